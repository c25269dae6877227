// Shared declarations of the emu (PrivateUse1) C++ core.
//
// The core only *forwards*: every device semantic lives behind a Python
// "bridge" object registered with _set_bridge(). Device "pointers" handed out
// by the bridge are emulated device virtual addresses: plain integers that are
// stored in DataPtrs but must never be dereferenced on the host.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceCapability.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

namespace at {
class Tensor;
} // namespace at

namespace emu {

// ---------------------------------------------------------------- bridge ---

// Installs the bridge (the old one, if any, is released). Caller holds the GIL.
void set_bridge(const pybind11::object& obj);

// True when a bridge is registered and the interpreter is not shutting down,
// i.e. when it is safe to call into Python at all.
bool bridge_usable() noexcept;

// Adds _set_tensor_ref, _tensor_ref and _binary_refs (tensor_ref.cpp: operand descriptors built in
// C++, the hot path of every op) to the module.
void add_tensor_ref_functions(PyObject* module);

// Adds _impl_typed (trampoline.cpp: typed dispatcher entry points into the Python kernels of the
// binary arithmetic ops) to the module.
void add_trampoline_functions(PyObject* module);

// The registered bridge; raises a clear error when none is registered.
// Caller must hold the GIL.
pybind11::object& bridge();

// DeviceIndex is int8_t; pass it (and any small integer) to Python as int.
template <typename T>
decltype(auto) py_arg(const T& v) {
  if constexpr (std::is_integral_v<T> && sizeof(T) == 1 && !std::is_same_v<T, bool>) {
    return static_cast<int>(v);
  } else {
    return (v);
  }
}

// Calls bridge.<name>(args...) with the GIL held and converts the result to R
// while the GIL is still held (a py::object must never outlive the GIL scope).
// Python exceptions propagate as pybind11::error_already_set.
template <typename R = void, typename... Args>
R call(const char* name, const Args&... args) {
  pybind11::gil_scoped_acquire gil;
  pybind11::object result = bridge().attr(name)(py_arg(args)...);
  if constexpr (!std::is_void_v<R>) {
    return result.template cast<R>();
  }
}

// Like call<void>, but for destructors/deleters/noexcept paths: never throws;
// failures are reported as unraisable warnings and otherwise ignored. Does
// nothing while the interpreter is finalizing (the process is exiting and
// the emulated memory goes with it).
template <typename... Args>
void call_noexcept(const char* name, const Args&... args) noexcept {
  if (!bridge_usable()) {
    return;
  }
  try {
    pybind11::gil_scoped_acquire gil;
    // Deleters also run while a Python exception is propagating (e.g. an
    // argument tensor released after its op raised). Park that exception
    // around the call, or Python rejects the call with a SystemError and the
    // block is never freed; it is restored when `pending` goes out of scope.
    pybind11::error_scope pending;
    try {
      bridge().attr(name)(py_arg(args)...);
    } catch (pybind11::error_already_set& e) {
      e.discard_as_unraisable((std::string("emu bridge.") + name).c_str());
    }
  } catch (const std::exception& e) {
    // Not a Python error (e.g. bridge missing): warn and continue.
    try {
      TORCH_WARN("emu: bridge.", name, " failed: ", e.what());
    } catch (...) {
    }
  } catch (...) {
  }
}

// Device VAs travel as Python ints and live in DataPtrs as void*.
inline uint64_t va(const void* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}
inline void* va_ptr(uint64_t v) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(v));
}

// ------------------------------------------------ device / stream state ---

// Number of emu devices (bridge.device_count()); 0 on any error. Never throws.
c10::DeviceIndex device_count() noexcept;
// Thread-local current device (like CUDA's per-thread current device).
c10::DeviceIndex current_device();
// Validates the index against device_count() and makes it current.
void set_device(c10::DeviceIndex index);
// Sets `index` as current, returns the previous current device.
c10::DeviceIndex exchange_device(c10::DeviceIndex index);
// -1 means "current device"; anything else is validated.
c10::DeviceIndex resolve_device(c10::DeviceIndex index);
// Thread-local current stream id of a device (0 = default stream).
c10::StreamId current_stream_id(c10::DeviceIndex index);
void set_current_stream_id(c10::DeviceIndex index, c10::StreamId id);

// ------------------------------------------------------------ allocators ---

// The device allocator (a c10::DeviceAllocator, also registered as the
// PrivateUse1 allocator, so torch.accelerator memory APIs reach it).
c10::Allocator* device_allocator();
// Host allocator for pinned (page-locked in spirit) CPU memory.
c10::Allocator* pinned_allocator();
// True when ptr lies inside a live pinned block.
bool is_pinned_ptr(const void* ptr);
// Grows/shrinks a device storage to newsize bytes (keeps min(old,new) bytes).
void resize_storage_bytes(const c10::Storage& storage, size_t newsize);

// ----------------------------------------------------------------- hooks ---

// Registers the PrivateUse1 hooks (idempotent). Called at module import.
void register_hooks();

// The dtypes torch.accelerator.get_device_capability() reports (bridge.supported_dtypes).
// capability.cpp.
c10::DeviceCapability device_capability(c10::DeviceIndex device);

// --------------------------------------------------------- backend meta ---

// Named boolean tags of an emu tensor (c10::BackendMeta), kept by torch.save/torch.load
// and shallow copies; an empty map removes them. backend_meta.cpp.
void set_backend_meta(const at::Tensor& t, const std::map<std::string, bool>& tags);
std::map<std::string, bool> get_backend_meta(const at::Tensor& t);
// Registers the PrivateUse1 BackendMeta serialization hooks (idempotent). At module import.
void register_backend_meta_serialization();

// ------------------------------------------------------------- profiler ---

// Registers emu with PyTorch's profiler: the legacy ProfilerStubs and the kineto
// child activity profiler (idempotent). Called at module import. profiler.cpp.
void register_profiler();
// The correlation id of the innermost op the profiler opened on this thread (0: none).
uint64_t profiler_correlation_id();
// The profiler's wall clock (c10::getTime, ns), the time axis of its host events.
int64_t profiler_wall_ns();

} // namespace emu
