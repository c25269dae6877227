// Device allocator (forwards to bridge.malloc/free, and its statistics to
// bridge.memory_*), pinned host allocator, and storage resizing for emu
// storages.
#include "emu_core.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

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

// bridge.memory_stats(device): a flat dict in torch.cuda.memory_stats()
// naming ("allocated_bytes.all.current", "num_ooms", ...) -> DeviceStats.
// Names the bridge does not report stay 0.
c10::CachingDeviceAllocator::DeviceStats device_stats_from_bridge(c10::DeviceIndex device) {
  namespace py = pybind11;
  using c10::CachingAllocator::Stat;
  using c10::CachingAllocator::StatArray;

  std::unordered_map<std::string, int64_t> flat;
  {
    py::gil_scoped_acquire gil;
    py::object result = bridge().attr("memory_stats")(py_arg(device));
    for (auto item : py::cast<py::dict>(result)) {
      flat[item.first.cast<std::string>()] = item.second.cast<int64_t>();
    }
  }
  auto get = [&flat](const std::string& key) -> int64_t {
    auto it = flat.find(key);
    return it == flat.end() ? 0 : it->second;
  };
  auto fill_stat = [&get](Stat& stat, const std::string& prefix) {
    stat.current = get(prefix + ".current");
    stat.peak = get(prefix + ".peak");
    stat.allocated = get(prefix + ".allocated");
    stat.freed = get(prefix + ".freed");
  };
  // Index order of c10::CachingAllocator::StatType.
  static constexpr std::array<const char*, 3> kPools = {"all", "small_pool", "large_pool"};
  auto fill_array = [&fill_stat](StatArray& array, const std::string& name) {
    for (size_t i = 0; i < kPools.size() && i < array.size(); ++i) {
      fill_stat(array[i], name + "." + kPools[i]);
    }
  };

  c10::CachingDeviceAllocator::DeviceStats stats;
  fill_array(stats.allocation, "allocation");
  fill_array(stats.segment, "segment");
  fill_array(stats.active, "active");
  fill_array(stats.inactive_split, "inactive_split");
  fill_array(stats.allocated_bytes, "allocated_bytes");
  fill_array(stats.reserved_bytes, "reserved_bytes");
  fill_array(stats.active_bytes, "active_bytes");
  fill_array(stats.inactive_split_bytes, "inactive_split_bytes");
  fill_array(stats.requested_bytes, "requested_bytes");
  stats.num_alloc_retries = get("num_alloc_retries");
  stats.num_ooms = get("num_ooms");
  fill_stat(stats.oversize_allocations, "oversize_allocations");
  fill_stat(stats.oversize_segments, "oversize_segments");
  stats.num_sync_all_streams = get("num_sync_all_streams");
  stats.num_device_alloc = get("num_device_alloc");
  stats.num_device_free = get("num_device_free");
  stats.num_oom_rejections = get("num_oom_rejections");
  stats.max_split_size = get("max_split_size");
  return stats;
}

// A c10::DeviceAllocator, so that torch.accelerator.memory_* / empty_cache /
// get_memory_info work for emu. The caching itself lives in the runtime.
struct EmuDeviceAllocator final : public c10::DeviceAllocator {
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

  // True once the emulated system is powered on. Never powers it on: the
  // torch.accelerator memory queries return empty/zero stats before that.
  bool initialized() override {
    if (!bridge_usable()) {
      return false;
    }
    try {
      return call<bool>("memory_initialized");
    } catch (pybind11::error_already_set& e) {
      pybind11::gil_scoped_acquire gil;
      e.discard_as_unraisable("emu bridge.memory_initialized");
    } catch (...) {
    }
    return false;
  }

  void emptyCache(c10::MempoolId_t mempool_id) override {
    TORCH_CHECK(mempool_id == c10::MempoolId_t(0, 0),
                "emu: the device allocator has no private memory pools (got pool id (",
                mempool_id.first, ", ", mempool_id.second, "))");
    call("empty_cache"); // every device with a context; powers nothing on
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get() != nullptr) {
      call("record_stream", stream.device_index(), va(ptr.get()), stream.id());
    }
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return device_stats_from_bridge(resolve_device(device));
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    call("memory_reset_accumulated", resolve_device(device));
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    call("memory_reset_peak", resolve_device(device));
  }

  // (free, total) bytes; unlike the statistics, this may power the system on.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    c10::DeviceIndex index = resolve_device(device);
    pybind11::gil_scoped_acquire gil;
    auto info = pybind11::cast<pybind11::tuple>(bridge().attr("mem_get_info")(py_arg(index)));
    TORCH_CHECK(info.size() == 2, "emu: bridge.mem_get_info must return (free, total)");
    return {info[0].cast<size_t>(), info[1].cast<size_t>()};
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
