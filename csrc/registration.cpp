// The schema of every op lives here, once. Kernels register next to their code with
// TORCH_LIBRARY_IMPL(flash_attn_ext, CPU|CUDA, m), the autograd guard in autograd_guard.cpp; fake kernels are
// in flash_attn_ext/ops.py.
#include <Python.h>
#include <torch/library.h>

extern "C" {
// `import flash_attn_ext._C` loads this shared library, which runs the static registrations below.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

TORCH_LIBRARY(flash_attn_ext, m) {
  // Row-wise softmax over `dim`; algorithm is "auto", "safe" (3 passes) or "online" (2 passes).
  m.def("softmax(Tensor x, int dim, str algorithm) -> Tensor");
  m.def("log_softmax(Tensor x, int dim, str algorithm) -> Tensor");
  m.def("logsumexp(Tensor x, int dim, bool keepdim) -> Tensor");
  // q (B, Hq, Sq, D), k/v (B, Hk, Sk, D) -> out (B, Hq, Sq, D), lse (B, Hq, Sq) float32, natural log.
  m.def("attention(Tensor q, Tensor k, Tensor v, bool causal, float? scale) -> (Tensor, Tensor)");
  // outs (N, B, H, S, D), lses (N, B, H, S) over N disjoint key blocks -> out (B, H, S, D), lse (B, H, S).
  m.def("merge_attention(Tensor outs, Tensor lses) -> (Tensor, Tensor)");
  // Internal: the gradient every op's backward asks for, (size, dtype) on grad's device. It raises, naming
  // `op` (see autograd_guard.cpp); its fake kernel lets torch.compile trace a backward that would raise.
  m.def("_forward_only_grad(Tensor grad, SymInt[] size, ScalarType dtype, str op) -> Tensor");
}
