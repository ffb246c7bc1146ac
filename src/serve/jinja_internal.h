// Internals of the Jinja interpreter shared by its files: the AST the parser builds (jinja_parse.cpp), the
// interpreter state the evaluator walks it with (jinja_eval.cpp), callables, and the Python string helpers
// the builtins use (jinja_builtins.cpp, jinja_value.cpp). Not a public API.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/jinja.h"

namespace zaya::jinja {
namespace detail {
struct Interp;
}
// ---- callables
// ----------------------------------------------------------------------------------------------
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  uint32_t at = 0;  // call site, for errors
  const Value* get_kw(std::string_view k) const {
    for (auto& [n, v] : kw)
      if (n == k) return &v;
    return nullptr;
  }
};
struct Callable {
  std::string name;
  std::function<Value(detail::Interp&, Args&)> fn;
};
}  // namespace zaya::jinja

namespace zaya::jinja::detail {

// ---- AST
// ----------------------------------------------------------------------------------------------------
enum class ExprType : uint8_t {
  Literal,
  Name,
  List,
  Tuple,
  Dict,
  Attr,
  Item,
  Slice,
  Call,
  Filter,
  Test,
  Neg,
  Pos,
  Not,
  And,
  Or,
  Binary,   // op: + - * / // % ** ~
  Compare,  // ops: == != < <= > >= in notin (chained)
  Cond,     // kids: then, cond, [else]
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct CallArgs {
  std::vector<ExprPtr> pos;
  std::vector<std::pair<std::string, ExprPtr>> kw;
  ExprPtr star, dstar;  // *args, **kwargs
};

struct Expr {
  ExprType type;
  uint32_t pos = 0;              // byte offset in the source: errors report line:column
  std::string name;              // Name / Attr / Filter / Test name, Binary op
  Value lit;                     // Literal
  std::vector<ExprPtr> kids;     // operands; Slice: target, start, stop, step (null = omitted)
  std::vector<std::string> ops;  // Compare
  CallArgs args;                 // Call / Filter / Test arguments
  bool negated = false;          // `is not`
};

enum class StmtType : uint8_t {
  Text,
  Output,
  If,
  For,
  Set,
  SetAttr,
  SetBlock,
  Macro,
  CallBlock,
  FilterBlock,
  With,
  Break,
  Continue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtType type;
  uint32_t pos = 0;
  std::string text;                  // Text; SetAttr attribute; Macro name; SetBlock name
  std::vector<std::string> targets;  // For / Set names (several = tuple unpacking); Macro / CallBlock params
  ExprPtr expr;                      // Output / For iterable / Set value / SetAttr value / CallBlock call
  ExprPtr cond;                      // For `if` filter; SetAttr object
  std::vector<std::pair<ExprPtr, Body>> branches;  // If / elif
  Body body, else_body;
  std::vector<ExprPtr> defaults;  // Macro / CallBlock parameter defaults (null = required)
  std::vector<ExprPtr> filters;   // SetBlock / FilterBlock: Filter exprs applied to the captured text
  std::vector<std::pair<std::string, ExprPtr>> assigns;  // With
  bool recursive = false;
};

struct Program {
  std::string name;
  std::string source;  // normalized newlines, for line:column
  Options options;
  Body body;
  std::string where(uint32_t pos) const;  // "name:line:col"
};

std::unique_ptr<Program> parse_program(std::string_view text, std::string name, const Options& opt);

// ---- the interpreter (jinja_eval.cpp)
// -----------------------------------------------------------------------
[[noreturn]] void fail_at(const Interp& in, uint32_t pos, const std::string& msg);
std::string interp_where(const Interp& in, uint32_t pos);
std::string type_name(const Value& v);  // Python type names for messages: str, int, NoneType, ...
const Options& in_options(const Interp& in);

// Builtins (jinja_builtins.cpp): each returns false when the name is unknown.
bool call_filter(Interp& in, const std::string& name, const Value& input, Args& args, Value& out);
bool call_test(Interp& in, const std::string& name, const Value& input, Args& args, bool& out);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value builtin_global(const std::string& name);              // undefined when not a builtin global
Value get_attr(const Value& obj, const std::string& name);  // sandboxed getattr: methods, then dict items
Value get_item(Interp& in, const Value& obj, const Value& key, uint32_t pos);
bool contains(Interp& in, const Value& container, const Value& item, uint32_t pos);
int compare(Interp& in, const Value& a, const Value& b, uint32_t pos);  // -1/0/1, errors like Python
List iterate(Interp& in, const Value& v, uint32_t pos);                 // Python iter(): keys of a dict
void check_size(Interp& in, size_t n, uint32_t pos);                    // strings and lists vs the limit
Value call_value(Interp& in, const Value& f, Args& args);

// ---- Python string helpers (jinja_value.cpp)
// ---------------------------------------------------------------
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
bool is_ascii(std::string_view s);
size_t py_len(std::string_view s);  // code points
bool py_isspace(char32_t c);
std::string py_strip(std::string_view s, const Value& chars, bool left, bool right);
std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_repr_str(std::string_view s);

}  // namespace zaya::jinja::detail
