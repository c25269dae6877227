// Device allocator (forwards to bridge.malloc/free), pinned host allocator,
// and storage resizing for emu storages.
#include "emu_core.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

namespace emu {

// ------------------------------------------------------ device allocator ---

namespace {

// DataPtr context: what the deleter needs to hand the block back.
struct DeviceBlock {
  c10::DeviceIndex device;
  uint64_t ptr;
};

void delete_device_block(void* ctx) {
  auto* block = static_cast<DeviceBlock*>(ctx);
  // Deleters run from arbitrary destructors: never throw from here.
  call_noexcept("free", block->device, block->ptr);
  delete block;
}

struct EmuDeviceAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = current_device();
    c10::Device dev(c10::DeviceType::PrivateUse1, device);
    if (nbytes == 0) {
      // Empty storages own nothing but still carry their device.
      return c10::DataPtr(nullptr, dev);
    }
    auto ptr = call<uint64_t>("malloc", device, static_cast<uint64_t>(nbytes));
    TORCH_CHECK(ptr != 0, "emu: bridge.malloc returned a null address for ", nbytes, " bytes");
    return c10::DataPtr(va_ptr(ptr), new DeviceBlock{device, ptr}, &delete_device_block, dev);
  }

  void copy_data(void* dest, const void* src, size_t count) const override {
    // Device VAs: the copy happens inside the emulator, never via memcpy.
    if (count > 0) {
      call("memcpy_d2d", current_device(), va(dest), va(src), static_cast<uint64_t>(count));
    }
  }
};

EmuDeviceAllocator g_device_allocator;

// The allocator torch looks up for PrivateUse1 (e.g. storage resize, clone).
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator);

} // namespace

c10::Allocator* device_allocator() {
  return &g_device_allocator;
}

void resize_storage_bytes(const c10::Storage& storage, size_t newsize) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  c10::Allocator* alloc = storage.allocator() ? storage.allocator() : device_allocator();
  c10::Device device = storage.device();
  // The allocator allocates on the *current* device: make it the storage's.
  c10::DeviceGuard guard(device);

  c10::DataPtr new_data =
      newsize > 0 ? alloc->allocate(newsize) : c10::DataPtr(nullptr, device);
  const c10::DataPtr& old_data = storage.data_ptr();
  size_t copy_bytes = std::min(newsize, storage.nbytes());
  if (old_data.get() != nullptr && copy_bytes > 0) {
    call("memcpy_d2d", device.index(), va(new_data.get()), va(old_data.get()),
         static_cast<uint64_t>(copy_bytes));
  }
  // The old block is freed (through its deleter) when replaced here.
  storage.set_data_ptr_noswap(std::move(new_data));
  storage.set_nbytes(newsize);
}

// ------------------------------------------------------ pinned allocator ---

namespace {

constexpr size_t kPinnedAlignment = 64;

// Live pinned blocks: start address -> size, so that any address inside a
// block (e.g. the data_ptr of a slice) is recognised as pinned.
std::mutex g_pinned_mutex;
std::map<uintptr_t, size_t>& pinned_blocks() {
  static auto* blocks = new std::map<uintptr_t, size_t>(); // leaked: used by late deleters
  return *blocks;
}

// Statistics for at::HostAllocator::get_stats (guarded by g_pinned_mutex;
// leaked like pinned_blocks(): late deleters update it).
at::HostStats& pinned_stats() {
  static auto* stats = new at::HostStats();
  return *stats;
}

void delete_pinned_block(void* ptr) {
  // Let the emulator finish any DMA touching this block before it goes away.
  call_noexcept("pinned_free", va(ptr));
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto it = pinned_blocks().find(reinterpret_cast<uintptr_t>(ptr));
    if (it != pinned_blocks().end()) {
      auto& stats = pinned_stats();
      stats.active_requests.decrease(1);
      stats.active_bytes.decrease(it->second);
      stats.allocations.decrease(1);
      stats.allocated_bytes.decrease(it->second);
      stats.num_host_free += 1;
      pinned_blocks().erase(it);
    }
  }
  std::free(ptr);
}

// Registered both as the hooks' pinned-memory allocator and as the
// PrivateUse1 at::HostAllocator: torch.accelerator.empty_host_cache() and
// friends call at::getHostAllocator(PrivateUse1) and dereference the result
// (a segfault when none is registered). It caches nothing: every block is
// freed when its last tensor goes, after pinned_free has let the emulator
// finish any DMA that touches it (so record_event has nothing to track).
struct EmuPinnedAllocator final : public at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::Device cpu(c10::DeviceType::CPU);
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, cpu);
    }
    // aligned_alloc needs a size that is a multiple of the alignment.
    size_t rounded = (nbytes + kPinnedAlignment - 1) / kPinnedAlignment * kPinnedAlignment;
    void* ptr = std::aligned_alloc(kPinnedAlignment, rounded);
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr,
                     "emu: failed to allocate ", nbytes, " bytes of pinned host memory");
    {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      pinned_blocks()[reinterpret_cast<uintptr_t>(ptr)] = nbytes;
      auto& stats = pinned_stats();
      stats.active_requests.increase(1);
      stats.active_bytes.increase(nbytes);
      stats.allocations.increase(1);
      stats.allocated_bytes.increase(nbytes);
      stats.num_host_alloc += 1;
    }
    return c10::DataPtr(ptr, ptr, &delete_pinned_block, cpu);
  }

  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override {
    return true; // nothing to record: see the struct comment
  }

  void empty_cache() override {} // nothing is cached

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    return pinned_stats();
  }

  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto& stats = pinned_stats();
    stats.active_requests.reset_accumulated();
    stats.active_bytes.reset_accumulated();
    stats.allocations.reset_accumulated();
    stats.allocated_bytes.reset_accumulated();
    stats.num_host_alloc = 0;
    stats.num_host_free = 0;
  }

  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto& stats = pinned_stats();
    stats.active_requests.reset_peak();
    stats.active_bytes.reset_peak();
    stats.allocations.reset_peak();
    stats.allocated_bytes.reset_peak();
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &delete_pinned_block;
  }

  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count); // real host memory
  }
};

EmuPinnedAllocator g_pinned_allocator;

} // namespace

REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_pinned_allocator)

c10::Allocator* pinned_allocator() {
  return &g_pinned_allocator;
}

bool is_pinned_ptr(const void* ptr) {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto& blocks = pinned_blocks();
  auto it = blocks.upper_bound(p); // first block starting after p
  if (it == blocks.begin()) {
    return false;
  }
  --it;
  return p >= it->first && p < it->first + it->second;
}

} // namespace emu
