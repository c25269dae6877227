// Typed entry points from the dispatcher into the Python kernels of the hottest ops.
//
// A kernel registered from Python (torch.library) is a boxed kernel: on every call torch pops the
// arguments off an IValue stack, walks the schema to build an args tuple and a kwargs dict,
// converts each IValue, calls the function with PyObject_Call and converts its result back onto the
// stack. For a 16-float add_ that is about 2.7 us, more than CPU's whole op. The ops below
// (the binary arithmetic ops, which every training step and most fused graphs run) are registered
// here instead, unboxed, with their schema's C++ signature: each call wraps its tensors and makes
// one vectorcall of the same Python kernel (the registry's wrapper, with its counting, contract
// checks and error translation unchanged). Arguments mean what they mean through torch's path: a
// wrapped number arrives as a Python number, the keyword-only alpha is passed only when it is not
// its default, as torch passes them, and a Python exception propagates as torch's python_error. torch's own path takes no other step for a kernel
// of a PrivateUse1 op (a dispatch mode or a tensor subclass is handled by the Python key, which
// runs before this one).
#include "emu_core.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>  // toPyObject: the Scalar conversion torch's path uses
#include <torch/library.h>

#include <array>
#include <cstring>
#include <memory>

namespace {

constexpr int kSlots = 8;
std::array<PyObject*, kSlots> kernels{};  // the Python kernel of each slot (a strong reference)
PyObject* alpha_name = nullptr;            // ("alpha",): the vectorcall's keyword names

// Owns a new reference; released when it goes out of scope.
struct Ref {
  PyObject* p;
  explicit Ref(PyObject* obj) : p(obj) {}
  ~Ref() { Py_XDECREF(p); }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
};

bool is_default_alpha(const at::Scalar& alpha) {
  return alpha.isIntegral(false) && !alpha.isSymbolic() && alpha.toLong() == 1;
}

// A tensor argument as torch's boxed path hands it to a Python kernel: a wrapped number (the
// 0-dim CPU tensor that ``x * 2`` makes of the 2) as the Python number, any other tensor as itself.
PyObject* argument(const at::Tensor& t) {
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
    return torch::jit::toPyObject(c10::IValue(t)).release().ptr();
  }
  PyObject* obj = THPVariable_Wrap(t);
  if (obj == nullptr) throw python_error();
  return obj;
}

// Calls kernel ``slot`` with (a, b[, alpha=alpha]); the result (a new reference), or throws.
PyObject* call(int slot, const at::Tensor& a, const at::Tensor& b, const at::Scalar* alpha) {
  Ref pa(argument(a));
  Ref pb(argument(b));
  PyObject* args[3] = {pa.p, pb.p, nullptr};
  PyObject* names = nullptr;
  Ref palpha(nullptr);
  if (alpha != nullptr && !is_default_alpha(*alpha)) {
    palpha.p = torch::jit::toPyObject(c10::IValue(*alpha)).release().ptr();
    args[2] = palpha.p;
    names = alpha_name;
  }
  PyObject* result = PyObject_Vectorcall(kernels[slot], args, 2, names);
  if (result == nullptr) throw python_error();
  return result;
}

at::Tensor tensor_result(PyObject* result) {
  Ref owned(result);
  if (!THPVariable_Check(result)) {
    PyErr_Format(PyExc_RuntimeError, "emu: a kernel returned %s where its schema returns a Tensor",
                 Py_TYPE(result)->tp_name);
    throw python_error();
  }
  return THPVariable_Unpack(result);
}

template <int S>
at::Tensor binary(const at::Tensor& self, const at::Tensor& other) {
  pybind11::gil_scoped_acquire gil;
  return tensor_result(call(S, self, other, nullptr));
}

template <int S>
at::Tensor& binary_(at::Tensor& self, const at::Tensor& other) {
  pybind11::gil_scoped_acquire gil;
  tensor_result(call(S, self, other, nullptr));  // an in-place op returns self
  return self;
}

template <int S>
at::Tensor binary_alpha(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  pybind11::gil_scoped_acquire gil;
  return tensor_result(call(S, self, other, &alpha));
}

template <int S>
at::Tensor& binary_alpha_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  pybind11::gil_scoped_acquire gil;
  tensor_result(call(S, self, other, &alpha));
  return self;
}

torch::Library& library() {
  // Lives as long as the process, like the registry's Python Library objects.
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                                        __LINE__);
  return *lib;
}

template <auto F>
void register_entry(torch::Library& lib, const char* name) {
  lib.impl(name, TORCH_FN(F));
}

struct Entry {
  const char* name;
  void (*register_with)(torch::Library&, const char*);  // kernel slot = the entry's index
};
const Entry entries[kSlots] = {
    {"add.Tensor", register_entry<binary_alpha<0>>}, {"add_.Tensor", register_entry<binary_alpha_<1>>},
    {"sub.Tensor", register_entry<binary_alpha<2>>}, {"sub_.Tensor", register_entry<binary_alpha_<3>>},
    {"mul.Tensor", register_entry<binary<4>>},       {"mul_.Tensor", register_entry<binary_<5>>},
    {"div.Tensor", register_entry<binary<6>>},       {"div_.Tensor", register_entry<binary_<7>>},
};

int slot_of(const char* name) {
  for (int i = 0; i < kSlots; ++i) {
    if (std::strcmp(name, entries[i].name) == 0) return i;
  }
  return -1;
}

// _impl_typed(name, kernel) -> bool: registers ``kernel`` (a Python callable) as the emu kernel of
// aten ``name`` through a typed entry point; False (nothing registered) where there is none for
// ``name``. A second call for one name replaces the kernel the entry point calls.
PyObject* impl_typed(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_impl_typed(name: str, kernel: callable)");
    return nullptr;
  }
  const char* name = PyUnicode_AsUTF8(args[0]);
  if (name == nullptr) return nullptr;
  const int slot = slot_of(name);
  if (slot < 0) Py_RETURN_FALSE;
  if (alpha_name == nullptr) {
    alpha_name = Py_BuildValue("(s)", "alpha");
    if (alpha_name == nullptr) return nullptr;
  }
  const bool registered = kernels[slot] != nullptr;
  Py_INCREF(args[1]);
  Py_XSETREF(kernels[slot], args[1]);
  if (!registered) entries[slot].register_with(library(), entries[slot].name);
  Py_RETURN_TRUE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"_impl_typed", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(impl_typed)), METH_FASTCALL,
     "Registers a Python kernel for an aten op through a typed C++ entry point (False: none for that op)."},
    {nullptr, nullptr, 0, nullptr},
};

} // namespace

namespace emu {
void add_trampoline_functions(PyObject* module) {
  if (PyModule_AddFunctions(module, methods) != 0) throw python_error();
}
} // namespace emu
