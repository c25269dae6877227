// Backend metadata of emu tensors: named boolean tags held by the TensorImpl
// (c10::BackendMeta), serialized with the tensor (torch.save/torch.load, the
// PrivateUse1 BackendMeta serialization hooks) and kept by shallow copies
// (detach(), .data, nn.Parameter), each of which gets its own copy. A new tensor
// (clone(), copy.deepcopy, .to(), any op's output) starts without tags, as the
// BackendMeta of every PyTorch backend does. torch.emu.set_backend_meta / get_backend_meta.
#include "emu_core.h"

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace emu {

namespace {

// The serialized metadata is torch's dict[str, bool] (with "conj" and "neg"):
// emu's tags travel under this prefix.
const std::string kPrefix = "emu.";

struct EmuBackendMeta final : public c10::BackendMeta {
  std::map<std::string, bool> tags;

  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& /*ptr*/) const override {
    // A shallow copy of the tensor gets its own tags: retagging one leaves the other.
    auto copy = c10::make_intrusive<EmuBackendMeta>();
    copy->tags = tags;
    return copy;
  }
};

void check_emu(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), what, ": expected a tensor, got an undefined tensor");
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, what,
              ": expected an emu tensor, got a tensor on ", t.device(),
              " (backend metadata is emu's own; move the tensor to emu first)");
}

const EmuBackendMeta* meta_of(const at::Tensor& t) {
  return dynamic_cast<const EmuBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
}

void serialize(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  if (const auto* meta = meta_of(t)) {
    for (const auto& [name, value] : meta->tags) {
      metadata[kPrefix + name] = value;
    }
  }
}

void deserialize(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  std::map<std::string, bool> tags;
  for (const auto& [key, value] : metadata) {
    if (key.compare(0, kPrefix.size(), kPrefix) == 0) {
      tags[key.substr(kPrefix.size())] = value;
    }
  }
  if (!tags.empty()) {
    set_backend_meta(t, tags);
  }
}

} // namespace

void set_backend_meta(const at::Tensor& t, const std::map<std::string, bool>& tags) {
  check_emu(t, "torch.emu.set_backend_meta");
  for (const auto& [name, value] : tags) {
    TORCH_CHECK(!name.empty(), "torch.emu.set_backend_meta: a tag name must not be empty");
  }
  if (tags.empty()) {
    t.unsafeGetTensorImpl()->set_backend_meta(nullptr);
    return;
  }
  auto meta = c10::make_intrusive<EmuBackendMeta>();
  meta->tags = tags;
  t.unsafeGetTensorImpl()->set_backend_meta(meta);
}

std::map<std::string, bool> get_backend_meta(const at::Tensor& t) {
  check_emu(t, "torch.emu.get_backend_meta");
  const auto* meta = meta_of(t);
  return meta == nullptr ? std::map<std::string, bool>{} : meta->tags;
}

void register_backend_meta_serialization() {
  static std::once_flag once;
  std::call_once(once, [] {
    torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &serialize, &deserialize);
  });
}

} // namespace emu
