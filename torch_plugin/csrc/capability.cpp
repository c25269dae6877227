// What torch.accelerator.get_device_capability() reports for emu (the device guard's
// getDeviceCapability): the dtypes an emu tensor can hold, copy, convert and fill.
#include "emu_core.h"

#include <c10/core/DeviceCapability.h>
#include <torch/csrc/utils/pybind.h> // torch.dtype <-> at::ScalarType

#include <vector>

namespace emu {

c10::DeviceCapability device_capability(c10::DeviceIndex device) {
  resolve_device(device); // an invalid index is an error naming the devices that exist
  std::vector<at::ScalarType> dtypes = call<std::vector<at::ScalarType>>("supported_dtypes");
  c10::DeviceCapability capability; // every bit set: clear them, then set the device's own
  capability.capability_data.capability_bits = 0;
  for (at::ScalarType dtype : dtypes) {
    switch (dtype) {
#define EMU_SET_DTYPE(_1, name)                                   \
  case at::ScalarType::name:                                      \
    capability.capability_data.supported_scalar_types.has_##name = 1; \
    break;
      AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(EMU_SET_DTYPE)
#undef EMU_SET_DTYPE
      default:
        break; // a dtype the capability bitfield has no bit for
    }
  }
  return capability;
}

} // namespace emu
