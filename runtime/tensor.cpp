#include "runtime/tensor.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "runtime/allocator.h"
#include "runtime/cuda.h"
#include "runtime/fill.h"

namespace gnn {

// ---- Shape ---------------------------------------------------------------------------------------

template <class It>
void Shape::assign(It first, It last) {
  const auto n = std::distance(first, last);
  GNN_CHECK(n <= kMaxDims, "tensors have at most ", kMaxDims, " dims, got ", n);
  n_ = int(n);
  std::copy(first, last, d_.begin());
  int64_t total = 1;
  for (int i = 0; i < n_; ++i) {
    GNN_CHECK(d_[i] >= 0, "negative dimension ", d_[i], " in shape ", str());
    GNN_CHECK(d_[i] == 0 || total <= std::numeric_limits<int64_t>::max() / 16 / d_[i], "shape ", str(),
              " has too many elements");
    total *= d_[i];
  }
}

Shape::Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
Shape::Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i) n *= d_[i];
  return n;
}

std::string dims_str(const int64_t* dims, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string Shape::str() const { return dims_str(d_.data(), n_); }

// ---- Storage -------------------------------------------------------------------------------------

Storage::Storage(size_t bytes_, Device device_) : bytes(bytes_), device(device_) {
  ptr = device.is_cuda() ? cuda_alloc(bytes, device.index) : host_alloc(bytes);
}

Storage::~Storage() {
  if (device.is_cuda()) cuda_free(ptr, device.index);
  else host_free(ptr, bytes);
}

// ---- Tensor --------------------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  GNN_CHECK(int64_t(values.size()) == shape.numel(), "from_vector: ", values.size(), " values for shape ", shape.str());
  Tensor host = empty(shape, dtype_of<T>());
  if constexpr (std::is_same_v<T, bool>)  // std::vector<bool> is packed
    for (size_t i = 0; i < values.size(); ++i) host.b8()[i] = values[i];
  else if (!values.empty()) std::memcpy(host.data(), values.data(), host.nbytes());
  return host.on(device);
}

int64_t Tensor::size(int d) const {
  const int n = dim();
  GNN_CHECK(d >= -n && d < n, "dim ", d, " out of range for ", desc());
  return shape_[d < 0 ? d + n : d];
}

Stream Tensor::stream() const { return is_cuda() ? cuda_stream(device().index) : nullptr; }

std::string Tensor::desc() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_.str() + " on " + device().str();
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  GNN_CHECK(defined() && dim() >= 1, "slice needs a tensor with at least one dim, got ", desc());
  GNN_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ", end, ") out of range for ", desc());
  std::vector<int64_t> dims = shape_.vec();
  const size_t row_bytes = size_t(numel() / std::max<int64_t>(dims[0], 1)) * dtype_size(dtype_);
  dims[0] = end - begin;
  Tensor t = *this;
  t.shape_ = Shape(dims);
  t.offset_ = offset_ + size_t(begin) * row_bytes;
  return t;
}

Tensor Tensor::reshape(std::vector<int64_t> dims) const {
  GNN_CHECK(defined(), "reshape of an undefined tensor");
  const auto shape_text = [&] { return dims_str(dims.data(), int(dims.size())); };
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < int(dims.size()); ++i) {
    if (dims[i] == -1) {
      GNN_CHECK(infer < 0, "reshape to ", shape_text(), ": at most one dim may be -1");
      infer = i;
    } else {
      known *= dims[i];
    }
  }
  if (infer >= 0) {
    GNN_CHECK(known > 0 && numel() % known == 0, "cannot reshape ", desc(), " to ", shape_text());
    dims[infer] = numel() / known;
  }
  Tensor t = *this;
  t.shape_ = Shape(dims);
  GNN_CHECK(t.numel() == numel(), "cannot reshape ", desc(), " to ", t.shape_.str(), ": ", numel(), " vs ", t.numel(),
            " elements");
  return t;
}

Tensor Tensor::to(Device device) const {
  GNN_CHECK(defined(), "copy of an undefined tensor");
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

std::vector<Tensor> Tensor::to_packed(const std::vector<Tensor>& ts, Device device) {
  constexpr size_t kAlign = 256;  // what cudaMalloc gives: every vector width the kernels load
  std::vector<Tensor> out(ts.size());
  bool packed = device.is_cuda();
  size_t total = 0;
  std::vector<UploadPiece> pieces;
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    packed = packed && t.device().is_cpu();
    pieces.push_back({total, t.data(), t.nbytes()});
    total += (t.nbytes() + kAlign - 1) / kAlign * kAlign;
  }
  if (!packed) {
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].defined()) out[i] = ts[i].to(device);
    return out;
  }
  auto storage = std::make_shared<Storage>(total, device);
  for (size_t i = 0, k = 0; i < ts.size(); ++i) {
    if (!ts[i].defined()) continue;
    out[i] = ts[i];
    out[i].storage_ = storage;
    out[i].offset_ = pieces[k++].offset;
  }
  cuda_upload(storage->ptr, device.index, pieces);
  return out;
}

void Tensor::move_packed(const std::vector<Tensor*>& ts, Device device) {
  std::vector<Tensor> in;
  for (const Tensor* t : ts) in.push_back(*t);
  std::vector<Tensor> out = to_packed(in, device);
  for (size_t i = 0; i < ts.size(); ++i) *ts[i] = std::move(out[i]);
}

void Tensor::copy_from(const Tensor& src) {
  GNN_CHECK(defined() && src.defined(), "copy_from: undefined tensor (", desc(), " <- ", src.desc(), ")");
  GNN_CHECK(dtype_ == src.dtype_ && numel() == src.numel(), "copy_from: ", src.desc(), " does not fit ", desc());
  if (nbytes() == 0 || data() == src.data()) return;
  if (device().is_cpu() && src.device().is_cpu()) std::memcpy(data(), src.data(), nbytes());
  else if (device().is_cuda() && src.device().is_cpu())
    cuda_upload(data(), device().index, src.data(), nbytes());  // queued on the stream; the host goes on
  else cuda_copy(data(), device(), src.data(), src.device(), nbytes());
}

namespace {
// The bytes of `value` converted to one element of `dtype`.
std::array<unsigned char, 8> element_bytes(double value, DType dtype) {
  std::array<unsigned char, 8> b{};
  auto put = [&](auto v) { std::memcpy(b.data(), &v, sizeof(v)); };
  switch (dtype) {
    case DType::F32:
      put(float(value));
      break;
    case DType::F64:
      put(value);
      break;
    case DType::I32:
      put(int32_t(value));
      break;
    case DType::I64:
      put(int64_t(value));
      break;
    case DType::U8:
      put(uint8_t(value));
      break;
    case DType::Bool:
      put(uint8_t(value != 0.0));
      break;
  }
  return b;
}
}  // namespace

void Tensor::fill_(double value) {
  GNN_CHECK(defined(), "fill_ of an undefined tensor");
  const auto bytes = element_bytes(value, dtype_);
  if (is_cuda()) {
    if constexpr (kWithCuda) fill_cuda(data(), bytes.data(), dtype_size(dtype_), numel(), stream());
  } else {
    fill_cpu(data(), bytes.data(), dtype_size(dtype_), numel());
  }
}

namespace {
template <class Out, class In>
void convert_elements(Out* out, const In* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<Out, bool>) out[i] = in[i] != In(0);
    else out[i] = static_cast<Out>(in[i]);
  }
}

template <class Out>
void convert_from(Out* out, const Tensor& in) {
  switch (in.dtype()) {
    case DType::F32:
      convert_elements(out, in.f32(), in.numel());
      break;
    case DType::F64:
      convert_elements(out, in.f64(), in.numel());
      break;
    case DType::I32:
      convert_elements(out, in.i32(), in.numel());
      break;
    case DType::I64:
      convert_elements(out, in.i64(), in.numel());
      break;
    case DType::U8:
      convert_elements(out, in.u8(), in.numel());
      break;
    case DType::Bool:
      convert_elements(out, in.b8(), in.numel());
      break;
  }
}
}  // namespace

Tensor Tensor::astype(DType dtype) const {
  GNN_CHECK(defined(), "astype of an undefined tensor");
  if (dtype == dtype_) return *this;
  GNN_CHECK(device().is_cpu(), "astype(", dtype_name(dtype), ") needs a host tensor, got ", desc());
  Tensor out = empty(shape_, dtype);
  switch (dtype) {
    case DType::F32:
      convert_from(out.f32(), *this);
      break;
    case DType::F64:
      convert_from(out.f64(), *this);
      break;
    case DType::I32:
      convert_from(out.i32(), *this);
      break;
    case DType::I64:
      convert_from(out.i64(), *this);
      break;
    case DType::U8:
      convert_from(out.u8(), *this);
      break;
    case DType::Bool:
      convert_from(out.b8(), *this);
      break;
  }
  return out;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  const Tensor host = on(Device::cpu());
  const T* p = host.data_as<T>();
  return std::vector<T>(p, p + numel());
}

double Tensor::item() const {
  GNN_CHECK(defined() && numel() == 1, "item() needs a one-element tensor, got ", desc());
  const Tensor h = on(Device::cpu());
  switch (dtype_) {
    case DType::F32:
      return *h.f32();
    case DType::F64:
      return *h.f64();
    case DType::I32:
      return *h.i32();
    case DType::I64:
      return double(*h.i64());
    case DType::U8:
      return *h.u8();
    case DType::Bool:
      return *h.b8();
  }
  return 0;
}

void check_tensor(const Tensor& t, const char* what, DType dtype, int ndim) {
  GNN_CHECK(t.defined() && t.dtype() == dtype && t.dim() == ndim, what, " must be ", dtype_name(dtype), " with ", ndim,
            " dims, got ", t.desc());
}

#define GNN_INSTANTIATE(T)                                                             \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&, Device); \
  template std::vector<T> Tensor::to_vector<T>() const;
GNN_INSTANTIATE(float)
GNN_INSTANTIATE(double)
GNN_INSTANTIATE(int32_t)
GNN_INSTANTIATE(int64_t)
GNN_INSTANTIATE(uint8_t)
#undef GNN_INSTANTIATE
template Tensor Tensor::from_vector<bool>(const std::vector<bool>&, const Shape&, Device);

}  // namespace gnn
