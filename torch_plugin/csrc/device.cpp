// Bridge registry, per-thread device/stream state and the PrivateUse1
// DeviceGuardImpl (devices, streams, events: all forwarded to the bridge).
#include "emu_core.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <limits>

namespace py = pybind11;

namespace emu {

// ---------------------------------------------------------------- bridge ---

namespace {
// Heap-allocated and intentionally never deleted: a static py::object would
// be destroyed after the interpreter is gone and crash at exit.
std::atomic<py::object*> g_bridge{nullptr};

bool interpreter_alive() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}
} // namespace

void set_bridge(const py::object& obj) {
  // Old bridge objects are leaked too: other threads may still be using them.
  g_bridge.store(new py::object(obj));
}

bool bridge_usable() noexcept {
  return g_bridge.load() != nullptr && interpreter_alive();
}

py::object& bridge() {
  py::object* b = g_bridge.load();
  TORCH_CHECK(
      b != nullptr,
      "emu: no bridge registered with the C++ core "
      "(torch_plugin._C._set_bridge was never called; import torch_plugin)");
  return *b;
}

// ---------------------------------------------------- device/stream state ---

namespace {
// Device indices are int8, so 128 slots cover every possible device.
constexpr size_t kMaxDevices = std::numeric_limits<c10::DeviceIndex>::max() + 1;
thread_local c10::DeviceIndex tl_device = 0;
thread_local std::array<c10::StreamId, kMaxDevices> tl_streams{};
} // namespace

c10::DeviceIndex device_count() noexcept {
  if (!bridge_usable()) {
    return 0;
  }
  try {
    int64_t n = call<int64_t>("device_count");
    if (n < 0) {
      return 0;
    }
    return static_cast<c10::DeviceIndex>(
        std::min<int64_t>(n, std::numeric_limits<c10::DeviceIndex>::max()));
  } catch (py::error_already_set& e) {
    // deviceCount() is required not to raise: report and say "no devices".
    py::gil_scoped_acquire gil;
    e.discard_as_unraisable("emu bridge.device_count");
  } catch (...) {
  }
  return 0;
}

c10::DeviceIndex current_device() {
  return tl_device;
}

namespace {
// An index that names an existing device, or an error saying what was asked and what exists.
c10::DeviceIndex checked_index(c10::DeviceIndex index) {
  c10::DeviceIndex n = device_count();
  TORCH_CHECK(
      index >= 0 && index < n,
      "emu: invalid device index ",
      static_cast<int>(index),
      " (",
      static_cast<int>(n),
      " emu device(s) available, valid indices are 0..",
      static_cast<int>(n) - 1,
      ")");
  return index;
}
} // namespace

void set_device(c10::DeviceIndex index) {
  tl_device = checked_index(index);
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  c10::DeviceIndex prev = tl_device;
  if (index != prev) {
    set_device(index);
  }
  return prev;
}

c10::DeviceIndex resolve_device(c10::DeviceIndex index) {
  return index == -1 ? tl_device : checked_index(index);
}

c10::StreamId current_stream_id(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0, "emu: invalid device index ", static_cast<int>(index));
  return tl_streams[static_cast<size_t>(index)];
}

void set_current_stream_id(c10::DeviceIndex index, c10::StreamId id) {
  TORCH_CHECK(index >= 0, "emu: invalid device index ", static_cast<int>(index));
  tl_streams[static_cast<size_t>(index)] = id;
}

// ---------------------------------------------------------- device guard ---

namespace {

constexpr auto kEmu = c10::DeviceType::PrivateUse1;

// Events are bridge ids (> 0) smuggled through the void* handle.
int64_t event_id(void* event) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(event));
}

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kEmu, device), id);
}

struct EmuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kEmu;
  }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kEmu, "emu guard got a ", d.type(), " device");
    return c10::Device(kEmu, exchange_device(d.index()));
  }
  c10::Device getDevice() const override {
    return c10::Device(kEmu, current_device());
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kEmu, "emu guard got a ", d.type(), " device");
    set_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    // Used by guard destructors to restore a device that was valid before.
    if (d.index() >= 0) {
      tl_device = d.index();
    }
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    return device_capability(d.index());
  }

  // --- streams: ids live in the emulator; 0 is the default stream.
  c10::Stream getStream(c10::Device d) const override {
    auto idx = resolve_device(d.index());
    return make_stream(idx, current_stream_id(idx));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return make_stream(resolve_device(d.index()), 0);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority)
      const override {
    // Like CUDA: a small round-robin pool per (device, priority), created
    // lazily, so callers that grab pool streams often do not leak streams.
    auto idx = resolve_device(d.index());
    int priority = isHighPriority ? -1 : 0; // lower value = higher priority
    auto& pool = stream_pool_[static_cast<size_t>(idx)][isHighPriority ? 1 : 0];
    size_t slot = pool.next.fetch_add(1) % kPoolSize;
    c10::StreamId id = pool.ids[slot].load();
    if (id == 0) {
      // Created outside any lock (the bridge call takes the GIL); if two
      // threads race, one extra stream is used once and the slot keeps one.
      c10::StreamId fresh = call<int64_t>("stream_create", idx, priority);
      id = pool.ids[slot].compare_exchange_strong(id, fresh) ? fresh : id;
    }
    return make_stream(idx, id);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    auto idx = resolve_device(d.index());
    auto id = call<int64_t>("stream_create", idx, priority);
    return make_stream(idx, id);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto idx = resolve_device(s.device_index());
    auto prev = current_stream_id(idx);
    set_current_stream_id(idx, s.id());
    return make_stream(idx, prev);
  }
  bool queryStream(const c10::Stream& s) const override {
    return call<bool>("stream_query", s.device_index(), s.id());
  }
  void synchronizeStream(const c10::Stream& s) const override {
    call("stream_synchronize", s.device_index(), s.id());
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    call("device_synchronize", resolve_device(device_index));
  }

  // --- events: created lazily on first record, as CUDA does.
  void record(
      void** event,
      const c10::Stream& stream,
      const c10::DeviceIndex device_index,
      const c10::EventFlag flag) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "emu: event on device ",
        static_cast<int>(device_index),
        " cannot be recorded on a stream of device ",
        static_cast<int>(stream.device_index()));
    if (*event == nullptr) {
      // flags: 0 = PYTORCH_DEFAULT (no timing), 1 = BACKEND_DEFAULT (timing).
      auto id = call<int64_t>(
          "event_create", stream.device_index(), static_cast<int>(flag));
      TORCH_CHECK(id > 0, "emu: bridge.event_create returned invalid id ", id);
      *event = reinterpret_cast<void*>(static_cast<intptr_t>(id));
    }
    call("event_record", event_id(*event), stream.device_index(), stream.id());
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) {
      return; // never recorded: nothing to wait for
    }
    call("event_block", event_id(event), stream.device_index(), stream.id());
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) {
      return true; // never recorded counts as complete
    }
    return call<bool>("event_query", event_id(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      call("event_synchronize", event_id(event));
    }
  }
  double elapsedTime(
      void* start,
      void* end,
      const c10::DeviceIndex device_index) const override {
    TORCH_CHECK(
        start != nullptr && end != nullptr,
        "emu: both events must be recorded before calling elapsed_time()");
    return call<double>(
        "event_elapsed_ms", event_id(start), event_id(end), device_index);
  }
  void destroyEvent(void* event, const c10::DeviceIndex device_index)
      const noexcept override {
    if (event != nullptr) {
      call_noexcept("event_destroy", event_id(event), device_index);
    }
  }

  static constexpr size_t kPoolSize = 8;
  struct StreamPool {
    std::atomic<size_t> next{0};
    std::array<std::atomic<c10::StreamId>, kPoolSize> ids{};
  };
  // [device][0 = normal, 1 = high priority]; the guard impl is a leaked
  // singleton, so this lives for the whole process.
  mutable std::array<std::array<StreamPool, 2>, kMaxDevices> stream_pool_{};

  void recordDataPtrOnStream(
      const c10::DataPtr& data_ptr,
      const c10::Stream& stream) const override {
    if (data_ptr.get() != nullptr) {
      call("record_stream", stream.device_index(), va(data_ptr.get()), stream.id());
    }
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, EmuGuardImpl);

} // namespace
} // namespace emu
