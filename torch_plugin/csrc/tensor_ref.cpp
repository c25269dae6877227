// Operand descriptors of emu tensors, built in C++ (the hot path of every op).
//
// A kernel describes each emu tensor it launches on as a runtime.TensorRef: (is_host, device,
// data_ptr, dtype code, shape, strides). Read through torch's Python bindings that is five calls
// and a tuple per operand, about a third of a tiny op's Python time; here it is one call that reads
// the at::Tensor directly. _binary_refs also decides, in the same call, whether two operands are
// the binary ops' common case (ops/elementwise.py), so that case costs no Python test at all.
#include "emu_core.h"

#include <ATen/core/Tensor.h>
#include <torch/csrc/DynamicTypes.h>  // getTHPDtype
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>

namespace {

PyTypeObject* ref_type = nullptr;  // runtime.TensorRef (a namedtuple: a tuple subclass)
// dtype code of each ScalarType (runtime.ELEMENT_NAMES), nullptr where the device stores none
std::array<PyObject*, static_cast<size_t>(c10::ScalarType::NumOptions)> codes{};

PyObject* int_tuple(c10::IntArrayRef values) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(values.size()));
  if (tuple == nullptr) return nullptr;
  for (size_t i = 0; i < values.size(); ++i) {
    PyObject* item = PyLong_FromLongLong(values[i]);
    if (item == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), item);
  }
  return tuple;
}

// TensorRef(False, device, data_ptr, code, shape, strides): shape and strides are borrowed, or
// nullptr (read from the tensor). nullptr with a Python error set on failure. What can throw (the
// tensor's reads) comes before any Python object is made, so an error leaks nothing.
PyObject* make_ref(const at::Tensor& t, PyObject* shape, PyObject* strides) {
  if (ref_type == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "emu: _set_tensor_ref was not called (torch_plugin.ops._common does)");
    return nullptr;
  }
  PyObject* code = codes[static_cast<size_t>(t.scalar_type())];
  if (code == nullptr) {  // as TO_CODE[t.dtype] does in Python
    PyErr_SetObject(PyExc_KeyError, reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type())));
    return nullptr;
  }
  const c10::Device device = t.device();
  const uintptr_t address = reinterpret_cast<uintptr_t>(t.data_ptr());
  const c10::IntArrayRef sizes = shape == nullptr ? t.sizes() : c10::IntArrayRef();
  const c10::IntArrayRef steps = strides == nullptr ? t.strides() : c10::IntArrayRef();
  PyObject* items[6] = {Py_False, nullptr, nullptr, code, shape, strides};
  Py_INCREF(Py_False);
  Py_INCREF(code);
  Py_XINCREF(shape);
  Py_XINCREF(strides);
  items[1] = PyLong_FromLong(device.is_cpu() ? -1 : static_cast<long>(device.index()));
  items[2] = PyLong_FromUnsignedLongLong(address);
  if (shape == nullptr) items[4] = int_tuple(sizes);
  if (strides == nullptr) items[5] = int_tuple(steps);
  PyObject* ref = nullptr;
  if (items[1] && items[2] && items[4] && items[5]) ref = ref_type->tp_alloc(ref_type, 6);
  if (ref == nullptr) {
    for (PyObject* item : items) Py_XDECREF(item);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < 6; ++i) PyTuple_SET_ITEM(ref, i, items[i]);
  return ref;
}

// _set_tensor_ref(TensorRef, {torch.dtype: code})
PyObject* set_tensor_ref(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 2 || !PyType_Check(args[0]) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(args[0]),
                                                                  &PyTuple_Type) || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_set_tensor_ref(ref_type: a tuple subclass, codes: {torch.dtype: int})");
    return nullptr;
  }
  PyObject* key;
  PyObject* value;
  Py_ssize_t pos = 0;
  std::array<PyObject*, codes.size()> table{};
  while (PyDict_Next(args[1], &pos, &key, &value)) {
    if (!THPDtype_Check(key)) {
      PyErr_SetString(PyExc_TypeError, "_set_tensor_ref: the codes' keys must be torch.dtype");
      return nullptr;
    }
    table[static_cast<size_t>(reinterpret_cast<THPDtype*>(key)->scalar_type)] = value;
  }
  for (size_t i = 0; i < codes.size(); ++i) {
    Py_XINCREF(table[i]);
    Py_XDECREF(codes[i]);
    codes[i] = table[i];
  }
  Py_INCREF(args[0]);
  Py_XDECREF(reinterpret_cast<PyObject*>(ref_type));
  ref_type = reinterpret_cast<PyTypeObject*>(args[0]);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// _tensor_ref(t, shape=None, strides=None): ops/_common.device_ref (shape and strides, when given,
// are passed on as they are)
PyObject* tensor_ref(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs < 1 || nargs > 3 || !THPVariable_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "device_ref(t: Tensor, shape=None, strides=None)");
    return nullptr;
  }
  PyObject* shape = nargs > 1 && args[1] != Py_None ? args[1] : nullptr;
  PyObject* strides = nargs > 2 && args[2] != Py_None ? args[2] : nullptr;
  return make_ref(THPVariable_Unpack(args[0]), shape, strides);
  END_HANDLE_TH_ERRORS
}

bool is_floating(c10::ScalarType s) {
  return s == c10::ScalarType::Float || s == c10::ScalarType::Double || s == c10::ScalarType::Half ||
         s == c10::ScalarType::BFloat16;
}

constexpr long IN_PLACE = 1;        // the result is written into a
constexpr long NO_REDUCED_0DIM = 2;  // a 0-dim float16/bfloat16 b is not the common case (mul, div)

// _binary_refs(a, b, flags): (ref_a, ref_b) when a and b are the binary ops' common case, else None:
// two emu tensors on one device, of one floating dtype and one shape, with elements; in place (flags
// & 1), a is also contiguous and b shares no storage with it, so nothing can overlap.
PyObject* binary_refs(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 3 || !PyLong_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "_binary_refs(a, b, flags: int)");
    return nullptr;
  }
  if (!THPVariable_Check(args[0]) || !THPVariable_Check(args[1])) Py_RETURN_NONE;
  const long flags = PyLong_AsLong(args[2]);
  const at::Tensor& a = THPVariable_Unpack(args[0]);
  const at::Tensor& b = THPVariable_Unpack(args[1]);
  const c10::ScalarType dtype = a.scalar_type();
  if (dtype != b.scalar_type() || !is_floating(dtype) || a.device() != b.device() || !a.device().is_privateuseone() ||
      a.sizes() != b.sizes() || a.numel() == 0) {
    Py_RETURN_NONE;
  }
  if ((flags & NO_REDUCED_0DIM) && b.dim() == 0 &&
      (dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16)) {
    Py_RETURN_NONE;
  }
  if ((flags & IN_PLACE) && (!a.is_contiguous() || b.is_alias_of(a))) Py_RETURN_NONE;
  PyObject* ref_a = make_ref(a, nullptr, nullptr);
  if (ref_a == nullptr) return nullptr;
  PyObject* ref_b = make_ref(b, nullptr, nullptr);
  if (ref_b == nullptr) {
    Py_DECREF(ref_a);
    return nullptr;
  }
  PyObject* pair = PyTuple_New(2);
  if (pair == nullptr) {
    Py_DECREF(ref_a);
    Py_DECREF(ref_b);
    return nullptr;
  }
  PyTuple_SET_ITEM(pair, 0, ref_a);
  PyTuple_SET_ITEM(pair, 1, ref_b);
  return pair;
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"_set_tensor_ref", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(set_tensor_ref)), METH_FASTCALL,
     "Register runtime.TensorRef and the dtype codes ({torch.dtype: int}) the descriptors use."},
    {"_tensor_ref", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tensor_ref)), METH_FASTCALL,
     "device_ref(t, shape=None, strides=None): the TensorRef of an emu tensor (data_ptr includes its offset)."},
    {"_binary_refs", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(binary_refs)), METH_FASTCALL,
     "(TensorRef of a, TensorRef of b) when a and b are the binary ops' common case, else None."},
    {nullptr, nullptr, 0, nullptr}};

} // namespace

namespace emu {
void add_tensor_ref_functions(PyObject* module) {
  if (PyModule_AddFunctions(module, methods) != 0) throw pybind11::error_already_set();
}
} // namespace emu
