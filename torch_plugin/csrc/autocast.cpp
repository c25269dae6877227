// The autocast policy of the emu device: the one table of AutocastPrivateUse1 kernels.
//
// Under torch.autocast("emu", dtype=torch.bfloat16 | torch.float16) these kernels cast their
// floating-point emu operands and redispatch below the autocast key (ATen's WrapFunction
// does both, with its weight-cast cache). The lists are CUDA's, taken from ATen's own
// X-macros (ATen/autocast_mode.h) so that emu follows CUDA op for op:
//   lower_precision_fp  matmul/linear/conv/bmm/baddbmm/addmm/... run in the autocast dtype
//   fp32                pointwise ops that overflow in half, norms, losses: cast to float32
//   fp32_set_opt_dtype  softmax/log_softmax/sum/prod/cumsum/...: float32 unless a dtype is given
//   fp32_append_dtype   norm.Scalar / norm.ScalarOpt_dim: redispatched with dtype=float32
//   promote             mixed-input ops (addcmul, dot, index_put, ...): the widest input dtype
// Ops not listed here fall through (the Python fallback in ops/registry.py) and run in the
// dtypes they are given. docs/autocast.md describes the policy; tests/torch_plugin/
// test_autocast.py checks it op by op against torch.autocast("cpu").
#include <ATen/autocast_mode.h>
#include <torch/library.h>

// Inside at::autocast, as ATen's own table: the X-macro signatures name Tensor, Scalar,
// IntArrayRef and ScalarType unqualified.
namespace at::autocast {
namespace {

// As CUDA: binary_cross_entropy is unsafe to autocast (its input usually comes from a sigmoid
// in half precision); the message is ATen's.
at::Tensor emu_binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define EMU_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(EMU_LOWER_PRECISION_FP)
  // The padding="same"/"valid" convolutions: CompositeImplicitAutograd like conv2d, listed by CPU.
  KERNEL_PRIVATEUSEONE(conv1d, padding, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv2d, padding, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv3d, padding, lower_precision_fp)

#define EMU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(EMU_FP32)

#define EMU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(EMU_FP32_SET_OPT_DTYPE)

  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define EMU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(EMU_PROMOTE)

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(emu_binary_cross_entropy_banned));
}

}  // namespace
}  // namespace at::autocast
