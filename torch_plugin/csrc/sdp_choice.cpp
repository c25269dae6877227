// scaled_dot_product_attention on emu: ATen picks a fused backend through _fused_sdp_choice_stub, a
// dispatch stub only C++ can fill for PrivateUse1. This entry hands the choice to the device's
// aten::_fused_sdp_choice kernel (Python, torch_plugin/ops/attention.py), which answers
// SDPBackend::overrideable (-> _scaled_dot_product_fused_attention_overrideable, the device's
// fused attention kernel) or math where the fused kernel does not apply.
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>

namespace {

int64_t emu_fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                             const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                             std::optional<double> scale, bool enable_gqa) {
  return at::_ops::_fused_sdp_choice::call(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                           enable_gqa);
}

} // namespace

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &emu_fused_sdp_choice);
} // namespace at::native
