// Values of the Jinja interpreter: construction, Python truthiness / str / repr / ==, json.dumps as
// transformers' `tojson` produces it, and the code-point string helpers (Python strings count code points).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "serve/jinja_internal.h"

namespace zaya::jinja {

using namespace detail;

namespace {
const std::string kEmpty;
}

Value::Value(std::string s) : kind_(Kind::String), s_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
namespace {
// 1 + the deepest child. A namespace attribute set later is not counted, but it cannot hold a namespace
// (jinja_eval.cpp), so a value's true depth stays below twice the limit: no recursion over values overflows.
uint16_t nest_depth(int child_max) {
  if (child_max + 1 > Value::kMaxNesting)
    throw Error(str_cat("value nested deeper than ", Value::kMaxNesting, " levels"));
  return uint16_t(child_max + 1);
}
}  // namespace

Value Value::list(List items, bool tuple) {
  Value v;
  int m = 0;
  for (auto& e : items) m = std::max(m, e.nesting());
  v.depth_ = nest_depth(m);
  v.kind_ = Kind::List;
  v.flag_ = tuple;
  v.l_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  int m = 0;
  for (auto& e : d.entries) m = std::max(m, e.second.nesting());
  v.depth_ = nest_depth(m);
  v.kind_ = Kind::Dict;
  v.d_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::dict() {
  return dict(Dict{});
}
Value Value::namespace_(Dict d) {
  Value v = dict(std::move(d));
  v.flag_ = true;
  return v;
}
Value Value::callable(std::shared_ptr<Callable> c) {
  Value v;
  v.kind_ = Kind::Callable;
  v.c_ = std::move(c);
  return v;
}

namespace {
template <typename J>
Value value_from_json(const J& j) {
  switch (j.type()) {
    case nlohmann::detail::value_t::null:
      return Value(nullptr);
    case nlohmann::detail::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::detail::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::detail::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value(int64_t(u)) : Value(double(u));
    }
    case nlohmann::detail::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::detail::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::detail::value_t::array: {
      List l;
      l.reserve(j.size());
      for (auto& e : j) l.push_back(value_from_json(e));
      return Value::list(std::move(l));
    }
    case nlohmann::detail::value_t::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d.entries.emplace_back(it.key(), value_from_json(it.value()));
      return Value::dict(std::move(d));
    }
    default:
      return Value();
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) {
  return value_from_json(j);
}
Value Value::from_json(const nlohmann::ordered_json& j) {
  return value_from_json(j);
}

const std::string& Value::str() const {
  return kind_ == Kind::String && s_ ? *s_ : kEmpty;
}
const std::string& Value::undefined_hint() const {
  return kind_ == Kind::Undefined && s_ ? *s_ : kEmpty;
}
const List& Value::items() const {
  static const List empty;
  return l_ ? *l_ : empty;
}
List& Value::items_mut() const {
  return *l_;
}
const Dict& Value::dict_ref() const {
  static const Dict empty;
  return d_ ? *d_ : empty;
}
Dict& Value::dict_mut() const {
  return *d_;
}
const Callable& Value::fn() const {
  return *c_;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
    case Kind::Int:
      return i_ != 0;
    case Kind::Float:
      return f_ != 0.0;
    case Kind::String:
      return !str().empty();
    case Kind::List:
      return !items().empty();
    case Kind::Dict:
      return flag_ || dict_ref().size() > 0;  // a namespace object is always true
    case Kind::Callable:
      return true;
  }
  return false;
}

bool Value::contains_namespace() const {
  if (is_namespace()) return true;
  if (kind_ == Kind::List)
    for (auto& e : items())
      if (e.contains_namespace()) return true;
  if (kind_ == Kind::Dict)
    for (auto& e : dict_ref().entries)
      if (e.second.contains_namespace()) return true;
  return false;
}

bool Value::same_object(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::Bool:
      return i_ == o.i_;
    case Kind::Int:
      return i_ == o.i_ && i_ >= -5 && i_ <= 256;  // CPython's small-int cache
    case Kind::Float:
      return false;
    case Kind::String:
      return s_ == o.s_;
    case Kind::List:
      return l_ == o.l_;
    case Kind::Dict:
      return d_ == o.d_;
    case Kind::Callable:
      return c_ == o.c_;
  }
  return false;
}

const Value* Dict::find(std::string_view key) const {
  for (auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}
Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}
void Dict::set(const std::string& key, Value v) {
  if (Value* p = find(key))
    *p = std::move(v);
  else
    entries.emplace_back(key, std::move(v));
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.get_int() == b.get_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      return a.str() == b.str();
    case Kind::List: {
      if (a.is_tuple() != b.is_tuple()) return false;  // Python: (1,) != [1]
      auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); i++)
        if (!(x[i] == y[i])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.is_namespace() || b.is_namespace()) return a.same_object(b);
      auto &x = a.dict_ref(), &y = b.dict_ref();
      if (x.size() != y.size()) return false;
      for (auto& [k, v] : x.entries) {
        const Value* w = y.find(k);
        if (!w || !(v == *w)) return false;
      }
      return true;
    }
    case Kind::Callable:
      return a.same_object(b);
    default:
      return false;
  }
}

// ---- Python formatting
// ---------------------------------------------------------------------------------------

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, r.ptr);  // [-]D[.DDD]e[+-]XX, shortest round trip
  bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  size_t e = s.find('e');
  int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; i++)
    if (s[i] != '.') digits += s[i];
  int decpt = exp + 1;  // value = 0.DIGITS * 10^decpt
  std::string out;
  if (decpt <= -4 || decpt > 16) {  // CPython's float_repr_style 'short' switch to exponent notation
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (decpt <= 0) {
    out = "0." + std::string(size_t(-decpt), '0') + digits;
  } else if (size_t(decpt) >= digits.size()) {
    out = digits + std::string(size_t(decpt) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
  }
  return neg ? "-" + out : out;
}

namespace {
void repr_to(const Value& v, std::string& out);

void str_to(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Kind::Undefined:
      return;
    case Kind::None:
      out += "None";
      return;
    case Kind::Bool:
      out += v.get_bool() ? "True" : "False";
      return;
    case Kind::Int:
      out += std::to_string(v.get_int());
      return;
    case Kind::Float:
      out += python_float_repr(v.get_float());
      return;
    case Kind::String:
      out += v.str();
      return;
    default:
      repr_to(v, out);
  }
}

void repr_to(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Kind::Undefined:
      out += "Undefined";
      return;
    case Kind::String:
      out += py_repr_str(v.str());
      return;
    case Kind::List: {
      out += v.is_tuple() ? '(' : '[';
      bool first = true;
      for (auto& e : v.items()) {
        if (!first) out += ", ";
        first = false;
        repr_to(e, out);
      }
      if (v.is_tuple() && v.items().size() == 1) out += ',';
      out += v.is_tuple() ? ')' : ']';
      return;
    }
    case Kind::Dict: {
      if (v.is_namespace()) {
        out += "<Namespace {";
      } else {
        out += '{';
      }
      bool first = true;
      for (auto& [k, e] : v.dict_ref().entries) {
        if (!first) out += ", ";
        first = false;
        out += py_repr_str(k);
        out += ": ";
        repr_to(e, out);
      }
      out += v.is_namespace() ? "}>" : "}";
      return;
    }
    case Kind::Callable:
      out += "<function " + v.fn().name + ">";
      return;
    default:
      str_to(v, out);
  }
}
}  // namespace

std::string Value::to_str() const {
  if (kind_ == Kind::String) return str();
  std::string s;
  str_to(*this, s);
  return s;
}
std::string Value::repr() const {
  std::string s;
  repr_to(*this, s);
  return s;
}

nlohmann::json Value::to_json() const {
  switch (kind_) {
    case Kind::None:
      return nullptr;
    case Kind::Bool:
      return get_bool();
    case Kind::Int:
      return i_;
    case Kind::Float:
      return f_;
    case Kind::String:
      return str();
    case Kind::List: {
      auto j = nlohmann::json::array();
      for (auto& e : items()) j.push_back(e.to_json());
      return j;
    }
    case Kind::Dict: {
      ZAYA_CHECK(!flag_, "a namespace object has no JSON form");
      auto j = nlohmann::json::object();
      for (auto& [k, e] : dict_ref().entries) j[k] = e.to_json();
      return j;
    }
    default:
      ZAYA_CHECK(false, "a ", kind_ == Kind::Undefined ? "undefined value" : "function", " has no JSON form");
  }
  return nullptr;
}

// ---- json.dumps
// ----------------------------------------------------------------------------------------------

namespace {
void json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size(); i++) {
    unsigned char c = s[i];
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
    }
    if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else if (c >= 0x80 && ensure_ascii) {
      // Decode one UTF-8 sequence and write it as \uXXXX (a surrogate pair above the BMP), as Python does.
      size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      std::u32string cp = utf8_decode(s.substr(i, n));
      i += n - 1;
      for (char32_t u : cp) {
        char b[16];
        if (u >= 0x10000) {
          u -= 0x10000;
          std::snprintf(b, sizeof b, "\\u%04x\\u%04x", unsigned(0xD800 + (u >> 10)),
                        unsigned(0xDC00 + (u & 0x3FF)));
        } else {
          std::snprintf(b, sizeof b, "\\u%04x", unsigned(u));
        }
        out += b;
      }
    } else {
      out += char(c);
    }
  }
  out += '"';
}

struct Dumper {
  int indent;
  bool ensure_ascii;
  std::string item_sep, key_sep;
  bool sort_keys;
  std::string out;

  void newline(int level) {
    out += '\n';
    out.append(size_t(indent) * size_t(level), ' ');
  }
  void dump(const Value& v, int level) {
    switch (v.kind()) {
      case Kind::None:
        out += "null";
        return;
      case Kind::Bool:
        out += v.get_bool() ? "true" : "false";
        return;
      case Kind::Int:
        out += std::to_string(v.get_int());
        return;
      case Kind::Float: {
        double d = v.get_float();
        if (std::isnan(d))
          out += "NaN";
        else if (std::isinf(d))
          out += d > 0 ? "Infinity" : "-Infinity";
        else
          out += python_float_repr(d);
        return;
      }
      case Kind::String:
        json_string(v.str(), ensure_ascii, out);
        return;
      case Kind::List: {
        auto& l = v.items();
        if (l.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < l.size(); i++) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          dump(l[i], level + 1);
        }
        if (indent >= 0) newline(level);
        out += ']';
        return;
      }
      case Kind::Dict: {
        if (v.is_namespace()) throw Error("Object of type Namespace is not JSON serializable");
        std::vector<const std::pair<std::string, Value>*> es;
        for (auto& e : v.dict_ref().entries) es.push_back(&e);
        if (sort_keys)
          std::stable_sort(es.begin(), es.end(), [](auto* a, auto* b) { return a->first < b->first; });
        if (es.empty()) {
          out += "{}";
          return;
        }
        out += '{';
        for (size_t i = 0; i < es.size(); i++) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          json_string(es[i]->first, ensure_ascii, out);
          out += key_sep;
          dump(es[i]->second, level + 1);
        }
        if (indent >= 0) newline(level);
        out += '}';
        return;
      }
      case Kind::Undefined:
        throw Error("Object of type Undefined is not JSON serializable");
      case Kind::Callable:
        throw Error("Object of type function is not JSON serializable");
    }
  }
};
}  // namespace

std::string json_dumps(const Value& v, int indent, bool ensure_ascii, std::string item_sep,
                       std::string key_sep, bool sort_keys) {
  if (item_sep.empty() && key_sep.empty()) {
    item_sep = indent >= 0 ? "," : ", ";
    key_sep = ": ";
  }
  Dumper d{indent, ensure_ascii, std::move(item_sep), std::move(key_sep), sort_keys, {}};
  d.dump(v, 0);
  return std::move(d.out);
}

// ---- code-point helpers
// --------------------------------------------------------------------------------------

namespace detail {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    char32_t cp;
    size_t n;
    if (c < 0x80)
      cp = c, n = 1;
    else if ((c >> 5) == 6)
      cp = c & 0x1F, n = 2;
    else if ((c >> 4) == 14)
      cp = c & 0x0F, n = 3;
    else if ((c >> 3) == 30)
      cp = c & 0x07, n = 4;
    else
      cp = 0xFFFD, n = 1;  // invalid lead byte
    if (i + n > s.size())
      cp = 0xFFFD, n = s.size() - i;
    else
      for (size_t k = 1; k < n; k++) {
        unsigned char cc = s[i + k];
        if ((cc >> 6) != 2) {
          cp = 0xFFFD, n = k;
          break;
        }
        cp = (cp << 6) | (cc & 0x3F);
      }
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80)
      out += char(c);
    else if (c < 0x800)
      out += char(0xC0 | (c >> 6)), out += char(0x80 | (c & 0x3F));
    else if (c < 0x10000)
      out += char(0xE0 | (c >> 12)), out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
    else
      out += char(0xF0 | (c >> 18)), out += char(0x80 | ((c >> 12) & 0x3F)),
          out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
  }
  return out;
}

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

size_t py_len(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool py_isspace(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::string py_strip(std::string_view s, const Value& chars, bool left, bool right) {
  bool by_space = !chars.is_string();
  std::u32string set = by_space ? std::u32string() : utf8_decode(chars.str());
  auto strip_it = [&](char32_t c) { return by_space ? py_isspace(c) : set.find(c) != std::u32string::npos; };
  if (is_ascii(s) && (by_space || is_ascii(chars.str()))) {
    size_t b = 0, e = s.size();
    if (left)
      while (b < e && strip_it(char32_t((unsigned char)s[b]))) b++;
    if (right)
      while (e > b && strip_it(char32_t((unsigned char)s[e - 1]))) e--;
    return std::string(s.substr(b, e - b));
  }
  std::u32string u = utf8_decode(s);
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) b++;
  if (right)
    while (e > b && strip_it(u[e - 1])) e--;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

// ASCII case mapping only (Python maps all of Unicode; chat templates apply these to roles and type names).
std::string py_lower(std::string_view s) {
  std::string o(s);
  for (char& c : o)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return o;
}
std::string py_upper(std::string_view s) {
  std::string o(s);
  for (char& c : o)
    if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
  return o;
}

std::string py_repr_str(std::string_view s) {
  bool has_sq = s.find('\'') != std::string_view::npos, has_dq = s.find('"') != std::string_view::npos;
  char q = has_sq && !has_dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\')
      out += '\\', out += char(c);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else
      out += char(c);
  }
  out += q;
  return out;
}

}  // namespace detail
}  // namespace zaya::jinja
