// Philox-style generator state for emu devices: the C++ side only keeps the
// (seed, offset) pair; the random kernels (Python side) consume it through
// _philox_reserve.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>
#include <torch/version.h>

namespace emu {

struct EmuGeneratorImpl final : public c10::GeneratorImpl {
  explicit EmuGeneratorImpl(c10::DeviceIndex device);

  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1;
  }

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  // State: 16 uint8 on CPU = seed (u64 little-endian) then offset (u64 LE).
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  void set_state(const c10::TensorImpl& new_state) override;

  // Returns (seed, offset) and advances offset by `increment`.
  // Caller must hold mutex_ (see Note [Acquire lock when using random generators]).
  std::pair<uint64_t, uint64_t> reserve(uint64_t increment);

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 14)
  // torch 2.14 added this virtual (a reservation in CUDA's Philox stream). emu refuses it with a
  // clear error (hooks.cpp); the override also keeps the core's vtable from naming the base's
  // definition, which a 2.13 libc10 lacks.
  void philox_state(uint64_t increment, at::Tensor& seed, at::Tensor& offset,
                    at::Tensor& intragraph_offset) override;
#endif

 private:
  EmuGeneratorImpl* clone_impl() const override;

  uint64_t seed_ = c10::default_rng_seed_val;
  uint64_t offset_ = 0;
};

// New independent generator for a device (-1 = current device).
at::Generator new_generator(c10::DeviceIndex device);
// The per-device default generator (created on first use; -1 = current).
const at::Generator& default_generator(c10::DeviceIndex device);

} // namespace emu
