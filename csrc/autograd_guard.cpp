// The autograd kernel of every op. The kernels are forward-only:
// - with grad mode on and an input that requires grad, the outputs get a graph node whose backward raises an
//   error naming the op, so backward never returns wrong gradients. The node raises through an op,
//   _forward_only_grad, rather than in its own apply(): torch.compile traces the backward of a graph whose
//   inputs require grad (AOTAutograd's joint graph) even when nobody calls backward, and a node that raised
//   while traced made the compiled forward fail where eager works. The op's fake kernel returns an empty
//   gradient of the input's shape, so the trace succeeds and the error comes when the compiled backward runs.
// - an input carrying a forward-mode tangent (torch.func.jvp / jacfwd, a forward_ad dual tensor) raises at
//   the call, as torch's ops without a forward formula do (left alone, the outputs would carry no tangent
//   and jvp would report zeros);
// - otherwise the call goes straight to the CPU / CUDA kernel.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/function.h>
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

// The backward node of every op's outputs: one gradient per input, each from _forward_only_grad, which raises.
// Holds the inputs' sizes (symbolic under torch.compile) and dtypes, not the inputs.
class ForwardOnlyBackward : public torch::autograd::Node {
 public:
  ForwardOnlyBackward(std::string op_name, const std::vector<at::Tensor>& inputs)
      : Node(torch::autograd::collect_next_edges(inputs)), op_name_(std::move(op_name)) {
    for (const at::Tensor& t : inputs) {
      sizes_.emplace_back(t.sym_sizes().vec());
      dtypes_.push_back(t.scalar_type());
    }
  }

  std::string name() const override { return "ForwardOnlyBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    static const auto grad_op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("flash_attn_ext::_forward_only_grad", "")
            .typed<at::Tensor(const at::Tensor&, c10::SymIntArrayRef, at::ScalarType, c10::string_view)>();
    const at::Tensor* grad = nullptr;  // any defined output gradient: it gives the device
    for (const at::Tensor& g : grads) {
      if (g.defined()) {
        grad = &g;
        break;
      }
    }
    torch::autograd::variable_list result(num_outputs());
    if (grad == nullptr) return result;
    for (size_t i = 0; i < result.size(); ++i) {
      if (task_should_compute_output(i)) result[i] = grad_op.call(*grad, sizes_[i], dtypes_[i], op_name_);
    }
    return result;
  }

 private:
  std::string op_name_;
  std::vector<std::vector<c10::SymInt>> sizes_;
  std::vector<at::ScalarType> dtypes_;
};

// The real kernel of _forward_only_grad (CPU and CUDA): raises, naming the forward op.
at::Tensor forward_only_grad(const at::Tensor&, c10::SymIntArrayRef, at::ScalarType, c10::string_view op_name) {
  TORCH_CHECK(false, op_name, " is forward-only (no backward kernel); call it under torch.no_grad() or use the torch ",
              "equivalent when you need gradients");
}

void forward_only(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  std::vector<at::Tensor> inputs;
  for (const c10::IValue& arg : torch::jit::last(*stack, op.schema().arguments().size())) {
    if (arg.isTensor()) inputs.push_back(arg.toTensor());
  }
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(!torch::autograd::isFwGradDefined(t), python_name(op),
                " is forward-only: forward-mode AD (torch.func.jvp, jacfwd, forward_ad dual tensors) is not "
                "supported; use the torch equivalent when you need tangents");
  }
  const bool record = torch::autograd::compute_requires_grad(inputs);
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  if (!record) return;
  auto node = std::shared_ptr<ForwardOnlyBackward>(new ForwardOnlyBackward(python_name(op), inputs),
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
  for (const char* op : {"softmax", "log_softmax", "logsumexp", "attention", "merge_attention", "_forward_only_grad"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&flash_attn_ext::forward_only>());
  }
}

TORCH_LIBRARY_IMPL(flash_attn_ext, CPU, m) { m.impl("_forward_only_grad", &flash_attn_ext::forward_only_grad); }
TORCH_LIBRARY_IMPL(flash_attn_ext, CUDA, m) { m.impl("_forward_only_grad", &flash_attn_ext::forward_only_grad); }
