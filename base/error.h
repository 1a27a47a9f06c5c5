// Errors: GNN_CHECK(cond, parts...) throws gnn::Error whose message names what was received, followed
// by the file:line that checked it. Apps catch gnn::Error in main, print one line, exit 1.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace gnn {

// text with each control byte (below 0x20, and 0x7f) written as \xNN: what every message shows
std::string printable(std::string text);

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string where) : Error(printable(std::move(message)), where, 0) {}
  // The message without the source location, for messages shown to users.
  const std::string& message() const { return message_; }
  const std::string& where() const { return where_; }

 private:
  Error(std::string shown, std::string& where, int)
      : std::runtime_error(shown + " [" + where + "]"), message_(std::move(shown)), where_(std::move(where)) {}
  std::string message_, where_;
};

namespace detail {
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);
  return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, std::string message);
}  // namespace detail

}  // namespace gnn

#define GNN_FAIL(...) ::gnn::detail::throw_error(__FILE__, __LINE__, ::gnn::detail::str_cat(__VA_ARGS__))
#define GNN_CHECK(cond, ...)  \
  do {                        \
    if (!(cond)) [[unlikely]] \
      GNN_FAIL(__VA_ARGS__);  \
  } while (0)
