// Lexer and parser of the Jinja interpreter: template text -> tokens -> AST (jinja_internal.h).
// The lexer reproduces jinja2's whitespace rules exactly, because a chat template's output is the model's
// prompt: `-` strips all whitespace on its side of a tag, trim_blocks drops the first newline after a block
// or comment tag, lstrip_blocks drops the spaces and tabs before a block or comment tag that starts a line,
// `+` disables either, and one trailing newline of the template is dropped (keep_trailing_newline=False). The
// parser follows jinja2's grammar and operator precedence (jinja2/parser.py).
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "serve/jinja_internal.h"

namespace zaya::jinja::detail {

std::string Program::where(uint32_t pos) const {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < source.size(); i++) {
    if (source[i] == '\n')
      line++, col = 1;
    else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80)
      col++;
  }
  return str_cat(name, ":", line, ":", col);
}

namespace {

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };

struct Token {
  Tok type;
  uint32_t pos;
  std::string text;  // data / name / op / decoded string
  int64_t i = 0;
  double f = 0;
};

const char* tok_desc(Tok t) {
  switch (t) {
    case Tok::Data:
      return "template data";
    case Tok::VarBegin:
      return "begin of print statement";
    case Tok::VarEnd:
      return "end of print statement";
    case Tok::BlockBegin:
      return "begin of statement block";
    case Tok::BlockEnd:
      return "end of statement block";
    case Tok::Name:
      return "name";
    case Tok::String:
      return "string";
    case Tok::Int:
      return "integer";
    case Tok::Float:
      return "float";
    case Tok::Op:
      return "operator";
    case Tok::End:
      return "end of template";
  }
  return "?";
}

// Python's str.rstrip() / `\s` over UTF-8 (the Unicode spaces chat templates could meet are rare but cheap).
size_t rstrip_len(std::string_view s) {
  std::u32string u = utf8_decode(s);
  size_t e = u.size();
  while (e > 0 && py_isspace(u[e - 1])) e--;
  return utf8_encode(std::u32string_view(u).substr(0, e)).size();
}
bool all_space(std::string_view s) {
  if (s.empty()) return false;
  for (char32_t c : utf8_decode(s))
    if (!py_isspace(c)) return false;
  return true;
}
size_t skip_space(std::string_view s, size_t p) {
  while (p < s.size()) {
    unsigned char c = s[p];
    if (c < 0x80) {
      if (!py_isspace(c)) break;
      p++;
    } else {
      size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      std::u32string u = utf8_decode(s.substr(p, n));
      if (u.size() != 1 || !py_isspace(u[0])) break;
      p += n;
    }
  }
  return p;
}

struct Lexer {
  const Program& prog;
  const std::string& src;
  const Options& opt;
  std::vector<Token> toks;
  bool line_starting = true;

  [[noreturn]] void fail(size_t pos, const std::string& msg) {
    throw Error(str_cat(prog.where(uint32_t(pos)), ": syntax error: ", msg));
  }

  // The text before a tag, with `-` / lstrip_blocks applied (jinja2's OptionalLStrip).
  void data_before(std::string_view text, char sign, bool is_var) {
    if (sign == '-') {
      text = text.substr(0, rstrip_len(text));
    } else if (sign != '+' && opt.lstrip_blocks && !is_var) {
      size_t l = text.rfind('\n');
      l = l == std::string_view::npos ? 0 : l + 1;
      if ((l > 0 || line_starting) && all_space(text.substr(l))) text = text.substr(0, l);
    }
    if (!text.empty()) toks.push_back({Tok::Data, uint32_t(text.data() - src.data()), std::string(text)});
  }

  // After a block or comment end: `-` strips all following whitespace, trim_blocks one newline.
  size_t after_end(size_t p, char sign, bool trim) {
    if (sign == '-') return skip_space(src, p);
    if (sign != '+' && trim && p < src.size() && src[p] == '\n') return p + 1;
    return p;
  }

  void run() {
    size_t pos = 0, n = src.size();
    while (pos < n) {
      size_t at = src.find('{', pos);
      while (at != std::string::npos && at + 1 < n && src[at + 1] != '{' && src[at + 1] != '%' &&
             src[at + 1] != '#')
        at = src.find('{', at + 1);
      if (at == std::string::npos || at + 1 >= n) {
        toks.push_back({Tok::Data, uint32_t(pos), src.substr(pos)});
        break;
      }
      char kind = src[at + 1];
      char sign = at + 2 < n && (src[at + 2] == '-' || src[at + 2] == '+') ? src[at + 2] : 0;
      size_t p = at + 2 + (sign ? 1 : 0);
      std::string_view text(src.data() + pos, at - pos);
      if (kind == '#') {
        data_before(text, sign, false);
        size_t e = src.find("#}", p);
        if (e == std::string::npos) fail(at, "missing end of comment tag");
        char esign = e > p && (src[e - 1] == '-' || src[e - 1] == '+') ? src[e - 1] : 0;
        pos = after_end(e + 2, esign, opt.trim_blocks);
        line_starting = pos > 0 && src[pos - 1] == '\n';
        continue;
      }
      if (kind == '%' && try_raw(at, p, text, sign, pos)) continue;
      data_before(text, sign, kind == '{');
      line_starting = false;
      toks.push_back({kind == '{' ? Tok::VarBegin : Tok::BlockBegin, uint32_t(at), {}});
      pos = lex_tag(p, kind == '{');
    }
    toks.push_back({Tok::End, uint32_t(n), {}});
  }

  // {% raw %}...{% endraw %}: the body is data, untouched.
  bool try_raw(size_t at, size_t p, std::string_view text, char sign, size_t& pos) {
    size_t q = skip_space(src, p);
    if (src.compare(q, 3, "raw") != 0) return false;
    q = skip_space(src, q + 3);
    size_t body;
    if (src.compare(q, 3, "-%}") == 0)
      body = skip_space(src, q + 3);
    else if (src.compare(q, 2, "%}") == 0)
      body = q + 2;
    else
      return false;
    data_before(text, sign, false);
    for (size_t s = src.find("{%", body); s != std::string::npos; s = src.find("{%", s + 2)) {
      char esign = s + 2 < src.size() && (src[s + 2] == '-' || src[s + 2] == '+') ? src[s + 2] : 0;
      size_t r = skip_space(src, s + 2 + (esign ? 1 : 0));
      if (src.compare(r, 6, "endraw") != 0) continue;
      r = skip_space(src, r + 6);
      char csign = 0;
      if (r < src.size() && (src[r] == '-' || src[r] == '+')) csign = src[r++];
      if (src.compare(r, 2, "%}") != 0) continue;
      line_starting = false;
      data_before(std::string_view(src.data() + body, s - body), esign, false);
      pos = after_end(r + 2, csign, opt.trim_blocks);
      line_starting = pos > 0 && src[pos - 1] == '\n';
      return true;
    }
    fail(at, "missing end of raw directive");
  }

  // Tokens inside {{ }} / {% %} up to the matching end; returns the position after it.
  size_t lex_tag(size_t p, bool is_var) {
    std::string balance;
    size_t n = src.size();
    while (true) {
      p = skip_space(src, p);
      if (p >= n)
        fail(p, is_var ? "unexpected end of template, expected '}}'"
                       : "unexpected end of template, expected '%}'");
      if (balance.empty()) {
        if (is_var) {
          if (src.compare(p, 3, "-}}") == 0) {
            toks.push_back({Tok::VarEnd, uint32_t(p), {}});
            size_t q = skip_space(src, p + 3);
            line_starting = q > 0 && src[q - 1] == '\n';
            return q;
          }
          if (src.compare(p, 2, "}}") == 0) {
            toks.push_back({Tok::VarEnd, uint32_t(p), {}});
            line_starting = false;
            return p + 2;
          }
        } else {
          char sign = 0;
          if ((src[p] == '-' || src[p] == '+') && src.compare(p + 1, 2, "%}") == 0) sign = src[p];
          if (sign || src.compare(p, 2, "%}") == 0) {
            toks.push_back({Tok::BlockEnd, uint32_t(p), {}});
            size_t q = after_end(p + (sign ? 3 : 2), sign, opt.trim_blocks);
            line_starting = q > 0 && src[q - 1] == '\n';
            return q;
          }
        }
      }
      char c = src[p];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p;
        while (e < n && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) e++;
        toks.push_back({Tok::Name, uint32_t(p), src.substr(p, e - p)});
        p = e;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two)
          if (src.compare(p, 2, t) == 0) op = t;
        if (op.empty()) {
          if (!std::strchr("+-/*%~[](){}<>=.:|,;", c))
            fail(p, str_cat("unexpected char '", std::string(1, c), "'"));
          op = std::string(1, c);
        }
        if (c == '(' || c == '[' || c == '{') balance += c == '(' ? ')' : c == '[' ? ']' : '}';
        if (op.size() == 1 && (c == ')' || c == ']' || c == '}')) {
          if (balance.empty()) fail(p, str_cat("unexpected '", op, "'"));
          if (balance.back() != c)
            fail(p, str_cat("unexpected '", op, "', expected '", std::string(1, balance.back()), "'"));
          balance.pop_back();
        }
        toks.push_back({Tok::Op, uint32_t(p), op});
        p += op.size();
      }
    }
  }

  size_t lex_number(size_t p) {
    size_t n = src.size(), s = p;
    auto digits = [&](size_t q) {
      size_t st = q;
      while (q < n &&
             (std::isdigit(static_cast<unsigned char>(src[q])) ||
              (src[q] == '_' && q > st && q + 1 < n && std::isdigit(static_cast<unsigned char>(src[q + 1])))))
        q++;
      return q;
    };
    if (src[p] == '0' && p + 1 < n && std::strchr("xXoObB", src[p + 1]) && p + 2 < n) {
      int base = std::tolower(src[p + 1]) == 'x' ? 16 : std::tolower(src[p + 1]) == 'o' ? 8 : 2;
      size_t q = p + 2;
      std::string d;
      while (q < n && (std::isxdigit(static_cast<unsigned char>(src[q])) || src[q] == '_')) {
        if (src[q] != '_') d += src[q];
        q++;
      }
      errno = 0;
      int64_t v = d.empty() ? 0 : std::strtoll(d.c_str(), nullptr, base);
      if (errno) fail(s, "integer literal out of range");
      toks.push_back({Tok::Int, uint32_t(s), {}, v});
      return q;
    }
    size_t q = digits(p);
    bool is_float = false;
    if (q + 1 < n && src[q] == '.' && std::isdigit(static_cast<unsigned char>(src[q + 1]))) {
      q = digits(q + 1);
      is_float = true;
    }
    if (q < n && (src[q] == 'e' || src[q] == 'E')) {
      size_t r = q + 1;
      if (r < n && (src[r] == '+' || src[r] == '-')) r++;
      if (r < n && std::isdigit(static_cast<unsigned char>(src[r]))) {
        q = digits(r);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = s; i < q; i++)
      if (src[i] != '_') text += src[i];
    Token t{is_float ? Tok::Float : Tok::Int, uint32_t(s), text};
    if (is_float) {
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.i = std::strtoll(text.c_str(), nullptr, 10);
      if (errno) fail(s, "integer literal out of range");
    }
    toks.push_back(t);
    return q;
  }

  // A Python string literal, decoded as jinja2 does (unicode-escape).
  size_t lex_string(size_t p) {
    char q = src[p];
    size_t i = p + 1, n = src.size();
    std::string out;
    while (true) {
      if (i >= n) fail(p, "unexpected end of string");
      char c = src[i];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        i++;
        continue;
      }
      if (i + 1 >= n) fail(p, "unexpected end of string");
      char e = src[i + 1];
      i += 2;
      auto hex = [&](int count) {
        uint32_t v = 0;
        for (int k = 0; k < count; k++) {
          if (i >= n || !std::isxdigit(static_cast<unsigned char>(src[i])))
            fail(i, "truncated \\x / \\u escape in string");
          char h = src[i++];
          v = v * 16 +
              uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
        }
        return v;
      };
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
          out += utf8_encode(std::u32string(1, char32_t(hex(2))));
          break;
        case 'u':
          out += utf8_encode(std::u32string(1, char32_t(hex(4))));
          break;
        case 'U': {
          uint32_t v = hex(8);
          if (v > 0x10FFFF) fail(p, "illegal Unicode character in string");
          out += utf8_encode(std::u32string(1, char32_t(v)));
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = uint32_t(e - '0');
            for (int k = 0; k < 2 && i < n && src[i] >= '0' && src[i] <= '7'; k++)
              v = v * 8 + uint32_t(src[i++] - '0');
            out += utf8_encode(std::u32string(1, char32_t(v)));
          } else {
            out += '\\';
            out += e;  // unknown escapes stay as written
          }
      }
    }
    toks.push_back({Tok::String, uint32_t(p), out});
    return i + 1;
  }
};

// ---- parser
// -------------------------------------------------------------------------------------------------

constexpr int kMaxNesting =
    200;  // expression / block nesting: deeper input is an error, not a stack overflow

struct Parser {
  const Program& prog;
  std::vector<Token>& toks;
  size_t i = 0;
  int depth = 0;

  struct Nest {
    Parser& p;
    explicit Nest(Parser& pp) : p(pp) {
      if (++p.depth > kMaxNesting)
        p.fail(p.cur().pos, str_cat("nesting deeper than ", kMaxNesting, " levels"));
    }
    ~Nest() { p.depth--; }
  };

  [[noreturn]] void fail(uint32_t pos, const std::string& msg) {
    throw Error(str_cat(prog.where(pos), ": syntax error: ", msg));
  }
  const Token& cur() const { return toks[i]; }
  const Token& peek(size_t k = 1) const { return toks[std::min(i + k, toks.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  std::string describe(const Token& t) const {
    if (t.type == Tok::Name || t.type == Tok::Op) return "'" + t.text + "'";
    return tok_desc(t.type);
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur().pos, str_cat("expected '", op, "', got ", describe(cur())));
    i++;
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail(cur().pos, str_cat("expected a name, got ", describe(cur())));
    return toks[i++].text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd)
      fail(cur().pos, str_cat("expected token 'end of statement block', got ", describe(cur())));
    i++;
  }

  static ExprPtr mk(ExprType t, uint32_t pos) {
    auto e = std::make_unique<Expr>();
    e->type = t;
    e->pos = pos;
    return e;
  }

  // ---- expressions (jinja2/parser.py precedence) ----
  ExprPtr parse_expression(bool with_condexpr = true) {
    Nest nest(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }
  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      uint32_t pos = cur().pos;
      i++;
      ExprPtr cond = parse_or();
      ExprPtr els;
      if (is_name("else")) {
        i++;
        els = parse_condexpr();
      }
      auto c = mk(ExprType::Cond, pos);
      c->kids.push_back(std::move(e));
      c->kids.push_back(std::move(cond));
      if (els) c->kids.push_back(std::move(els));
      e = std::move(c);
    }
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      auto n = mk(ExprType::Or, cur().pos);
      i++;
      n->kids.push_back(std::move(e));
      n->kids.push_back(parse_and());
      e = std::move(n);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      auto n = mk(ExprType::And, cur().pos);
      i++;
      n->kids.push_back(std::move(e));
      n->kids.push_back(parse_not());
      e = std::move(n);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Nest nest(*this);
      auto n = mk(ExprType::Not, cur().pos);
      i++;
      n->kids.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    uint32_t pos = cur().pos;
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        i++;
      } else if (is_name("in")) {
        op = "in";
        i++;
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        op = "notin";
        i += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = mk(ExprType::Compare, pos);
        cmp->kids.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->kids.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, uint32_t pos) {
    auto n = mk(ExprType::Binary, pos);
    n->name = op;
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return n;
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      uint32_t pos = cur().pos;
      i++;
      e = binary(op, std::move(e), parse_concat(), pos);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      uint32_t pos = cur().pos;
      i++;
      e = binary("~", std::move(e), parse_math2(), pos);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      uint32_t pos = cur().pos;
      i++;
      e = binary(op, std::move(e), parse_pow(), pos);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      uint32_t pos = cur().pos;
      i++;
      e = binary("**", std::move(e), parse_unary(true), pos);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      auto n = mk(is_op("-") ? ExprType::Neg : ExprType::Pos, cur().pos);
      i++;
      n->kids.push_back(parse_unary(false));
      e = std::move(n);
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }
  ExprPtr parse_primary() {
    const Token& t = cur();
    uint32_t pos = t.pos;
    if (t.type == Tok::Name) {
      i++;
      if (t.text == "true" || t.text == "True") return lit(Value(true), pos);
      if (t.text == "false" || t.text == "False") return lit(Value(false), pos);
      if (t.text == "none" || t.text == "None") return lit(Value(nullptr), pos);
      auto n = mk(ExprType::Name, pos);
      n->name = t.text;
      return n;
    }
    if (t.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) s += toks[i++].text;  // adjacent literals concatenate
      return lit(Value(std::move(s)), pos);
    }
    if (t.type == Tok::Int) {
      i++;
      return lit(Value(t.i), pos);
    }
    if (t.type == Tok::Float) {
      i++;
      return lit(Value(t.f), pos);
    }
    if (is_op("(")) {
      i++;
      ExprPtr e = parse_tuple(true, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      i++;
      auto n = mk(ExprType::List, pos);
      while (!is_op("]")) {
        if (!n->kids.empty()) expect_op(",");
        if (is_op("]")) break;
        n->kids.push_back(parse_expression());
      }
      expect_op("]");
      return n;
    }
    if (is_op("{")) {
      i++;
      auto n = mk(ExprType::Dict, pos);
      while (!is_op("}")) {
        if (!n->kids.empty()) expect_op(",");
        if (is_op("}")) break;
        n->kids.push_back(parse_expression());
        expect_op(":");
        n->kids.push_back(parse_expression());
      }
      expect_op("}");
      return n;
    }
    fail(pos, str_cat("unexpected ", describe(t)));
  }
  ExprPtr lit(Value v, uint32_t pos) {
    auto n = mk(ExprType::Literal, pos);
    n->lit = std::move(v);
    return n;
  }
  // `a, b` (an implicit tuple) where jinja2 allows one; `explicit_parens`: inside ( ).
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, bool simplified = false) {
    uint32_t pos = cur().pos;
    std::vector<ExprPtr> items;
    bool trailing_comma = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        i++;
        trailing_comma = true;
      }
      if (is_op(")") || cur().type == Tok::BlockEnd || cur().type == Tok::VarEnd ||
          (cur().type == Tok::Name &&
           (cur().text == "in" || cur().text == "if" || cur().text == "recursive")))
        break;
      if (simplified) {
        auto n = mk(ExprType::Name, cur().pos);
        n->name = expect_name();
        items.push_back(std::move(n));
      } else {
        items.push_back(parse_expression(with_condexpr));
      }
      trailing_comma = false;
    }
    if (items.size() == 1 && !trailing_comma) return std::move(items[0]);
    if (items.empty() && !explicit_parens)
      fail(pos, str_cat("expected an expression, got ", describe(cur())));
    auto t = mk(ExprType::Tuple, pos);
    t->kids = std::move(items);
    return t;
  }
  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        uint32_t pos = cur().pos;
        i++;
        if (cur().type == Tok::Name) {
          auto n = mk(ExprType::Attr, pos);
          n->name = toks[i++].text;
          n->kids.push_back(std::move(e));
          e = std::move(n);
        } else if (cur().type == Tok::Int) {
          auto n = mk(ExprType::Item, pos);
          n->kids.push_back(std::move(e));
          n->kids.push_back(lit(Value(toks[i].i), toks[i].pos));
          i++;
          e = std::move(n);
        } else {
          fail(cur().pos, str_cat("expected a name after '.', got ", describe(cur())));
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        auto n = mk(ExprType::Call, e->pos);  // errors point at the callee
        n->kids.push_back(std::move(e));
        parse_call_args(n->args);
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_subscript(ExprPtr target) {
    uint32_t pos = cur().pos;
    expect_op("[");
    ExprPtr parts[3];
    bool is_slice = false;
    int k = 0;
    while (true) {
      if (is_op(":")) {
        if (k >= 2) fail(cur().pos, "too many ':' in a slice");
        is_slice = true;
        i++;
        k++;
        continue;
      }
      if (is_op("]")) break;
      if (parts[k]) fail(cur().pos, str_cat("expected ']', got ", describe(cur())));
      parts[k] = is_slice ? parse_expression() : parse_tuple(true, false);
      if (!is_slice && !is_op(":")) break;
    }
    expect_op("]");
    if (!is_slice) {
      if (!parts[0]) fail(pos, "expected a subscript");
      auto n = mk(ExprType::Item, pos);
      n->kids.push_back(std::move(target));
      n->kids.push_back(std::move(parts[0]));
      return n;
    }
    auto n = mk(ExprType::Slice, pos);
    n->kids.push_back(std::move(target));
    for (auto& p : parts) n->kids.push_back(std::move(p));
    return n;
  }
  void parse_call_args(CallArgs& a) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*")) {
        i++;
        a.star = parse_expression();
      } else if (is_op("**")) {
        i++;
        a.dstar = parse_expression();
      } else if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string k = toks[i].text;
        i += 2;
        a.kw.emplace_back(k, parse_expression());
      } else {
        if (!a.kw.empty()) fail(cur().pos, "positional argument after keyword argument");
        a.pos.push_back(parse_expression());
      }
    }
    expect_op(")");
  }
  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        i++;
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        auto n = mk(ExprType::Call, e->pos);  // errors point at the callee
        n->kids.push_back(std::move(e));
        parse_call_args(n->args);
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_filter(ExprPtr input) {
    uint32_t pos = cur().pos;
    std::string name = expect_name();
    while (is_op(".")) {  // dotted filter names
      i++;
      name += "." + expect_name();
    }
    if (!has_filter(name)) fail(pos, str_cat("no filter named '", name, "'"));
    auto n = mk(ExprType::Filter, pos);
    n->name = name;
    if (input) n->kids.push_back(std::move(input));
    if (is_op("(")) parse_call_args(n->args);
    return n;
  }
  ExprPtr parse_test(ExprPtr input) {
    uint32_t pos = cur().pos;
    i++;  // is
    bool negated = false;
    if (is_name("not")) {
      i++;
      negated = true;
    }
    std::string name = expect_name();
    while (is_op(".")) {
      i++;
      name += "." + expect_name();
    }
    if (!has_test(name)) fail(pos, str_cat("no test named '", name, "'"));
    auto n = mk(ExprType::Test, pos);
    n->name = name;
    n->negated = negated;
    n->kids.push_back(std::move(input));
    if (is_op("(")) {
      parse_call_args(n->args);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
               !(cur().type == Tok::Name &&
                 (cur().text == "else" || cur().text == "or" || cur().text == "and" || cur().text == "is"))) {
      if (is_name("is")) fail(cur().pos, "you cannot chain multiple tests with is");
      n->args.pos.push_back(parse_postfix(parse_primary()));
    }
    return n;
  }

  // ---- statements ----
  // Parses until a block tag named in `ends`; leaves i at that tag's name and returns its name.
  std::string parse_body(Body& body, std::initializer_list<const char*> ends) {
    Nest nest(*this);
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::End) {
        if (ends.size() == 0) return {};
        std::string want;
        for (const char* e : ends) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
        fail(t.pos, str_cat("unexpected end of template, expected ", want));
      }
      if (t.type == Tok::Data) {
        auto s = std::make_unique<Stmt>();
        s->type = StmtType::Text;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        i++;
      } else if (t.type == Tok::VarBegin) {
        i++;
        auto s = std::make_unique<Stmt>();
        s->type = StmtType::Output;
        s->pos = cur().pos;
        s->expr = parse_tuple(true, false);
        if (cur().type != Tok::VarEnd)
          fail(cur().pos, str_cat("expected token 'end of print statement', got ", describe(cur())));
        i++;
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        i++;
        if (cur().type != Tok::Name) fail(cur().pos, str_cat("expected a tag name, got ", describe(cur())));
        const std::string& tag = cur().text;
        for (const char* e : ends)
          if (tag == e) return tag;
        parse_statement(body);
      } else {
        fail(t.pos, str_cat("unexpected ", describe(t)));
      }
    }
  }

  void end_tag(const char* name) {
    // i is at the end tag's name (parse_body returned it)
    i++;
    (void)name;
    expect_block_end();
  }

  void parse_statement(Body& body) {
    const Token& t = cur();
    uint32_t pos = t.pos;
    std::string tag = t.text;
    i++;
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    if (tag == "if") {
      s->type = StmtType::If;
      ExprPtr cond = parse_tuple(true, false);
      expect_block_end();
      while (true) {
        Body b;
        std::string end = parse_body(b, {"elif", "else", "endif"});
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "elif") {
          i++;
          cond = parse_tuple(true, false);
          expect_block_end();
          continue;
        }
        if (end == "else") {
          i++;
          expect_block_end();
          parse_body(s->else_body, {"endif"});
        }
        end_tag("endif");
        break;
      }
    } else if (tag == "for") {
      s->type = StmtType::For;
      ExprPtr target = parse_tuple(true, false, true);
      if (target->type == ExprType::Name)
        s->targets.push_back(target->name);
      else
        for (auto& k : target->kids) s->targets.push_back(k->name);
      if (!is_name("in")) fail(cur().pos, str_cat("expected 'in', got ", describe(cur())));
      i++;
      s->expr = parse_tuple(false, false);
      if (is_name("if")) {
        i++;
        s->cond = parse_expression();
      }
      if (is_name("recursive")) {
        i++;
        s->recursive = true;
      }
      expect_block_end();
      std::string end = parse_body(s->body, {"endfor", "else"});
      if (end == "else") {
        i++;
        expect_block_end();
        parse_body(s->else_body, {"endfor"});
      }
      end_tag("endfor");
    } else if (tag == "set") {
      // set NAME = expr | set NAME.ATTR = expr | set A, B = expr | set NAME %}...{% endset
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "." &&
          peek(2).type == Tok::Name) {
        s->type = StmtType::SetAttr;
        auto obj = mk(ExprType::Name, cur().pos);
        obj->name = toks[i].text;
        s->cond = std::move(obj);
        s->text = toks[i + 2].text;
        i += 3;
        expect_op("=");
        s->expr = parse_tuple(true, false);
        expect_block_end();
      } else {
        ExprPtr target = parse_tuple(true, false, true);
        if (target->type == ExprType::Name)
          s->targets.push_back(target->name);
        else
          for (auto& k : target->kids) s->targets.push_back(k->name);
        if (is_op("=")) {
          i++;
          s->type = StmtType::Set;
          s->expr = parse_tuple(true, false);
          expect_block_end();
        } else {
          if (s->targets.size() != 1) fail(pos, "a block set assigns one name");
          s->type = StmtType::SetBlock;
          s->text = s->targets[0];
          while (is_op("|")) {
            i++;
            s->filters.push_back(parse_filter(nullptr));
          }
          expect_block_end();
          parse_body(s->body, {"endset"});
          end_tag("endset");
        }
      }
    } else if (tag == "macro") {
      s->type = StmtType::Macro;
      s->text = expect_name();
      parse_signature(*s);
      expect_block_end();
      parse_body(s->body, {"endmacro"});
      end_tag("endmacro");
    } else if (tag == "call") {
      s->type = StmtType::CallBlock;
      if (is_op("(")) parse_signature(*s);
      s->expr = parse_expression();
      if (s->expr->type != ExprType::Call) fail(s->expr->pos, "expected a call after {% call %}");
      expect_block_end();
      parse_body(s->body, {"endcall"});
      end_tag("endcall");
    } else if (tag == "filter") {
      s->type = StmtType::FilterBlock;
      s->filters.push_back(parse_filter(nullptr));
      while (is_op("|")) {
        i++;
        s->filters.push_back(parse_filter(nullptr));
      }
      expect_block_end();
      parse_body(s->body, {"endfilter"});
      end_tag("endfilter");
    } else if (tag == "with") {
      s->type = StmtType::With;
      while (cur().type != Tok::BlockEnd) {
        if (!s->assigns.empty()) expect_op(",");
        std::string n = expect_name();
        expect_op("=");
        s->assigns.emplace_back(n, parse_expression());
      }
      expect_block_end();
      parse_body(s->body, {"endwith"});
      end_tag("endwith");
    } else if (tag == "generation") {
      // transformers' AssistantTracker: marks assistant text for masks; renders its body unchanged.
      expect_block_end();
      Body b;
      parse_body(b, {"endgeneration"});
      end_tag("endgeneration");
      for (auto& st : b) body.push_back(std::move(st));
      return;
    } else if (tag == "break" || tag == "continue") {
      s->type = tag == "break" ? StmtType::Break : StmtType::Continue;
      expect_block_end();
    } else {
      fail(pos, str_cat("encountered unknown tag '", tag, "'"));
    }
    body.push_back(std::move(s));
  }

  void parse_signature(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.targets.empty()) expect_op(",");
      if (is_op(")")) break;
      s.targets.push_back(expect_name());
      if (is_op("=")) {
        i++;
        s.defaults.push_back(parse_expression());
      } else {
        if (!s.defaults.empty() && s.defaults.back())
          fail(cur().pos, "non-default argument follows default argument");
        s.defaults.push_back(nullptr);
      }
    }
    expect_op(")");
  }
};

}  // namespace

std::unique_ptr<Program> parse_program(std::string_view text, std::string name, const Options& opt) {
  auto prog = std::make_unique<Program>();
  prog->name = std::move(name);
  prog->options = opt;
  // Newlines normalized to \n (jinja2: \r\n and \r are line breaks too), one trailing newline dropped.
  std::string& src = prog->source;
  src.reserve(text.size());
  for (size_t k = 0; k < text.size(); k++) {
    if (text[k] == '\r') {
      src += '\n';
      if (k + 1 < text.size() && text[k + 1] == '\n') k++;
    } else {
      src += text[k];
    }
  }
  if (!opt.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  ZAYA_CHECK(src.size() < (1ull << 31), prog->name, ": template larger than 2 GiB");
  Lexer lx{*prog, src, opt, {}};
  lx.run();
  Parser ps{*prog, lx.toks};
  std::string end = ps.parse_body(prog->body, {});
  (void)end;
  return prog;
}

}  // namespace zaya::jinja::detail
