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
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "io/npz.h"
#include "io/tpugraphs.h"
#include "kernels/activation.h"
#include "kernels/instance_norm.h"
#include "kernels/layer_norm.h"
#include "kernels/pooling.h"
#include "kernels/sage.h"
#include "kernels/segment_softmax.h"
#include "kernels/spmm.h"
#include "runtime/graph.h"
#include "runtime/parallel.h"
#include "runtime/tensor.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace gnn::py {
namespace {

using In = nb::ndarray<nb::ro>;  // any framework, any dtype: checked below, by name
using Out = nb::ndarray<>;
using OptIn = std::optional<In>;
using OptOut = std::optional<Out>;

const char* dtype_str(nb::dlpack::dtype t) {
  if (t == nb::dtype<float>()) return "float32";
  if (t == nb::dtype<double>()) return "float64";
  if (t == nb::dtype<int32_t>()) return "int32";
  if (t == nb::dtype<int64_t>()) return "int64";
  if (t == nb::dtype<uint8_t>()) return "uint8";
  if (t == nb::dtype<bool>()) return "bool";
  if (t.code == uint8_t(nb::dlpack::dtype_code::Float) && t.bits == 16) return "float16";
  if (t.code == uint8_t(nb::dlpack::dtype_code::Bfloat)) return "bfloat16";
  return "an unsupported dtype";
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

// One argument's checks: dtype, host memory, C-contiguous, and the shape (-1: any size there).
template <class T, class A>
T* checked(const A& a, const char* name, std::initializer_list<int64_t> shape) {
  if (a.dtype() != nb::dtype<std::remove_const_t<T>>())
    throw nb::type_error((std::string(name) + " must be " + dtype_str(nb::dtype<std::remove_const_t<T>>()) + ", got " +
                          dtype_str(a.dtype()))
                             .c_str());
  if (a.device_type() != nb::device::cpu::value)
    throw nb::type_error((std::string(name) + " is not in host memory (DLPack device type " +
                          std::to_string(a.device_type()) +
                          "); this build of gnn's Python module runs its kernels on CPU arrays only")
                             .c_str());
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
  int64_t expect = 1;
  const bool empty = std::find(got.begin(), got.end(), 0) != got.end();  // any strides will do: nothing is read
  for (size_t i = got.size(); !empty && i-- > 0;) {
    if (got[i] != 1 && a.stride(i) != expect)
      throw nb::value_error((std::string(name) + " is not C-contiguous (shape " + shape_str(got) +
                             "); pass a contiguous array (numpy.ascontiguousarray, tensor.contiguous())")
                                .c_str());
    expect *= got[i];
  }
  return static_cast<T*>(const_cast<void*>(static_cast<const void*>(a.data())));
}

template <class T, class A>
T* checked_opt(const std::optional<A>& a, const char* name, std::initializer_list<int64_t> shape) {
  return a ? checked<T>(*a, name, shape) : nullptr;
}

// The size of dimension d of an argument whose rank is checked first.
template <class A>
int64_t dim_of(const A& a, const char* name, size_t ndim, size_t d) {
  if (a.ndim() != ndim)
    throw nb::value_error(
        (std::string(name) + " must have " + std::to_string(ndim) + " dimensions, got shape " + shape_str(shape_of(a)))
            .c_str());
  return int64_t(a.shape(d));
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
  CsrView view() const {
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

PyGraph* make_graph(const In& edge_index, std::optional<int64_t> num_nodes, std::optional<int64_t> num_src_nodes) {
  if (edge_index.dtype() != nb::dtype<int64_t>() && edge_index.dtype() != nb::dtype<int32_t>())
    throw nb::type_error(
        ("edge_index must be int64 or int32, got " + std::string(dtype_str(edge_index.dtype()))).c_str());
  if (edge_index.device_type() != nb::device::cpu::value)
    throw nb::type_error("edge_index is not in host memory; build the graph from a CPU copy (edge_index.cpu())");
  if (edge_index.ndim() != 2 || edge_index.shape(0) != 2)
    throw nb::value_error(("edge_index must have shape (2, E) (row 0 sources, row 1 targets, as in PyG), got " +
                           shape_str(shape_of(edge_index)))
                              .c_str());
  const std::vector<int64_t> src = index_row(edge_index, 0), dst = index_row(edge_index, 1);
  auto bound = [](const std::vector<int64_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()) + 1; };
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

// A read-only NumPy view of one of the graph's int32 arrays, kept alive by the Python Graph object.
nb::ndarray<nb::numpy, const int32_t, nb::ndim<1>> graph_array(nb::handle self, const Tensor& t) {
  return nb::ndarray<nb::numpy, const int32_t, nb::ndim<1>>(t.i32(), {size_t(t.numel())}, self);
}

// ---- numpy arrays owning a gnn Tensor -------------------------------------------------------------

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
  for (int64_t e = 0; e < E; ++e)
    for (int64_t h = 0; h < H; ++h) cols[size_t(h * E + e)] = w[e * H + h];
  return cols;
}

int64_t weight_heads(const OptIn& w, int64_t E, int64_t W) {
  if (!w) return 1;
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
const float* checked_weight(const OptIn& w, int64_t E, int64_t H) {
  if (!w) return nullptr;
  return w->ndim() == 2 ? checked<const float>(*w, "edge_weight", {E, H})
                        : checked<const float>(*w, "edge_weight", {E});
}

void spmm_forward(const PyGraph& graph, const In& x, const OptIn& edge_weight, const std::string& reduce, Out out,
                  OptOut argmax) {
  const Reduce op = parse_reduce(reduce);
  const int64_t N = graph.g.num_nodes, S = graph.g.num_sources(), E = graph.g.num_edges;
  const int64_t W = dim_of(x, "x", 2, 1);
  const float* xp = checked<const float>(x, "x", {S, W});
  const int64_t H = weight_heads(edge_weight, E, W), F = W / H;
  const float* wp = checked_weight(edge_weight, E, H);
  float* yp = checked<float>(out, "out", {N, W});
  if (op == Reduce::kMax && !argmax) throw nb::value_error("argmax: reduce='max' needs an int32 array (H, N, F)");
  int32_t* ap = op == Reduce::kMax ? checked<int32_t>(*argmax, "argmax", {H, N, F}) : nullptr;
  nb::gil_scoped_release release;
  const std::vector<float> cols = H > 1 ? weight_columns(wp, E, H) : std::vector<float>();
  const CsrView g = graph.view();
  for (int64_t h = 0; h < H; ++h)
    spmm_forward_cpu(yp + h * F, ap ? ap + h * N * F : nullptr, xp + h * F, H > 1 ? cols.data() + h * E : wp, g, F, W,
                     W, op);
}

void spmm_backward(const PyGraph& graph, const In& grad_out, const OptIn& edge_weight, const std::string& reduce,
                   const OptIn& argmax, const OptIn& x, OptOut grad_x, OptOut grad_weight) {
  const Reduce op = parse_reduce(reduce);
  const int64_t N = graph.g.num_nodes, S = graph.g.num_sources(), E = graph.g.num_edges;
  const int64_t W = dim_of(grad_out, "grad_out", 2, 1);
  const float* dy = checked<const float>(grad_out, "grad_out", {N, W});
  const int64_t H = weight_heads(edge_weight, E, W), F = W / H;
  const float* wp = checked_weight(edge_weight, E, H);
  if (op == Reduce::kMax && !argmax) throw nb::value_error("argmax: reduce='max' needs the forward's argmax");
  const int32_t* ap = op == Reduce::kMax ? checked<const int32_t>(*argmax, "argmax", {H, N, F}) : nullptr;
  float* dx = checked_opt<float>(grad_x, "grad_x", {S, W});
  float* dw = nullptr;
  const float* xp = nullptr;
  if (grad_weight) {
    if (!edge_weight) throw nb::value_error("grad_weight: the forward had no edge_weight");
    if (!x) throw nb::value_error("x: grad_weight needs the forward's input x");
    dw = edge_weight->ndim() == 2 ? checked<float>(*grad_weight, "grad_weight", {E, H})
                                  : checked<float>(*grad_weight, "grad_weight", {E});
    xp = checked<const float>(*x, "x", {S, W});
  }
  nb::gil_scoped_release release;
  const std::vector<float> cols = H > 1 ? weight_columns(wp, E, H) : std::vector<float>();
  std::vector<float> dcols(dw && H > 1 ? size_t(E * H) : 0);
  const CsrView g = graph.view();
  for (int64_t h = 0; h < H; ++h) {
    const float* wh = H > 1 ? cols.data() + h * E : wp;
    const int32_t* ah = ap ? ap + h * N * F : nullptr;
    if (dx) spmm_backward_x_cpu(dx + h * F, dy + h * F, ah, wh, g, F, W, W, op);
    if (dw) spmm_backward_w_cpu(H > 1 ? dcols.data() + h * E : dw, dy + h * F, xp + h * F, ah, g, F, W, W, op);
  }
  if (dw && H > 1)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t h = 0; h < H; ++h) dw[e * H + h] = dcols[size_t(h * E + e)];
}

// Seconds per call of spmm_forward (its checks included) looped in C++: what a call costs with no Python
// in the way, for `python -m gnn.bench --overhead`.
double time_spmm_forward(const PyGraph& graph, const In& x, const std::string& reduce, Out out, int repeats) {
  if (reduce == "max") throw nb::value_error("reduce: time 'sum' or 'mean' (max needs an argmax array)");
  if (repeats < 1) throw nb::value_error("repeats must be >= 1");
  spmm_forward(graph, x, std::nullopt, reduce, out, std::nullopt);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) spmm_forward(graph, x, std::nullopt, reduce, out, std::nullopt);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / repeats;
}

const int32_t* checked_indptr(const In& indptr, int64_t& S) {
  S = dim_of(indptr, "indptr", 1, 0) - 1;
  if (S < 0) throw nb::value_error("indptr must have at least one entry (0)");
  return checked<const int32_t>(indptr, "indptr", {S + 1});
}

void check_indptr_values(const int32_t* p, int64_t S, int64_t E, const char* rows) {
  if (p[0] != 0 || p[S] != E)
    throw nb::value_error(("indptr must start at 0 and end at the number of " + std::string(rows) + " (" +
                           std::to_string(E) + "), got " + std::to_string(p[0]) + " .. " + std::to_string(p[S]))
                              .c_str());
  for (int64_t s = 0; s < S; ++s)
    if (p[s + 1] < p[s])
      throw nb::value_error(("indptr must not decrease; it does at position " + std::to_string(s + 1)).c_str());
}

void segment_softmax_forward(const In& x, const In& indptr, Out out) {
  int64_t S;
  const int32_t* ptr = checked_indptr(indptr, S);
  const int64_t E = dim_of(x, "x", 2, 0), H = int64_t(x.shape(1));
  const float* xp = checked<const float>(x, "x", {E, H});
  float* yp = checked<float>(out, "out", {E, H});
  check_indptr_values(ptr, S, E, "rows of x");
  nb::gil_scoped_release release;
  segment_softmax_forward_cpu(yp, xp, ptr, S, H);
}

void segment_softmax_backward(const In& y, const In& grad_out, const In& indptr, Out grad_x) {
  int64_t S;
  const int32_t* ptr = checked_indptr(indptr, S);
  const int64_t E = dim_of(y, "y", 2, 0), H = int64_t(y.shape(1));
  const float* yp = checked<const float>(y, "y", {E, H});
  const float* dy = checked<const float>(grad_out, "grad_out", {E, H});
  float* dx = checked<float>(grad_x, "grad_x", {E, H});
  check_indptr_values(ptr, S, E, "rows of y");
  nb::gil_scoped_release release;
  segment_softmax_backward_cpu(dx, yp, dy, ptr, S, H);
}

void gat_scores_forward(const PyGraph& graph, const In& a_src, const In& a_dst, float negative_slope, Out out) {
  const int64_t N = graph.g.num_nodes, E = graph.g.num_edges;
  if (graph.g.num_src >= 0) throw nb::value_error("graph: GAT scores need one node set, not a bipartite graph");
  const int64_t H = dim_of(a_src, "a_src", 2, 1);
  const float* as = checked<const float>(a_src, "a_src", {N, H});
  const float* ad = checked<const float>(a_dst, "a_dst", {N, H});
  float* s = checked<float>(out, "out", {E, H});
  nb::gil_scoped_release release;
  gat_scores_forward_cpu(s, as, ad, graph.view(), H, negative_slope);
}

void gat_scores_backward(const PyGraph& graph, const In& grad_out, const In& a_src, const In& a_dst,
                         float negative_slope, Out grad_src, Out grad_dst) {
  const int64_t N = graph.g.num_nodes, E = graph.g.num_edges;
  if (graph.g.num_src >= 0) throw nb::value_error("graph: GAT scores need one node set, not a bipartite graph");
  const int64_t H = dim_of(a_src, "a_src", 2, 1);
  const float* ds = checked<const float>(grad_out, "grad_out", {E, H});
  const float* as = checked<const float>(a_src, "a_src", {N, H});
  const float* ad = checked<const float>(a_dst, "a_dst", {N, H});
  float* dsrc = checked<float>(grad_src, "grad_src", {N, H});
  float* ddst = checked<float>(grad_dst, "grad_dst", {N, H});
  nb::gil_scoped_release release;
  gat_scores_backward_cpu(dsrc, ddst, ds, as, ad, graph.view(), H, negative_slope);
}

void sage_forward(const PyGraph& graph, const In& x, const In& weight, const OptIn& bias, const std::string& activation,
                  float negative_slope, Out out, OptOut z, OptOut h) {
  const Act act = parse_activation(activation);
  if (graph.g.num_src >= 0) throw nb::value_error("graph: the SAGE layer needs one node set, not a bipartite graph");
  const int64_t N = graph.g.num_nodes, F = dim_of(x, "x", 2, 1), O = dim_of(weight, "weight", 2, 1);
  const float* xp = checked<const float>(x, "x", {N, F});
  const float* W = checked<const float>(weight, "weight", {2 * F, O});
  const float* b = checked_opt<const float>(bias, "bias", {O});
  float* yp = checked<float>(out, "out", {N, O});
  if (bool(z) != bool(h)) throw nb::value_error("z and h: pass both (to train) or neither (inference)");
  float* zp = checked_opt<float>(z, "z", {N, O});
  float* hp = checked_opt<float>(h, "h", {N, 2 * F});
  nb::gil_scoped_release release;
  sage_forward_cpu(yp, zp, hp, xp, graph.view(), W, b, F, O, act, negative_slope);
}

void sage_backward(const PyGraph& graph, const In& grad_out, const In& z, const In& h, const In& weight,
                   const std::string& activation, float negative_slope, Out grad_x, Out grad_weight, OptOut grad_bias) {
  const Act act = parse_activation(activation);
  if (graph.g.num_src >= 0) throw nb::value_error("graph: the SAGE layer needs one node set, not a bipartite graph");
  const int64_t N = graph.g.num_nodes, O = dim_of(weight, "weight", 2, 1), F = int64_t(weight.shape(0)) / 2;
  const float* W = checked<const float>(weight, "weight", {2 * F, O});
  const float* dy = checked<const float>(grad_out, "grad_out", {N, O});
  const float* zp = checked<const float>(z, "z", {N, O});
  const float* hp = checked<const float>(h, "h", {N, 2 * F});
  float* dx = checked<float>(grad_x, "grad_x", {N, F});
  float* dW = checked<float>(grad_weight, "grad_weight", {2 * F, O});
  float* db = checked_opt<float>(grad_bias, "grad_bias", {O});
  nb::gil_scoped_release release;
  std::vector<float> workspace(size_t(sage_backward_workspace(N, F, O)));
  sage_backward_cpu(dx, dW, db, dy, zp, hp, graph.view(), W, F, O, act, negative_slope, workspace.data());
}

const int64_t* checked_ptr(const In& ptr, int64_t rows, int64_t& G) {
  G = dim_of(ptr, "ptr", 1, 0) - 1;
  if (G < 0) throw nb::value_error("ptr must have at least one entry (0)");
  const int64_t* p = checked<const int64_t>(ptr, "ptr", {G + 1});
  if (p[0] != 0 || p[G] != rows)
    throw nb::value_error(("ptr must start at 0 and end at the number of rows of x (" + std::to_string(rows) +
                           "), got " + std::to_string(p[0]) + " .. " + std::to_string(p[G]))
                              .c_str());
  for (int64_t g = 0; g < G; ++g)
    if (p[g + 1] < p[g])
      throw nb::value_error(("ptr must not decrease; it does at position " + std::to_string(g + 1)).c_str());
  return p;
}

void pool_forward(const In& x, const In& ptr, const std::string& reduce, Out out, OptOut argmax) {
  const bool lse = reduce == "logsumexp";
  const Reduce op = lse ? Reduce::kSum : parse_reduce(reduce, true);
  const int64_t N = dim_of(x, "x", 2, 0), F = int64_t(x.shape(1));
  int64_t G;
  const float* xp = checked<const float>(x, "x", {N, F});
  const int64_t* p = checked_ptr(ptr, N, G);
  float* yp = checked<float>(out, "out", {G, F});
  if (op == Reduce::kMax && !lse && !argmax) throw nb::value_error("argmax: reduce='max' needs an int32 array (G, F)");
  int32_t* ap = op == Reduce::kMax && !lse ? checked<int32_t>(*argmax, "argmax", {G, F}) : nullptr;
  nb::gil_scoped_release release;
  if (lse) pool_logsumexp_forward_cpu(yp, xp, p, G, F);
  else pool_forward_cpu(yp, ap, xp, p, G, F, op);
}

void pool_backward(const In& grad_out, const In& ptr, const std::string& reduce, const OptIn& argmax, const OptIn& x,
                   const OptIn& y, Out grad_x) {
  const bool lse = reduce == "logsumexp";
  const Reduce op = lse ? Reduce::kSum : parse_reduce(reduce, true);
  const int64_t N = dim_of(grad_x, "grad_x", 2, 0), F = int64_t(grad_x.shape(1));
  int64_t G;
  const int64_t* p = checked_ptr(ptr, N, G);
  const float* dy = checked<const float>(grad_out, "grad_out", {G, F});
  float* dx = checked<float>(grad_x, "grad_x", {N, F});
  if (lse && (!x || !y)) throw nb::value_error("x and y: reduce='logsumexp' needs the forward's input and output");
  const float* xp = lse ? checked<const float>(*x, "x", {N, F}) : nullptr;
  const float* yp = lse ? checked<const float>(*y, "y", {G, F}) : nullptr;
  if (op == Reduce::kMax && !lse && !argmax) throw nb::value_error("argmax: reduce='max' needs the forward's argmax");
  const int32_t* ap = op == Reduce::kMax && !lse ? checked<const int32_t>(*argmax, "argmax", {G, F}) : nullptr;
  nb::gil_scoped_release release;
  if (lse) pool_logsumexp_backward_cpu(dx, dy, xp, yp, p, G, F);
  else pool_backward_cpu(dx, dy, ap, p, G, F, op);
}

void instance_norm_forward(const In& x, const In& ptr, const OptIn& weight, const OptIn& bias, float eps, Out out,
                           Out mean, Out rstd) {
  const int64_t N = dim_of(x, "x", 2, 0), F = int64_t(x.shape(1));
  int64_t G;
  const float* xp = checked<const float>(x, "x", {N, F});
  const int64_t* p = checked_ptr(ptr, N, G);
  const float* gamma = checked_opt<const float>(weight, "weight", {F});
  const float* beta = checked_opt<const float>(bias, "bias", {F});
  float* yp = checked<float>(out, "out", {N, F});
  float* mp = checked<float>(mean, "mean", {G, F});
  float* rp = checked<float>(rstd, "rstd", {G, F});
  if (!(eps > 0)) throw nb::value_error(("eps must be > 0, got " + std::to_string(eps)).c_str());
  nb::gil_scoped_release release;
  instance_norm_forward_cpu(yp, mp, rp, xp, nullptr, gamma, beta, p, G, F, eps, Act::kNone);
}

void instance_norm_backward(const In& grad_out, const In& x, const In& ptr, const In& mean, const In& rstd,
                            const OptIn& weight, Out grad_x, OptOut grad_weight, OptOut grad_bias) {
  const int64_t N = dim_of(x, "x", 2, 0), F = int64_t(x.shape(1));
  int64_t G;
  const float* xp = checked<const float>(x, "x", {N, F});
  const int64_t* p = checked_ptr(ptr, N, G);
  const float* dy = checked<const float>(grad_out, "grad_out", {N, F});
  const float* mp = checked<const float>(mean, "mean", {G, F});
  const float* rp = checked<const float>(rstd, "rstd", {G, F});
  const float* gamma = checked_opt<const float>(weight, "weight", {F});
  float* dx = checked<float>(grad_x, "grad_x", {N, F});
  std::vector<float> scratch_g(grad_weight ? 0 : size_t(F)), scratch_b(grad_bias ? 0 : size_t(F));
  float* dg = grad_weight ? checked<float>(*grad_weight, "grad_weight", {F}) : scratch_g.data();
  float* db = grad_bias ? checked<float>(*grad_bias, "grad_bias", {F}) : scratch_b.data();
  nb::gil_scoped_release release;
  instance_norm_backward_cpu(dx, dg, db, dy, xp, nullptr, mp, rp, gamma, nullptr, p, G, F, Act::kNone);
}

void layer_norm_forward(const In& x, const OptIn& weight, const OptIn& bias, float eps, Out out, Out mean, Out rstd) {
  const int64_t R = dim_of(x, "x", 2, 0), F = int64_t(x.shape(1));
  const float* xp = checked<const float>(x, "x", {R, F});
  const float* gamma = checked_opt<const float>(weight, "weight", {F});
  const float* beta = checked_opt<const float>(bias, "bias", {F});
  float* yp = checked<float>(out, "out", {R, F});
  float* mp = checked<float>(mean, "mean", {R});
  float* rp = checked<float>(rstd, "rstd", {R});
  if (!(eps > 0)) throw nb::value_error(("eps must be > 0, got " + std::to_string(eps)).c_str());
  nb::gil_scoped_release release;
  layer_norm_forward_cpu(yp, mp, rp, xp, gamma, beta, R, F, eps);
}

void layer_norm_backward(const In& grad_out, const In& x, const In& mean, const In& rstd, const OptIn& weight,
                         Out grad_x, OptOut grad_weight, OptOut grad_bias) {
  const int64_t R = dim_of(x, "x", 2, 0), F = int64_t(x.shape(1));
  const float* xp = checked<const float>(x, "x", {R, F});
  const float* dy = checked<const float>(grad_out, "grad_out", {R, F});
  const float* mp = checked<const float>(mean, "mean", {R});
  const float* rp = checked<const float>(rstd, "rstd", {R});
  const float* gamma = checked_opt<const float>(weight, "weight", {F});
  float* dx = checked<float>(grad_x, "grad_x", {R, F});
  std::vector<float> scratch_g(grad_weight ? 0 : size_t(F)), scratch_b(grad_bias ? 0 : size_t(F));
  float* dg = grad_weight ? checked<float>(*grad_weight, "grad_weight", {F}) : scratch_g.data();
  float* db = grad_bias ? checked<float>(*grad_bias, "grad_bias", {F}) : scratch_b.data();
  nb::gil_scoped_release release;
  layer_norm_backward_cpu(dx, dg, db, dy, xp, mp, rp, gamma, R, F);
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

  m.def("num_threads", &gnn::num_threads, "The number of CPU threads the kernels use.");
  m.def(
      "set_num_threads",
      [](int n) {
        // OpenMP would try to start that many threads at the next kernel: a typo must not kill the process.
        const int most = std::max(1, int(std::thread::hardware_concurrency())) * 8;
        if (n < 1 || n > most)
          throw nb::value_error(
              ("n must be in [1, " + std::to_string(most) + "] (8 per hardware thread), got " + std::to_string(n))
                  .c_str());
        gnn::set_num_threads(n);
      },
      "n"_a,
      "Sets the number of CPU threads the kernels use, 1 to 8 per hardware thread. This is OpenMP's setting\n"
      "(omp_set_num_threads) for the calling thread: where torch shares the process's OpenMP runtime,\n"
      "torch.set_num_threads changes it too, and the other way round.");

  nb::class_<PyGraph>(m, "Graph",
                      "A directed graph in CSR (rows: targets, listing their sources) and CSC form, built by a\n"
                      "counting sort; edges keep their input order within a row.")
      .def(nb::new_(&make_graph), "edge_index"_a, "num_nodes"_a = nb::none(), "num_src_nodes"_a = nb::none(),
           "edge_index: (2, E) int64 or int32, row 0 sources, row 1 targets (PyG's convention).\n"
           "num_nodes: target nodes (default: the largest index + 1). num_src_nodes: a bipartite graph's\n"
           "sources (default: the same node set).")
      .def_prop_ro("num_nodes", [](const PyGraph& g) { return g.g.num_nodes; })
      .def_prop_ro("num_src_nodes", [](const PyGraph& g) { return g.g.num_sources(); })
      .def_prop_ro("num_edges", [](const PyGraph& g) { return g.g.num_edges; })
      .def_prop_ro("is_bipartite", [](const PyGraph& g) { return g.g.num_src >= 0; })
      .def_prop_ro(
          "indptr", [](nb::handle self) { return graph_array(self, nb::cast<PyGraph&>(self).g.csr_indptr); },
          "CSR row pointers (num_nodes + 1), int32, read-only, no copy.")
      .def_prop_ro(
          "indices", [](nb::handle self) { return graph_array(self, nb::cast<PyGraph&>(self).g.csr_indices); },
          "The source of each CSR entry (E), int32.")
      .def_prop_ro(
          "eid", [](nb::handle self) { return graph_array(self, nb::cast<PyGraph&>(self).g.csr_eid); },
          "The input edge id of each CSR entry (E), int32: values[graph.eid] puts per-edge values in CSR order.")
      .def_prop_ro(
          "csc_indptr", [](nb::handle self) { return graph_array(self, nb::cast<PyGraph&>(self).g.csc_indptr); },
          "CSC row pointers (num_src_nodes + 1), int32.")
      .def_prop_ro(
          "csc_indices", [](nb::handle self) { return graph_array(self, nb::cast<PyGraph&>(self).g.csc_indices); },
          "The target of each CSC entry (E), int32.")
      .def_prop_ro(
          "csc_to_csr", [](nb::handle self) { return graph_array(self, nb::cast<PyGraph&>(self).g.csc_to_csr); },
          "The CSR position of each CSC entry (E), int32.")
      .def("__repr__", [](const PyGraph& g) {
        return "gnn.Graph(num_nodes=" + std::to_string(g.g.num_nodes) +
               (g.g.num_src >= 0 ? ", num_src_nodes=" + std::to_string(g.g.num_src) : std::string()) +
               ", num_edges=" + std::to_string(g.g.num_edges) + ")";
      });

  m.def("spmm_forward", &spmm_forward, "graph"_a, "x"_a, "edge_weight"_a.none(), "reduce"_a, "out"_a,
        "argmax"_a.none());
  m.def("spmm_backward", &spmm_backward, "graph"_a, "grad_out"_a, "edge_weight"_a.none(), "reduce"_a, "argmax"_a.none(),
        "x"_a.none(), "grad_x"_a.none(), "grad_weight"_a.none());
  m.def("_time_spmm_forward", &time_spmm_forward, "graph"_a, "x"_a, "reduce"_a, "out"_a, "repeats"_a);
  m.def("segment_softmax_forward", &segment_softmax_forward, "x"_a, "indptr"_a, "out"_a);
  m.def("segment_softmax_backward", &segment_softmax_backward, "y"_a, "grad_out"_a, "indptr"_a, "grad_x"_a);
  m.def("gat_scores_forward", &gat_scores_forward, "graph"_a, "a_src"_a, "a_dst"_a, "negative_slope"_a, "out"_a);
  m.def("gat_scores_backward", &gat_scores_backward, "graph"_a, "grad_out"_a, "a_src"_a, "a_dst"_a, "negative_slope"_a,
        "grad_src"_a, "grad_dst"_a);
  m.def("sage_forward", &sage_forward, "graph"_a, "x"_a, "weight"_a, "bias"_a.none(), "activation"_a,
        "negative_slope"_a, "out"_a, "z"_a.none(), "h"_a.none());
  m.def("sage_backward", &sage_backward, "graph"_a, "grad_out"_a, "z"_a, "h"_a, "weight"_a, "activation"_a,
        "negative_slope"_a, "grad_x"_a, "grad_weight"_a, "grad_bias"_a.none());
  m.def("pool_forward", &pool_forward, "x"_a, "ptr"_a, "reduce"_a, "out"_a, "argmax"_a.none());
  m.def("pool_backward", &pool_backward, "grad_out"_a, "ptr"_a, "reduce"_a, "argmax"_a.none(), "x"_a.none(),
        "y"_a.none(), "grad_x"_a);
  m.def("instance_norm_forward", &instance_norm_forward, "x"_a, "ptr"_a, "weight"_a.none(), "bias"_a.none(), "eps"_a,
        "out"_a, "mean"_a, "rstd"_a);
  m.def("instance_norm_backward", &instance_norm_backward, "grad_out"_a, "x"_a, "ptr"_a, "mean"_a, "rstd"_a,
        "weight"_a.none(), "grad_x"_a, "grad_weight"_a.none(), "grad_bias"_a.none());
  m.def("layer_norm_forward", &layer_norm_forward, "x"_a, "weight"_a.none(), "bias"_a.none(), "eps"_a, "out"_a,
        "mean"_a, "rstd"_a);
  m.def("layer_norm_backward", &layer_norm_backward, "grad_out"_a, "x"_a, "mean"_a, "rstd"_a, "weight"_a.none(),
        "grad_x"_a, "grad_weight"_a.none(), "grad_bias"_a.none());
  m.def("load_npz", &load_npz, "path"_a, "keys"_a = nb::none(),
        "Reads an .npz (members in parallel, CRC-checked) into a dict of NumPy arrays, no copy after reading.");
  m.def("load_tpugraph", &load_tpugraph_py, "path"_a, "require_runtimes"_a = true,
        "Reads and validates a TpuGraphs tile or layout .npz (every schema rule) into a dict of NumPy arrays.");
}
