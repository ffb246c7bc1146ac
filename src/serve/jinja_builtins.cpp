// Builtins of the Jinja interpreter: filters, tests, globals, and the Python methods templates call on
// strings, dicts and lists, each with jinja2's (and Python's) behaviour. transformers' environment is
// sandboxed and immutable, so methods that would modify a list or dict are refused, as there.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "core/error.h"
#include "serve/jinja_internal.h"

namespace zaya::jinja::detail {

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return v.is_tuple() ? "tuple" : "list";
    case Kind::Dict:
      return v.is_namespace() ? "Namespace" : "dict";
    case Kind::Callable:
      return "function";
  }
  return "?";
}

namespace {

// Positional-or-keyword argument `idx` / `name` of a builtin.
const Value* arg(const Args& a, size_t idx, std::string_view name) {
  if (idx < a.pos.size()) return &a.pos[idx];
  return a.get_kw(name);
}
Value arg_or(const Args& a, size_t idx, std::string_view name, Value dflt) {
  const Value* v = arg(a, idx, name);
  return v ? *v : dflt;
}
int64_t int_arg(Interp& in, const Value& v, const char* what, uint32_t pos) {
  if (!v.is_int() && !v.is_bool()) fail_at(in, pos, str_cat(what, " must be an integer, got ", type_name(v)));
  return v.get_int();
}

Value make_fn(std::string name, std::function<Value(Interp&, Args&)> f) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(f);
  return Value::callable(c);
}

// ---- Python string methods ----

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep.is_string()) {  // runs of whitespace, no empty strings
    std::u32string u = utf8_decode(s);
    size_t k = 0;
    while (k < u.size()) {
      while (k < u.size() && py_isspace(u[k])) k++;
      if (k >= u.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t e = u.size();
        while (e > k && py_isspace(u[e - 1])) e--;
        out.push_back(utf8_encode(std::u32string_view(u).substr(k, e - k)));
        return out;
      }
      size_t b = k;
      while (k < u.size() && !py_isspace(u[k])) k++;
      out.push_back(utf8_encode(std::u32string_view(u).substr(b, k - b)));
    }
    return out;
  }
  const std::string& d = sep.str();
  size_t b = 0;
  while (true) {
    size_t e = maxsplit >= 0 && int64_t(out.size()) >= maxsplit ? std::string::npos : s.find(d, b);
    if (e == std::string::npos) {
      out.push_back(s.substr(b));
      return out;
    }
    out.push_back(s.substr(b, e - b));
    b = e + d.size();
  }
}

std::vector<std::string> py_rsplit(const std::string& s, const Value& sep, int64_t maxsplit) {
  if (maxsplit < 0 || !sep.is_string()) {
    if (maxsplit < 0) return py_split(s, sep, -1);
    // whitespace rsplit with a limit: split all, then rejoin the head (rare in templates)
    std::vector<std::string> all = py_split(s, sep, -1);
    if (int64_t(all.size()) <= maxsplit + 1) return all;
    std::vector<std::string> out;
    size_t head = all.size() - size_t(maxsplit);
    std::u32string u = utf8_decode(s);
    size_t e = u.size(), found = 0;
    while (e > 0 && py_isspace(u[e - 1])) e--;
    size_t k = e;
    while (k > 0 && found < size_t(maxsplit)) {
      while (k > 0 && !py_isspace(u[k - 1])) k--;
      found++;
      while (k > 0 && py_isspace(u[k - 1])) k--;
    }
    size_t b = 0;
    while (b < k && py_isspace(u[b])) b++;
    out.push_back(utf8_encode(std::u32string_view(u).substr(b, k - b)));
    for (size_t j = head; j < all.size(); j++) out.push_back(all[j]);
    return out;
  }
  const std::string& d = sep.str();
  std::vector<std::string> rev;
  size_t e = s.size();
  while (true) {
    if (int64_t(rev.size()) >= maxsplit || e < d.size()) {
      rev.push_back(s.substr(0, e));
      break;
    }
    size_t p = s.rfind(d, e - d.size());
    if (p == std::string::npos) {
      rev.push_back(s.substr(0, e));
      break;
    }
    rev.push_back(s.substr(p + d.size(), e - p - d.size()));
    e = p;
  }
  std::reverse(rev.begin(), rev.end());
  return rev;
}

bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::string py_title(const std::string& s) {  // str.title(): cased runs start upper, continue lower
  std::string o = s;
  bool prev_cased = false;
  for (char& c : o) {
    if (is_alpha(c)) {
      c = prev_cased ? char(std::tolower(c)) : char(std::toupper(c));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return o;
}
std::string py_capitalize(const std::string& s) {
  std::string o = py_lower(s);
  if (!o.empty() && o[0] >= 'a' && o[0] <= 'z') o[0] = char(o[0] - 'a' + 'A');
  return o;
}
std::string jinja_title(const std::string& s) {  // jinja2's do_title: words split at [-\s({\[<]+
  std::string o;
  bool start = true;
  for (char c : s) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' || c == '\t' ||
               c == '\n' || c == '\r' || c == '\f' || c == '\v';
    if (sep) {
      o += c;
      start = true;
    } else {
      o += start ? char(std::toupper(c)) : char(std::tolower(c));
      start = false;
    }
  }
  return o;
}
std::string py_replace(const std::string& s, const std::string& a, const std::string& b, int64_t count) {
  std::string o;
  if (a.empty()) {  // Python inserts `b` between every code point (and at both ends)
    std::u32string u = utf8_decode(s);
    int64_t done = 0;
    for (size_t k = 0; k <= u.size(); k++) {
      if (count < 0 || done < count) o += b, done++;
      if (k < u.size()) o += utf8_encode(std::u32string(1, u[k]));
    }
    return o;
  }
  size_t p = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(a, p);
    if (f == std::string::npos) break;
    o.append(s, p, f - p);
    o += b;
    p = f + a.size();
    done++;
  }
  o.append(s, p, std::string::npos);
  return o;
}
std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  std::u32string u = utf8_decode(s);
  size_t b = 0;
  for (size_t k = 0; k < u.size(); k++) {
    char32_t c = u[k];
    bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
              c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!br) continue;
    size_t e = k + 1;
    if (c == '\r' && k + 1 < u.size() && u[k + 1] == '\n') e++;
    out.push_back(utf8_encode(std::u32string_view(u).substr(b, (keepends ? e : k) - b)));
    b = e;
    k = e - 1;
  }
  if (b < u.size()) out.push_back(utf8_encode(std::u32string_view(u).substr(b)));
  return out;
}

Value str_list(std::vector<std::string> v) {
  List l;
  l.reserve(v.size());
  for (auto& s : v) l.emplace_back(std::move(s));
  return Value::list(std::move(l));
}

bool starts_or_ends(Interp& in, const std::string& s, const Value& what, bool start, uint32_t pos) {
  auto test = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (what.is_string()) return test(what.str());
  if (what.is_list() && what.is_tuple()) {
    for (auto& x : what.items()) {
      if (!x.is_string()) fail_at(in, pos, "tuple for startswith/endswith must only contain str");
      if (test(x.str())) return true;
    }
    return false;
  }
  fail_at(in, pos,
          str_cat(start ? "startswith" : "endswith", " first arg must be str or a tuple of str, not ",
                  type_name(what)));
}

// str.format with {} / {0} / {name} fields and str() conversion (format specs are not supported).
std::string py_format(Interp& in, const std::string& f, const Args& a) {
  std::string o;
  size_t auto_idx = 0;
  for (size_t k = 0; k < f.size(); k++) {
    char c = f[k];
    if (c == '{' && k + 1 < f.size() && f[k + 1] == '{') {
      o += '{';
      k++;
    } else if (c == '}' && k + 1 < f.size() && f[k + 1] == '}') {
      o += '}';
      k++;
    } else if (c == '{') {
      size_t e = f.find('}', k);
      if (e == std::string::npos) fail_at(in, a.at, "single '{' encountered in format string");
      std::string field = f.substr(k + 1, e - k - 1);
      if (field.find_first_of(":!") != std::string::npos)
        fail_at(in, a.at, "format specs in str.format are not supported");
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_idx < a.pos.size()) v = &a.pos[auto_idx++];
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        size_t idx = field.size() > 9 ? SIZE_MAX : size_t(std::strtoull(field.c_str(), nullptr, 10));
        if (idx < a.pos.size()) v = &a.pos[idx];
      } else {
        v = a.get_kw(field);
      }
      if (!v) fail_at(in, a.at, str_cat("str.format: no argument for field '{", field, "}'"));
      o += v->to_str();
      check_size(in, o.size(), a.at);
      k = e;
    } else if (c == '}') {
      fail_at(in, a.at, "single '}' encountered in format string");
    } else {
      o += c;
    }
  }
  return o;
}

Value unsafe_method(const std::string& owner, const std::string& name) {
  return make_fn(owner + "." + name, [owner, name](Interp& in, Args& a) -> Value {
    fail_at(in, a.at,
            str_cat("access to attribute '", name, "' of '", owner,
                    "' object is unsafe: chat templates may not modify their inputs"));
  });
}

Value string_method(const Value& self, const std::string& name) {
  static const char* known[] = {
      "strip",      "lstrip",  "rstrip",     "split",   "rsplit",  "startswith", "endswith", "upper",
      "lower",      "title",   "capitalize", "replace", "find",    "rfind",      "count",    "join",
      "splitlines", "isdigit", "isalpha",    "isalnum", "isspace", "islower",    "isupper",  "format",
      "index",      "rindex",  "center",     "ljust",   "rjust",   "zfill",      "swapcase"};
  if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return name == k; }) ==
      std::end(known))
    return Value::undefined("'str object' has no attribute '" + name + "'");
  return make_fn("str." + name, [self, name](Interp& in, Args& a) -> Value {
    const std::string& s = self.str();
    auto sarg = [&](size_t i, const char* nm) -> Value {
      Value v = arg_or(a, i, nm, Value(nullptr));
      if (!v.is_none() && !v.is_string())
        fail_at(in, a.at, str_cat("str.", name, "() argument must be str or None, not ", type_name(v)));
      return v;
    };
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return Value(py_strip(s, sarg(0, "chars"), name != "rstrip", name != "lstrip"));
    if (name == "split" || name == "rsplit") {
      Value sep = sarg(0, "sep");
      if (sep.is_string() && sep.str().empty()) fail_at(in, a.at, "empty separator");
      int64_t maxsplit = int_arg(in, arg_or(a, 1, "maxsplit", Value(-1)), "maxsplit", a.at);
      return str_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
    }
    if (name == "startswith" || name == "endswith") {
      const Value* p = arg(a, 0, "prefix");
      if (!p) fail_at(in, a.at, str_cat(name, "() takes at least 1 argument (0 given)"));
      return Value(starts_or_ends(in, s, *p, name == "startswith", a.at));
    }
    if (name == "upper") return Value(py_upper(s));
    if (name == "lower") return Value(py_lower(s));
    if (name == "swapcase") {
      std::string o = s;
      for (char& c : o)
        c = std::isupper(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : char(std::toupper(c));
      return Value(o);
    }
    if (name == "title") return Value(py_title(s));
    if (name == "capitalize") return Value(py_capitalize(s));
    if (name == "replace") {
      Value o = arg_or(a, 0, "old", Value()), n = arg_or(a, 1, "new", Value());
      if (!o.is_string() || !n.is_string()) fail_at(in, a.at, "replace() arguments must be str");
      std::string r =
          py_replace(s, o.str(), n.str(), int_arg(in, arg_or(a, 2, "count", Value(-1)), "count", a.at));
      check_size(in, r.size(), a.at);
      return Value(std::move(r));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
      Value sub = arg_or(a, 0, "sub", Value());
      if (!sub.is_string()) fail_at(in, a.at, str_cat(name, "() argument must be str"));
      if (name == "count") {
        if (sub.str().empty()) return Value(int64_t(py_len(s) + 1));
        int64_t c = 0;
        for (size_t p = s.find(sub.str()); p != std::string::npos;
             p = s.find(sub.str(), p + sub.str().size()))
          c++;
        return Value(c);
      }
      size_t p = name[0] == 'r' ? s.rfind(sub.str()) : s.find(sub.str());
      if (p == std::string::npos) {
        if (name == "index" || name == "rindex") fail_at(in, a.at, "substring not found");
        return Value(int64_t(-1));
      }
      return Value(int64_t(py_len(std::string_view(s).substr(0, p))));
    }
    if (name == "join") {
      const Value* it = arg(a, 0, "iterable");
      if (!it) fail_at(in, a.at, "join() takes exactly one argument");
      std::string o;
      bool first = true;
      for (auto& x : iterate(in, *it, a.at)) {
        if (!x.is_string())
          fail_at(in, a.at, str_cat("sequence item: expected str instance, ", type_name(x), " found"));
        if (!first) o += s;
        first = false;
        o += x.str();
        check_size(in, o.size(), a.at);
      }
      return Value(std::move(o));
    }
    if (name == "splitlines")
      return str_list(py_splitlines(s, arg_or(a, 0, "keepends", Value(false)).truthy()));
    if (name == "format") return Value(py_format(in, s, a));
    if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
      int64_t w = int_arg(in, arg_or(a, 0, "width", Value(0)), "width", a.at);
      check_size(in, size_t(std::max<int64_t>(w, 0)), a.at);
      int64_t len = int64_t(py_len(s));
      if (w <= len) return self;
      if (name == "zfill") {
        size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
        return Value(s.substr(0, sign) + std::string(size_t(w - len), '0') + s.substr(sign));
      }
      std::string fill = arg_or(a, 1, "fillchar", Value(" ")).to_str();
      auto pad = [&](int64_t k) {
        std::string p;
        for (int64_t j = 0; j < k; j++) p += fill;
        return p;
      };
      int64_t total = w - len;
      if (name == "ljust") return Value(s + pad(total));
      if (name == "rjust") return Value(pad(total) + s);
      int64_t left = total / 2 + (total & w & 1);  // CPython's centering
      return Value(pad(left) + s + pad(total - left));
    }
    // is* predicates (ASCII classes; Python's are Unicode-wide)
    if (s.empty()) return Value(false);
    bool all = true, any_cased = false;
    for (unsigned char c : s) {
      if (name == "isdigit")
        all &= c >= '0' && c <= '9';
      else if (name == "isalpha")
        all &= is_alpha(char(c));
      else if (name == "isalnum")
        all &= is_alpha(char(c)) || (c >= '0' && c <= '9');
      else if (name == "isspace")
        all &= py_isspace(c);
      else if (name == "islower")
        all &= !(c >= 'A' && c <= 'Z'), any_cased |= c >= 'a' && c <= 'z';
      else if (name == "isupper")
        all &= !(c >= 'a' && c <= 'z'), any_cased |= c >= 'A' && c <= 'Z';
    }
    if (name == "islower" || name == "isupper") return Value(all && any_cased);
    return Value(all);
  });
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return make_fn("dict." + name, [self, name](Interp&, Args&) -> Value {
      List l;
      for (auto& [k, v] : self.dict_ref().entries) {
        if (name == "items")
          l.push_back(Value::list({Value(k), v}, true));
        else if (name == "keys")
          l.push_back(Value(k));
        else
          l.push_back(v);
      }
      return Value::list(std::move(l));
    });
  }
  if (name == "get") {
    return make_fn("dict.get", [self](Interp& in, Args& a) -> Value {
      const Value* k = arg(a, 0, "key");
      if (!k) fail_at(in, a.at, "get expected at least 1 argument, got 0");
      Value dflt = arg_or(a, 1, "default", Value(nullptr));
      if (!k->is_string()) return dflt;
      const Value* v = self.dict_ref().find(k->str());
      return v ? *v : dflt;
    });
  }
  if (name == "copy")
    return make_fn("dict.copy", [self](Interp&, Args&) { return Value::dict(self.dict_ref()); });
  if (name == "pop" || name == "popitem" || name == "update" || name == "setdefault" || name == "clear")
    return unsafe_method("dict", name);
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  if (name == "index" || name == "count") {
    return make_fn("list." + name, [self, name](Interp& in, Args& a) -> Value {
      const Value* x = arg(a, 0, "value");
      if (!x) fail_at(in, a.at, str_cat(name, "() takes exactly one argument"));
      int64_t c = 0, k = 0;
      for (auto& e : self.items()) {
        if (e == *x) {
          if (name == "index") return Value(k);
          c++;
        }
        k++;
      }
      if (name == "index") fail_at(in, a.at, str_cat(x->repr(), " is not in list"));
      return Value(c);
    });
  }
  if (name == "append" || name == "extend" || name == "pop" || name == "insert" || name == "remove" ||
      name == "sort" || name == "reverse" || name == "clear")
    return unsafe_method(type_name(self), name);
  return Value();
}

}  // namespace

void check_size(Interp& in, size_t n, uint32_t pos) {
  if (n > in_options(in).max_output_bytes)
    fail_at(in, pos,
            str_cat("value of ", n, " bytes/items exceeds the output limit of ",
                    in_options(in).max_output_bytes));
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::String:
      return string_method(obj, name);
    case Kind::Dict: {
      if (obj.is_namespace()) {
        const Value* v = obj.dict_ref().find(name);
        return v ? *v : Value::undefined("'Namespace object' has no attribute '" + name + "'");
      }
      Value m =
          dict_method(obj, name);  // Python getattr first: d.items is the method even with an 'items' key
      if (!m.is_undefined()) return m;
      const Value* v = obj.dict_ref().find(name);
      return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Kind::List: {
      Value m = list_method(obj, name);
      if (!m.is_undefined()) return m;
      break;
    }
    default:
      break;
  }
  return Value::undefined(str_cat("'", type_name(obj), " object' has no attribute '", name, "'"));
}

Value get_item(Interp& in, const Value& obj, const Value& key, uint32_t pos) {
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.dict_ref().find(key.str())) return *v;
      if (!obj.is_namespace()) {
        Value m = dict_method(obj, key.str());  // the sandbox falls back to getattr
        if (!m.is_undefined()) return m;
      }
      return Value::undefined("'dict object' has no attribute '" + key.str() + "'");
    }
    return Value::undefined("'dict object' has no attribute " + key.repr());
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t k = key.get_int();
    if (obj.is_list()) {
      int64_t n = int64_t(obj.items().size());
      if (k < 0) k += n;
      if (k < 0 || k >= n)
        return Value::undefined(str_cat("'", type_name(obj), " object' has no element ", key.get_int()));
      return obj.items()[size_t(k)];
    }
    const std::string& s = obj.str();
    if (is_ascii(s)) {
      int64_t n = int64_t(s.size());
      if (k < 0) k += n;
      if (k < 0 || k >= n) return Value::undefined(str_cat("'str object' has no element ", key.get_int()));
      return Value(std::string(1, s[size_t(k)]));
    }
    std::u32string u = utf8_decode(s);
    int64_t n = int64_t(u.size());
    if (k < 0) k += n;
    if (k < 0 || k >= n) return Value::undefined(str_cat("'str object' has no element ", key.get_int()));
    return Value(utf8_encode(std::u32string(1, u[size_t(k)])));
  }
  if (key.is_string()) return get_attr(obj, key.str());
  (void)in;
  (void)pos;
  return Value::undefined(str_cat("'", type_name(obj), " object' has no element ", key.repr()));
}

bool contains(Interp& in, const Value& c, const Value& item, uint32_t pos) {
  switch (c.kind()) {
    case Kind::String:
      if (!item.is_string())
        fail_at(in, pos, str_cat("'in <string>' requires string as left operand, not ", type_name(item)));
      return c.str().find(item.str()) != std::string::npos;
    case Kind::List:
      for (auto& x : c.items())
        if (x == item) return true;
      return false;
    case Kind::Dict:
      return item.is_string() && c.dict_ref().find(item.str()) != nullptr;
    case Kind::Undefined:
      return false;
    default:
      fail_at(in, pos, str_cat("argument of type '", type_name(c), "' is not iterable"));
  }
}

int compare(Interp& in, const Value& a, const Value& b, uint32_t pos) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.get_int() < b.get_int() ? -1 : a.get_int() > b.get_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    auto &x = a.items(), &y = b.items();
    for (size_t k = 0; k < x.size() && k < y.size(); k++) {
      if (x[k] == y[k]) continue;
      return compare(in, x[k], y[k], pos);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail_at(in, pos,
          str_cat("'<' not supported between instances of '", type_name(a), "' and '", type_name(b), "'"));
}

List iterate(Interp& in, const Value& v, uint32_t pos) {
  switch (v.kind()) {
    case Kind::List:
      return v.items();
    case Kind::Dict: {
      if (v.is_namespace()) break;
      List l;
      l.reserve(v.dict_ref().size());
      for (auto& [k, x] : v.dict_ref().entries) l.emplace_back(k);
      return l;
    }
    case Kind::String: {
      List l;
      for (char32_t c : utf8_decode(v.str())) l.emplace_back(utf8_encode(std::u32string(1, c)));
      return l;
    }
    case Kind::Undefined:
      return {};
    default:
      break;
  }
  fail_at(in, pos, str_cat("'", type_name(v), "' object is not iterable"));
}

// ---- tests
// ---------------------------------------------------------------------------------------------------

namespace {

using TestFn = bool (*)(Interp&, const Value&, Args&);

bool num_test(Interp& in, const Value& v, Args& a, int which) {
  const Value* o = arg(a, 0, "other");
  if (!o) fail_at(in, a.at, "comparison test needs an argument");
  if (which == 0) return v == *o;
  if (which == 1) return !(v == *o);
  if (v.is_undefined())
    fail_at(in, a.at, v.undefined_hint().empty() ? "undefined value used" : v.undefined_hint());
  int c = compare(in, v, *o, a.at);
  return which == 2 ? c < 0 : which == 3 ? c <= 0 : which == 4 ? c > 0 : c >= 0;
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> m = {
      {"defined", [](Interp&, const Value& v, Args&) { return !v.is_undefined(); }},
      {"undefined", [](Interp&, const Value& v, Args&) { return v.is_undefined(); }},
      {"none", [](Interp&, const Value& v, Args&) { return v.is_none(); }},
      {"boolean", [](Interp&, const Value& v, Args&) { return v.is_bool(); }},
      {"true", [](Interp&, const Value& v, Args&) { return v.is_bool() && v.get_bool(); }},
      {"false", [](Interp&, const Value& v, Args&) { return v.is_bool() && !v.get_bool(); }},
      {"integer", [](Interp&, const Value& v, Args&) { return v.is_int(); }},
      {"float", [](Interp&, const Value& v, Args&) { return v.is_float(); }},
      {"number", [](Interp&, const Value& v, Args&) { return v.is_number(); }},
      {"string", [](Interp&, const Value& v, Args&) { return v.is_string(); }},
      {"mapping", [](Interp&, const Value& v, Args&) { return v.is_dict() && !v.is_namespace(); }},
      {"iterable",
       [](Interp&, const Value& v, Args&) {
         return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace()) || v.is_undefined();
       }},
      {"sequence",
       [](Interp&, const Value& v, Args&) {
         return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace()) || v.is_undefined();
       }},
      {"callable", [](Interp&, const Value& v, Args&) { return v.is_callable(); }},
      {"escaped", [](Interp&, const Value&, Args&) { return false; }},
      {"lower",
       [](Interp&, const Value& v, Args&) {
         return v.is_string() ? py_lower(v.str()) == v.str() : v.to_str() == py_lower(v.to_str());
       }},
      {"upper",
       [](Interp&, const Value& v, Args&) {
         return v.is_string() ? py_upper(v.str()) == v.str() : v.to_str() == py_upper(v.to_str());
       }},
      {"sameas",
       [](Interp& in, const Value& v, Args& a) {
         const Value* o = arg(a, 0, "other");
         if (!o) fail_at(in, a.at, "sameas needs an argument");
         return v.same_object(*o);
       }},
      {"divisibleby",
       [](Interp& in, const Value& v, Args& a) {
         const Value* o = arg(a, 0, "num");
         if (!o || !o->is_number() || !v.is_number()) fail_at(in, a.at, "divisibleby needs two numbers");
         if (o->as_double() == 0) fail_at(in, a.at, "integer division or modulo by zero");
         if (v.is_float() || o->is_float()) return std::fmod(v.as_double(), o->as_double()) == 0;
         return o->get_int() == -1 || v.get_int() % o->get_int() == 0;  // INT64_MIN % -1 traps
       }},
      {"even",
       [](Interp& in, const Value& v, Args& a) {
         if (!v.is_number()) fail_at(in, a.at, str_cat("'even' needs a number, got ", type_name(v)));
         return v.is_float() ? std::fmod(v.get_float(), 2) == 0 : v.get_int() % 2 == 0;
       }},
      {"odd",
       [](Interp& in, const Value& v, Args& a) {
         if (!v.is_number()) fail_at(in, a.at, str_cat("'odd' needs a number, got ", type_name(v)));
         return v.is_float() ? std::fabs(std::fmod(v.get_float(), 2)) == 1 : v.get_int() % 2 != 0;
       }},
      {"eq", [](Interp& in, const Value& v, Args& a) { return num_test(in, v, a, 0); }},
      {"ne", [](Interp& in, const Value& v, Args& a) { return num_test(in, v, a, 1); }},
      {"lt", [](Interp& in, const Value& v, Args& a) { return num_test(in, v, a, 2); }},
      {"le", [](Interp& in, const Value& v, Args& a) { return num_test(in, v, a, 3); }},
      {"gt", [](Interp& in, const Value& v, Args& a) { return num_test(in, v, a, 4); }},
      {"ge", [](Interp& in, const Value& v, Args& a) { return num_test(in, v, a, 5); }},
      {"in",
       [](Interp& in, const Value& v, Args& a) {
         const Value* o = arg(a, 0, "seq");
         if (!o) fail_at(in, a.at, "'in' test needs an argument");
         return contains(in, *o, v, a.at);
       }},
      {"filter", [](Interp&, const Value& v, Args&) { return v.is_string() && has_filter(v.str()); }},
      {"test", [](Interp&, const Value& v, Args&) { return v.is_string() && has_test(v.str()); }},
  };
  return m;
}

std::string test_alias(const std::string& n) {
  if (n == "equalto" || n == "==") return "eq";
  if (n == "!=") return "ne";
  if (n == "lessthan" || n == "<") return "lt";
  if (n == "<=") return "le";
  if (n == "greaterthan" || n == ">") return "gt";
  if (n == ">=") return "ge";
  return n;
}

}  // namespace

bool has_test(const std::string& name) {
  return tests().count(test_alias(name)) > 0;
}

bool call_test(Interp& in, const std::string& name, const Value& input, Args& args, bool& out) {
  auto it = tests().find(test_alias(name));
  if (it == tests().end()) return false;
  out = it->second(in, input, args);
  return true;
}

// ---- filters
// -------------------------------------------------------------------------------------------------

namespace {

using FilterFn = Value (*)(Interp&, const Value&, Args&);

// `attribute="a.b"` / `attribute=0` lookups of map, sort, selectattr, ... (jinja2's make_attrgetter).
Value attr_path(Interp& in, const Value& v, const Value& path, uint32_t pos) {
  if (path.is_int()) return get_item(in, v, path, pos);
  Value cur = v;
  for (auto& part : py_split(path.to_str(), Value("."), -1)) {
    bool digits = !part.empty() && part.size() < 18 && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = get_item(in, cur, digits ? Value(int64_t(std::strtoll(part.c_str(), nullptr, 10))) : Value(part),
                   pos);
    if (cur.is_undefined()) break;
  }
  return cur;
}

// Sort key comparison: strings lowercased unless case_sensitive (jinja2's ignore_case).
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

List sorted(Interp& in, List items, bool reverse, bool case_sensitive, const Value* attribute, uint32_t pos) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (auto& x : items)
    keyed.emplace_back(sort_key(attribute ? attr_path(in, x, *attribute, pos) : x, case_sensitive), x);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare(in, b.first, a.first, pos) < 0 : compare(in, a.first, b.first, pos) < 0;
  });
  List out;
  out.reserve(keyed.size());
  for (auto& [k, x] : keyed) out.push_back(std::move(x));
  return out;
}

// select / reject / selectattr / rejectattr
Value select_impl(Interp& in, const Value& seq, Args& a, bool by_attr, bool keep) {
  size_t off = by_attr ? 1 : 0;
  Value attribute = by_attr ? arg_or(a, 0, "attribute", Value()) : Value();
  if (by_attr && attribute.is_undefined())
    fail_at(in, a.at, "selectattr / rejectattr need an attribute name");
  std::string test;
  Args targs;
  targs.at = a.at;
  if (a.pos.size() > off) {
    test = a.pos[off].to_str();
    targs.pos.assign(a.pos.begin() + long(off) + 1, a.pos.end());
  }
  for (auto& kv : a.kw)
    if (kv.first != "attribute") targs.kw.push_back(kv);
  if (!test.empty() && !has_test(test)) fail_at(in, a.at, str_cat("no test named '", test, "'"));
  List out;
  for (auto& x : iterate(in, seq, a.at)) {
    Value v = by_attr ? attr_path(in, x, attribute, a.at) : x;
    bool r = v.truthy();
    if (!test.empty()) call_test(in, test, v, targs, r);
    if (r == keep) out.push_back(x);
  }
  return Value::list(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&#34;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

double py_round(double x, int64_t nd) {  // Python round(): correctly rounded, exact ties to even
  if (nd >= 0 && nd <= 300 && std::isfinite(x)) {
    char buf[512];  // glibc printf rounds the exact binary value, as CPython's round does
    std::snprintf(buf, sizeof buf, "%.*f", int(nd), x);
    return std::strtod(buf, nullptr);
  }
  double p = std::pow(10.0, double(nd));
  double y = x * p;
  double r = std::nearbyint(y);  // default FE_TONEAREST: ties to even
  return r / p;
}

Value to_int(const Value& v, const Value& dflt, int base) {
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(v.get_int());
  if (v.is_float()) {
    double t = std::trunc(v.get_float());
    if (!(t > -9.2e18 && t < 9.2e18)) return dflt;  // beyond int64 (Python would give a big int)
    return Value(int64_t(t));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.str(), Value(), true, true);
    std::string t;
    for (char c : s)
      if (c != '_') t += c;
    if (t.empty()) return dflt;
    errno = 0;
    char* end = nullptr;
    long long r = std::strtoll(t.c_str(), &end, base);
    if (errno == 0 && end && *end == 0) return Value(int64_t(r));
    // jinja2 falls back to int(float(value))
    double d = std::strtod(t.c_str(), &end);
    if (end && *end == 0 && std::trunc(d) > -9.2e18 && std::trunc(d) < 9.2e18 && base == 10)
      return Value(int64_t(std::trunc(d)));
    return dflt;
  }
  return dflt;
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> m = {
      {"tojson",
       [](Interp& in, const Value& v, Args& a) -> Value {
         // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
         // sort_keys=False)
         Value ea = arg_or(a, 0, "ensure_ascii", Value(false));
         Value ind = arg_or(a, 1, "indent", Value(nullptr));
         Value seps = arg_or(a, 2, "separators", Value(nullptr));
         Value sk = arg_or(a, 3, "sort_keys", Value(false));
         int indent = -1;
         if (ind.is_int() || ind.is_bool())
           indent = int(std::clamp<int64_t>(ind.get_int(), 0, 1024));
         else if (!ind.is_none())
           fail_at(in, a.at, "tojson: indent must be an integer or None");
         std::string is, ks;
         if (!seps.is_none()) {
           if (!seps.is_list() || seps.items().size() != 2)
             fail_at(in, a.at, "tojson: separators must be a pair");
           is = seps.items()[0].to_str();
           ks = seps.items()[1].to_str();
         }
         try {
           std::string s = json_dumps(v, indent, ea.truthy(), is, ks, sk.truthy());
           check_size(in, s.size(), a.at);
           return Value(std::move(s));
         } catch (const Error& e) {
           fail_at(in, a.at, str_cat("tojson: ", e.what()));
         }
       }},
      {"trim",
       [](Interp&, const Value& v, Args& a) {
         return Value(py_strip(v.to_str(), arg_or(a, 0, "chars", Value()), true, true));
       }},
      {"length",
       [](Interp& in, const Value& v, Args& a) -> Value {
         switch (v.kind()) {
           case Kind::String:
             return Value(int64_t(py_len(v.str())));
           case Kind::List:
             return Value(int64_t(v.items().size()));
           case Kind::Dict:
             return Value(int64_t(v.dict_ref().size()));
           case Kind::Undefined:
             return Value(int64_t(0));
           default:
             fail_at(in, a.at, str_cat("object of type '", type_name(v), "' has no len()"));
         }
       }},
      {"items",
       [](Interp& in, const Value& v, Args& a) -> Value {
         if (v.is_undefined()) return Value::list();
         if (!v.is_dict() || v.is_namespace()) fail_at(in, a.at, "Can only get item pairs from a mapping.");
         List l;
         for (auto& [k, x] : v.dict_ref().entries) l.push_back(Value::list({Value(k), x}, true));
         return Value::list(std::move(l));
       }},
      {"string", [](Interp&, const Value& v, Args&) { return Value(v.to_str()); }},
      {"join",
       [](Interp& in, const Value& v, Args& a) -> Value {
         std::string sep = arg_or(a, 0, "d", Value("")).to_str();
         const Value* attribute = arg(a, 1, "attribute");
         std::string o;
         bool first = true;
         for (auto& x : iterate(in, v, a.at)) {
           if (!first) o += sep;
           first = false;
           o += (attribute ? attr_path(in, x, *attribute, a.at) : x).to_str();
           check_size(in, o.size(), a.at);
         }
         return Value(std::move(o));
       }},
      {"list", [](Interp& in, const Value& v, Args& a) { return Value::list(iterate(in, v, a.at)); }},
      {"first",
       [](Interp& in, const Value& v, Args& a) -> Value {
         List l = iterate(in, v, a.at);
         return l.empty() ? Value::undefined("No first item, sequence was empty.") : l.front();
       }},
      {"last",
       [](Interp& in, const Value& v, Args& a) -> Value {
         List l = iterate(in, v, a.at);
         return l.empty() ? Value::undefined("No last item, sequence was empty.") : l.back();
       }},
      {"default",
       [](Interp&, const Value& v, Args& a) -> Value {
         Value d = arg_or(a, 0, "default_value", Value(""));
         bool boolean = arg_or(a, 1, "boolean", Value(false)).truthy();
         if (v.is_undefined() || (boolean && !v.truthy())) return d;
         return v;
       }},
      {"upper", [](Interp&, const Value& v, Args&) { return Value(py_upper(v.to_str())); }},
      {"lower", [](Interp&, const Value& v, Args&) { return Value(py_lower(v.to_str())); }},
      {"capitalize", [](Interp&, const Value& v, Args&) { return Value(py_capitalize(v.to_str())); }},
      {"title", [](Interp&, const Value& v, Args&) { return Value(jinja_title(v.to_str())); }},
      {"replace",
       [](Interp& in, const Value& v, Args& a) -> Value {
         std::string r = py_replace(v.to_str(), arg_or(a, 0, "old", Value("")).to_str(),
                                    arg_or(a, 1, "new", Value("")).to_str(),
                                    arg_or(a, 2, "count", Value(nullptr)).is_none()
                                        ? -1
                                        : int_arg(in, arg_or(a, 2, "count", Value()), "count", a.at));
         check_size(in, r.size(), a.at);
         return Value(std::move(r));
       }},
      {"int",
       [](Interp& in, const Value& v, Args& a) -> Value {
         int64_t base = int_arg(in, arg_or(a, 1, "base", Value(10)), "base", a.at);
         if (base != 10 && base != 16 && base != 8 && base != 2) fail_at(in, a.at, "int: unsupported base");
         return to_int(v, arg_or(a, 0, "default", Value(0)), int(base));
       }},
      {"float",
       [](Interp&, const Value& v, Args& a) -> Value {
         Value dflt = arg_or(a, 0, "default", Value(0.0));
         if (v.is_number()) return Value(v.as_double());
         if (v.is_string()) {
           std::string s = py_strip(v.str(), Value(), true, true);
           char* end = nullptr;
           double d = std::strtod(s.c_str(), &end);
           if (!s.empty() && end && *end == 0) return Value(d);
         }
         return dflt;
       }},
      {"abs",
       [](Interp& in, const Value& v, Args& a) -> Value {
         if (v.is_float()) return Value(std::fabs(v.get_float()));
         if (v.is_int() || v.is_bool()) {
           if (v.get_int() == INT64_MIN) fail_at(in, a.at, "integer overflow");
           return Value(v.get_int() < 0 ? -v.get_int() : v.get_int());
         }
         fail_at(in, a.at, str_cat("bad operand type for abs(): '", type_name(v), "'"));
       }},
      {"round",
       [](Interp& in, const Value& v, Args& a) -> Value {
         int64_t prec = int_arg(in, arg_or(a, 0, "precision", Value(0)), "precision", a.at);
         std::string method = arg_or(a, 1, "method", Value("common")).to_str();
         if (!v.is_number()) fail_at(in, a.at, str_cat("round needs a number, got ", type_name(v)));
         double x = v.as_double(), p = std::pow(10.0, double(prec));
         if (method == "common") {
           if (!v.is_float() && prec >= 0) return Value(v.get_int());  // round(int, n) stays an int
           return Value(py_round(x, prec));
         }
         if (method == "ceil") return Value(std::ceil(x * p) / p);
         if (method == "floor") return Value(std::floor(x * p) / p);
         fail_at(in, a.at, "method must be common, ceil or floor");
       }},
      {"map",
       [](Interp& in, const Value& v, Args& a) -> Value {
         List out;
         if (const Value* attribute = a.get_kw("attribute")) {
           const Value* dp = a.get_kw("default");
           Value dflt = dp ? *dp : Value();
           for (auto& x : iterate(in, v, a.at)) {
             Value r = attr_path(in, x, *attribute, a.at);
             out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
           }
           return Value::list(std::move(out));
         }
         if (a.pos.empty()) fail_at(in, a.at, "map requires a filter name or attribute=");
         std::string f = a.pos[0].to_str();
         if (!has_filter(f)) fail_at(in, a.at, str_cat("no filter named '", f, "'"));
         Args fa;
         fa.at = a.at;
         fa.pos.assign(a.pos.begin() + 1, a.pos.end());
         fa.kw = a.kw;
         for (auto& x : iterate(in, v, a.at)) {
           Value r;
           call_filter(in, f, x, fa, r);
           out.push_back(std::move(r));
         }
         return Value::list(std::move(out));
       }},
      {"select", [](Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, false, true); }},
      {"reject", [](Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, false, false); }},
      {"selectattr", [](Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, true, true); }},
      {"rejectattr", [](Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, true, false); }},
      {"unique",
       [](Interp& in, const Value& v, Args& a) -> Value {
         bool cs = arg_or(a, 0, "case_sensitive", Value(false)).truthy();
         const Value* attribute = arg(a, 1, "attribute");
         List out, seen;
         for (auto& x : iterate(in, v, a.at)) {
           Value k = sort_key(attribute ? attr_path(in, x, *attribute, a.at) : x, cs);
           if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
           seen.push_back(k);
           out.push_back(x);
         }
         return Value::list(std::move(out));
       }},
      {"sort",
       [](Interp& in, const Value& v, Args& a) -> Value {
         bool rev = arg_or(a, 0, "reverse", Value(false)).truthy();
         bool cs = arg_or(a, 1, "case_sensitive", Value(false)).truthy();
         const Value* attribute = arg(a, 2, "attribute");
         return Value::list(sorted(in, iterate(in, v, a.at), rev, cs, attribute, a.at));
       }},
      {"dictsort",
       [](Interp& in, const Value& v, Args& a) -> Value {
         if (!v.is_dict()) fail_at(in, a.at, "dictsort needs a dict");
         bool cs = arg_or(a, 0, "case_sensitive", Value(false)).truthy();
         std::string by = arg_or(a, 1, "by", Value("key")).to_str();
         bool rev = arg_or(a, 2, "reverse", Value(false)).truthy();
         if (by != "key" && by != "value")
           fail_at(in, a.at, "You can only sort by either \"key\" or \"value\"");
         List pairs;
         for (auto& [k, x] : v.dict_ref().entries) pairs.push_back(Value::list({Value(k), x}, true));
         Value idx(int64_t(by == "key" ? 0 : 1));
         return Value::list(sorted(in, std::move(pairs), rev, cs, &idx, a.at));
       }},
      {"indent",
       [](Interp& in, const Value& v, Args& a) -> Value {
         Value w = arg_or(a, 0, "width", Value(4));
         std::string ind =
             w.is_string()
                 ? w.str()
                 : std::string(size_t(std::clamp<int64_t>(int_arg(in, w, "width", a.at), 0, 4096)), ' ');
         bool first = arg_or(a, 1, "first", Value(false)).truthy();
         bool blank = arg_or(a, 2, "blank", Value(false)).truthy();
         std::string s = v.to_str() + "\n";
         std::vector<std::string> lines = py_splitlines(s, false);
         std::string rv;
         for (size_t k = 0; k < lines.size(); k++) {  // appends only: GCC 12 warns (falsely) on "\n" + str
           if (k) {
             rv += '\n';
             if (blank || !lines[k].empty()) rv += ind;
           }
           rv += lines[k];
         }
         if (first) rv = ind + rv;
         check_size(in, rv.size(), a.at);
         return Value(std::move(rv));
       }},
      {"safe", [](Interp&, const Value& v, Args&) { return v; }},
      {"escape", [](Interp&, const Value& v, Args&) { return Value(html_escape(v.to_str())); }},
      {"forceescape", [](Interp&, const Value& v, Args&) { return Value(html_escape(v.to_str())); }},
      {"wordcount",
       [](Interp&, const Value& v, Args&) {
         int64_t n = 0;
         bool in_word = false;
         for (unsigned char c : v.to_str()) {
           bool w = std::isalnum(c) || c == '_' || c >= 0x80;
           if (w && !in_word) n++;
           in_word = w;
         }
         return Value(n);
       }},
      {"batch",
       [](Interp& in, const Value& v, Args& a) -> Value {
         int64_t n = int_arg(in, arg_or(a, 0, "linecount", Value()), "linecount", a.at);
         if (n <= 0) fail_at(in, a.at, "batch size must be positive");
         const Value* fill = arg(a, 1, "fill_with");
         List out, cur;
         for (auto& x : iterate(in, v, a.at)) {
           cur.push_back(x);
           if (int64_t(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
         }
         if (!cur.empty()) {
           if (fill && !fill->is_none())
             while (int64_t(cur.size()) < n) cur.push_back(*fill);
           out.push_back(Value::list(std::move(cur)));
         }
         return Value::list(std::move(out));
       }},
      {"sum",
       [](Interp& in, const Value& v, Args& a) -> Value {
         const Value* attribute = arg(a, 0, "attribute");
         Value acc = arg_or(a, 1, "start", Value(0));
         for (auto& x : iterate(in, v, a.at)) {
           Value y = attribute ? attr_path(in, x, *attribute, a.at) : x;
           if (!acc.is_number() || !y.is_number()) fail_at(in, a.at, "sum needs numbers");
           int64_t r;
           if (acc.is_float() || y.is_float())
             acc = Value(acc.as_double() + y.as_double());
           else if (__builtin_add_overflow(acc.get_int(), y.get_int(), &r))
             fail_at(in, a.at, "integer overflow");
           else
             acc = Value(r);
         }
         return acc;
       }},
      {"min",
       [](Interp& in, const Value& v, Args& a) -> Value {
         List l = sorted(in, iterate(in, v, a.at), false,
                         arg_or(a, 0, "case_sensitive", Value(false)).truthy(), arg(a, 1, "attribute"), a.at);
         return l.empty() ? Value::undefined("No aggregated item, sequence was empty.") : l.front();
       }},
      {"max",
       [](Interp& in, const Value& v, Args& a) -> Value {
         List l = sorted(in, iterate(in, v, a.at), true,
                         arg_or(a, 0, "case_sensitive", Value(false)).truthy(), arg(a, 1, "attribute"), a.at);
         return l.empty() ? Value::undefined("No aggregated item, sequence was empty.") : l.front();
       }},
      {"reverse",
       [](Interp& in, const Value& v, Args& a) -> Value {
         if (v.is_string()) {
           std::u32string u = utf8_decode(v.str());
           std::reverse(u.begin(), u.end());
           return Value(utf8_encode(u));
         }
         List l = iterate(in, v, a.at);
         std::reverse(l.begin(), l.end());
         return Value::list(std::move(l));
       }},
      {"center",
       [](Interp& in, const Value& v, Args& a) -> Value {
         Args b;
         b.at = a.at;
         b.pos.push_back(arg_or(a, 0, "width", Value(80)));
         Value m = string_method(Value(v.to_str()), "center");
         return call_value(in, m, b);
       }},
      {"attr",
       [](Interp& in, const Value& v, Args& a) -> Value {
         const Value* n = arg(a, 0, "name");
         if (!n) fail_at(in, a.at, "attr needs a name");
         // Python getattr only: dict keys are not attributes (a namespace's are)
         std::string name = n->to_str();
         if (v.is_namespace() || v.is_string() || v.is_list()) return get_attr(v, name);
         if (v.is_dict()) {
           Value m = dict_method(v, name);
           if (!m.is_undefined()) return m;
         }
         return Value::undefined(str_cat("'", type_name(v), " object' has no attribute '", name, "'"));
       }},
  };
  return m;
}

std::string filter_alias(const std::string& n) {
  if (n == "count") return "length";
  if (n == "d") return "default";
  if (n == "e") return "escape";
  return n;
}

}  // namespace

bool has_filter(const std::string& name) {
  return filters().count(filter_alias(name)) > 0;
}

bool call_filter(Interp& in, const std::string& name, const Value& input, Args& args, Value& out) {
  auto it = filters().find(filter_alias(name));
  if (it == filters().end()) return false;
  out = it->second(in, input, args);
  return true;
}

// ---- globals
// -------------------------------------------------------------------------------------------------

Value builtin_global(const std::string& name) {
  static const std::unordered_map<std::string, Value> g = [] {
    std::unordered_map<std::string, Value> m;
    m["range"] = make_fn("range", [](Interp& in, Args& a) -> Value {
      if (a.pos.empty() || a.pos.size() > 3) fail_at(in, a.at, "range expected 1 to 3 arguments");
      for (auto& x : a.pos)
        if (!x.is_int() && !x.is_bool())
          fail_at(in, a.at, str_cat("'", type_name(x), "' object cannot be interpreted as an integer"));
      int64_t start = 0, stop, stp = 1;
      if (a.pos.size() == 1)
        stop = a.pos[0].get_int();
      else
        start = a.pos[0].get_int(), stop = a.pos[1].get_int();
      if (a.pos.size() == 3) stp = a.pos[2].get_int();
      if (stp == 0) fail_at(in, a.at, "range() arg 3 must not be zero");
      // Python len(range): ceil((stop - start) / step) when positive
      __int128 span = stp > 0 ? (__int128)stop - start : (__int128)start - stop;
      __int128 step_abs = stp > 0 ? stp : -(__int128)stp;
      __int128 n = span <= 0 ? 0 : (span + step_abs - 1) / step_abs;
      if (n > 100000)  // jinja2's sandbox MAX_RANGE
        fail_at(in, a.at, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      List l;
      l.reserve(size_t(n));
      for (int64_t k = 0; k < int64_t(n); k++) l.emplace_back(int64_t((__int128)start + (__int128)k * stp));
      return Value::list(std::move(l));
    });
    m["namespace"] = make_fn("namespace", [](Interp& in, Args& a) -> Value {
      Dict d;
      for (auto& p : a.pos) {
        if (!p.is_dict()) fail_at(in, a.at, "namespace() positional argument must be a dict");
        for (auto& [k, v] : p.dict_ref().entries) d.set(k, v);
      }
      for (auto& [k, v] : a.kw) d.set(k, v);
      return Value::namespace_(std::move(d));
    });
    m["dict"] = make_fn("dict", [](Interp& in, Args& a) -> Value {
      Dict d;
      for (auto& p : a.pos) {
        if (!p.is_dict()) fail_at(in, a.at, "dict() positional argument must be a dict");
        for (auto& [k, v] : p.dict_ref().entries) d.set(k, v);
      }
      for (auto& [k, v] : a.kw) d.set(k, v);
      return Value::dict(std::move(d));
    });
    m["raise_exception"] = make_fn("raise_exception", [](Interp& in, Args& a) -> Value {
      fail_at(in, a.at, str_cat("raise_exception: ", a.pos.empty() ? std::string() : a.pos[0].to_str()));
    });
    m["strftime_now"] = make_fn("strftime_now", [](Interp& in, Args& a) -> Value {
      if (a.pos.empty() || !a.pos[0].is_string())
        fail_at(in, a.at, "strftime_now(format) needs a format string");
      int64_t now = in_options(in).now;
      std::time_t t = now < 0 ? std::time(nullptr) : std::time_t(now);
      std::tm tm{};
      localtime_r(&t, &tm);
      const std::string& fmt = a.pos[0].str();
      check_size(in, fmt.size() * 64, a.at);
      std::string buf(fmt.size() * 64 + 64, '\0');
      size_t n = fmt.empty() ? 0 : std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
      buf.resize(n);
      return Value(buf);
    });
    m["joiner"] = make_fn("joiner", [](Interp&, Args& a) -> Value {
      std::string sep = arg_or(a, 0, "sep", Value(", ")).to_str();
      auto used = std::make_shared<bool>(false);
      return make_fn("joiner", [sep, used](Interp&, Args&) -> Value {
        if (!*used) {
          *used = true;
          return Value("");
        }
        return Value(sep);
      });
    });
    return m;
  }();
  auto it = g.find(name);
  return it == g.end() ? Value() : it->second;
}

}  // namespace zaya::jinja::detail
