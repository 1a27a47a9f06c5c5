#include "io/npy.h"

#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "io/atomic_file.h"

namespace gnn {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr uint64_t kMaxHeaderLen = uint64_t(1) << 20;  // real headers are < 200 bytes

// ---- the header dict: a tokenizer and a parser for exactly the three keys numpy writes ------------

struct Token {
  enum Kind { kPunct, kString, kInt, kTrue, kFalse, kEnd } kind;
  std::string text;
  int64_t value = 0;
};

class HeaderLexer {
 public:
  HeaderLexer(std::string_view s, const std::string& where) : s_(s), where_(where) {}

  Token next() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ == s_.size()) return {Token::kEnd, ""};
    const char c = s_[i_];
    if (std::strchr("{}():,[]", c)) return ++i_, Token{Token::kPunct, std::string(1, c)};
    if (c == '\'' || c == '"') return string(c);
    if (std::isdigit(static_cast<unsigned char>(c))) return integer();
    if (std::isalpha(static_cast<unsigned char>(c))) {
      const size_t b = i_;
      while (i_ < s_.size() && std::isalnum(static_cast<unsigned char>(s_[i_]))) ++i_;
      const std::string_view w = s_.substr(b, i_ - b);
      if (w == "True") return {Token::kTrue, "True"};
      if (w == "False") return {Token::kFalse, "False"};
      fail("unexpected word '", w, "'");
    }
    fail("unexpected character '", c, "'");
  }

  template <class... A>
  [[noreturn]] void fail(const A&... a) const {
    GNN_FAIL(where_, ": bad .npy header (", a..., " at offset ", i_, ")");
  }

 private:
  Token string(char quote) {
    std::string out;
    for (++i_; i_ < s_.size() && s_[i_] != quote; ++i_) {
      if (s_[i_] == '\\') {
        if (++i_ == s_.size()) break;
      }
      out += s_[i_];
    }
    if (i_ == s_.size()) fail("unterminated string");
    ++i_;
    return {Token::kString, out};
  }
  Token integer() {
    int64_t v = 0;
    const size_t b = i_;
    for (; i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])); ++i_) {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("integer too large");
      v = v * 10 + (s_[i_] - '0');
    }
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 longs
    return {Token::kInt, std::string(s_.substr(b, i_ - b)), v};
  }

  std::string_view s_;
  const std::string& where_;
  size_t i_ = 0;
};

void parse_descr(NpyHeader& h, const std::string& d, const HeaderLexer& lex) {
  if (d == "|O" || d == "O" || d == "<O" || d == ">O") lex.fail("object arrays (pickles) are refused");
  if (d.size() < 3) lex.fail("unsupported dtype '", d, "'");
  const char order = d[0], kind = d[1];
  const std::string size_text = d.substr(2);
  if (size_text.find_first_not_of("0123456789") != std::string::npos || size_text.size() > 2)
    lex.fail("unsupported dtype '", d, "'");
  const int size = std::stoi(size_text);
  const bool ok = (kind == 'b' && size == 1) || (kind == 'u' && (size == 1 || size == 2 || size == 4 || size == 8)) ||
                  (kind == 'i' && (size == 1 || size == 2 || size == 4 || size == 8)) ||
                  (kind == 'f' && (size == 2 || size == 4 || size == 8));
  if (!ok || !std::strchr("<>|=", order)) lex.fail("unsupported dtype '", d, "'");
  const bool little = std::endian::native == std::endian::little;
  h.descr = d;
  h.kind = kind;
  h.itemsize = size;
  h.byte_swap = size > 1 && ((order == '<' && !little) || (order == '>' && little));
}

void parse_dict(NpyHeader& h, std::string_view text, const std::string& where) {
  HeaderLexer lex(text, where);
  auto expect = [&](const char* p) {
    const Token t = lex.next();
    if (t.kind != Token::kPunct || t.text != p) lex.fail("expected '", p, "', got '", t.text, "'");
  };
  expect("{");
  bool seen_descr = false, seen_order = false, seen_shape = false;
  for (Token t = lex.next(); !(t.kind == Token::kPunct && t.text == "}"); t = lex.next()) {
    if (t.kind != Token::kString) lex.fail("expected a key, got '", t.text, "'");
    const std::string key = t.text;
    expect(":");
    if (key == "descr") {
      if (seen_descr) lex.fail("duplicate key 'descr'");
      const Token v = lex.next();
      if (v.kind == Token::kPunct && v.text == "[") lex.fail("structured dtypes are not supported");
      if (v.kind != Token::kString) lex.fail("descr must be a string");
      parse_descr(h, v.text, lex);
      seen_descr = true;
    } else if (key == "fortran_order") {
      if (seen_order) lex.fail("duplicate key 'fortran_order'");
      const Token v = lex.next();
      if (v.kind != Token::kTrue && v.kind != Token::kFalse) lex.fail("fortran_order must be True or False");
      h.fortran_order = v.kind == Token::kTrue;
      seen_order = true;
    } else if (key == "shape") {
      if (seen_shape) lex.fail("duplicate key 'shape'");
      expect("(");
      for (Token d = lex.next(); !(d.kind == Token::kPunct && d.text == ")"); d = lex.next()) {
        if (d.kind != Token::kInt) lex.fail("shape entries must be integers, got '", d.text, "'");
        h.shape.push_back(d.value);
        const Token sep = lex.next();
        if (sep.kind == Token::kPunct && sep.text == ")") break;
        if (sep.kind != Token::kPunct || sep.text != ",") lex.fail("expected ',' or ')' in shape");
      }
      seen_shape = true;
    } else {
      lex.fail("unexpected key '", key, "'");
    }
    const Token sep = lex.next();
    if (sep.kind == Token::kPunct && sep.text == "}") break;
    if (sep.kind != Token::kPunct || sep.text != ",") lex.fail("expected ',' or '}' after '", key, "'");
  }
  if (lex.next().kind != Token::kEnd) lex.fail("text after the closing '}'");
  if (!seen_descr || !seen_order || !seen_shape) lex.fail("missing key (needs descr, fortran_order and shape)");
  if (h.shape.size() > size_t(kMaxDims))
    lex.fail("array has ", h.shape.size(), " dims; at most ", kMaxDims, " supported");
  // Overflow-safe element count: the product must fit comfortably in 62 bits.
  int64_t n = 1;
  for (int64_t d : h.shape) {
    if (d != 0 && n > (int64_t(1) << 58) / d) lex.fail("shape ", h.shape_str(), " is too large");
    n *= d;
  }
}

}  // namespace

DType NpyHeader::dtype() const {
  switch (kind) {
    case 'b':
      return DType::Bool;
    case 'u':
      return itemsize == 1 ? DType::U8 : itemsize == 2 ? DType::I32 : DType::I64;
    case 'i':
      return itemsize <= 4 ? DType::I32 : DType::I64;
    default:
      return itemsize <= 4 ? DType::F32 : DType::F64;
  }
}

int64_t NpyHeader::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyHeader::shape_str() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

NpyHeader read_npy_header(ByteStream& in) {
  const std::string& where = in.where();
  uint8_t pre[12];
  GNN_CHECK(in.total() >= 10, where, ": not an .npy array (", in.total(), " bytes)");
  in.read(pre, 8);
  GNN_CHECK(std::memcmp(pre, kMagic, 6) == 0, where, ": not an .npy array (bad magic)");
  NpyHeader h;
  h.version_major = pre[6];
  GNN_CHECK(pre[6] >= 1 && pre[6] <= 3 && pre[7] == 0, where, ": unsupported .npy version ", int(pre[6]), ".",
            int(pre[7]));
  const int len_bytes = h.version_major == 1 ? 2 : 4;
  GNN_CHECK(in.total() >= uint64_t(8 + len_bytes), where, ": truncated .npy header");
  in.read(pre + 8, size_t(len_bytes));
  uint64_t hlen = pre[8] | uint64_t(pre[9]) << 8;
  if (len_bytes == 4) hlen |= uint64_t(pre[10]) << 16 | uint64_t(pre[11]) << 24;
  GNN_CHECK(hlen <= kMaxHeaderLen, where, ": .npy header length ", hlen, " is over the ", kMaxHeaderLen, " limit");
  h.header_bytes = 8 + uint64_t(len_bytes) + hlen;
  GNN_CHECK(h.header_bytes <= in.total(), where, ": .npy header (", hlen, " bytes) runs past the end (", in.total(),
            " bytes)");
  std::string text(hlen, '\0');
  in.read(text.data(), hlen);
  parse_dict(h, text, where);
  GNN_CHECK(in.total() - h.header_bytes == h.data_bytes(), where, ": shape ", h.shape_str(), " of '", h.descr,
            "' needs ", h.data_bytes(), " data bytes but ", in.total() - h.header_bytes, " follow the header");
  return h;
}

namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf, nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal half: renormalise
    int e = -1;
    uint32_t m = mant;
    do {
      ++e, m <<= 1;
    } while ((m & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((m & 0x3FF) << 13);
  }
  return std::bit_cast<float>(bits);
}

template <int N>
struct UintOf;
template <>
struct UintOf<2> {
  using type = uint16_t;
};
template <>
struct UintOf<4> {
  using type = uint32_t;
};
template <>
struct UintOf<8> {
  using type = uint64_t;
};

// One element of type T from possibly unaligned, possibly byte-swapped bytes (swapped as raw bits).
template <class T>
T load_raw(const uint8_t* p, bool swap) {
  using U = typename UintOf<sizeof(T)>::type;
  U v;
  std::memcpy(&v, p, sizeof(U));
  if (swap) {
    if constexpr (sizeof(U) == 2) v = __builtin_bswap16(v);
    if constexpr (sizeof(U) == 4) v = __builtin_bswap32(v);
    if constexpr (sizeof(U) == 8) v = __builtin_bswap64(v);
  }
  return std::bit_cast<T>(v);
}

// n elements of the file's type at `raw` -> the tensor's type at `out`; `first` is the index of the
// first element, for messages.
void convert(const NpyHeader& h, const uint8_t* raw, void* out, int64_t n, int64_t first, const std::string& where) {
  const bool s = h.byte_swap;
  const int k = h.itemsize;
  auto each = [&](auto* dst, auto f) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f(raw + i * k);
  };
  switch (h.kind) {
    case 'b':
      each(static_cast<bool*>(out), [](const uint8_t* p) { return *p != 0; });
      break;
    case 'u':
      if (k == 1) each(static_cast<uint8_t*>(out), [](const uint8_t* p) { return *p; });
      if (k == 2) each(static_cast<int32_t*>(out), [&](const uint8_t* p) { return int32_t(load_raw<uint16_t>(p, s)); });
      if (k == 4) each(static_cast<int64_t*>(out), [&](const uint8_t* p) { return int64_t(load_raw<uint32_t>(p, s)); });
      if (k == 8) {
        auto* dst = static_cast<int64_t*>(out);
        for (int64_t i = 0; i < n; ++i) {
          const uint64_t v = load_raw<uint64_t>(raw + i * 8, s);
          GNN_CHECK(v <= uint64_t(std::numeric_limits<int64_t>::max()), where, ": element ", first + i, " (", v,
                    ") of a u8 array does not fit i64");
          dst[i] = int64_t(v);
        }
      }
      break;
    case 'i':
      if (k == 1) each(static_cast<int32_t*>(out), [](const uint8_t* p) { return int32_t(int8_t(*p)); });
      if (k == 2) each(static_cast<int32_t*>(out), [&](const uint8_t* p) { return int32_t(load_raw<int16_t>(p, s)); });
      if (k == 4) each(static_cast<int32_t*>(out), [&](const uint8_t* p) { return load_raw<int32_t>(p, s); });
      if (k == 8) each(static_cast<int64_t*>(out), [&](const uint8_t* p) { return load_raw<int64_t>(p, s); });
      break;
    default:
      if (k == 2)
        each(static_cast<float*>(out), [&](const uint8_t* p) { return half_to_float(load_raw<uint16_t>(p, s)); });
      if (k == 4) each(static_cast<float*>(out), [&](const uint8_t* p) { return load_raw<float>(p, s); });
      if (k == 8) each(static_cast<double*>(out), [&](const uint8_t* p) { return load_raw<double>(p, s); });
      break;
  }
}

// Column-major (Fortran) data -> row-major, for elements of `esize` bytes.
void fortran_to_c(const uint8_t* src, uint8_t* dst, const std::vector<int64_t>& shape, size_t esize) {
  const int nd = int(shape.size());
  std::vector<int64_t> fstride(nd), idx(nd, 0);
  int64_t st = 1;
  for (int d = 0; d < nd; ++d) fstride[d] = st, st *= shape[d];
  const int64_t n = st;
  int64_t off = 0;  // Fortran offset of the C-order element i
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * esize, src + off * esize, esize);
    for (int d = nd - 1; d >= 0; --d) {  // advance the C-order index, last dim fastest
      if (++idx[d] < shape[d]) {
        off += fstride[d];
        break;
      }
      off -= fstride[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace

Tensor read_npy(ByteStream& in, NpyHeader* header_out) {
  const NpyHeader h = read_npy_header(in);
  const DType dt = h.dtype();
  Tensor t = Tensor::empty(Shape(h.shape), dt);
  // Straight into the tensor unless bytes must change: byte order, widening, bool normalisation, or
  // the range check of u8 -> i64.
  const bool direct =
      !h.byte_swap && int(dtype_size(dt)) == h.itemsize && h.kind != 'b' && !(h.kind == 'u' && h.itemsize > 1);
  const bool reorder = h.fortran_order && h.shape.size() > 1;
  const int64_t n = h.numel();
  Tensor linear = reorder ? Tensor::empty(Shape(h.shape), dt) : t;  // C-typed data in the file's order
  if (direct) {
    in.read(linear.data(), linear.nbytes());
  } else {
    constexpr int64_t kChunk = int64_t(1) << 22;
    std::vector<uint8_t> raw(size_t(std::min(n, kChunk)) * size_t(h.itemsize));
    const size_t out_size = dtype_size(dt);
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t m = std::min(kChunk, n - i);
      in.read(raw.data(), size_t(m) * size_t(h.itemsize));
      convert(h, raw.data(), static_cast<uint8_t*>(linear.data()) + size_t(i) * out_size, m, i, in.where());
    }
  }
  in.finish();
  if (reorder)
    fortran_to_c(static_cast<const uint8_t*>(linear.data()), static_cast<uint8_t*>(t.data()), h.shape, dtype_size(dt));
  if (header_out) *header_out = h;
  return t;
}

std::string npy_header(DType dtype, const Shape& shape) {
  const char* descr = nullptr;
  switch (dtype) {
    case DType::F32:
      descr = "<f4";
      break;
    case DType::F64:
      descr = "<f8";
      break;
    case DType::I32:
      descr = "<i4";
      break;
    case DType::I64:
      descr = "<i8";
      break;
    case DType::U8:
      descr = "|u1";
      break;
    case DType::Bool:
      descr = "|b1";
      break;
  }
  static_assert(std::endian::native == std::endian::little, "the writer emits little-endian data");
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < shape.ndim(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  dict += shape.ndim() == 1 ? ",), }" : "), }";
  // numpy pads with spaces and a newline so that the data starts on a 64-byte boundary.
  for (int version : {1, 2}) {
    const size_t pre = version == 1 ? 10 : 12;
    const size_t pad = 64 - (pre + dict.size() + 1) % 64;
    const size_t hlen = dict.size() + pad + 1;
    if (version == 1 && hlen > 0xFFFF) continue;
    std::string out(kMagic, 6);
    out += char(version);
    out += '\0';
    for (size_t b = 0; b < pre - 8; ++b) out += char((hlen >> (8 * b)) & 0xFF);
    return out + dict + std::string(pad, ' ') + "\n";
  }
  GNN_FAIL("unreachable");
}

void write_npy(const Tensor& t, const std::function<void(const void*, size_t)>& sink) {
  GNN_CHECK(t.defined(), "write_npy: undefined tensor");
  const Tensor host = t.on(Device::cpu());
  const std::string header = npy_header(host.dtype(), host.shape());
  sink(header.data(), header.size());
  if (host.nbytes()) sink(host.data(), host.nbytes());
}

Tensor load_npy(const std::string& path) {
  auto src = open_file(path);
  RangeStream in(src, 0, src->size());
  return read_npy(in);
}

void save_npy(const std::string& path, const Tensor& t) {
  AtomicFile f(path);
  write_npy(t, [&](const void* p, size_t n) { f.write(p, n); });
  f.commit();
}

}  // namespace gnn
