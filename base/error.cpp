#include "base/error.h"

#include <algorithm>
#include <cstdlib>

namespace gnn {

namespace {
bool is_control(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  return c < 0x20 || c == 0x7f;
}
}  // namespace

// A control byte is written as \xNN: printed through a C string a message would stop at a NUL (one in a zip
// member's name, an npy header, a flag's value), a terminal would act on an escape, and a newline would
// make two lines of one message. Bytes from 0x80 up (UTF-8) stay.
std::string printable(std::string text) {
  if (std::none_of(text.begin(), text.end(), is_control)) return text;
  std::string shown;
  shown.reserve(text.size() + 8);
  for (const char ch : text) {
    if (!is_control(ch)) {
      shown += ch;
      continue;
    }
    static const char kHex[] = "0123456789abcdef";
    const auto c = static_cast<unsigned char>(ch);
    shown += "\\x";
    shown += kHex[c >> 4];
    shown += kHex[c & 15];
  }
  return shown;
}

}  // namespace gnn

namespace gnn::detail {

void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), str_cat(file, ":", line));
}

}  // namespace gnn::detail

namespace gnn {

// Declared in base/cuda_check.h; plain C++ so that the check's header needs nothing but the toolkit.
bool cuda_sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("GNN_SYNC");
    return v != nullptr && *v && std::string(v) != "0";  // (empty: as unset)
  }();
  return on;
}

}  // namespace gnn
