// Python bindings of the emu C++ core (torch_plugin._C).
#include "emu_core.h"
#include "generator.h"

#include <ATen/core/Generator.h>
#include <torch/csrc/utils/pybind.h> // type casters for at::Generator
#include <torch/version.h>           // TORCH_VERSION_MAJOR/MINOR of the headers this core is built against

#include <limits>
#include <map>
#include <mutex>
#include <string>

namespace py = pybind11;

namespace {
// Python ints -> DeviceIndex (int8) without silent wrap-around.
c10::DeviceIndex to_index(int device) {
  TORCH_CHECK(device >= -1 && device <= std::numeric_limits<c10::DeviceIndex>::max(),
              "emu: invalid device index ", device);
  return static_cast<c10::DeviceIndex>(device);
}
} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "C++ core of the emu PrivateUse1 backend (forwards to a Python bridge)";
  // The torch series this core was compiled against: torch's C++ ABI changes between minor
  // releases, so torch_plugin refuses to register beside another one (torch_plugin/_compat.py).
  m.attr("_built_with_torch") = py::make_tuple(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);

  // Hooks are registered at import rather than at static-init time so that a
  // library merely loaded (not imported) does not claim PrivateUse1.
  emu::register_hooks();
  emu::register_profiler();
  emu::register_backend_meta_serialization();

  m.def("_set_bridge", &emu::set_bridge, py::arg("bridge"),
        "Register the Python bridge object all device semantics are forwarded to.");

  m.def("_register_hooks", &emu::register_hooks,
        "Register the PrivateUse1 hooks (already done at import; idempotent).");

  // Device index state lives in C++ (per thread). Calls that may reach the
  // bridge run without the GIL; the bridge calls re-acquire it.
  m.def("_get_device", []() { return static_cast<int>(emu::current_device()); });
  m.def("_set_device", [](int device) {
    py::gil_scoped_release no_gil;
    emu::set_device(to_index(device));
  }, py::arg("device"));
  m.def("_exchange_device", [](int device) {
    py::gil_scoped_release no_gil;
    return static_cast<int>(emu::exchange_device(to_index(device)));
  }, py::arg("device"));

  m.def("_current_stream_id", [](int device) {
    auto idx = to_index(device);
    return static_cast<int64_t>(emu::current_stream_id(idx == -1 ? emu::current_device() : idx));
  }, py::arg("device"));
  m.def("_set_current_stream", [](int device, int64_t stream_id) {
    auto idx = to_index(device);
    emu::set_current_stream_id(idx == -1 ? emu::current_device() : idx, stream_id);
  }, py::arg("device"), py::arg("stream_id"));

  m.def("_default_generator", [](int device) {
    at::Generator gen;
    {
      py::gil_scoped_release no_gil;
      gen = emu::default_generator(to_index(device));
    }
    return gen; // -> torch.Generator (same Python object while it is alive)
  }, py::arg("device"));

  m.def("_philox_reserve", [](const at::Generator& gen, uint64_t increment) {
    auto* impl = at::check_generator<emu::EmuGeneratorImpl>(gen);
    // See Note [Acquire lock when using random generators]
    std::lock_guard<std::mutex> lock(impl->mutex_);
    auto [seed, offset] = impl->reserve(increment);
    return py::make_tuple(seed, offset);
  }, py::arg("gen"), py::arg("increment"),
     "Return the generator's (seed, offset) and advance its offset by increment.");

  m.def("_profiler_correlation_id", &emu::profiler_correlation_id,
        "The correlation id of the innermost op PyTorch's profiler opened on this thread (0: none).");
  m.def("_profiler_wall_ns", &emu::profiler_wall_ns,
        "PyTorch's profiler clock (c10::getTime) in ns: the time axis of its host events.");

  m.def("_set_backend_meta", &emu::set_backend_meta, py::arg("tensor"), py::arg("tags"),
        "Replace the emu tensor's backend metadata tags ({name: bool}; {} removes them).");
  m.def("_get_backend_meta", &emu::get_backend_meta, py::arg("tensor"),
        "The emu tensor's backend metadata tags ({name: bool}).");

  emu::add_tensor_ref_functions(m.ptr());
  emu::add_trampoline_functions(m.ptr());

  m.def("_is_pinned_ptr", [](uint64_t ptr) { return emu::is_pinned_ptr(emu::va_ptr(ptr)); },
        py::arg("ptr"));
}
