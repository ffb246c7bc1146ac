// A Jinja2 interpreter for chat templates (the `chat_template` of tokenizer_config.json /
// chat_template.jinja). Parse once, render many: Template::parse(text, name) builds an AST;
// Template::render(context) walks it. Semantics follow Python jinja2 as Hugging Face transformers configures
// it for apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, a
// json.dumps `tojson`, raise_exception and strftime_now globals), so a checkpoint's own template renders byte
// for byte the prompt the model was trained on. The supported subset and the known differences are in
// docs/chat-templates.md. Every failure (syntax, undefined use, raise_exception, limits) is a zaya::Error
// naming template:line:column.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zaya::jinja {

class Value;
using List = std::vector<Value>;
struct Dict;
struct Callable;  // builtins, bound methods, macros (defined in jinja_internal.h)

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };

// A Python-like value. Strings, lists and dicts are shared (copying a Value is cheap), as in Python where a
// template reading `message.content` does not copy the string.
class Value {
 public:
  Value() = default;  // undefined
  Value(std::nullptr_t) : kind_(Kind::None) {}
  Value(bool b) : kind_(Kind::Bool), i_(b) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(int64_t v) : kind_(Kind::Int), i_(v) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  Value(std::string s);
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  static Value undefined(std::string hint = {});  // hint: what was looked up, for error messages
  static Value list(List items = {}, bool tuple = false);
  static Value dict(Dict d);
  static Value dict();
  static Value namespace_(Dict d);  // jinja2 namespace(): a dict whose attributes `set ns.x = ...` may assign
  static Value callable(std::shared_ptr<Callable> c);
  static Value from_json(const nlohmann::json& j);          // std::map objects: keys sorted
  static Value from_json(const nlohmann::ordered_json& j);  // keys in document order, as Python json.loads

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_callable() const { return kind_ == Kind::Callable; }
  bool is_tuple() const { return kind_ == Kind::List && flag_; }
  bool is_namespace() const { return kind_ == Kind::Dict && flag_; }

  bool get_bool() const { return i_ != 0; }
  int64_t get_int() const { return i_; }
  double get_float() const { return f_; }
  double as_double() const { return kind_ == Kind::Float ? f_ : double(i_); }  // numbers (bool counts as int)
  const std::string& str() const;
  const List& items() const;
  List& items_mut() const;
  const Dict& dict_ref() const;
  Dict& dict_mut() const;
  const Callable& fn() const;
  const std::string& undefined_hint() const;

  bool truthy() const;             // Python bool()
  std::string to_str() const;      // Python str(): True, None, 1.5, "['a', 1]"; undefined prints as ""
  std::string repr() const;        // Python repr()
  nlohmann::json to_json() const;  // errors on undefined and callables
  bool same_object(const Value& o) const;  // Python `is`
  bool contains_namespace() const;
  int nesting() const { return depth_; }  // list / dict nesting when built (0 for scalars)
  // Values nest at most this deep: printing, comparing, dumping and freeing them recurse.
  static constexpr int kMaxNesting = 256;

 private:
  Kind kind_ = Kind::Undefined;
  bool flag_ = false;  // tuple (List) / namespace (Dict)
  uint16_t depth_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // string, or the undefined hint
  std::shared_ptr<List> l_;
  std::shared_ptr<Dict> d_;
  std::shared_ptr<Callable> c_;
};

// Insertion-ordered, string-keyed (JSON objects, Python dicts as templates build them).
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
  size_t size() const { return entries.size(); }
};

bool operator==(const Value& a, const Value& b);  // Python ==: 1 == 1.0 == True, deep for lists and dicts

// Python json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' `tojson` calls it.
// indent < 0 means None; separators empty means Python's default for the indent.
std::string json_dumps(const Value& v, int indent = -1, bool ensure_ascii = false, std::string item_sep = {},
                       std::string key_sep = {}, bool sort_keys = false);
// Python repr(float): shortest round trip, "1.0", "1e+16", "1.5e-05", "inf", "nan".
std::string python_float_repr(double d);

struct Options {
  bool trim_blocks = true;    // transformers' apply_chat_template setting (jinja2's default is false)
  bool lstrip_blocks = true;  // idem
  bool keep_trailing_newline = false;
  // Bounds: a hostile template gets a clear error instead of hanging or exhausting memory.
  size_t max_output_bytes = 16u << 20;  // also caps any one string or list built while rendering
  uint64_t max_steps = 20'000'000;      // statements + loop iterations + expression nodes evaluated
  int max_call_depth = 100;             // macro / caller() recursion
  // strftime_now() reads this time (local time); < 0 means the current time. Tests fix it.
  int64_t now = -1;
};

namespace detail {
struct Program;
}

class Template {
 public:
  // Throws zaya::Error "NAME:LINE:COL: ..." on a syntax error.
  static Template parse(std::string_view text, std::string name = "template", Options options = {});
  // The context is a dict of top-level variables (messages, tools, add_generation_prompt, bos_token, ...).
  std::string render(const Value& context) const;
  std::string render(const nlohmann::json& context) const { return render(Value::from_json(context)); }
  std::string render(const nlohmann::ordered_json& context) const {
    return render(Value::from_json(context));
  }
  const std::string& name() const;

 private:
  std::shared_ptr<const detail::Program> prog_;
};

}  // namespace zaya::jinja
