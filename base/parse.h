// Numbers in text as the command line, the run files and the CSVs take them: the whole text, plain
// decimal (no sign '+', no leading space, no hex "0x10", no inf or nan), read by std::from_chars; and
// such a field as an error shows it.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace gnn {

inline bool parse_int64(std::string_view s, int64_t* v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
}

inline bool parse_finite(std::string_view s, double* v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(*v);
}

// A field of a user's file (a CSV's ID, a JSON key) in an error: cut past n bytes, its length said, so the
// error stays a line however long the field
inline std::string shown_field(std::string_view field, size_t n = 120) {
  if (field.size() <= n) return std::string(field);
  return std::string(field.substr(0, n)) + "... (" + std::to_string(field.size()) + " bytes)";
}

}  // namespace gnn
