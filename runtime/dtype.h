// Element types of a Tensor and the Device a tensor lives on.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gnn {

enum class DType : uint8_t { F32, F64, I32, I64, U8, Bool };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "f64", "i32", "i64", "u8", "bool"
bool dtype_is_float(DType t);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::F64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::I32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::I64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::U8;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::Bool;
}

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;  // "cpu", "cuda:0"
  // Parses "cpu", "cuda", "cuda:N"; throws gnn::Error naming the text otherwise.
  static Device parse(const std::string& text);
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace gnn
