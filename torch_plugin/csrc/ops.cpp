// Metadata-only aten kernels for PrivateUse1. They reuse ATen's own
// implementations so that aliasing/stride semantics are exactly PyTorch's;
// the only thing that differs from CPU is that storage memory is allocated,
// grown and copied through the bridge (device VAs are never dereferenced).
// copy_/_copy_from/fill_ and all compute ops are registered from Python.
// record_stream is here too: it only forwards an allocator hint.
#include "emu_core.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/library.h>

namespace emu {
namespace {

const c10::DispatchKeySet kEmuKeys(c10::DispatchKey::PrivateUse1);

void check_factory_args(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "emu tensors only support the strided layout, got ", *layout);
  TORCH_CHECK(!pin_memory.value_or(false),
              "only CPU tensors can be pinned; pin_memory=True is invalid for emu tensors");
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  check_factory_args(layout, pin_memory);
  // Out-of-tree kernels get no codegen'd device guard: the allocator uses
  // the current device, so make the requested one current.
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(
      size, device_allocator(), kEmuKeys,
      c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  check_factory_args(layout, pin_memory);
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(
      size, stride, device_allocator(), kEmuKeys, c10::dtype_or_default(dtype));
}

// Makes self's storage large enough for its current sizes/strides/offset.
// This is the CPU maybe_resize_storage_cpu() logic, except that growth goes
// through the bridge (resize_bytes_cpu would memcpy device addresses).
void maybe_grow_storage(c10::TensorImpl* self) {
  if (self->numel() == 0) {
    return; // nothing to hold (and storage_offset may be past the end)
  }
  size_t needed = at::detail::computeStorageNbytes(
      self->sizes(), self->strides(), self->dtype().itemsize(), self->storage_offset());
  const c10::Storage& storage = self->unsafe_storage();
  TORCH_CHECK(storage, "emu: tensor without storage cannot be resized");
  if (needed > storage.nbytes()) {
    resize_storage_bytes(storage, needed);
  }
}

// Puts a tensor's storage and geometry back if a resize_/set_ fails half-way.
// ATen's CPU kernels set the new sizes before growing the storage, so an
// out-of-memory growth would leave a tensor whose sizes exceed its storage:
// every later read of it would then fault (or, on the CPU, read out of
// bounds). "Bad input never corrupts state" (DESIGN.md): roll back instead.
class GeometryRollback {
 public:
  explicit GeometryRollback(c10::TensorImpl* self)
      : self_(self),
        storage_(self->unsafe_storage()),
        sizes_(self->sizes().vec()),
        strides_(self->strides().vec()),
        offset_(self->storage_offset()) {}
  GeometryRollback(const GeometryRollback&) = delete;
  GeometryRollback& operator=(const GeometryRollback&) = delete;
  ~GeometryRollback() {
    if (committed_) {
      return;
    }
    try { // runs while an exception unwinds: must not throw
      if (!self_->unsafe_storage().is_alias_of(storage_)) {
        self_->set_storage_keep_dtype(storage_);
      }
      if (self_->sizes() != c10::IntArrayRef(sizes_) ||
          self_->strides() != c10::IntArrayRef(strides_) || self_->storage_offset() != offset_) {
        self_->set_sizes_and_strides(sizes_, strides_, offset_);
      }
    } catch (...) {
    }
  }
  void commit() {
    committed_ = true;
  }

 private:
  c10::TensorImpl* self_;
  c10::Storage storage_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t offset_;
  bool committed_ = false;
};

void check_sizes_nonnegative(c10::IntArrayRef size) {
  for (int64_t s : size) {
    TORCH_CHECK(s >= 0, "Trying to resize a tensor to a negative dimension ", s, ": ", size);
  }
}

// ATen's resize_impl_cpu_ with resize_storage=false only updates the
// sizes/strides (it returns early when they are unchanged), then we grow.
void resize_impl(c10::TensorImpl* self, c10::IntArrayRef size, at::OptionalIntArrayRef stride) {
  check_sizes_nonnegative(size);
  GeometryRollback rollback(self);
  at::native::resize_impl_cpu_(self, size, stride, /*resize_storage=*/false);
  maybe_grow_storage(self);
  rollback.commit();
}

// aten::resize_ : same steps as at::native::resize_ (CPU).
const at::Tensor& resize_(
    const at::Tensor& self,
    c10::IntArrayRef size,
    std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(self.device());
  auto* impl = self.unsafeGetTensorImpl();
  resize_impl(impl, size, /*stride=*/std::nullopt);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "Unsupported memory format", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

// aten::set_.source_Storage_storage_offset : at::native::set_storage_cpu_
// with the storage growth routed through the bridge.
at::Tensor& set_storage_offset(
    at::Tensor& self,
    c10::Storage source,
    int64_t storage_offset,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  check_sizes_nonnegative(size);
  GeometryRollback rollback(self.unsafeGetTensorImpl()); // checkSetStorage swaps the storage
  at::native::checkSetStorage(self, std::move(source), storage_offset, size, stride);
  c10::DeviceGuard guard(self.device());
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  at::OptionalIntArrayRef stride_opt =
      stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : std::nullopt;
  resize_impl(self.unsafeGetTensorImpl(), size, stride_opt);
  rollback.commit();
  return self;
}

// aten::set_ (no source): an empty storage on self's device. The CPU kernel
// would attach a CPU storage, which set_ then rejects as a device mismatch.
at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), 0,
      c10::DataPtr(nullptr, self.device()), device_allocator(), /*resizable=*/true);
  self.set_(std::move(storage), 0, {0}, {});
  return self;
}

// aten::record_stream : not compute, only tells the allocator side (the
// bridge) that the block is in use on `stream`; the op has no generic kernel.
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected an emu stream, got ", stream);
  c10::impl::VirtualGuardImpl(c10::DeviceType::PrivateUse1)
      .recordDataPtrOnStream(self.storage().data_ptr(), stream);
}

// aten::_has_compatible_shallow_copy_type : whether `from`'s TensorImpl can be
// shallow-copied into `self`'s (Tensor.data = ..., which nn.Module.to() uses so
// that a parameter keeps its identity). c10's own rule knows only the built-in
// dense backends; without this kernel Module.to("emu") replaced each parameter
// by a new one, and weights tied between modules (a language model's embedding
// and output layer) silently stopped sharing their gradient. Dense strided
// tensors on the CPU and on emu are interchangeable, as CPU and CUDA ones are.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) {
    return true;
  }
  auto dense = [](const at::Tensor& t) {
    const auto type = t.device().type();
    return t.layout() == c10::kStrided && !t.is_quantized() && t.key_set().has(c10::DispatchKey::Dense) &&
           (type == c10::DeviceType::CPU || type == c10::DeviceType::PrivateUse1);
  };
  return dense(self) && dense(from);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  // Views: ATen's generic implementations only touch metadata.
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  // The only other aten views without a kernel usable by PrivateUse1
  // (they dispatch per backend in native_functions.yaml).
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  // Storage (re)binding and resizing.
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("record_stream", TORCH_FN(record_stream));
}

} // namespace emu
