// NPY arrays: versions 1.0 (2-byte header length), 2.0 (4-byte) and 3.0 (4-byte, utf-8), the header a
// Python dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (372, 140), }
// parsed by a tokenizer (not string search); nothing from a file is ever executed.
//
// File dtypes and what they load as (widening is lossless; u8 values over 2^63-1 are refused):
//   b1 -> bool   u1 -> u8   i1 i2 u2 i4 -> i32   u4 i8 u8 -> i64   f2 f4 -> f32   f8 -> f64
// Either byte order; fortran_order arrays come back in C order; 0-d and empty arrays work.
// Object arrays (pickles), structured, string and datetime dtypes are refused.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/byte_source.h"
#include "runtime/tensor.h"

namespace gnn {

struct NpyHeader {
  int version_major = 1;
  std::string descr;  // as written, e.g. "<f4"
  char kind = 'f';  // b, u, i, f
  int itemsize = 4;  // bytes per element in the file
  bool byte_swap = false;  // file byte order differs from this machine's
  bool fortran_order = false;
  std::vector<int64_t> shape;
  uint64_t header_bytes = 0;  // magic + version + length field + dict: where the data starts

  DType dtype() const;  // what it loads as
  int64_t numel() const;
  uint64_t data_bytes() const { return uint64_t(numel()) * uint64_t(itemsize); }
  std::string shape_str() const;  // "(372, 140)"
};

// Reads the header from the start of `in` (nothing else); checks the data length against total().
NpyHeader read_npy_header(ByteStream& in);
// Reads a whole array: header, data (straight into the tensor when no conversion is needed), finish().
Tensor read_npy(ByteStream& in, NpyHeader* header_out = nullptr);

// The header numpy writes for a C-order array of this dtype and shape (v1.0, v2.0 if it must).
std::string npy_header(DType dtype, const Shape& shape);
// Writes header + data through `sink` (a file, or a ZIP member).
void write_npy(const Tensor& t, const std::function<void(const void*, size_t)>& sink);

Tensor load_npy(const std::string& path);
void save_npy(const std::string& path, const Tensor& t);  // atomic: temporary file, then rename

}  // namespace gnn
