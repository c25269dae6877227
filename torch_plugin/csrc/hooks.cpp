// The emu generator and the PrivateUse1 hooks (what at::globalContext() asks
// for PrivateUse1: init, generators, pinned memory, storage resizing, ...).
#include "emu_core.h"
#include "generator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <limits>
#include <memory>
#include <mutex>

namespace emu {

// ------------------------------------------------------------- generator ---

EmuGeneratorImpl::EmuGeneratorImpl(c10::DeviceIndex device)
    : c10::GeneratorImpl(
          c10::Device(c10::DeviceType::PrivateUse1, device),
          c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

void EmuGeneratorImpl::set_current_seed(uint64_t seed) {
  // As with CUDA's Philox generator, a new seed restarts the counter.
  seed_ = seed;
  offset_ = 0;
}

uint64_t EmuGeneratorImpl::current_seed() const {
  return seed_;
}

uint64_t EmuGeneratorImpl::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom(/*is_cuda=*/true);
  set_current_seed(s);
  return s;
}

void EmuGeneratorImpl::set_offset(uint64_t offset) {
  offset_ = offset;
}

uint64_t EmuGeneratorImpl::get_offset() const {
  return offset_;
}

namespace {
constexpr int64_t kStateBytes = 16;

void put_u64_le(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(v >> (8 * i));
  }
}

uint64_t get_u64_le(const uint8_t* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(in[i]) << (8 * i);
  }
  return v;
}
} // namespace

c10::intrusive_ptr<c10::TensorImpl> EmuGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu({kStateBytes}, c10::ScalarType::Byte);
  auto* bytes = static_cast<uint8_t*>(state.mutable_data_ptr());
  put_u64_le(bytes, seed_);
  put_u64_le(bytes + 8, offset_);
  return state.getIntrusivePtr();
}

void EmuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state); // CPU ByteTensor, contiguous
  TORCH_CHECK(
      new_state.numel() == kStateBytes,
      "emu generator state must be a ByteTensor of ",
      kStateBytes,
      " bytes (seed uint64 LE, offset uint64 LE), got ",
      new_state.numel(),
      " bytes");
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  seed_ = get_u64_le(bytes);
  offset_ = get_u64_le(bytes + 8);
}

std::pair<uint64_t, uint64_t> EmuGeneratorImpl::reserve(uint64_t increment) {
  std::pair<uint64_t, uint64_t> current{seed_, offset_};
  offset_ += increment;
  return current;
}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 14)
void EmuGeneratorImpl::philox_state(uint64_t, at::Tensor&, at::Tensor&, at::Tensor&) {
  // The reservation it grants is a position in CUDA's Philox4x32-10 stream; the emu random
  // kernels draw their own stream from (seed, offset), so answering would promise a stream
  // that no emu kernel draws. Refuse rather than hand out a plausible wrong position.
  TORCH_CHECK_NOT_IMPLEMENTED(false,
      "Generator.philox_state is not supported on emu: the emu random kernels do not draw "
      "CUDA's Philox4x32-10 stream (use the emu random operators, seeded by torch.manual_seed)");
}
#endif

EmuGeneratorImpl* EmuGeneratorImpl::clone_impl() const {
  auto* gen = new EmuGeneratorImpl(device().index());
  gen->seed_ = seed_;
  gen->offset_ = offset_;
  return gen;
}

at::Generator new_generator(c10::DeviceIndex device) {
  return at::make_generator<EmuGeneratorImpl>(resolve_device(device));
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  constexpr size_t kMax = std::numeric_limits<c10::DeviceIndex>::max() + 1;
  // Leaked on purpose: generators may be touched by late destructors, and the
  // returned references must stay valid for the life of the process.
  static auto* gens = new std::array<at::Generator, kMax>();
  static std::mutex mutex;
  auto idx = static_cast<size_t>(resolve_device(device));
  std::lock_guard<std::mutex> lock(mutex);
  at::Generator& gen = (*gens)[idx];
  if (!gen.defined()) {
    gen = at::make_generator<EmuGeneratorImpl>(static_cast<c10::DeviceIndex>(idx));
    gen.seed(); // like CUDA: a fresh default generator gets a random seed
  }
  return gen;
}

// ----------------------------------------------------------------- hooks ---

namespace {

struct EmuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return device_count() > 0; // never throws, never starts the emulator
  }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    if (!bridge_usable()) {
      return false;
    }
    return call<bool>("has_primary_context", device_index);
  }
  void init() const override {
    call("lazy_init");
  }
  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_device(device);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }

  c10::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_allocator();
  }
  bool isPinnedPtr(const void* data) const override {
    return is_pinned_ptr(data);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    auto idx = call<int64_t>("device_from_ptr", va(data));
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(idx));
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

} // namespace

void register_hooks() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked: torch keeps the raw pointer for the life of the process.
    at::RegisterPrivateUse1HooksInterface(new EmuHooks());
  });
}

} // namespace emu
