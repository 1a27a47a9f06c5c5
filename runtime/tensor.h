// Tensor: a contiguous row-major array of up to 6 dims on the host or a CUDA device, behind a
// ref-counted buffer. Slices along dim 0 and reshapes are views (no copy); everything else copies.
// Host buffers are 64-byte aligned; CUDA buffers come from the device's caching allocator.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/common.h"
#include "base/error.h"
#include "runtime/dtype.h"

namespace gnn {

inline constexpr int kMaxDims = 6;

std::string dims_str(const int64_t* dims, int n);  // "[3, 4]"

class Shape {
 public:
  Shape() = default;  // 0-d: one element
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int ndim() const { return n_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t numel() const;
  std::vector<int64_t> vec() const { return {d_.begin(), d_.begin() + n_}; }
  std::string str() const;  // "[3, 4]", "[]" for 0-d
  friend bool operator==(const Shape& a, const Shape& b) {
    return a.n_ == b.n_ && std::equal(a.d_.begin(), a.d_.begin() + a.n_, b.d_.begin());
  }

 private:
  template <class It>
  void assign(It first, It last);
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

// One allocation; freed through the allocator it came from when the last Tensor drops it.
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device;
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Device device = Device::cpu()) {
    return from_vector(values, Shape{int64_t(values.size())}, device);
  }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int dim() const { return shape_.ndim(); }
  int64_t size(int d) const;  // negative d counts from the end
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  Stream stream() const;  // the device's compute stream (nullptr on the host)
  std::string desc() const;  // "f32[3, 4] on cpu"

  // Raw data. The typed accessors check the dtype and name the tensor when it is wrong.
  void* data() const { return storage_ ? static_cast<char*>(storage_->ptr) + offset_ : nullptr; }
  template <class T>
  T* data_as() const {
    GNN_CHECK(dtype_ == dtype_of<T>(), "expected a ", dtype_name(dtype_of<T>()), " tensor, got ", desc());
    return static_cast<T*>(data());
  }
  float* f32() const { return data_as<float>(); }
  double* f64() const { return data_as<double>(); }
  int32_t* i32() const { return data_as<int32_t>(); }
  int64_t* i64() const { return data_as<int64_t>(); }
  uint8_t* u8() const { return data_as<uint8_t>(); }
  bool* b8() const { return data_as<bool>(); }

  // Views sharing this tensor's buffer.
  Tensor slice(int64_t begin, int64_t end) const;  // rows [begin, end) of dim 0
  Tensor reshape(std::vector<int64_t> dims) const;  // one dim may be -1
  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  // No other Tensor (view or copy) holds this one's buffer: writing it in place changes no one else's.
  bool sole_owner() const { return storage_ && storage_.use_count() == 1; }

  // Copies.
  Tensor to(Device device) const;
  Tensor on(Device device) const { return this->device() == device ? *this : to(device); }  // no copy when there
  Tensor clone() const { return to(device()); }
  // Copies of several tensors to `device` (undefined ones stay undefined). Host tensors bound for a GPU
  // share one allocation, each at a 256-byte boundary, and go in one queued transfer: a batch of graph
  // arrays costs one copy call instead of one per array. Otherwise each is copied as by to().
  static std::vector<Tensor> to_packed(const std::vector<Tensor>& ts, Device device);
  static void move_packed(const std::vector<Tensor*>& ts, Device device);  // each *t = its packed copy
  // Same dtype and element count, any devices. Host to GPU and within a GPU the copy is queued on the
  // device's stream and this returns at once (src may be changed or freed); GPU to host waits for it.
  void copy_from(const Tensor& src);
  void fill_(double value);
  Tensor astype(DType dtype) const;  // a converted copy (host tensors); the same tensor when dtype matches
  template <class T>
  std::vector<T> to_vector() const;  // copies to the host
  double item() const;  // the single element of a one-element tensor, as double

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes into storage_
  Shape shape_;
  DType dtype_ = DType::F32;
};

// Throws unless t is defined, has this dtype and this many dims; `what` names it in the message.
void check_tensor(const Tensor& t, const char* what, DType dtype, int ndim);

}  // namespace gnn
