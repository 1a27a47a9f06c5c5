#include "runtime/dtype.h"

#include "base/error.h"

namespace gnn {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
    case DType::Bool:
      return 1;
  }
  GNN_FAIL("unknown dtype ", int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::U8:
      return "u8";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

bool dtype_is_float(DType t) { return t == DType::F32 || t == DType::F64; }

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() < 9 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos)
    return cuda(std::stoi(text.substr(5)));
  GNN_FAIL("unknown device '", text, "' (expected cpu, cuda or cuda:N)");
}

}  // namespace gnn
