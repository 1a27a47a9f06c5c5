// gnn._gnn: the kernels, the graph and the npz reader for Python (nanobind; python/README.md).
//
// Every function works on arrays the caller owns, handed over through DLPack or the buffer protocol
// (NumPy, PyTorch, anything with __dlpack__) without a copy: inputs are read where they lie and
// outputs are written into arrays the caller allocated (gnn/__init__.py allocates them in the input's
// own framework, so a torch caller gets torch tensors back). Each argument is checked here before any
// kernel runs: wrong dtype, device, shape or strides raise one TypeError or ValueError naming the
// argument; errors from the library (a corrupt file, an edge out of range) raise gnn.Error.
// The GIL is released while a kernel runs. Per-edge arrays are in the graph's CSR order
// (Graph.eid maps a CSR position to the caller's edge id).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "io/npz.h"
#include "io/tpugraphs.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/instance_norm.h"
#include "kernels/layer_norm.h"
#include "kernels/pooling.h"
#include "kernels/sage.h"
#include "kernels/segment_softmax.h"
#include "kernels/spmm.h"
#include "runtime/cuda.h"
#include "runtime/graph.h"
#include "runtime/parallel.h"
#include "runtime/tensor.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace gnn::py {

[[noreturn]] void refuse_unreadable(nb::handle a, const char* name);

// An array argument. nanobind's own conversion refuses, before any check here runs, what is not an array
// and an array that neither DLPack nor the buffer protocol can describe (NumPy's big-endian and object
// arrays, torch's meta tensors), and the caller would read "incompatible function arguments", naming
// nothing. Such an argument is taken instead (the caster below, on nanobind's last pass only) and refused
// by name at the first check that reads it; its accessors refuse it too, unnamed, should a path ever read
// it before a check. (The module binds no overloads: the caster would take what a later overload reads.)
template <class Base>
struct Arg : Base {
  nb::object refused;    // the Python object, when it could not be read as an array
  bool no_data = false;  // read, but its DLPack export points at no memory (into the first page)
  bool negated = false;  // read, but a torch tensor with its negative bit set

  void readable(const char* name) const {
    if (negated)
      throw nb::type_error((std::string(name ? name : "an array argument") +
                            " is a negated view (a torch tensor with its negative bit set, whose memory holds "
                            "the values un-negated); pass a plain tensor of its values (.resolve_neg())")
                               .c_str());
    if (no_data)
      throw nb::type_error((std::string(name ? name : "an array argument") +
                            " has no data of its own (a tensor subclass without storage, such as a FakeTensor "
                            "or PyG's EdgeIndex, or a DLPack export pointing at address 0); pass a plain tensor "
                            "of its values")
                               .c_str());
    if (refused) refuse_unreadable(refused, name);
  }
  size_t ndim() const { return readable(nullptr), Base::ndim(); }
  int64_t shape(size_t i) const { return readable(nullptr), Base::shape(i); }
  int64_t stride(size_t i) const { return readable(nullptr), Base::stride(i); }
  nb::dlpack::dtype dtype() const { return readable(nullptr), Base::dtype(); }
  int32_t device_type() const { return readable(nullptr), Base::device_type(); }
  int32_t device_id() const { return readable(nullptr), Base::device_id(); }
  size_t nbytes() const { return readable(nullptr), Base::nbytes(); }
  decltype(auto) data() const { return readable(nullptr), Base::data(); }
};

// A size argument (typed `int` in the signature), taken as whatever object was passed so that
// optional_count can name it when it is not an integer: nanobind's own int conversion names nothing.
struct SizeArg {
  nb::object o;
};

// What an argument's class is, as far as reading it goes: torch's tensor or a subclass (it has is_neg),
// and a class that dispatches its ops in Python (FakeTensor, PyG's EdgeIndex, other wrapper subclasses),
// whose instances may hold no storage of their own (torch.Tensor's own __torch_dispatch__ is torch's
// disabled one). The answer is kept per class (a failed attribute lookup costs about half a microsecond
// a call), with a reference to the class, under the GIL.
enum ClassFlags : uint8_t { kTorchTensor = 1, kPythonDispatch = 2 };
inline uint8_t class_flags(nb::handle a) noexcept {
  static std::vector<std::pair<PyObject*, uint8_t>> known;
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(a.ptr()));
  for (const auto& [t, flags] : known)
    if (t == type) return flags;
  uint8_t flags = PyObject_HasAttrString(type, "is_neg") ? kTorchTensor : 0;
  if (PyObject* d = PyObject_GetAttrString(type, "__torch_dispatch__")) {
    bool wrapper = true;  // (a dispatch of its own without a __name__)
    if (PyObject* n = PyObject_GetAttrString(d, "__name__")) {
      const char* s = PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : nullptr;
      wrapper = !s || std::strcmp(s, "_disabled_torch_dispatch_impl") != 0;
      Py_DECREF(n);
    }
    if (wrapper) flags |= kPythonDispatch;
    Py_DECREF(d);
  }
  PyErr_Clear();
  if (known.size() < 64) {
    Py_INCREF(type);
    known.emplace_back(type, flags);
  }
  return flags;
}

// Whether a is a torch tensor with its negative bit set (a lazy negation, such as the imaginary part of
// a conjugate): its memory holds the values un-negated, and DLPack carries no such bit, so reading it
// would read the wrong sign.
inline bool negated_tensor(nb::handle a) noexcept {
  if (!(class_flags(a) & kTorchTensor)) return false;
  PyObject* r = PyObject_CallMethod(a.ptr(), "is_neg", nullptr);
  const bool neg = r == Py_True;
  Py_XDECREF(r);
  PyErr_Clear();
  return neg;
}

// An integer from calling o.name(), or nullopt where the call fails or gives no integer.
inline std::optional<uintptr_t> call_for_int(PyObject* o, const char* name) noexcept {
  PyObject* r = PyObject_CallMethod(o, name, nullptr);
  std::optional<uintptr_t> v;
  if (r && PyLong_Check(r)) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(r);
    if (!PyErr_Occurred()) v = uintptr_t(u);
  }
  Py_XDECREF(r);
  PyErr_Clear();
  return v;
}

// Whether a tensor of such a class holds no storage of its own (its DLPack export then points at address
// 0 plus its offset): its data pointer does not lie in a storage with data, or asking fails (a wrapper's
// "invalid python storage", a FakeTensor's under torch 1.13).
inline bool storage_free_tensor(nb::handle a) noexcept {
  if (!(class_flags(a) & kPythonDispatch)) return false;
  PyObject* st = PyObject_CallMethod(a.ptr(), "untyped_storage", nullptr);
  if (!st) PyErr_Clear(), st = PyObject_CallMethod(a.ptr(), "storage", nullptr);  // (torch < 2)
  PyErr_Clear();
  if (!st) return true;
  const std::optional<uintptr_t> start = call_for_int(st, "data_ptr"), size = call_for_int(st, "nbytes");
  Py_DECREF(st);
  const std::optional<uintptr_t> p = call_for_int(a.ptr(), "data_ptr");
  return !start || !size || !p || !*start || *p < *start || *p >= *start + *size;
}

// Whether an object that nanobind could not read is meant as an array: it speaks one of the array
// protocols or has a dtype.
inline bool array_like(nb::handle a) noexcept {
  for (const char* attr : {"__dlpack__", "__array_interface__", "__array__", "__cuda_array_interface__", "dtype"})
    if (PyObject_HasAttrString(a.ptr(), attr)) return true;
  return false;
}

}  // namespace gnn::py

namespace nanobind::detail {
template <class Base>
struct type_caster<gnn::py::Arg<Base>> {
  using Inner = make_caster<Base>;
  NB_TYPE_CASTER(gnn::py::Arg<Base>, Inner::Name)

  bool from_python(handle src, uint32_t flags, cleanup_list* cleanup) noexcept {
    Inner inner;
    // (None reaches here only where an argument is declared .none(), to be refused by name: nanobind's
    // ndarray would take it as an empty array.)
    if (!src.is_none() && inner.from_python(src, flags, cleanup)) {
      static_cast<Base&>(value) = std::move(inner.value);
      value.refused = object();
      // (Base's own data(): the wrapper's refuses an array marked as this one is about to be.) Data in
      // the first page (a null pointer plus an offset), or a torch subclass without storage of its own.
      value.no_data = value.Base::size() > 0 && (reinterpret_cast<uintptr_t>(value.Base::data()) < 4096 ||
                                                 gnn::py::storage_free_tensor(src));
      value.negated = gnn::py::negated_tensor(src);
      return true;
    }
    if (!(flags & uint32_t(cast_flags::convert)) && !src.is_none()) return false;
    value.refused = borrow(src);
    return true;
  }
};

template <>
struct type_caster<gnn::py::SizeArg> {
  NB_TYPE_CASTER(gnn::py::SizeArg, const_name("int"))
  bool from_python(handle src, uint32_t, cleanup_list*) noexcept {
    value.o = borrow(src);
    return true;
  }
};
}  // namespace nanobind::detail

namespace gnn::py {

// Names what kept an array argument from being read: not an array at all, its byte order, an object
// dtype, a device DLPack has no code for, or else what its own __dlpack__ said.
[[noreturn]] void refuse_unreadable(nb::handle a, const char* name) {
  // str(h) (nb::str from an object, not a handle, would require h to be a str already)
  auto text = [](nb::handle h) { return nb::cast<std::string>(nb::str(h)); };
  const std::string who = name ? name : "an array argument";
  std::string type = "?", dtype, detail;
  try {
    type = a.is_none() ? "None" : text(nb::object(a.type().attr("__name__")));
    if (!array_like(a))
      throw nb::type_error((who + " must be an array (NumPy, torch, CuPy, or DLPack), got " + type).c_str());
    if (nb::hasattr(a, "dtype")) {
      nb::object dt = a.attr("dtype");
      dtype = text(dt);
      if (nb::hasattr(dt, "isnative") && !nb::cast<bool>(dt.attr("isnative")))
        throw nb::type_error((who + " is a " + type + " of dtype " + dtype +
                              ", not in this machine's byte order; pass a native-order copy "
                              "(a.astype(a.dtype.newbyteorder('=')))")
                                 .c_str());
      if (nb::hasattr(dt, "hasobject") && nb::cast<bool>(dt.attr("hasobject")))
        throw nb::type_error((who + " is a " + type + " of dtype " + dtype +
                              "; gnn reads numeric arrays (float32, int32, int64)")
                                 .c_str());
    }
    if (nb::hasattr(a, "device")) {
      const std::string device = text(nb::object(a.attr("device")));
      if (device != "cpu" && device.rfind("cuda", 0) != 0)
        throw nb::type_error(
            (who + " is on " + device + "; gnn's kernels run on host memory and on CUDA devices").c_str());
    }
    if (nb::hasattr(a, "__dlpack__")) {
      try {
        a.attr("__dlpack__")();
      } catch (const nb::python_error& e) {
        detail = ": its __dlpack__ says " + text(e.value());  // (what() would add the traceback)
      }
    }
  } catch (const nb::python_error&) {  // an attribute that raised, or was not what it is in NumPy or torch:
  } catch (const nb::cast_error&) {    // say what is known
  }
  throw nb::type_error((who + " (a " + type + (dtype.empty() ? "" : " of dtype " + dtype) +
                        ") cannot be read as an array through DLPack or the buffer protocol" + detail)
                           .c_str());
}

namespace {

using In = Arg<nb::ndarray<nb::ro>>;  // any framework, any dtype: checked below, by name
using Out = Arg<nb::ndarray<>>;
using OptIn = std::optional<In>;
using OptOut = std::optional<Out>;

std::string dtype_str(nb::dlpack::dtype t) {
  if (t == nb::dtype<bool>()) return "bool";
  using Code = nb::dlpack::dtype_code;
  const char* kind = t.code == uint8_t(Code::Int)       ? "int"
                     : t.code == uint8_t(Code::UInt)    ? "uint"
                     : t.code == uint8_t(Code::Float)   ? "float"
                     : t.code == uint8_t(Code::Bfloat)  ? "bfloat"
                     : t.code == uint8_t(Code::Complex) ? "complex"
                                                        : nullptr;
  // (as NumPy and torch name them: float32, uint16, complex64; a code DLPack added later by its number)
  std::string name = kind ? kind + std::to_string(t.bits)
                          : "DLPack type code " + std::to_string(t.code) + " of " + std::to_string(t.bits) + " bits";
  return t.lanes > 1 ? name + " x " + std::to_string(t.lanes) + " lanes" : name;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

template <class A>
std::vector<int64_t> shape_of(const A& a) {
  std::vector<int64_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = int64_t(a.shape(i));
  return s;
}

// Where a call's arrays live: host memory or one CUDA device. The first array checked fixes it and every
// other array of the call must be there too; CUDA calls run on the caller's stream (python/README.md).
struct Place {
  int32_t type = 0;  // a DLPack device type; 0 until the first array is checked
  int32_t id = 0;
  bool cuda() const { return type == int32_t(nb::device::cuda::value); }
  Device device() const { return cuda() ? Device::cuda(id) : Device::cpu(); }
};

std::string place_str(int32_t type, int32_t id) {
  if (type == int32_t(nb::device::cpu::value)) return "host memory";
  if (type == int32_t(nb::device::cuda::value)) return "cuda:" + std::to_string(id);
  return "DLPack device type " + std::to_string(type) + " (" + std::to_string(id) + ")";
}

template <class A>
void check_place(const A& a, const char* name, Place& at) {
  a.readable(name);
  const int32_t type = a.device_type(), id = a.device_id();
  if (type != int32_t(nb::device::cpu::value) && type != int32_t(nb::device::cuda::value))
    throw nb::type_error(
        (std::string(name) + " is on " + place_str(type, id) + "; gnn's kernels run on host memory and on CUDA devices")
            .c_str());
  if (type == int32_t(nb::device::cuda::value) && !kWithCuda)
    throw nb::type_error((std::string(name) + " is on " + place_str(type, id) +
                          ", and this build of gnn's Python module has no CUDA (build it where nvcc is on PATH)")
                             .c_str());
  if (at.type == 0) {
    at.type = type, at.id = id;
  } else if (at.type != type || at.id != id) {
    throw nb::value_error((std::string(name) + " is on " + place_str(type, id) + ", the call's other arrays on " +
                           place_str(at.type, at.id) + "; pass them all on one device")
                              .c_str());
  }
}

// An array's strides must be C order's (dimensions of size 1 aside; an empty array has nothing to read).
template <class A>
void check_contiguous(const A& a, const char* name) {
  a.readable(name);
  const std::vector<int64_t> got = shape_of(a);
  if (std::find(got.begin(), got.end(), 0) != got.end()) return;
  int64_t expect = 1;
  for (size_t i = got.size(); i-- > 0;) {
    if (got[i] != 1 && a.stride(i) != expect)
      throw nb::value_error((std::string(name) + " is not C-contiguous (shape " + shape_str(got) +
                             "); pass a contiguous array (numpy.ascontiguousarray, tensor.contiguous())")
                                .c_str());
    expect *= got[i];
  }
}

// One argument's checks: dtype, place (host or the call's CUDA device), C-contiguous, and the shape (-1:
// any size there).
template <class T, class A>
T* checked(Place& at, const A& a, const char* name, std::initializer_list<int64_t> shape) {
  a.readable(name);
  if (a.dtype() != nb::dtype<std::remove_const_t<T>>())
    throw nb::type_error((std::string(name) + " must be " + dtype_str(nb::dtype<std::remove_const_t<T>>()) + ", got " +
                          dtype_str(a.dtype()))
                             .c_str());
  check_place(a, name, at);
  const std::vector<int64_t> got = shape_of(a);
  bool ok = got.size() == shape.size();
  for (size_t i = 0; ok && i < got.size(); ++i) ok = shape.begin()[i] < 0 || shape.begin()[i] == got[i];
  if (!ok) {
    std::vector<int64_t> want(shape);
    std::string w = "(";
    for (size_t i = 0; i < want.size(); ++i)
      w += (i ? ", " : "") + (want[i] < 0 ? std::string("*") : std::to_string(want[i]));
    w += want.size() == 1 ? ",)" : ")";
    throw nb::value_error((std::string(name) + " must have shape " + w + ", got " + shape_str(got)).c_str());
  }
  check_contiguous(a, name);
  return static_cast<T*>(const_cast<void*>(static_cast<const void*>(a.data())));
}

template <class T, class A>
T* checked_opt(Place& at, const std::optional<A>& a, const char* name, std::initializer_list<int64_t> shape) {
  return a ? checked<T>(at, *a, name, shape) : nullptr;
}

// The size of dimension d of an argument whose rank is checked first.
template <class A>
int64_t dim_of(const A& a, const char* name, size_t ndim, size_t d) {
  a.readable(name);
  if (a.ndim() != ndim)
    throw nb::value_error(
        (std::string(name) + " must have " + std::to_string(ndim) + " dimensions, got shape " + shape_str(shape_of(a)))
            .c_str());
  return int64_t(a.shape(d));
}

// ---- CUDA calls -----------------------------------------------------------------------------------
// A call on a CUDA device runs its kernels on the caller's stream (the integer handle the Python layer
// passes: torch's or CuPy's current stream), with that device current. Scratch memory is stream-ordered
// on the same stream (cudaMallocAsync), so it is reused only behind the kernels that read it.
// The CUDA branches sit under `if constexpr (kWithCuda)`: a CPU-only build has no CUDA kernels to call.

// Makes a device current for the scope and puts the caller's current device back after it, so a torch
// or CuPy caller whose arrays are on cuda:1 does not find its current device changed by the call.
class DeviceScope {
 public:
  explicit DeviceScope(int device) : previous_(cuda_current_device()) { cuda_set_device(device); }
  ~DeviceScope() {
    try {
      cuda_set_device(previous_);
    } catch (...) {}
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_;
};

struct OnDevice {
  int device;
  Stream stream;
  DeviceScope scope;
  OnDevice(const Place& at, uintptr_t handle)
      : device(at.id), stream(reinterpret_cast<Stream>(handle)), scope(at.id) {}
};

// Floats of stream-ordered scratch, freed on the stream when the call's kernels are queued.
class Scratch {
 public:
  Scratch(const OnDevice& on, int64_t floats) : device_(on.device), stream_(on.stream) {
    if (floats > 0) p_ = static_cast<float*>(cuda_alloc_async(size_t(floats) * sizeof(float), device_, stream_));
  }
  ~Scratch() {
    try {
      cuda_free_async(p_, device_, stream_);
    } catch (...) {}
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return p_; }

 private:
  int device_;
  Stream stream_;
  float* p_ = nullptr;
};

// The values of a small index array (pointers) on the host, to check them before a kernel reads by them:
// the array itself in host memory, or a copy made on the caller's stream (one wait) on a device.
template <class I>
const I* host_values(const I* p, int64_t n, const Place& at, uintptr_t stream, std::vector<I>& copy) {
  if (!at.cuda()) return p;
  copy.resize(size_t(n));
  nb::gil_scoped_release release;
  const DeviceScope scope(at.id);
  cuda_download_on(copy.data(), p, size_t(n) * sizeof(I), at.id, reinterpret_cast<Stream>(stream));
  return copy.data();
}

// The module's cuBLAS use: gnn's handle of the device, one call at a time (a handle's stream is set per
// call), with a workspace of its own from the caller's stream (the one gnn binds belongs to gnn's stream).
std::mutex g_blas_mu;
constexpr int64_t kBlasWorkspaceFloats = int64_t(2) << 20;  // 8 MiB
BlasHandle module_blas(int device, const Scratch& workspace) {
  BlasHandle b = cuda_blas(device);
  b.workspace = workspace.get();
  b.workspace_bytes = size_t(kBlasWorkspaceFloats) * sizeof(float);
  return b;
}

Reduce parse_reduce(const std::string& r, bool allow_logsumexp = false) {
  if (r == "sum" || r == "add") return Reduce::kSum;
  if (r == "mean") return Reduce::kMean;
  if (r == "max") return Reduce::kMax;
  throw nb::value_error(("reduce must be 'sum', 'mean' or 'max'" +
                         std::string(allow_logsumexp ? " or 'logsumexp'" : "") + ", got '" + r + "'")
                            .c_str());
}

Act parse_activation(const std::string& name) {
  try {
    return parse_act(name.c_str());
  } catch (const Error&) {
    throw nb::value_error(
        ("activation must be one of none, relu, leaky_relu, elu, gelu, sigmoid, tanh; got '" + name + "'").c_str());
  }
}

// ---- Graph ----------------------------------------------------------------------------------------

struct PyGraph {
  Graph g;
  std::map<int, Graph> on_device;  // copies on CUDA devices, made on a call's first use there

  PyGraph() = default;
  PyGraph(const PyGraph&) = delete;
  PyGraph& operator=(const PyGraph&) = delete;
  ~PyGraph() {
    // A caller's stream may still be reading a copy: wait for the device before the copy is freed.
    if (on_device.empty()) return;
    nb::gil_scoped_release release;  // the wait must not stall the interpreter's other threads
    for (const auto& [device, copy] : on_device) {
      try {
        const DeviceScope scope(device);
        cuda_device_synchronize(device);
      } catch (...) {}
    }
  }

  static CsrView view_of(const Graph& g) {
    CsrView v;
    v.num_rows = g.num_nodes;
    v.num_cols = g.num_sources();
    v.indptr = g.csr_indptr.i32();
    v.indices = g.csr_indices.i32();
    v.csc_indptr = g.csc_indptr.i32();
    v.csc_indices = g.csc_indices.i32();
    v.csc_to_csr = g.csc_to_csr.i32();
    v.num_edges = g.num_edges;
    return v;
  }
  CsrView view() const { return view_of(g); }
  // The graph where a call's arrays are: this one, or its copy on their CUDA device (uploaded on gnn's
  // stream and waited for, once, so that any stream may read it). Called with the GIL held.
  CsrView view(const Place& at) {
    if (!at.cuda()) return view();
    auto it = on_device.find(at.id);
    if (it == on_device.end()) {
      const DeviceScope scope(at.id);
      Graph copy = g.to(Device::cuda(at.id));
      cuda_synchronize(at.id);
      it = on_device.emplace(at.id, std::move(copy)).first;
    }
    return view_of(it->second);
  }
};

// Reads row r of a [2, E] index array of any integer dtype and any strides into int64.
std::vector<int64_t> index_row(const In& a, size_t r) {
  const int64_t E = int64_t(a.shape(1));
  std::vector<int64_t> out(static_cast<size_t>(E));
  const auto* base = static_cast<const char*>(a.data());
  const int64_t item = a.dtype().bits / 8;
  for (int64_t e = 0; e < E; ++e) {
    const char* p = base + (int64_t(r) * a.stride(0) + e * a.stride(1)) * item;
    if (a.dtype() == nb::dtype<int64_t>()) {
      std::memcpy(&out[size_t(e)], p, 8);
    } else {
      int32_t v;
      std::memcpy(&v, p, 4);
      out[size_t(e)] = v;
    }
  }
  return out;
}

// A size argument given as a Python object, None meaning absent: an integer (int, a NumPy integer,
// anything with __index__) or a whole number float() takes (not str, bytes or bool), as the Python
// layer's _count takes; named where it is not. What a caller's own __index__ or __float__ raises other
// than a TypeError (a KeyboardInterrupt) goes on as it is.
std::optional<int64_t> optional_count(const SizeArg& arg, const char* name) {
  const nb::handle o = arg.o;
  if (!o.is_valid() || o.is_none()) return std::nullopt;
  const std::string who(name);
  auto out_of_range = [&] { return nb::value_error((who + " is out of range for a 64-bit size").c_str()); };
  // (text, bytes and truth values are mistakes read as numbers: refused, as the Python layer's _real does)
  const std::string type_name = Py_TYPE(o.ptr())->tp_name;
  const bool not_number = PyBool_Check(o.ptr()) || PyUnicode_Check(o.ptr()) || PyBytes_Check(o.ptr()) ||
                          PyByteArray_Check(o.ptr()) || PyMemoryView_Check(o.ptr()) || type_name == "numpy.bool" ||
                          type_name == "numpy.bool_";
  if (!not_number) {
    if (PyObject* i = PyNumber_Index(o.ptr())) {
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
      Py_DECREF(i);
      if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        throw out_of_range();
      }
      return int64_t(v);
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();  // (what __index__ raised)
    PyErr_Clear();
    if (PyObject* fo = PyNumber_Float(o.ptr())) {  // a whole float (a NumPy float, a 0-d tensor...)
      const double f = PyFloat_AsDouble(fo);
      Py_DECREF(fo);
      if (!std::isfinite(f) || f != std::trunc(f))
        throw nb::value_error((who + " must be a whole number, got " + nb::cast<std::string>(nb::str(o))).c_str());
      if (std::fabs(f) >= 9.2e18) throw out_of_range();
      return int64_t(f);
    }
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {  // (a Fraction or int too large for a float)
      PyErr_Clear();
      throw out_of_range();
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_ValueError))
      throw nb::python_error();
    PyErr_Clear();
  }
  throw nb::type_error(
      (who + " must be an integer or None, got " + nb::cast<std::string>(nb::str(o.type().attr("__name__")))).c_str());
}

PyGraph* make_graph(const In& edge_index, const SizeArg& num_nodes_arg, const SizeArg& num_src_nodes_arg) {
  const std::optional<int64_t> num_nodes = optional_count(num_nodes_arg, "num_nodes");
  const std::optional<int64_t> num_src_nodes = optional_count(num_src_nodes_arg, "num_src_nodes");
  edge_index.readable("edge_index");
  if (edge_index.dtype() != nb::dtype<int64_t>() && edge_index.dtype() != nb::dtype<int32_t>())
    throw nb::type_error(
        ("edge_index must be int64 or int32, got " + std::string(dtype_str(edge_index.dtype()))).c_str());
  if (edge_index.device_type() != nb::device::cpu::value)
    throw nb::type_error("edge_index is not in host memory; build the graph from a CPU copy (edge_index.cpu())");
  if (edge_index.ndim() != 2 || edge_index.shape(0) != 2)
    throw nb::value_error(("edge_index must have shape (2, E) (row 0 sources, row 1 targets, as in PyG), got " +
                           shape_str(shape_of(edge_index)))
                              .c_str());
  if (num_src_nodes && *num_src_nodes < 0)
    throw nb::value_error(("num_src_nodes must be >= 0, got " + std::to_string(*num_src_nodes)).c_str());
  // (before the rows are copied out: a broadcast view of 2^31 edges would take 32 GB to be refused)
  if (int64_t(edge_index.shape(1)) >= int64_t(std::numeric_limits<int32_t>::max()))
    GNN_FAIL("edge_index: ", int64_t(edge_index.shape(1)), " edges does not fit int32 indices");
  const std::vector<int64_t> src = index_row(edge_index, 0), dst = index_row(edge_index, 1);
  auto bound = [](const std::vector<int64_t>& v) -> int64_t {  // (saturating: 2^63 - 1 + 1 would wrap)
    // (ids below 0 count as none: the graph's own check then names the id, not a num_nodes never given)
    const int64_t hi = v.empty() ? -1 : *std::max_element(v.begin(), v.end());
    return hi == std::numeric_limits<int64_t>::max() ? hi : std::max<int64_t>(hi, -1) + 1;
  };
  const int64_t N = num_nodes ? *num_nodes : std::max(bound(dst), num_src_nodes ? 0 : bound(src));
  if (N < 0) throw nb::value_error(("num_nodes must be >= 0, got " + std::to_string(N)).c_str());
  auto* out = new PyGraph;
  try {
    nb::gil_scoped_release release;
    if (num_src_nodes)
      out->g =
          Graph::from_bipartite_edges(src.data(), dst.data(), int64_t(src.size()), *num_src_nodes, N, "edge_index");
    else out->g = Graph::from_edges(src.data(), dst.data(), int64_t(src.size()), N, "edge_index");
  } catch (...) {
    delete out;
    throw;
  }
  return out;
}

// ---- numpy arrays owning a gnn Tensor -------------------------------------------------------------
nb::object to_numpy(Tensor t);

// A NumPy copy of one of the graph's int32 arrays. Not a view: the kernels trust the graph's CSR (checked
// once, when it was built), and a read-only NumPy view still exports writable memory through DLPack
// (torch.from_dlpack ignores the read-only bit), through which a write crashed the next kernel.
nb::object graph_array(const Tensor& t) { return to_numpy(t.clone()); }

// The edge_index the graph was built from, int64 (2, E) in its input order: CSR entry k is input edge eid[k],
// from indices[k] into its row. Building a graph from it gives the same graph (the sort keeps input order).
nb::object graph_edge_index(const Graph& g) {
  const int64_t E = g.num_edges;
  Tensor t = Tensor::empty(Shape{2, E}, DType::I64);
  const int32_t *indptr = g.csr_indptr.i32(), *indices = g.csr_indices.i32(), *eid = g.csr_eid.i32();
  int64_t* out = t.i64();
  for (int64_t v = 0; v < g.num_nodes; ++v)
    for (int64_t k = indptr[v]; k < indptr[v + 1]; ++k) out[eid[k]] = indices[k], out[E + eid[k]] = v;
  return to_numpy(std::move(t));
}

nb::object to_numpy(Tensor t) {
  auto* keep = new Tensor(std::move(t));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape;
  for (int64_t d : keep->shape().vec()) shape.push_back(size_t(d));
  nb::dlpack::dtype dt = nb::dtype<float>();
  switch (keep->dtype()) {
    case DType::F32:
      dt = nb::dtype<float>();
      break;
    case DType::F64:
      dt = nb::dtype<double>();
      break;
    case DType::I32:
      dt = nb::dtype<int32_t>();
      break;
    case DType::I64:
      dt = nb::dtype<int64_t>();
      break;
    case DType::U8:
      dt = nb::dtype<uint8_t>();
      break;
    case DType::Bool:
      dt = nb::dtype<bool>();
      break;
  }
  return nb::cast(nb::ndarray<nb::numpy>(keep->data(), shape.size(), shape.data(), owner, nullptr, dt));
}

nb::dict tensors_to_dict(const std::map<std::string, Tensor>& arrays) {
  nb::dict out;
  for (const auto& [k, t] : arrays) out[k.c_str()] = to_numpy(t);
  return out;
}

// ---- kernels --------------------------------------------------------------------------------------

// Per-edge weights [E] or [E, H] -> H contiguous columns of E (the kernels read one head's weights at a time).
std::vector<float> weight_columns(const float* w, int64_t E, int64_t H) {
  std::vector<float> cols(size_t(E * H));
  transpose_ref(cols.data(), w, E, H);
  return cols;
}

int64_t weight_heads(const OptIn& w, int64_t E, int64_t W) {
  if (!w) return 1;
  w->readable("edge_weight");
  const int64_t H = w->ndim() == 2 ? int64_t(w->shape(1)) : 1;
  if (w->ndim() < 1 || w->ndim() > 2 || int64_t(w->shape(0)) != E)
    throw nb::value_error(("edge_weight must have shape (E,) or (E, H) with E = " + std::to_string(E) + ", got " +
                           shape_str(shape_of(*w)))
                              .c_str());
  if (H < 1 || W % H != 0)
    throw nb::value_error(
        ("x has " + std::to_string(W) + " columns, which do not split into " + std::to_string(H) + " heads").c_str());
  return H;
}

// Edge weights [E] or [E, H] (H may be 1), as weight_heads read them.
const float* checked_weight(Place& at, const OptIn& w, int64_t E, int64_t H) {
  if (!w) return nullptr;
  return w->ndim() == 2 ? checked<const float>(at, *w, "edge_weight", {E, H})
                        : checked<const float>(at, *w, "edge_weight", {E});
}

// On a device, per-head weights [E, H] as H columns of E in scratch (a strided copy on the call's stream).
void device_weight_columns(float* cols, const float* w, int64_t E, int64_t H, const OnDevice& on) {
  for (int64_t h = 0; h < H; ++h)
    cuda_copy_2d_on(cols + h * E, sizeof(float), w + h, size_t(H) * sizeof(float), sizeof(float), size_t(E), on.device,
                    on.stream);
}

void spmm_forward(PyGraph& graph, const In& x, const OptIn& edge_weight, const std::string& reduce, Out out,
                  OptOut argmax, uintptr_t stream) {
  const Reduce op = parse_reduce(reduce);
  const int64_t N = graph.g.num_nodes, S = graph.g.num_sources(), E = graph.g.num_edges;
  const int64_t W = dim_of(x, "x", 2, 1);
  Place at;
  const float* xp = checked<const float>(at, x, "x", {S, W});
  const int64_t H = weight_heads(edge_weight, E, W), F = W / H;
  const float* wp = checked_weight(at, edge_weight, E, H);
  float* yp = checked<float>(at, out, "out", {N, W});
  if (op == Reduce::kMax && !argmax) throw nb::value_error("argmax: reduce='max' needs an int32 array (H, N, F)");
  int32_t* ap = op == Reduce::kMax ? checked<int32_t>(at, *argmax, "argmax", {H, N, F}) : nullptr;
  const CsrView g = graph.view(at);
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) {
      const OnDevice on(at, stream);
      if (H > 1 && op != Reduce::kMax) return spmm_heads_forward_cuda(yp, xp, wp, g, H, F, op, on.stream);
      const Scratch cols(on, H > 1 ? E * H : 0);
      if (H > 1) device_weight_columns(cols.get(), wp, E, H, on);
      for (int64_t h = 0; h < H; ++h)
        spmm_forward_cuda(yp + h * F, ap ? ap + h * N * F : nullptr, xp + h * F, H > 1 ? cols.get() + h * E : wp, g, F,
                          W, W, op, nullptr, on.stream);
      return;
    }
  }
  if (H > 1 && op != Reduce::kMax) return spmm_heads_forward_cpu(yp, xp, wp, g, H, F, op);
  const std::vector<float> cols = H > 1 ? weight_columns(wp, E, H) : std::vector<float>();  // (max's heads)
  for (int64_t h = 0; h < H; ++h)
    spmm_forward_cpu(yp + h * F, ap ? ap + h * N * F : nullptr, xp + h * F, H > 1 ? cols.data() + h * E : wp, g, F, W,
                     W, op);
}

// A max's argmax handed back to a backward on the host: [B, S, F] (B blocks of S segments, F columns), each
// entry -1 (an empty segment: no gradient) or a position in its segment [ptr[s], ptr[s + 1]), as the forward
// wrote it. The kernels route each gradient to the row named, unchecked: a position past the end would go
// nowhere (zeros, silently), one in another segment to another graph's rows. Checked in parallel without the
// GIL (a pass over argmax, a tenth of a max backward's time on one thread); on a device argmax is read as
// given (checking it here would copy it to the host on every call).
template <class P>
void check_argmax(const int32_t* a, const P* ptr, int64_t B, int64_t S, int64_t F, const char* segment) {
  int64_t first = INT64_MAX;  // the first entry that is not the forward's
  {
    nb::gil_scoped_release release;
#pragma omp parallel for reduction(min : first) schedule(static) if (B * S * F > 65536)
    for (int64_t bs = 0; bs < B * S; ++bs) {
      const int64_t lo = int64_t(ptr[bs % S]), hi = int64_t(ptr[bs % S + 1]);
      const int32_t* row = a + bs * F;
      auto fits = [&](int64_t f) { return row[f] == -1 || (row[f] >= lo && row[f] < hi); };
      bool ok = true;
      for (int64_t f = 0; f < F; ++f) ok &= fits(f);  // (vectorised: the search below runs on a bad row only)
      for (int64_t f = 0; !ok && f < F; ++f)
        if (!fits(f)) first = std::min(first, bs * F + f), ok = true;
    }
  }
  if (first == INT64_MAX) return;
  const int64_t s = first / F % S;
  throw nb::value_error(("argmax: entry " + std::to_string(first) + " is " + std::to_string(a[first]) +
                         ", outside its " + segment + " " + std::to_string(s) + "'s positions [" +
                         std::to_string(int64_t(ptr[s])) + ", " + std::to_string(int64_t(ptr[s + 1])) +
                         ") and not -1: not the forward's argmax")
                            .c_str());
}

void spmm_backward(PyGraph& graph, const In& grad_out, const OptIn& edge_weight, const std::string& reduce,
                   const OptIn& argmax, const OptIn& x, OptOut grad_x, OptOut grad_weight, uintptr_t stream) {
  const Reduce op = parse_reduce(reduce);
  const int64_t N = graph.g.num_nodes, S = graph.g.num_sources(), E = graph.g.num_edges;
  const int64_t W = dim_of(grad_out, "grad_out", 2, 1);
  Place at;
  const float* dy = checked<const float>(at, grad_out, "grad_out", {N, W});
  const int64_t H = weight_heads(edge_weight, E, W), F = W / H;
  const float* wp = checked_weight(at, edge_weight, E, H);
  if (op == Reduce::kMax && !argmax) throw nb::value_error("argmax: reduce='max' needs the forward's argmax");
  const int32_t* ap = op == Reduce::kMax ? checked<const int32_t>(at, *argmax, "argmax", {H, N, F}) : nullptr;
  if (ap && !at.cuda()) check_argmax(ap, graph.g.csr_indptr.i32(), H, N, F, "node");
  float* dx = checked_opt<float>(at, grad_x, "grad_x", {S, W});
  float* dw = nullptr;
  const float* xp = nullptr;
  if (grad_weight) {
    if (!edge_weight) throw nb::value_error("grad_weight: the forward had no edge_weight");
    if (!x) throw nb::value_error("x: grad_weight needs the forward's input x");
    dw = edge_weight->ndim() == 2 ? checked<float>(at, *grad_weight, "grad_weight", {E, H})
                                  : checked<float>(at, *grad_weight, "grad_weight", {E});
    xp = checked<const float>(at, *x, "x", {S, W});
  }
  const CsrView g = graph.view(at);
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) {
      const OnDevice on(at, stream);
      if (H > 1 && op != Reduce::kMax) {
        if (dx) spmm_heads_backward_x_cuda(dx, dy, wp, g, H, F, op, on.stream);
        if (dw) spmm_heads_backward_w_cuda(dw, dy, xp, g, H, F, op, on.stream);
        return;
      }
      const Scratch cols(on, H > 1 ? E * H : 0), dcols(on, dw && H > 1 ? E * H : 0);
      if (H > 1) device_weight_columns(cols.get(), wp, E, H, on);
      for (int64_t h = 0; h < H; ++h) {
        const float* wh = H > 1 ? cols.get() + h * E : wp;
        const int32_t* ah = ap ? ap + h * N * F : nullptr;
        if (dx) spmm_backward_x_cuda(dx + h * F, dy + h * F, ah, wh, g, F, W, W, op, nullptr, on.stream);
        if (dw)
          spmm_backward_w_cuda(H > 1 ? dcols.get() + h * E : dw, dy + h * F, xp + h * F, ah, g, F, W, W, op, on.stream);
      }
      if (dw && H > 1)  // the columns back into [E, H]
        for (int64_t h = 0; h < H; ++h)
          cuda_copy_2d_on(dw + h, size_t(H) * sizeof(float), dcols.get() + h * E, sizeof(float), sizeof(float),
                          size_t(E), on.device, on.stream);
      return;
    }
  }
  if (H > 1 && op != Reduce::kMax) {
    if (dx) spmm_heads_backward_x_cpu(dx, dy, wp, g, H, F, op);
    if (dw) spmm_heads_backward_w_cpu(dw, dy, xp, g, H, F, op);
    return;
  }
  const std::vector<float> cols = H > 1 ? weight_columns(wp, E, H) : std::vector<float>();  // (max's heads)
  std::vector<float> dcols(dw && H > 1 ? size_t(E * H) : 0);
  for (int64_t h = 0; h < H; ++h) {
    const float* wh = H > 1 ? cols.data() + h * E : wp;
    const int32_t* ah = ap ? ap + h * N * F : nullptr;
    if (dx) spmm_backward_x_cpu(dx + h * F, dy + h * F, ah, wh, g, F, W, W, op);
    if (dw) spmm_backward_w_cpu(H > 1 ? dcols.data() + h * E : dw, dy + h * F, xp + h * F, ah, g, F, W, W, op);
  }
  if (dw && H > 1) transpose_ref(dw, dcols.data(), H, E);
}

// Seconds per call of spmm_forward (its checks included) looped in C++: what a call costs with no Python
// in the way, for `python -m gnn.bench --overhead`. On a device, the calls are queued and waited for once.
double time_spmm_forward(PyGraph& graph, const In& x, const std::string& reduce, Out out, int repeats,
                         uintptr_t stream) {
  if (reduce == "max") throw nb::value_error("reduce: time 'sum' or 'mean' (max needs an argmax array)");
  if (repeats < 1) throw nb::value_error("repeats must be >= 1");
  auto wait = [&] {
    if (x.device_type() != nb::device::cuda::value) return;
    nb::gil_scoped_release release;
    const DeviceScope scope(int(x.device_id()));
    cuda_stream_synchronize(reinterpret_cast<Stream>(stream), int(x.device_id()));
  };
  spmm_forward(graph, x, std::nullopt, reduce, out, std::nullopt, stream);
  wait();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) spmm_forward(graph, x, std::nullopt, reduce, out, std::nullopt, stream);
  wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / repeats;
}

const int32_t* checked_indptr(Place& at, const In& indptr, int64_t& S) {
  S = dim_of(indptr, "indptr", 1, 0) - 1;
  if (S < 0) throw nb::value_error("indptr must have at least one entry (0)");
  return checked<const int32_t>(at, indptr, "indptr", {S + 1});
}

// A pointer array's values (on the host, or copied from the call's device) must start at 0, end at the
// number of rows it splits, and not decrease: `indptr` (int32, over edges) or `ptr` (int64, over nodes).
template <class I>
void check_pointer_values(const I* ptr, int64_t S, int64_t rows, const char* name, const char* of, const Place& at,
                          uintptr_t stream) {
  std::vector<I> copy;
  const I* p = host_values(ptr, S + 1, at, stream, copy);
  if (p[0] != 0 || p[S] != rows)
    throw nb::value_error((std::string(name) + " must start at 0 and end at the number of " + of + " (" +
                           std::to_string(rows) + "), got " + std::to_string(p[0]) + " .. " + std::to_string(p[S]))
                              .c_str());
  for (int64_t s = 0; s < S; ++s)
    if (p[s + 1] < p[s])
      throw nb::value_error((std::string(name) + " must not decrease; it does at position " + std::to_string(s + 1))
                                .c_str());
}

// The kernels of segment_softmax on the call's place, once its arguments are checked.
void softmax_forward_on(const Place& at, float* y, const float* x, const int32_t* ptr, int64_t S, int64_t H,
                        uintptr_t stream) {
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) return segment_softmax_forward_cuda(y, x, ptr, S, H, OnDevice(at, stream).stream);
  }
  segment_softmax_forward_cpu(y, x, ptr, S, H);
}

void softmax_backward_on(const Place& at, float* dx, const float* y, const float* dy, const int32_t* ptr, int64_t S,
                         int64_t H, uintptr_t stream) {
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) return segment_softmax_backward_cuda(dx, y, dy, ptr, S, H, OnDevice(at, stream).stream);
  }
  segment_softmax_backward_cpu(dx, y, dy, ptr, S, H);
}

void segment_softmax_forward(const In& x, const In& indptr, Out out, uintptr_t stream) {
  Place at;
  const int64_t E = dim_of(x, "x", 2, 0), H = int64_t(x.shape(1));
  const float* xp = checked<const float>(at, x, "x", {E, H});
  int64_t S;
  const int32_t* ptr = checked_indptr(at, indptr, S);
  float* yp = checked<float>(at, out, "out", {E, H});
  check_pointer_values(ptr, S, E, "indptr", "rows of x", at, stream);
  softmax_forward_on(at, yp, xp, ptr, S, H, stream);
}

void segment_softmax_backward(const In& y, const In& grad_out, const In& indptr, Out grad_x, uintptr_t stream) {
  Place at;
  const int64_t E = dim_of(y, "y", 2, 0), H = int64_t(y.shape(1));
  const float* yp = checked<const float>(at, y, "y", {E, H});
  int64_t S;
  const int32_t* ptr = checked_indptr(at, indptr, S);
  const float* dy = checked<const float>(at, grad_out, "grad_out", {E, H});
  float* dx = checked<float>(at, grad_x, "grad_x", {E, H});
  check_pointer_values(ptr, S, E, "indptr", "rows of y", at, stream);
  softmax_backward_on(at, dx, yp, dy, ptr, S, H, stream);
}

// The same over a Graph's own rows (its CSR row pointers, checked when it was built): no pointer array
// to check, so no wait on a device.
void segment_softmax_forward_graph(const In& x, PyGraph& graph, Out out, uintptr_t stream) {
  Place at;
  const int64_t E = graph.g.num_edges, S = graph.g.num_nodes, H = dim_of(x, "x", 2, 1);
  const float* xp = checked<const float>(at, x, "x", {E, H});
  float* yp = checked<float>(at, out, "out", {E, H});
  softmax_forward_on(at, yp, xp, graph.view(at).indptr, S, H, stream);
}

void segment_softmax_backward_graph(const In& y, const In& grad_out, PyGraph& graph, Out grad_x, uintptr_t stream) {
  Place at;
  const int64_t E = graph.g.num_edges, S = graph.g.num_nodes, H = dim_of(y, "y", 2, 1);
  const float* yp = checked<const float>(at, y, "y", {E, H});
  const float* dy = checked<const float>(at, grad_out, "grad_out", {E, H});
  float* dx = checked<float>(at, grad_x, "grad_x", {E, H});
  softmax_backward_on(at, dx, yp, dy, graph.view(at).indptr, S, H, stream);
}

void gat_scores_forward(PyGraph& graph, const In& a_src, const In& a_dst, float negative_slope, Out out,
                        uintptr_t stream) {
  // a_src over the sources, a_dst over the targets (the same node set unless the graph is bipartite)
  const int64_t N = graph.g.num_nodes, U = graph.g.num_sources(), E = graph.g.num_edges;
  const int64_t H = dim_of(a_src, "a_src", 2, 1);
  Place at;
  const float* as = checked<const float>(at, a_src, "a_src", {U, H});
  const float* ad = checked<const float>(at, a_dst, "a_dst", {N, H});
  float* s = checked<float>(at, out, "out", {E, H});
  const CsrView g = graph.view(at);
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) return gat_scores_forward_cuda(s, as, ad, g, H, negative_slope, OnDevice(at, stream).stream);
  }
  gat_scores_forward_cpu(s, as, ad, g, H, negative_slope);
}

void gat_scores_backward(PyGraph& graph, const In& grad_out, const In& a_src, const In& a_dst, float negative_slope,
                         Out grad_src, Out grad_dst, uintptr_t stream) {
  const int64_t N = graph.g.num_nodes, U = graph.g.num_sources(), E = graph.g.num_edges;
  const int64_t H = dim_of(a_src, "a_src", 2, 1);
  Place at;
  const float* ds = checked<const float>(at, grad_out, "grad_out", {E, H});
  const float* as = checked<const float>(at, a_src, "a_src", {U, H});
  const float* ad = checked<const float>(at, a_dst, "a_dst", {N, H});
  float* dsrc = checked<float>(at, grad_src, "grad_src", {U, H});
  float* ddst = checked<float>(at, grad_dst, "grad_dst", {N, H});
  const CsrView g = graph.view(at);
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda())
      return gat_scores_backward_cuda(dsrc, ddst, ds, as, ad, g, H, negative_slope, OnDevice(at, stream).stream);
  }
  gat_scores_backward_cpu(dsrc, ddst, ds, as, ad, g, H, negative_slope);
}

void sage_forward(PyGraph& graph, const In& x, const In& weight, const OptIn& bias, const std::string& activation,
                  float negative_slope, Out out, OptOut z, OptOut h, uintptr_t stream) {
  const Act act = parse_activation(activation);
  if (graph.g.num_src >= 0) throw nb::value_error("graph: the SAGE layer needs one node set, not a bipartite graph");
  const int64_t N = graph.g.num_nodes, F = dim_of(x, "x", 2, 1), O = dim_of(weight, "weight", 2, 1);
  Place at;
  const float* xp = checked<const float>(at, x, "x", {N, F});
  const float* W = checked<const float>(at, weight, "weight", {2 * F, O});
  const float* b = checked_opt<const float>(at, bias, "bias", {O});
  float* yp = checked<float>(at, out, "out", {N, O});
  if (bool(z) != bool(h)) throw nb::value_error("z and h: pass both (to train) or neither (inference)");
  float* zp = checked_opt<float>(at, z, "z", {N, O});
  float* hp = checked_opt<float>(at, h, "h", {N, 2 * F});
  const CsrView g = graph.view(at);
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) {
      const OnDevice on(at, stream);
      const Scratch scratch(on, hp ? 0 : N * 2 * F), workspace(on, kBlasWorkspaceFloats);
      std::lock_guard<std::mutex> lock(g_blas_mu);
      return sage_forward_cuda(yp, zp, hp, scratch.get(), xp, g, W, b, F, O, act, negative_slope,
                               module_blas(on.device, workspace), on.stream);
    }
  }
  sage_forward_cpu(yp, zp, hp, xp, g, W, b, F, O, act, negative_slope);
}

void sage_backward(PyGraph& graph, const In& grad_out, const In& z, const In& h, const In& weight,
                   const std::string& activation, float negative_slope, Out grad_x, Out grad_weight, OptOut grad_bias,
                   uintptr_t stream) {
  const Act act = parse_activation(activation);
  if (graph.g.num_src >= 0) throw nb::value_error("graph: the SAGE layer needs one node set, not a bipartite graph");
  const int64_t N = graph.g.num_nodes, O = dim_of(weight, "weight", 2, 1), F = int64_t(weight.shape(0)) / 2;
  Place at;
  const float* W = checked<const float>(at, weight, "weight", {2 * F, O});
  const float* dy = checked<const float>(at, grad_out, "grad_out", {N, O});
  const float* zp = checked<const float>(at, z, "z", {N, O});
  const float* hp = checked<const float>(at, h, "h", {N, 2 * F});
  float* dx = checked<float>(at, grad_x, "grad_x", {N, F});
  float* dW = checked<float>(at, grad_weight, "grad_weight", {2 * F, O});
  float* db = checked_opt<float>(at, grad_bias, "grad_bias", {O});
  const CsrView g = graph.view(at);
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) {
      const OnDevice on(at, stream);
      const Scratch scratch(on, sage_backward_workspace_cuda(N, F, O)), workspace(on, kBlasWorkspaceFloats);
      std::lock_guard<std::mutex> lock(g_blas_mu);
      return sage_backward_cuda(dx, dW, db, dy, zp, hp, g, W, F, O, act, negative_slope, scratch.get(),
                                module_blas(on.device, workspace), on.stream);
    }
  }
  std::vector<float> workspace(size_t(sage_backward_workspace(N, F, O)));
  sage_backward_cpu(dx, dW, db, dy, zp, hp, g, W, F, O, act, negative_slope, workspace.data());
}

// A graph pointer array [G + 1] (int64) over `rows` rows: checked, and its values (on the host, or copied
// from the call's device) must start at 0, end at rows and not decrease.
const int64_t* checked_ptr(Place& at, const In& ptr, int64_t rows, int64_t& G, uintptr_t stream) {
  G = dim_of(ptr, "ptr", 1, 0) - 1;
  if (G < 0) throw nb::value_error("ptr must have at least one entry (0)");
  const int64_t* ptr_data = checked<const int64_t>(at, ptr, "ptr", {G + 1});
  check_pointer_values(ptr_data, G, rows, "ptr", "rows of x", at, stream);
  return ptr_data;
}

void pool_forward(const In& x, const In& ptr, const std::string& reduce, Out out, OptOut argmax, uintptr_t stream) {
  const bool lse = reduce == "logsumexp";
  const Reduce op = lse ? Reduce::kSum : parse_reduce(reduce, true);
  const int64_t N = dim_of(x, "x", 2, 0), F = int64_t(x.shape(1));
  Place at;
  int64_t G;
  const float* xp = checked<const float>(at, x, "x", {N, F});
  const int64_t* p = checked_ptr(at, ptr, N, G, stream);
  float* yp = checked<float>(at, out, "out", {G, F});
  if (op == Reduce::kMax && !lse && !argmax) throw nb::value_error("argmax: reduce='max' needs an int32 array (G, F)");
  int32_t* ap = op == Reduce::kMax && !lse ? checked<int32_t>(at, *argmax, "argmax", {G, F}) : nullptr;
  if (ap && N > int64_t(std::numeric_limits<int32_t>::max()))
    throw nb::value_error(("x has " + std::to_string(N) +
                           " rows: reduce='max' keeps each maximum's row in int32 "
                           "argmax, so x may have at most 2147483647")
                              .c_str());
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) {
      const OnDevice on(at, stream);
      if (lse) return pool_logsumexp_forward_cuda(yp, xp, p, G, F, on.stream);
      return pool_forward_cuda(yp, ap, xp, p, G, F, op, on.stream);
    }
  }
  if (lse) pool_logsumexp_forward_cpu(yp, xp, p, G, F);
  else pool_forward_cpu(yp, ap, xp, p, G, F, op);
}

void pool_backward(const In& grad_out, const In& ptr, const std::string& reduce, const OptIn& argmax, const OptIn& x,
                   const OptIn& y, Out grad_x, uintptr_t stream) {
  const bool lse = reduce == "logsumexp";
  const Reduce op = lse ? Reduce::kSum : parse_reduce(reduce, true);
  const int64_t N = dim_of(grad_x, "grad_x", 2, 0), F = int64_t(grad_x.shape(1));
  Place at;
  int64_t G;
  float* dx = checked<float>(at, grad_x, "grad_x", {N, F});
  const int64_t* p = checked_ptr(at, ptr, N, G, stream);
  const float* dy = checked<const float>(at, grad_out, "grad_out", {G, F});
  if (lse && (!x || !y)) throw nb::value_error("x and y: reduce='logsumexp' needs the forward's input and output");
  const float* xp = lse ? checked<const float>(at, *x, "x", {N, F}) : nullptr;
  const float* yp = lse ? checked<const float>(at, *y, "y", {G, F}) : nullptr;
  if (op == Reduce::kMax && !lse && !argmax) throw nb::value_error("argmax: reduce='max' needs the forward's argmax");
  const int32_t* ap = op == Reduce::kMax && !lse ? checked<const int32_t>(at, *argmax, "argmax", {G, F}) : nullptr;
  if (ap && !at.cuda()) check_argmax(ap, p, 1, G, F, "graph");
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) {
      const OnDevice on(at, stream);
      if (lse) return pool_logsumexp_backward_cuda(dx, dy, xp, yp, p, N, G, F, on.stream);
      return pool_backward_cuda(dx, dy, ap, p, N, G, F, op, nullptr, on.stream);
    }
  }
  if (lse) pool_logsumexp_backward_cpu(dx, dy, xp, yp, p, G, F);
  else pool_backward_cpu(dx, dy, ap, p, G, F, op);
}

// A norm's epsilon: a finite number above 0 (inf would make every output 0, NaN every output NaN).
void check_eps(float eps) {
  if (!(eps > 0) || !std::isfinite(eps))
    throw nb::value_error(("eps must be a finite number > 0, got " + std::to_string(eps)).c_str());
}

void instance_norm_forward(const In& x, const In& ptr, const OptIn& weight, const OptIn& bias, float eps, Out out,
                           Out mean, Out rstd, uintptr_t stream) {
  const int64_t N = dim_of(x, "x", 2, 0), F = int64_t(x.shape(1));
  Place at;
  int64_t G;
  const float* xp = checked<const float>(at, x, "x", {N, F});
  const int64_t* p = checked_ptr(at, ptr, N, G, stream);
  const float* gamma = checked_opt<const float>(at, weight, "weight", {F});
  const float* beta = checked_opt<const float>(at, bias, "bias", {F});
  float* yp = checked<float>(at, out, "out", {N, F});
  float* mp = checked<float>(at, mean, "mean", {G, F});
  float* rp = checked<float>(at, rstd, "rstd", {G, F});
  check_eps(eps);
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda())
      return instance_norm_forward_cuda(yp, mp, rp, xp, nullptr, gamma, beta, p, G, F, eps, Act::kNone,
                                        OnDevice(at, stream).stream);
  }
  instance_norm_forward_cpu(yp, mp, rp, xp, nullptr, gamma, beta, p, G, F, eps, Act::kNone);
}

void instance_norm_backward(const In& grad_out, const In& x, const In& ptr, const In& mean, const In& rstd,
                            const OptIn& weight, Out grad_x, OptOut grad_weight, OptOut grad_bias, uintptr_t stream) {
  const int64_t N = dim_of(x, "x", 2, 0), F = int64_t(x.shape(1));
  Place at;
  int64_t G;
  const float* xp = checked<const float>(at, x, "x", {N, F});
  const int64_t* p = checked_ptr(at, ptr, N, G, stream);
  const float* dy = checked<const float>(at, grad_out, "grad_out", {N, F});
  const float* mp = checked<const float>(at, mean, "mean", {G, F});
  const float* rp = checked<const float>(at, rstd, "rstd", {G, F});
  const float* gamma = checked_opt<const float>(at, weight, "weight", {F});
  float* dx = checked<float>(at, grad_x, "grad_x", {N, F});
  float* dg = checked_opt<float>(at, grad_weight, "grad_weight", {F});
  float* db = checked_opt<float>(at, grad_bias, "grad_bias", {F});
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) {
      const OnDevice on(at, stream);
      const Scratch workspace(on, 2 * G * F);  // the per-graph terms, written whether or not asked for
      return instance_norm_backward_cuda(dx, dg, db, dy, xp, nullptr, mp, rp, gamma, nullptr, p, G, F, Act::kNone,
                                         workspace.get(), on.stream);
    }
  }
  std::vector<float> scratch_g(dg ? 0 : size_t(F)), scratch_b(db ? 0 : size_t(F));
  instance_norm_backward_cpu(dx, dg ? dg : scratch_g.data(), db ? db : scratch_b.data(), dy, xp, nullptr, mp, rp, gamma,
                             nullptr, p, G, F, Act::kNone);
}

void layer_norm_forward(const In& x, const OptIn& weight, const OptIn& bias, float eps, Out out, Out mean, Out rstd,
                        uintptr_t stream) {
  const int64_t R = dim_of(x, "x", 2, 0), F = int64_t(x.shape(1));
  Place at;
  const float* xp = checked<const float>(at, x, "x", {R, F});
  const float* gamma = checked_opt<const float>(at, weight, "weight", {F});
  const float* beta = checked_opt<const float>(at, bias, "bias", {F});
  float* yp = checked<float>(at, out, "out", {R, F});
  float* mp = checked<float>(at, mean, "mean", {R});
  float* rp = checked<float>(at, rstd, "rstd", {R});
  check_eps(eps);
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) return layer_norm_forward_cuda(yp, mp, rp, xp, gamma, beta, R, F, eps, OnDevice(at, stream).stream);
  }
  layer_norm_forward_cpu(yp, mp, rp, xp, gamma, beta, R, F, eps);
}

void layer_norm_backward(const In& grad_out, const In& x, const In& mean, const In& rstd, const OptIn& weight,
                         Out grad_x, OptOut grad_weight, OptOut grad_bias, uintptr_t stream) {
  const int64_t R = dim_of(x, "x", 2, 0), F = int64_t(x.shape(1));
  Place at;
  const float* xp = checked<const float>(at, x, "x", {R, F});
  const float* dy = checked<const float>(at, grad_out, "grad_out", {R, F});
  const float* mp = checked<const float>(at, mean, "mean", {R});
  const float* rp = checked<const float>(at, rstd, "rstd", {R});
  const float* gamma = checked_opt<const float>(at, weight, "weight", {F});
  float* dx = checked<float>(at, grad_x, "grad_x", {R, F});
  float* dg = checked_opt<float>(at, grad_weight, "grad_weight", {F});
  float* db = checked_opt<float>(at, grad_bias, "grad_bias", {F});
  nb::gil_scoped_release release;
  if constexpr (kWithCuda) {
    if (at.cuda()) {
      const OnDevice on(at, stream);
      const Scratch workspace(on, dg || db ? layer_norm_backward_workspace_cuda(R, F) : 0);
      return layer_norm_backward_cuda(dx, dg, db, dy, xp, mp, rp, gamma, R, F, workspace.get(), on.stream);
    }
  }
  std::vector<float> scratch_g(dg ? 0 : size_t(F)), scratch_b(db ? 0 : size_t(F));
  layer_norm_backward_cpu(dx, dg ? dg : scratch_g.data(), db ? db : scratch_b.data(), dy, xp, mp, rp, gamma, R, F);
}

// ---- files ----------------------------------------------------------------------------------------

nb::dict load_npz(const std::string& path, std::optional<std::vector<std::string>> keys) {
  std::map<std::string, Tensor> arrays;
  {
    nb::gil_scoped_release release;
    NpzReader npz(path);
    arrays = keys ? npz.load_keys(*keys) : npz.load_all();
  }
  return tensors_to_dict(arrays);
}

nb::dict load_tpugraph_py(const std::string& path, bool require_runtimes) {
  TpuGraph g;
  {
    nb::gil_scoped_release release;
    LoadOptions options;
    options.require_runtimes = require_runtimes;
    g = load_tpugraph(path, options);
  }
  std::map<std::string, Tensor> arrays{
      {"node_feat", g.node_feat}, {"node_opcode", g.node_opcode}, {"edge_index", g.edge_index}};
  auto put = [&](const char* k, const Tensor& t) {
    if (t.defined()) arrays[k] = t;
  };
  put("config_feat", g.config_feat);
  put("config_runtime_normalizers", g.config_runtime_normalizers);
  put("node_config_ids", g.node_config_ids);
  put("node_config_feat", g.node_config_feat);
  put("node_splits", g.node_splits);
  put("config_runtime", g.config_runtime);
  return tensors_to_dict(arrays);
}

// ---- device arrays (gnn.cuda) ---------------------------------------------------------------------
// For arrays that no framework owns (and for tests where torch has no CUDA): device memory outside gnn's
// pool, handed out through DLPack; freeing it waits for the device, so no stream can still be using it.

nb::dlpack::dtype parse_dtype(const std::string& name) {
  if (name == "float32") return nb::dtype<float>();
  if (name == "int32") return nb::dtype<int32_t>();
  if (name == "int64") return nb::dtype<int64_t>();
  throw nb::value_error(("dtype must be 'float32', 'int32' or 'int64', got '" + name + "'").c_str());
}

using DeviceArray = nb::ndarray<nb::array_api>;  // an object with __dlpack__ and __dlpack_device__

DeviceArray device_empty_of(const std::vector<int64_t>& shape, nb::dlpack::dtype dt, int device) {
  for (int64_t d : shape)
    if (d < 0) throw nb::value_error(("shape must not be negative, got " + shape_str(shape)).c_str());
  int64_t bytes = dt.bits / 8;  // (a product past int64 would wrap and hand out a small buffer for a huge shape)
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) bytes = 0;
  for (int64_t d : shape)
    if (bytes > 0 && __builtin_mul_overflow(bytes, d, &bytes))
      throw nb::value_error(("shape " + shape_str(shape) + " holds more bytes than an int64 counts").c_str());
  if (!cuda_available()) throw nb::type_error(("no CUDA device: " + cuda_status()).c_str());
  if (device < 0 || device >= cuda_device_count())
    throw nb::value_error(
        ("device must be in [0, " + std::to_string(cuda_device_count()) + "), got " + std::to_string(device)).c_str());
  void* p = nullptr;
  {
    const DeviceScope scope(device);
    p = cuda_malloc_unpooled(std::max<size_t>(size_t(bytes), 1), device);
  }
  struct Block {
    void* p;
    int device;
  };
  nb::capsule owner(new Block{p, device}, [](void* b) noexcept {
    auto* block = static_cast<Block*>(b);
    nb::gil_scoped_release release;  // cudaFree waits for the device
    try {
      const DeviceScope scope(block->device);
      cuda_free_unpooled(block->p, block->device);
    } catch (...) {}
    delete block;
  });
  std::vector<size_t> dims(shape.begin(), shape.end());
  return DeviceArray(p, dims.size(), dims.data(), owner, nullptr, dt, nb::device::cuda::value, device);
}

DeviceArray device_empty(const std::vector<int64_t>& shape, const std::string& dtype, int device) {
  return device_empty_of(shape, parse_dtype(dtype), device);
}

// Host array -> a new device array (copied and waited for, so it is there for any stream).
DeviceArray device_from_host(const In& a, int device) {
  a.readable("array");
  if (a.device_type() != nb::device::cpu::value) throw nb::type_error("array: pass a host (NumPy) array");
  if (a.dtype() != nb::dtype<float>() && a.dtype() != nb::dtype<int32_t>() && a.dtype() != nb::dtype<int64_t>())
    throw nb::type_error(("array must be float32, int32 or int64, got " + std::string(dtype_str(a.dtype()))).c_str());
  check_contiguous(a, "array");
  DeviceArray out = device_empty_of(shape_of(a), a.dtype(), device);
  nb::gil_scoped_release release;
  const DeviceScope scope(device);
  cuda_copy(out.data(), Device::cuda(device), a.data(), Device::cpu(), a.nbytes());
  return out;
}

// Device array -> a new NumPy array, copied behind the work queued on `stream` and waited for.
nb::object device_to_host(const In& a, uintptr_t stream) {
  a.readable("array");
  if (a.device_type() != nb::device::cuda::value) throw nb::type_error("array is not on a CUDA device");
  std::vector<size_t> dims;
  for (size_t i = 0; i < a.ndim(); ++i) dims.push_back(a.shape(i));
  check_contiguous(a, "array");
  auto* buf = new std::vector<char>(std::max<size_t>(a.nbytes(), 1));
  nb::capsule owner(buf, [](void* p) noexcept { delete static_cast<std::vector<char>*>(p); });
  {
    nb::gil_scoped_release release;
    const DeviceScope scope(int(a.device_id()));
    cuda_download_on(buf->data(), a.data(), a.nbytes(), int(a.device_id()), reinterpret_cast<Stream>(stream));
  }
  return nb::cast(nb::ndarray<nb::numpy>(buf->data(), dims.size(), dims.data(), owner, nullptr, a.dtype()));
}

}  // namespace
}  // namespace gnn::py

NB_MODULE(_gnn, m) {
  using namespace gnn::py;
  m.doc() = "gnn.cpp's kernels, graph and npz reader (the raw layer; use the functions in gnn)";
  nb::exception<gnn::Error>(m, "Error", PyExc_RuntimeError);
  // Graphs held by torch's autograd nodes or a layer's cache may outlive the module at interpreter exit,
  // which nanobind would report as leaks; the pytest suite checks reference counts itself.
  nb::set_leak_warnings(false);
  m.attr("__version__") = GNN_VERSION;
  m.attr("with_openmp") = gnn::openmp_enabled();
  m.attr("with_cuda") = gnn::kWithCuda;

  m.def("num_threads", &gnn::num_threads, "The number of CPU threads the kernels use.");
  m.def(
      "set_num_threads",
      [](const SizeArg& arg) {
        const std::optional<int64_t> given = optional_count(arg, "n");
        if (!given) throw nb::type_error("n must be an integer, got None");
        const int64_t n = *given;
        // OpenMP would try to start that many threads at the next kernel: a typo must not kill the process.
        const int most = std::max(1, int(std::thread::hardware_concurrency())) * 8;
        if (n < 1 || n > most)
          throw nb::value_error(
              ("n must be in [1, " + std::to_string(most) + "] (8 per hardware thread), got " + std::to_string(n))
                  .c_str());
        gnn::set_num_threads(int(n));
      },
      "n"_a,
      "Sets the number of CPU threads the kernels use, 1 to 8 per hardware thread. This is OpenMP's setting\n"
      "(omp_set_num_threads) for the calling thread: where torch shares the process's OpenMP runtime,\n"
      "torch.set_num_threads changes it too, and the other way round.");

  nb::class_<PyGraph>(m, "Graph",
                      "A directed graph in CSR (rows: targets, listing their sources) and CSC form, built by a\n"
                      "counting sort; edges keep their input order within a row.")
      // (edge_index None is taken, to be refused by name)
      .def(nb::new_(&make_graph), "edge_index"_a.none(), "num_nodes"_a = nb::none(), "num_src_nodes"_a = nb::none(),
           "edge_index: (2, E) int64 or int32, row 0 sources, row 1 targets (PyG's convention).\n"
           "num_nodes: target nodes (default: the largest index + 1). num_src_nodes: a bipartite graph's\n"
           "sources (default: the same node set).")
      .def_prop_ro("num_nodes", [](const PyGraph& g) { return g.g.num_nodes; })
      .def_prop_ro("num_src_nodes", [](const PyGraph& g) { return g.g.num_sources(); })
      .def_prop_ro("num_edges", [](const PyGraph& g) { return g.g.num_edges; })
      .def_prop_ro("is_bipartite", [](const PyGraph& g) { return g.g.num_src >= 0; })
      .def_prop_ro(
          "indptr", [](const PyGraph& g) { return graph_array(g.g.csr_indptr); },
          "CSR row pointers (num_nodes + 1), int32 (a copy: the graph's own arrays are not handed out).")
      .def_prop_ro(
          "indices", [](const PyGraph& g) { return graph_array(g.g.csr_indices); },
          "The source of each CSR entry (E), int32.")
      .def_prop_ro(
          "eid", [](const PyGraph& g) { return graph_array(g.g.csr_eid); },
          "The input edge id of each CSR entry (E), int32: values[graph.eid] puts per-edge values in CSR order.")
      .def_prop_ro(
          "csc_indptr", [](const PyGraph& g) { return graph_array(g.g.csc_indptr); },
          "CSC row pointers (num_src_nodes + 1), int32.")
      .def_prop_ro(
          "csc_indices", [](const PyGraph& g) { return graph_array(g.g.csc_indices); },
          "The target of each CSC entry (E), int32.")
      .def_prop_ro(
          "csc_to_csr", [](const PyGraph& g) { return graph_array(g.g.csc_to_csr); },
          "The CSR position of each CSC entry (E), int32.")
      .def_prop_ro(
          "edge_index", [](const PyGraph& g) { return graph_edge_index(g.g); },
          "The edge_index the graph was built from, int64 (2, E), edges in their input order.")
      // pickle and copy.copy / deepcopy: rebuilt from its edge_index (a torch DataLoader's workers get graphs so)
      .def("__reduce__",
           [](nb::handle self) {
             const PyGraph& g = nb::cast<const PyGraph&>(self);
             // (its own class, and a subclass's attributes as the state pickle restores)
             return nb::make_tuple(self.type(),
                                   nb::make_tuple(graph_edge_index(g.g), g.g.num_nodes,
                                                  g.g.num_src >= 0 ? nb::object(nb::int_(g.g.num_src)) : nb::none()),
                                   nb::hasattr(self, "__dict__") ? nb::getattr(self, "__dict__") : nb::none());
           })
      .def("__repr__", [](const PyGraph& g) {
        return "gnn.Graph(num_nodes=" + std::to_string(g.g.num_nodes) +
               (g.g.num_src >= 0 ? ", num_src_nodes=" + std::to_string(g.g.num_src) : std::string()) +
               ", num_edges=" + std::to_string(g.g.num_edges) + ")";
      });

  // whether a Graph was built (Graph.__new__ alone makes one that was not: gnn._graph refuses it by name)
  m.def("_graph_ready", [](nb::handle g) { return nb::inst_ready(g); }, "graph"_a);
  m.def("spmm_forward", &spmm_forward, "graph"_a, "x"_a, "edge_weight"_a.none(), "reduce"_a, "out"_a, "argmax"_a.none(),
        "stream"_a = 0);
  m.def("spmm_backward", &spmm_backward, "graph"_a, "grad_out"_a, "edge_weight"_a.none(), "reduce"_a, "argmax"_a.none(),
        "x"_a.none(), "grad_x"_a.none(), "grad_weight"_a.none(), "stream"_a = 0);
  m.def("_time_spmm_forward", &time_spmm_forward, "graph"_a, "x"_a, "reduce"_a, "out"_a, "repeats"_a, "stream"_a = 0);
  // Apart, not overloads: the Python layer hands torch tensors over as DLPack capsules, which can be read
  // once, so an overload that read one and then failed on another argument would leave none to the next.
  m.def("segment_softmax_forward", &segment_softmax_forward, "x"_a, "indptr"_a, "out"_a, "stream"_a = 0);
  m.def("segment_softmax_backward", &segment_softmax_backward, "y"_a, "grad_out"_a, "indptr"_a, "grad_x"_a,
        "stream"_a = 0);
  m.def("segment_softmax_forward_graph", &segment_softmax_forward_graph, "x"_a, "graph"_a, "out"_a, "stream"_a = 0);
  m.def("segment_softmax_backward_graph", &segment_softmax_backward_graph, "y"_a, "grad_out"_a, "graph"_a, "grad_x"_a,
        "stream"_a = 0);
  m.def("gat_scores_forward", &gat_scores_forward, "graph"_a, "a_src"_a, "a_dst"_a, "negative_slope"_a, "out"_a,
        "stream"_a = 0);
  m.def("gat_scores_backward", &gat_scores_backward, "graph"_a, "grad_out"_a, "a_src"_a, "a_dst"_a, "negative_slope"_a,
        "grad_src"_a, "grad_dst"_a, "stream"_a = 0);
  m.def("sage_forward", &sage_forward, "graph"_a, "x"_a, "weight"_a, "bias"_a.none(), "activation"_a,
        "negative_slope"_a, "out"_a, "z"_a.none(), "h"_a.none(), "stream"_a = 0);
  m.def("sage_backward", &sage_backward, "graph"_a, "grad_out"_a, "z"_a, "h"_a, "weight"_a, "activation"_a,
        "negative_slope"_a, "grad_x"_a, "grad_weight"_a, "grad_bias"_a.none(), "stream"_a = 0);
  m.def("pool_forward", &pool_forward, "x"_a, "ptr"_a, "reduce"_a, "out"_a, "argmax"_a.none(), "stream"_a = 0);
  m.def("pool_backward", &pool_backward, "grad_out"_a, "ptr"_a, "reduce"_a, "argmax"_a.none(), "x"_a.none(),
        "y"_a.none(), "grad_x"_a, "stream"_a = 0);
  m.def("instance_norm_forward", &instance_norm_forward, "x"_a, "ptr"_a, "weight"_a.none(), "bias"_a.none(), "eps"_a,
        "out"_a, "mean"_a, "rstd"_a, "stream"_a = 0);
  m.def("instance_norm_backward", &instance_norm_backward, "grad_out"_a, "x"_a, "ptr"_a, "mean"_a, "rstd"_a,
        "weight"_a.none(), "grad_x"_a, "grad_weight"_a.none(), "grad_bias"_a.none(), "stream"_a = 0);
  m.def("layer_norm_forward", &layer_norm_forward, "x"_a, "weight"_a.none(), "bias"_a.none(), "eps"_a, "out"_a,
        "mean"_a, "rstd"_a, "stream"_a = 0);
  m.def("layer_norm_backward", &layer_norm_backward, "grad_out"_a, "x"_a, "mean"_a, "rstd"_a, "weight"_a.none(),
        "grad_x"_a, "grad_weight"_a.none(), "grad_bias"_a.none(), "stream"_a = 0);
  m.def("cuda_available", &gnn::cuda_available, "Whether this build has CUDA and a device is usable.");
  m.def("cuda_status", &gnn::cuda_status, "One line: the CUDA devices, or why CUDA cannot be used.");
  m.def("cuda_device_count", &gnn::cuda_device_count);
  m.def(
      "_data_ptr", [](const In& a) { return reinterpret_cast<uintptr_t>(a.data()); }, "array"_a);
  m.def(
      "_shape",
      [](const In& a, const std::string& name) {
        a.readable(name.c_str());
        return shape_of(a);
      },
      "array"_a, "name"_a);
  m.def("_device_empty", &device_empty, "shape"_a, "dtype"_a, "device"_a);
  m.def("_device_from_host", &device_from_host, "array"_a, "device"_a);
  m.def("_device_to_host", &device_to_host, "array"_a, "stream"_a = 0);
  m.def(
      "_stream_create",
      [](int device) {
        const DeviceScope scope(device);
        return reinterpret_cast<uintptr_t>(gnn::cuda_stream_create(device));
      },
      "device"_a);
  m.def(
      "_stream_destroy",
      [](uintptr_t s, int device) {
        const DeviceScope scope(device);
        gnn::cuda_stream_destroy(reinterpret_cast<gnn::Stream>(s), device);
      },
      "handle"_a,
      "device"_a);
  m.def(
      "_stream_synchronize",
      [](uintptr_t s, int device) {
        nb::gil_scoped_release release;
        const DeviceScope scope(device);
        gnn::cuda_stream_synchronize(reinterpret_cast<gnn::Stream>(s), device);
      },
      "handle"_a, "device"_a);
  m.def("load_npz", &load_npz, "path"_a, "keys"_a = nb::none(),
        "Reads an .npz (members in parallel, CRC-checked) into a dict of NumPy arrays, no copy after reading.");
  m.def("load_tpugraph", &load_tpugraph_py, "path"_a, "require_runtimes"_a = true,
        "Reads and validates a TpuGraphs tile or layout .npz (every schema rule) into a dict of NumPy arrays.");
}
