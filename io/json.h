// A small JSON value: built and dumped by the CLI (one object per line), parsed for the official
// eval_indices files. Objects keep insertion order. NaN and infinities dump as null.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gnn {

class Json {
 public:
  enum class Type { Null, Bool, Number, String, Array, Object };

  Json() = default;
  Json(bool v) : type_(Type::Bool), bool_(v) {}
  Json(double v) : type_(Type::Number), num_(v) {}
  Json(int v) : Json(int64_t(v)) {}
  Json(int64_t v) : type_(Type::Number), num_(double(v)), int_(v), is_int_(true) {}
  Json(uint64_t v) : Json(int64_t(v)) {}
  Json(const char* v) : type_(Type::String), str_(v) {}
  Json(std::string v) : type_(Type::String), str_(std::move(v)) {}
  static Json array() {
    Json j;
    j.type_ = Type::Array;
    return j;
  }
  static Json object() {
    Json j;
    j.type_ = Type::Object;
    return j;
  }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  Json& push_back(Json v);  // arrays
  Json& set(const std::string& key, Json v);  // objects: replaces an existing key in place
  bool contains(const std::string& key) const;
  const Json& operator[](const std::string& key) const;  // throws gnn::Error naming the key
  const Json& operator[](size_t i) const;
  size_t size() const;
  const std::vector<std::pair<std::string, Json>>& items() const { return obj_; }
  const std::vector<Json>& elements() const { return arr_; }

  double as_number() const;
  int64_t as_int() const;  // numbers that hold an exact integer
  bool is_integer() const;  // as_int() would succeed
  bool as_bool() const;
  const std::string& as_string() const;

  std::string dump() const;
  static Json parse(std::string_view text, const std::string& where = "JSON");

 private:
  void dump_to(std::string& out) const;
  Type type_ = Type::Null;
  bool bool_ = false;
  double num_ = 0;
  int64_t int_ = 0;
  bool is_int_ = false;
  std::string str_;
  std::vector<Json> arr_;
  std::vector<std::pair<std::string, Json>> obj_;
  friend class JsonParser;
};

}  // namespace gnn
