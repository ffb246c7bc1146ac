// The evaluator of the Jinja interpreter: walks the AST with Python semantics (jinja2's defaults for
// undefined values and scoping) under the step / output / depth bounds of Options.
// Scoping as jinja2 compiles it: a for-loop iteration, a macro call and a with block get a new scope; if and
// set do not (a `set` inside a loop body is gone at the next iteration, one inside an if is not); macros see
// the template's top-level scope, not their caller's.
#include <cmath>

#include "core/error.h"
#include "serve/jinja_internal.h"

namespace zaya::jinja {
namespace detail {

struct Scope {
  Scope* parent;
  std::vector<std::pair<std::string, Value>> vars;
  const Value* find(const std::string& n) const {
    for (auto it = vars.rbegin(); it != vars.rend(); ++it)
      if (it->first == n) return &it->second;
    return nullptr;
  }
  void set(const std::string& n, Value v) {
    for (auto& [k, x] : vars)
      if (k == n) {
        x = std::move(v);
        return;
      }
    vars.emplace_back(n, std::move(v));
  }
};

enum class Flow { Normal, Break, Continue };

struct Interp {
  const Program& prog;
  const Options& opt;
  Scope* root = nullptr;  // context + template-level variables
  std::string* out = nullptr;
  uint64_t steps = 0;
  int depth = 0;       // C++ recursion of eval/exec
  int call_depth = 0;  // macro recursion
  bool in_loop = false;

  static constexpr int kMaxEvalDepth = 1500;

  struct Guard {
    Interp& in;
    Guard(Interp& i, uint32_t pos) : in(i) {
      if (++in.depth > kMaxEvalDepth) fail_at(in, pos, "template nests too deeply (recursion limit)");
    }
    ~Guard() { in.depth--; }
  };

  void step(uint32_t pos) {
    if (++steps > opt.max_steps)
      fail_at(*this, pos, str_cat("template exceeded the limit of ", opt.max_steps, " evaluation steps"));
  }
  void emit(std::string_view s, uint32_t pos) {
    if (out->size() + s.size() > opt.max_output_bytes)
      fail_at(*this, pos, str_cat("template output exceeds the limit of ", opt.max_output_bytes, " bytes"));
    out->append(s);
  }

  Value lookup(const std::string& n, Scope* sc) {
    for (Scope* s = sc; s; s = s->parent)
      if (const Value* v = s->find(n)) return *v;
    Value g = builtin_global(n);
    if (!g.is_undefined()) return g;
    return Value::undefined("'" + n + "' is undefined");
  }

  // ---- expressions ----
  Value eval(const Expr& e, Scope* sc);
  Value eval_binary(const Expr& e, Scope* sc);
  Value eval_call(const Expr& e, Scope* sc);
  Args eval_args(const CallArgs& a, Scope* sc, uint32_t pos);
  Value apply_filter(const Expr& f, Value input, Scope* sc);

  // ---- statements ----
  Flow exec_body(const Body& b, Scope* sc);
  Flow exec(const Stmt& s, Scope* sc);
  void exec_for(const Stmt& s, Scope* sc);
  Value make_macro(const Stmt& s, Scope* sc, const Body* body_override = nullptr);
  void assign(const std::vector<std::string>& targets, const Value& v, Scope* sc, uint32_t pos);
  std::string capture(const Body& b, Scope* sc);
};

[[noreturn]] void fail_at(const Interp& in, uint32_t pos, const std::string& msg) {
  throw Error(str_cat(in.prog.where(pos), ": ", msg));
}
std::string interp_where(const Interp& in, uint32_t pos) {
  return in.prog.where(pos);
}
const Options& in_options(const Interp& in) {
  return in.opt;
}

[[noreturn]] void undefined_error(Interp& in, const Value& v, uint32_t pos) {
  const std::string& h = v.undefined_hint();
  fail_at(in, pos, h.empty() ? "undefined value used" : h);
}

Value Interp::eval(const Expr& e, Scope* sc) {
  Guard g(*this, e.pos);
  step(e.pos);
  switch (e.type) {
    case ExprType::Literal:
      return e.lit;
    case ExprType::Name:
      return lookup(e.name, sc);
    case ExprType::List:
    case ExprType::Tuple: {
      List l;
      l.reserve(e.kids.size());
      for (auto& k : e.kids) l.push_back(eval(*k, sc));
      return Value::list(std::move(l), e.type == ExprType::Tuple);
    }
    case ExprType::Dict: {
      Dict d;
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
        Value key = eval(*e.kids[k], sc);
        if (!key.is_string()) fail_at(*this, e.kids[k]->pos, "dict keys must be strings in this interpreter");
        d.set(key.str(), eval(*e.kids[k + 1], sc));
      }
      return Value::dict(std::move(d));
    }
    case ExprType::Attr: {
      Value obj = eval(*e.kids[0], sc);
      if (obj.is_undefined()) undefined_error(*this, obj, e.pos);
      return get_attr(obj, e.name);
    }
    case ExprType::Item: {
      Value obj = eval(*e.kids[0], sc);
      if (obj.is_undefined()) undefined_error(*this, obj, e.pos);
      return get_item(*this, obj, eval(*e.kids[1], sc), e.pos);
    }
    case ExprType::Slice: {
      Value obj = eval(*e.kids[0], sc);
      if (obj.is_undefined()) undefined_error(*this, obj, e.pos);
      auto bound = [&](const ExprPtr& p, bool& given) -> int64_t {
        given = false;
        if (!p) return 0;
        Value v = eval(*p, sc);
        if (v.is_none()) return 0;
        if (!v.is_int() && !v.is_bool()) fail_at(*this, p->pos, "slice indices must be integers or None");
        given = true;
        return v.get_int();
      };
      bool has_start, has_stop, has_step;
      int64_t start = bound(e.kids[1], has_start), stop = bound(e.kids[2], has_stop),
              stp = bound(e.kids[3], has_step);
      if (!has_step) stp = 1;
      if (stp == 0) fail_at(*this, e.pos, "slice step cannot be zero");
      bool str = obj.is_string();
      if (!str && !obj.is_list())
        fail_at(*this, e.pos, str_cat("'", type_name(obj), "' object is not subscriptable"));
      std::u32string u;
      bool ascii = str && is_ascii(obj.str());
      if (str && !ascii) u = utf8_decode(obj.str());
      int64_t n = str ? (ascii ? int64_t(obj.str().size()) : int64_t(u.size())) : int64_t(obj.items().size());
      // Python's slice.indices()
      auto adj = [&](int64_t v, bool given, int64_t dflt) {
        if (!given) return dflt;
        if (v < 0) v += n;
        if (stp > 0) return std::clamp<int64_t>(v, 0, n);
        return std::clamp<int64_t>(v, -1, n - 1);
      };
      int64_t b = adj(start, has_start, stp > 0 ? 0 : n - 1), en = adj(stop, has_stop, stp > 0 ? n : -1);
      std::vector<int64_t> idx;
      for (int64_t k = b; stp > 0 ? k < en : k > en; k += stp) idx.push_back(k);
      if (str) {
        if (ascii) {
          std::string r;
          r.reserve(idx.size());
          for (int64_t k : idx) r += obj.str()[size_t(k)];
          return Value(std::move(r));
        }
        std::u32string r;
        for (int64_t k : idx) r += u[size_t(k)];
        return Value(utf8_encode(r));
      }
      List r;
      r.reserve(idx.size());
      for (int64_t k : idx) r.push_back(obj.items()[size_t(k)]);
      return Value::list(std::move(r), obj.is_tuple());
    }
    case ExprType::Call:
      return eval_call(e, sc);
    case ExprType::Filter:
      return apply_filter(e, eval(*e.kids[0], sc), sc);
    case ExprType::Test: {
      Value v = eval(*e.kids[0], sc);
      Args a = eval_args(e.args, sc, e.pos);
      bool r = false;
      if (!call_test(*this, e.name, v, a, r)) fail_at(*this, e.pos, str_cat("no test named '", e.name, "'"));
      return Value(e.negated ? !r : r);
    }
    case ExprType::Neg:
    case ExprType::Pos: {
      Value v = eval(*e.kids[0], sc);
      if (v.is_undefined()) undefined_error(*this, v, e.pos);
      if (!v.is_number())
        fail_at(*this, e.pos,
                str_cat("bad operand type for unary ", e.type == ExprType::Neg ? "-" : "+", ": '",
                        type_name(v), "'"));
      if (e.type == ExprType::Pos) return v.is_bool() ? Value(v.get_int()) : v;
      if (v.is_float()) return Value(-v.get_float());
      if (v.get_int() == INT64_MIN) fail_at(*this, e.pos, "integer overflow");
      return Value(-v.get_int());
    }
    case ExprType::Not:
      return Value(!eval(*e.kids[0], sc).truthy());
    case ExprType::And: {
      Value l = eval(*e.kids[0], sc);
      return l.truthy() ? eval(*e.kids[1], sc) : l;
    }
    case ExprType::Or: {
      Value l = eval(*e.kids[0], sc);
      return l.truthy() ? l : eval(*e.kids[1], sc);
    }
    case ExprType::Cond: {
      if (eval(*e.kids[1], sc).truthy()) return eval(*e.kids[0], sc);
      if (e.kids.size() > 2) return eval(*e.kids[2], sc);
      return Value::undefined("the inline if expression evaluated to false and no else section was defined");
    }
    case ExprType::Binary:
      return eval_binary(e, sc);
    case ExprType::Compare: {
      Value l = eval(*e.kids[0], sc);
      for (size_t k = 0; k < e.ops.size(); k++) {
        Value r = eval(*e.kids[k + 1], sc);
        const std::string& op = e.ops[k];
        uint32_t pos = e.kids[k + 1]->pos;
        bool ok;
        if (op == "==")
          ok = l == r;
        else if (op == "!=")
          ok = !(l == r);
        else if (op == "in")
          ok = contains(*this, r, l, pos);
        else if (op == "notin")
          ok = !contains(*this, r, l, pos);
        else {
          if (l.is_undefined()) undefined_error(*this, l, pos);
          if (r.is_undefined()) undefined_error(*this, r, pos);
          int c = compare(*this, l, r, pos);
          ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!ok) return Value(false);
        l = std::move(r);
      }
      return Value(true);
    }
  }
  return Value();
}

namespace {
int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}
int64_t pymod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}
}  // namespace

Value Interp::eval_binary(const Expr& e, Scope* sc) {
  Value l = eval(*e.kids[0], sc), r = eval(*e.kids[1], sc);
  const std::string& op = e.name;
  uint32_t pos = e.pos;
  if (op == "~") {  // string concatenation: str() of both sides, undefined prints as ""
    std::string s = l.to_str();
    s += r.to_str();
    check_size(*this, s.size(), pos);
    return Value(std::move(s));
  }
  if (l.is_undefined()) undefined_error(*this, l, pos);
  if (r.is_undefined()) undefined_error(*this, r, pos);
  auto type_error = [&]() -> Value {
    if (op == "+" && l.is_string())
      fail_at(*this, pos, str_cat("can only concatenate str (not \"", type_name(r), "\") to str"));
    fail_at(
        *this, pos,
        str_cat("unsupported operand type(s) for ", op, ": '", type_name(l), "' and '", type_name(r), "'"));
  };
  if (l.is_number() && r.is_number()) {
    bool fl = l.is_float() || r.is_float();
    if (op == "/") {
      if (r.as_double() == 0) fail_at(*this, pos, "division by zero");
      return Value(l.as_double() / r.as_double());
    }
    if (fl) {
      double a = l.as_double(), b = r.as_double();
      if (op == "+") return Value(a + b);
      if (op == "-") return Value(a - b);
      if (op == "*") return Value(a * b);
      if (op == "**") return Value(std::pow(a, b));
      if (b == 0) fail_at(*this, pos, "float division by zero");
      if (op == "//") return Value(std::floor(a / b));
      if (op == "%") {
        double m = std::fmod(a, b);
        if (m != 0 && ((m < 0) != (b < 0))) m += b;
        return Value(m);
      }
    } else {
      int64_t a = l.get_int(), b = r.get_int(), x;
      auto ovf = [&]() -> Value { fail_at(*this, pos, "integer overflow"); };
      if (op == "+") return __builtin_add_overflow(a, b, &x) ? ovf() : Value(x);
      if (op == "-") return __builtin_sub_overflow(a, b, &x) ? ovf() : Value(x);
      if (op == "*") return __builtin_mul_overflow(a, b, &x) ? ovf() : Value(x);
      if (op == "**") {
        if (b < 0) return Value(std::pow(double(a), double(b)));
        int64_t acc = 1;
        for (int64_t k = 0; k < b; k++) {
          if (__builtin_mul_overflow(acc, a, &acc)) return ovf();
          if (acc == 0 || acc == 1) break;
          step(pos);
        }
        return Value(acc);
      }
      if (b == 0) fail_at(*this, pos, "integer division or modulo by zero");
      if (b == -1) {  // INT64_MIN / -1 traps on x86
        if (op == "%") return Value(int64_t(0));
        return a == INT64_MIN ? ovf() : Value(-a);
      }
      if (op == "//") return Value(floordiv(a, b));
      if (op == "%") return Value(pymod(a, b));
    }
    return type_error();
  }
  if (op == "+") {
    if (l.is_string() && r.is_string()) {
      check_size(*this, l.str().size() + r.str().size(), pos);
      return Value(l.str() + r.str());
    }
    if (l.is_list() && r.is_list()) {
      check_size(*this, l.items().size() + r.items().size(), pos);
      List x = l.items();
      x.insert(x.end(), r.items().begin(), r.items().end());
      return Value::list(std::move(x), l.is_tuple());
    }
    return type_error();
  }
  if (op == "*") {
    const Value* seq = l.is_string() || l.is_list() ? &l : &r;
    const Value* cnt = seq == &l ? &r : &l;
    if (!(cnt->is_int() || cnt->is_bool()) || !(seq->is_string() || seq->is_list())) return type_error();
    int64_t k = std::max<int64_t>(0, cnt->get_int());
    size_t unit = seq->is_string() ? seq->str().size() : seq->items().size();
    if (unit && uint64_t(k) > opt.max_output_bytes / unit) check_size(*this, opt.max_output_bytes + 1, pos);
    if (seq->is_string()) {
      std::string s;
      s.reserve(unit * size_t(k));
      for (int64_t j = 0; j < k; j++) s += seq->str();
      return Value(std::move(s));
    }
    List x;
    for (int64_t j = 0; j < k; j++) x.insert(x.end(), seq->items().begin(), seq->items().end());
    return Value::list(std::move(x), seq->is_tuple());
  }
  if (op == "%" && l.is_string()) fail_at(*this, pos, "printf-style '%' string formatting is not supported");
  return type_error();
}

Args Interp::eval_args(const CallArgs& a, Scope* sc, uint32_t pos) {
  Args r;
  r.at = pos;
  for (auto& p : a.pos) r.pos.push_back(eval(*p, sc));
  if (a.star) {
    Value v = eval(*a.star, sc);
    for (auto& x : iterate(*this, v, a.star->pos)) r.pos.push_back(x);
  }
  for (auto& [k, p] : a.kw) r.kw.emplace_back(k, eval(*p, sc));
  if (a.dstar) {
    Value v = eval(*a.dstar, sc);
    if (!v.is_dict()) fail_at(*this, a.dstar->pos, "argument after ** must be a mapping");
    for (auto& [k, x] : v.dict_ref().entries) r.kw.emplace_back(k, x);
  }
  return r;
}

Value Interp::eval_call(const Expr& e, Scope* sc) {
  Value f = eval(*e.kids[0], sc);
  if (f.is_undefined()) undefined_error(*this, f, e.pos);
  if (!f.is_callable()) fail_at(*this, e.pos, str_cat("'", type_name(f), "' object is not callable"));
  Args a = eval_args(e.args, sc, e.pos);
  return call_value(*this, f, a);
}

Value call_value(Interp& in, const Value& f, Args& args) {
  if (!f.is_callable()) fail_at(in, args.at, str_cat("'", type_name(f), "' object is not callable"));
  return f.fn().fn(in, args);
}

Value Interp::apply_filter(const Expr& f, Value input, Scope* sc) {
  Args a = eval_args(f.args, sc, f.pos);
  Value out;
  if (!call_filter(*this, f.name, input, a, out))
    fail_at(*this, f.pos, str_cat("no filter named '", f.name, "'"));
  return out;
}

// ---- statements
// ----------------------------------------------------------------------------------------------

Flow Interp::exec_body(const Body& b, Scope* sc) {
  for (auto& s : b) {
    Flow fl = exec(*s, sc);
    if (fl != Flow::Normal) return fl;
  }
  return Flow::Normal;
}

std::string Interp::capture(const Body& b, Scope* sc) {
  std::string buf;
  std::string* saved = out;
  out = &buf;
  try {
    exec_body(b, sc);
  } catch (...) {
    out = saved;
    throw;
  }
  out = saved;
  return buf;
}

void Interp::assign(const std::vector<std::string>& targets, const Value& v, Scope* sc, uint32_t pos) {
  if (targets.size() == 1) {
    sc->set(targets[0], v);
    return;
  }
  List items = iterate(*this, v, pos);
  if (items.size() != targets.size())
    fail_at(*this, pos,
            str_cat(items.size() < targets.size() ? "not enough" : "too many", " values to unpack (expected ",
                    targets.size(), ", got ", items.size(), ")"));
  for (size_t k = 0; k < targets.size(); k++) sc->set(targets[k], items[k]);
}

Flow Interp::exec(const Stmt& s, Scope* sc) {
  Guard g(*this, s.pos);
  step(s.pos);
  switch (s.type) {
    case StmtType::Text:
      emit(s.text, s.pos);
      break;
    case StmtType::Output: {
      Value v = eval(*s.expr, sc);
      if (v.is_string())
        emit(v.str(), s.pos);
      else
        emit(v.to_str(), s.pos);
      break;
    }
    case StmtType::If:
      for (auto& [cond, body] : s.branches)
        if (eval(*cond, sc).truthy()) return exec_body(body, sc);
      return exec_body(s.else_body, sc);
    case StmtType::For:
      exec_for(s, sc);
      break;
    case StmtType::Set:
      assign(s.targets, eval(*s.expr, sc), sc, s.pos);
      break;
    case StmtType::SetAttr: {
      Value obj = eval(*s.cond, sc);
      if (!obj.is_namespace()) fail_at(*this, s.pos, "cannot assign attribute on non-namespace object");
      Value v = eval(*s.expr, sc);
      // No namespace inside a namespace: that keeps values acyclic and their depth bounded (jinja2 allows it;
      // chat templates store counters, flags, strings and lists in namespaces).
      if (v.contains_namespace())
        fail_at(*this, s.pos, "a namespace attribute cannot hold a namespace object");
      obj.dict_mut().set(s.text, std::move(v));
      break;
    }
    case StmtType::SetBlock: {
      Value v(capture(s.body, sc));
      for (auto& f : s.filters) v = apply_filter(*f, v, sc);
      sc->set(s.text, v);
      break;
    }
    case StmtType::Macro:
      sc->set(s.text, make_macro(s, sc));
      break;
    case StmtType::CallBlock: {
      // caller() renders the block body with the call block's own parameters.
      Value caller = make_macro(s, sc);
      const Expr& call = *s.expr;
      Value f = eval(*call.kids[0], sc);
      if (f.is_undefined()) undefined_error(*this, f, call.pos);
      Args a = eval_args(call.args, sc, call.pos);
      a.kw.emplace_back("caller", caller);
      emit(call_value(*this, f, a).to_str(), s.pos);
      break;
    }
    case StmtType::FilterBlock: {
      Value v(capture(s.body, sc));
      for (auto& f : s.filters) v = apply_filter(*f, v, sc);
      emit(v.to_str(), s.pos);
      break;
    }
    case StmtType::With: {
      Scope inner{sc, {}};
      for (auto& [n, e] : s.assigns) inner.set(n, eval(*e, sc));
      return exec_body(s.body, &inner);
    }
    case StmtType::Break:
    case StmtType::Continue:
      if (!in_loop)
        fail_at(*this, s.pos,
                str_cat("'", s.type == StmtType::Break ? "break" : "continue", "' outside a loop"));
      return s.type == StmtType::Break ? Flow::Break : Flow::Continue;
  }
  return Flow::Normal;
}

void Interp::exec_for(const Stmt& s, Scope* sc) {
  Value seq = eval(*s.expr, sc);
  List all = iterate(*this, seq, s.expr->pos);
  List items;
  if (s.cond) {
    // `for x in xs if cond`: filtered first (loop.length counts the kept items); cond sees the target names.
    for (auto& x : all) {
      step(s.pos);
      Scope probe{sc, {}};
      assign(s.targets, x, &probe, s.pos);
      if (eval(*s.cond, &probe).truthy()) items.push_back(x);
    }
  } else {
    items = std::move(all);
  }
  if (items.empty()) {
    Scope inner{sc, {}};
    exec_body(s.else_body, &inner);
    return;
  }
  int64_t n = int64_t(items.size());
  Value loop = Value::dict();
  Dict& ld = loop.dict_mut();
  ld.entries.reserve(12);
  ld.set("length", Value(n));
  Value outer_loop = sc ? lookup("loop", sc) : Value();
  int64_t depth = outer_loop.is_dict() && outer_loop.dict_ref().find("depth")
                      ? outer_loop.dict_ref().find("depth")->get_int() + 1
                      : 1;
  if (!s.recursive) depth = 1;
  ld.set("depth", Value(depth));
  ld.set("depth0", Value(depth - 1));
  bool saved_in_loop = in_loop;
  in_loop = true;
  auto idx_holder = std::make_shared<int64_t>(0);
  auto cycle = std::make_shared<Callable>();
  cycle->name = "loop.cycle";
  cycle->fn = [idx_holder](Interp& in, Args& a) -> Value {
    if (a.pos.empty()) fail_at(in, a.at, "no items for cycling given");
    return a.pos[size_t(*idx_holder % int64_t(a.pos.size()))];
  };
  ld.set("cycle", Value::callable(cycle));
  for (int64_t k = 0; k < n; k++) {
    step(s.pos);
    *idx_holder = k;
    ld.set("index", Value(k + 1));
    ld.set("index0", Value(k));
    ld.set("revindex", Value(n - k));
    ld.set("revindex0", Value(n - k - 1));
    ld.set("first", Value(k == 0));
    ld.set("last", Value(k == n - 1));
    ld.set("previtem", k > 0 ? items[size_t(k - 1)] : Value::undefined("there is no previous item"));
    ld.set("nextitem", k + 1 < n ? items[size_t(k + 1)] : Value::undefined("there is no next item"));
    Scope inner{sc, {}};
    inner.vars.reserve(s.targets.size() + 1);
    inner.set("loop", loop);
    assign(s.targets, items[size_t(k)], &inner, s.pos);
    Flow fl = exec_body(s.body, &inner);
    if (fl == Flow::Break) break;
  }
  in_loop = saved_in_loop;
}

Value Interp::make_macro(const Stmt& s, Scope* sc, const Body* body_override) {
  // A macro sees the template's top-level names (and its own parameters), not its caller's locals. A caller()
  // block (CallBlock) sees the scope it was written in.
  Scope* parent = s.type == StmtType::CallBlock ? sc : root;
  const Stmt* def = &s;
  const Body* body = body_override ? body_override : &s.body;
  auto c = std::make_shared<Callable>();
  c->name = s.type == StmtType::Macro ? s.text : "caller";
  c->fn = [def, body, parent](Interp& in, Args& a) -> Value {
    if (in.call_depth >= in.opt.max_call_depth)
      fail_at(in, a.at, str_cat("macro recursion deeper than ", in.opt.max_call_depth, " calls"));
    Scope local{parent, {}};
    const auto& params = def->targets;
    List varargs;
    for (size_t k = 0; k < a.pos.size(); k++) {
      if (k < params.size())
        local.set(params[k], a.pos[k]);
      else
        varargs.push_back(a.pos[k]);
    }
    Dict kwargs;
    for (auto& [n, v] : a.kw) {
      if (n == "caller" && v.is_callable()) {  // {% call %} passes its body as caller()
        local.set("caller", v);
        continue;
      }
      bool is_param = false;
      for (size_t k = 0; k < params.size(); k++)
        if (params[k] == n) {
          if (k < a.pos.size())
            fail_at(in, a.at, str_cat("macro '", def->text, "' got multiple values for argument '", n, "'"));
          is_param = true;
        }
      if (is_param)
        local.set(n, v);
      else
        kwargs.set(n, v);
    }
    for (size_t k = 0; k < params.size(); k++) {
      if (local.find(params[k])) continue;
      if (k < def->defaults.size() && def->defaults[k])
        local.set(params[k], in.eval(*def->defaults[k], &local));
      else
        local.set(params[k], Value::undefined("parameter '" + params[k] + "' was not provided"));
    }
    local.set("varargs", Value::list(std::move(varargs), true));
    local.set("kwargs", Value::dict(std::move(kwargs)));
    in.call_depth++;
    bool saved_in_loop = in.in_loop;
    in.in_loop = false;
    std::string r;
    try {
      r = in.capture(*body, &local);
    } catch (...) {
      in.call_depth--;
      in.in_loop = saved_in_loop;
      throw;
    }
    in.call_depth--;
    in.in_loop = saved_in_loop;
    return Value(std::move(r));
  };
  return Value::callable(c);
}

}  // namespace detail

// ---- Template
// ------------------------------------------------------------------------------------------------

Template Template::parse(std::string_view text, std::string name, Options options) {
  Template t;
  t.prog_ = detail::parse_program(text, std::move(name), options);
  return t;
}

const std::string& Template::name() const {
  return prog_->name;
}

std::string Template::render(const Value& context) const {
  ZAYA_CHECK(prog_, "render of an unparsed template");
  ZAYA_CHECK(context.is_dict() || context.is_undefined() || context.is_none(), prog_->name,
             ": the render context must be a dict of variables, got ", context.repr());
  detail::Interp in{*prog_, prog_->options};
  detail::Scope root{nullptr, {}};
  for (auto& [k, v] : context.dict_ref().entries) root.set(k, v);
  in.root = &root;
  std::string out;
  in.out = &out;
  in.exec_body(prog_->body, &root);
  return out;
}

}  // namespace zaya::jinja
