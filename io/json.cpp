#include "io/json.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/parse.h"

namespace gnn {

Json& Json::push_back(Json v) {
  GNN_CHECK(type_ == Type::Array, "JSON push_back on a non-array");
  arr_.push_back(std::move(v));
  return arr_.back();
}

Json& Json::set(const std::string& key, Json v) {
  GNN_CHECK(type_ == Type::Object, "JSON set('", key, "') on a non-object");
  for (auto& [k, old] : obj_)
    if (k == key) return old = std::move(v);
  obj_.emplace_back(key, std::move(v));
  return obj_.back().second;
}

bool Json::contains(const std::string& key) const {
  for (const auto& kv : obj_)
    if (kv.first == key) return true;
  return false;
}

const Json& Json::operator[](const std::string& key) const {
  GNN_CHECK(type_ == Type::Object, "JSON: looking up '", key, "' in a non-object");
  for (const auto& kv : obj_)
    if (kv.first == key) return kv.second;
  GNN_FAIL("JSON: no key '", key, "'");
}

const Json& Json::operator[](size_t i) const {
  GNN_CHECK(type_ == Type::Array && i < arr_.size(), "JSON: index ", i, " out of range");
  return arr_[i];
}

size_t Json::size() const { return type_ == Type::Array ? arr_.size() : type_ == Type::Object ? obj_.size() : 0; }

double Json::as_number() const {
  GNN_CHECK(type_ == Type::Number, "JSON: expected a number");
  return num_;
}

bool Json::is_integer() const {
  return type_ == Type::Number && (is_int_ || (std::floor(num_) == num_ && std::fabs(num_) < 9.007e15));
}

int64_t Json::as_int() const {
  GNN_CHECK(is_integer(), "JSON: expected an integer");
  return is_int_ ? int_ : int64_t(num_);
}

bool Json::as_bool() const {
  GNN_CHECK(type_ == Type::Bool, "JSON: expected true or false");
  return bool_;
}

const std::string& Json::as_string() const {
  GNN_CHECK(type_ == Type::String, "JSON: expected a string");
  return str_;
}

namespace {
void dump_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}
}  // namespace

void Json::dump_to(std::string& out) const {
  switch (type_) {
    case Type::Null:
      out += "null";
      break;
    case Type::Bool:
      out += bool_ ? "true" : "false";
      break;
    case Type::Number: {
      if (is_int_) {
        out += std::to_string(int_);
      } else if (!std::isfinite(num_)) {
        out += "null";
      } else {
        char b[32];
        const auto r = std::to_chars(b, b + sizeof b, num_);  // shortest text that reads back exactly
        out.append(b, r.ptr);
      }
      break;
    }
    case Type::String:
      dump_string(out, str_);
      break;
    case Type::Array:
      out += '[';
      for (size_t i = 0; i < arr_.size(); ++i) {
        if (i) out += ", ";
        arr_[i].dump_to(out);
      }
      out += ']';
      break;
    case Type::Object:
      out += '{';
      for (size_t i = 0; i < obj_.size(); ++i) {
        if (i) out += ", ";
        dump_string(out, obj_[i].first);
        out += ": ";
        obj_[i].second.dump_to(out);
      }
      out += '}';
      break;
  }
}

std::string Json::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

class JsonParser {
 public:
  JsonParser(std::string_view s, const std::string& where) : s_(s), where_(where) {}

  Json document() {
    Json v = value(0);
    ws();
    if (i_ != s_.size()) fail("text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) { GNN_FAIL(where_, ": bad JSON at byte ", i_, " (", what, ")"); }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  Json value(int depth) {
    if (depth > 256) fail("nested too deeply");
    ws();
    if (i_ == s_.size()) fail("unexpected end");
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      Json o = Json::object();
      if (eat('}')) return o;
      do {
        ws();
        if (i_ == s_.size() || s_[i_] != '"') fail("expected a key");
        std::string k = string();
        if (!eat(':')) fail("expected ':'");
        o.obj_.emplace_back(std::move(k), value(depth + 1));
      } while (eat(','));
      if (!eat('}')) fail("expected ',' or '}'");
      return o;
    }
    if (c == '[') {
      ++i_;
      Json a = Json::array();
      if (eat(']')) return a;
      do a.arr_.push_back(value(depth + 1));
      while (eat(','));
      if (!eat(']')) fail("expected ',' or ']'");
      return a;
    }
    if (c == '"') return Json(string());
    if (word("true")) return Json(true);
    if (word("false")) return Json(false);
    if (word("null")) return Json();
    return number();
  }
  std::string string() {
    std::string out;
    for (++i_; i_ < s_.size() && s_[i_] != '"'; ++i_) {
      char c = s_[i_];
      if (c == '\\') {
        if (++i_ == s_.size()) break;
        switch (s_[i_]) {
          case 'n':
            c = '\n';
            break;
          case 't':
            c = '\t';
            break;
          case 'r':
            c = '\r';
            break;
          case 'b':
            c = '\b';
            break;
          case 'f':
            c = '\f';
            break;
          case 'u': {
            unsigned v = 0;
            if (i_ + 4 >= s_.size() || std::from_chars(&s_[i_ + 1], &s_[i_ + 5], v, 16).ptr != &s_[i_ + 5])
              fail("bad \\u escape");
            i_ += 4;
            if (v < 0x80) {
              out += char(v);
            } else if (v < 0x800) {
              out += char(0xC0 | (v >> 6)), out += char(0x80 | (v & 0x3F));
            } else {
              out += char(0xE0 | (v >> 12)), out += char(0x80 | ((v >> 6) & 0x3F)), out += char(0x80 | (v & 0x3F));
            }
            continue;
          }
          default:
            c = s_[i_];
        }
      }
      out += c;
    }
    if (i_ == s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  Json number() {
    const size_t b = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    bool integral = true;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || std::strchr(".eE+-", s_[i_]))) {
      if (!std::isdigit(static_cast<unsigned char>(s_[i_]))) integral = false;
      ++i_;
    }
    const char* first = s_.data() + b;
    const char* last = s_.data() + i_;
    // from_chars reports a value out of range with ec and leaves v untouched: without the ec check
    // 9223372036854775808 would read as 0. An integer past int64 is read as the double it rounds to
    // (valid JSON), which as_int() and is_integer() then refuse: no index or count is read from it.
    if (integral && last != first) {
      int64_t v = 0;
      const auto r = std::from_chars(first, last, v);
      if (r.ptr == last && r.ec == std::errc() && !(v == 0 && *first == '-')) return Json(v);  // ("-0": a double)
    }
    if (last == first) fail("bad number");
    double d = 0;
    const auto r = std::from_chars(first, last, d);
    if (r.ptr != last || r.ec == std::errc::invalid_argument) fail("bad number");
    if (r.ec == std::errc::result_out_of_range) {  // too large, or so small it becomes subnormal or 0
      d = std::strtod(std::string(first, last).c_str(), nullptr);
      if (!std::isfinite(d))
        fail("number " + shown_field(std::string_view(first, size_t(last - first))) +
             " is out of the range of a double");
    }
    return Json(d);
  }

  std::string_view s_;
  const std::string& where_;
  size_t i_ = 0;
};

Json Json::parse(std::string_view text, const std::string& where) { return JsonParser(text, where).document(); }

}  // namespace gnn
