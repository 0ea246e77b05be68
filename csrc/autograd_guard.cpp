// The autograd kernel of every op. The kernels are forward-only: with grad mode on and an input that
// requires grad, the outputs get a graph node whose backward raises an error naming the op, so backward
// never returns wrong gradients; otherwise the call goes straight to the CPU / CUDA kernel. Why C++: the
// same guard registered from Python (torch.library.register_autograd) ran Python on every call, ~12 us of
// host time per op call against ~2 us for torch.softmax.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <vector>

namespace flash_attn_ext {
namespace {

// "flash_attn_ext::softmax" -> "flash_attn_ext.softmax", the name users call.
std::string python_name(const c10::OperatorHandle& op) {
  std::string name = op.schema().name();
  const size_t colons = name.find("::");
  return colons == std::string::npos ? name : name.replace(colons, 2, ".");
}

void forward_only(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  std::vector<at::Tensor> inputs;
  for (const c10::IValue& arg : torch::jit::last(*stack, op.schema().arguments().size())) {
    if (arg.isTensor()) inputs.push_back(arg.toTensor());
  }
  const bool record = torch::autograd::compute_requires_grad(inputs);
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  if (!record) return;
  const std::string name = python_name(op);
  auto node = std::shared_ptr<torch::autograd::Error>(
      new torch::autograd::Error(name + " is forward-only (no backward kernel); call it under torch.no_grad() or "
                                        "use the torch equivalent when you need gradients",
                                 torch::autograd::collect_next_edges(inputs)),
      torch::autograd::deleteNode);
  for (const c10::IValue& out : torch::jit::last(*stack, op.schema().returns().size())) {
    if (out.isTensor() && torch::autograd::isDifferentiableType(out.toTensor().scalar_type())) {
      torch::autograd::set_history(out.toTensor(), node);
    }
  }
}

}  // namespace
}  // namespace flash_attn_ext

TORCH_LIBRARY_IMPL(flash_attn_ext, Autograd, m) {
  for (const char* op : {"softmax", "log_softmax", "logsumexp", "attention", "merge_attention"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&flash_attn_ext::forward_only>());
  }
}
