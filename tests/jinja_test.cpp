// The Jinja interpreter (src/serve/jinja.h) against Python jinja2: every real chat template of
// tests/data/chat_templates over many conversations, and the language-feature cases, byte for byte with the
// outputs tools/reference/render_chat_templates.py recorded in cases.json (transformers' environment). Then
// the unit tests jinja2 cannot record for us: error messages with template:line:column, the limits that stop
// a hostile template, the API, timing.
#include "serve/jinja.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

using zaya::jinja::Options;
using zaya::jinja::Template;
using zaya::jinja::Value;

namespace {

const std::string kData = std::string(ZAYA_SOURCE_DIR) + "/tests/data/chat_templates/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string template_path(const std::string& name) {
  if (name == "zaya1.jinja") return std::string(ZAYA_SOURCE_DIR) + "/configs/chat_templates/zaya1.jinja";
  return kData + name;
}

const nlohmann::ordered_json& cases() {
  static const nlohmann::ordered_json j = nlohmann::ordered_json::parse(read_file(kData + "cases.json"));
  return j;
}

// strftime_now renders the recorded UTC time, in UTC.
Options fixed_time_options() {
  setenv("TZ", "UTC", 1);
  tzset();
  Options o;
  o.now = cases()["now"].get<int64_t>();
  return o;
}

std::string render(const std::string& text,
                   const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  return Template::parse(text, "t").render(ctx);
}

// The message of the zaya::Error rendering `text` raises ("" if none).
std::string error_of(const std::string& text,
                     const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(), Options opt = {}) {
  try {
    Template::parse(text, "t.jinja", opt).render(ctx);
  } catch (const zaya::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(JinjaTemplates, RealChatTemplatesMatchJinja2ByteForByte) {
  Options opt = fixed_time_options();
  std::map<std::string, Template> templates;
  std::map<std::string, int> per_template;
  int matched = 0, errors = 0, total = 0;
  for (auto& c : cases()["cases"]) {
    std::string name = c["template"];
    if (!templates.count(name))
      templates.emplace(name, Template::parse(read_file(template_path(name)), name, opt));
    total++;
    std::string got, err;
    try {
      got = templates.at(name).render(c["context"]);
    } catch (const zaya::Error& e) {
      err = e.what();
    }
    std::string what = name + " / " + c["conversation"].get<std::string>() +
                       " add_generation_prompt=" + c["context"]["add_generation_prompt"].dump() +
                       (c["context"].contains("enable_thinking")
                            ? " enable_thinking=" + c["context"]["enable_thinking"].dump()
                            : "");
    if (c.contains("error")) {
      EXPECT_FALSE(err.empty()) << what << ": jinja2 raised " << c["error"] << " but zaya rendered:\n" << got;
      if (!err.empty()) matched++, errors++, per_template[name]++;
    } else {
      EXPECT_EQ(err, "") << what;
      EXPECT_EQ(got, c["expected"].get<std::string>()) << what;
      if (err.empty() && got == c["expected"].get<std::string>()) matched++, per_template[name]++;
    }
  }
  std::printf(
      "chat templates: %d of %d cases match jinja2 byte for byte (%d of them expected errors), %zu "
      "templates\n",
      matched, total, errors, templates.size());
  for (auto& [n, k] : per_template) std::printf("  %-52s %d\n", n.c_str(), k);
  EXPECT_GE(templates.size(), 12u);
  EXPECT_GE(total, 700);
  EXPECT_EQ(matched, total);
}

TEST(JinjaTemplates, LanguageFeaturesMatchJinja2) {
  Options opt = fixed_time_options();
  int matched = 0, total = 0;
  for (auto& c : cases()["features"]) {
    total++;
    std::string text = c["template"], got, err;
    try {
      got = Template::parse(text, "feature", opt).render(c["context"]);
    } catch (const zaya::Error& e) {
      err = e.what();
    }
    if (c.contains("error")) {
      EXPECT_FALSE(err.empty()) << text << "\njinja2 raised " << c["error"] << ", zaya rendered: " << got;
      matched += !err.empty();
    } else {
      EXPECT_EQ(err, "") << text;
      EXPECT_EQ(got, c["expected"].get<std::string>()) << text;
      matched += err.empty() && got == c["expected"].get<std::string>();
    }
  }
  std::printf("language features: %d of %d cases match jinja2\n", matched, total);
  EXPECT_GE(total, 80);
  EXPECT_EQ(matched, total);
}

// ---- the ZAYA1 template: the conventions of the reconstruction, stated directly ----

TEST(JinjaZaya1, Conventions) {
  Template t = Template::parse(read_file(template_path("zaya1.jinja")), "zaya1.jinja");
  nlohmann::ordered_json ctx = {{"bos_token", "<bos>"}, {"add_generation_prompt", true}, {"tools", nullptr}};
  ctx["messages"] = {{{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(t.render(ctx), "<bos><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  ctx["enable_thinking"] = false;
  EXPECT_EQ(t.render(ctx),
            "<bos><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n</think>\n\n");
  // Tools in the system turn, a tool call in <zyphra_tool_call> XML, the result as a user turn.
  ctx["tools"] = {{{"type", "function"}, {"function", {{"name", "list_directory"}}}}};
  ctx["messages"] = {
      {{"role", "user"}, {"content", "ls"}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls", {{{"function", {{"name", "list_directory"}, {"arguments", {{"path", "/tmp"}}}}}}}}},
      {{"role", "tool"}, {"content", "{\"files\": []}"}}};
  std::string out = t.render(ctx);
  EXPECT_EQ(
      out,
      "<bos><|im_start|>system\n# Tools\n\n<tools>\n<function>\n<name>list_directory</name>\n</function>\n"
      "</tools>\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n"
      "<zyphra_tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
      "</parameter>\n</function>\n</zyphra_tool_call><|im_end|>\n<|im_start|>user\nls<|im_end|>\n"
      "<|im_start|>assistant\n<think>\n</think>\n\n<zyphra_tool_call>\n<function=list_directory>\n"
      "<parameter=path>\n/tmp\n</parameter>\n</function>\n</zyphra_tool_call>\n<|im_end|>\n"
      "<|im_start|>user\n<zyphra_tool_response>{\"files\": []}</zyphra_tool_response><|im_end|>\n"
      "<|im_start|>assistant\n<think>\n</think>\n\n");
}

// ---- unit tests of what the jinja2 cases cannot show ----

TEST(JinjaWhitespace, TrimAndLstripBlocksAreTransformersDefaults) {
  EXPECT_EQ(render("<{% if true %}\nx\n{% endif %}>"), "<x\n>");
  EXPECT_EQ(render("a\n    {% if true %}b{% endif %}"), "a\nb");
  EXPECT_EQ(render("a\n    {{ 'b' }}"), "a\n    b");  // lstrip_blocks leaves {{ }} alone
  EXPECT_EQ(render("text\n"), "text");                // one trailing newline dropped
  EXPECT_EQ(render("text\n\n"), "text\n");
  Options raw;
  raw.trim_blocks = raw.lstrip_blocks = false;
  raw.keep_trailing_newline = true;
  EXPECT_EQ(Template::parse("a\n  {% if true %}\nb{% endif %}\n", "t", raw).render(Value::dict()),
            "a\n  \nb\n");
}

TEST(JinjaErrors, NameTemplateLineAndColumn) {
  EXPECT_EQ(error_of("line one\n  {{ missing.attr }}"), "t.jinja:2:13: 'missing' is undefined");
  EXPECT_EQ(error_of("{% for x in [1] %}\n{% endif %}"),
            "t.jinja:2:4: syntax error: encountered unknown tag 'endif'");
  EXPECT_EQ(error_of("{% if true %}never closed"),
            "t.jinja:1:26: syntax error: unexpected end of template, expected 'elif' or 'else' or 'endif'");
  EXPECT_EQ(error_of("{{ 1 + }}"), "t.jinja:1:8: syntax error: unexpected end of print statement");
  EXPECT_EQ(error_of("{{ x | nosuchfilter }}"), "t.jinja:1:8: syntax error: no filter named 'nosuchfilter'");
  EXPECT_EQ(error_of("{{ x is nosuchtest }}"), "t.jinja:1:6: syntax error: no test named 'nosuchtest'");
  EXPECT_EQ(error_of("{{ 'unterminated }}"), "t.jinja:1:4: syntax error: unexpected end of string");
  EXPECT_EQ(error_of("{# open comment"), "t.jinja:1:1: syntax error: missing end of comment tag");
  EXPECT_EQ(error_of("{{ (1 ] }}"), "t.jinja:1:7: syntax error: unexpected ']', expected ')'");
  EXPECT_EQ(error_of("\n\n   {{ raise_exception('Only user and assistant roles') }}"),
            "t.jinja:3:7: raise_exception: Only user and assistant roles");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"), "t.jinja:1:8: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("{% set x = 1 %}{% set x.y = 2 %}"),
            "t.jinja:1:19: cannot assign attribute on non-namespace object");
  EXPECT_EQ(error_of("{% break %}"), "t.jinja:1:4: 'break' outside a loop");
  // Columns count code points, as an editor shows them.
  EXPECT_EQ(error_of("héllo {{ nope() }}"), "t.jinja:1:10: 'nope' is undefined");
}

TEST(JinjaLimits, HostileTemplatesStopWithAClearError) {
  Options opt;
  opt.max_steps = 100000;
  EXPECT_NE(
      error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {}, opt)
          .find("exceeded the limit of 100000 evaluation steps"),
      std::string::npos);
  opt = Options{};
  opt.max_output_bytes = 1000;
  EXPECT_NE(error_of("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", {}, opt)
                .find("output exceeds the limit of 1000"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000 }}", {}, opt).find("exceeds the output limit"), std::string::npos);
  EXPECT_NE(
      error_of(
          "{% set ns = namespace(s='xx') %}{% for i in range(20) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
          {}, opt)
          .find("exceeds the output limit"),
      std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
                .find("macro recursion deeper than 100"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .find("nesting deeper than"),
            std::string::npos);
  std::string deep;
  for (int i = 0; i < 1000; i++) deep += "{% if true %}";
  EXPECT_NE(error_of(deep).find("nesting deeper than"), std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000) }}").find("Range too big"), std::string::npos);
  // Values stay acyclic and shallow, so printing, comparing and freeing them cannot overflow the stack.
  EXPECT_NE(
      error_of("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}")
          .find("value nested deeper than 256 levels"),
      std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns.self = [ns] %}{{ ns }}")
                .find("a namespace attribute cannot hold a namespace object"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  // INT64_MIN / -1 traps on x86: Python's big ints overflow here instead, and % -1 is 0.
  EXPECT_NE(error_of("{{ (-9223372036854775807 - 1) // -1 }}").find("integer overflow"), std::string::npos);
  EXPECT_EQ(
      render("{{ (-9223372036854775807 - 1) % -1 }} {{ (-9223372036854775807 - 1) is divisibleby(-1) }}"),
      "0 True");
}

TEST(JinjaApi, ParseOnceRenderManyAndValues) {
  Template t = Template::parse("{{ greeting }}, {{ who | upper }}!", "hello");
  EXPECT_EQ(t.name(), "hello");
  Value ctx = Value::dict();
  ctx.dict_mut().set("greeting", Value("Hi"));
  ctx.dict_mut().set("who", Value("zaya"));
  EXPECT_EQ(t.render(ctx), "Hi, ZAYA!");
  EXPECT_EQ(t.render(nlohmann::json{{"greeting", "Bye"}, {"who", "you"}}), "Bye, YOU!");
  EXPECT_THROW(t.render(Value(3)), zaya::Error);
  // Values print as Python's str() and dump as Python's json.dumps.
  EXPECT_EQ(Value::from_json(nlohmann::json::parse("[1, 2.0, true, null, \"a\"]")).to_str(),
            "[1, 2.0, True, None, 'a']");
  EXPECT_EQ(zaya::jinja::python_float_repr(0.1), "0.1");
  EXPECT_EQ(zaya::jinja::python_float_repr(1e22), "1e+22");
  EXPECT_EQ(zaya::jinja::python_float_repr(123456789.0), "123456789.0");
  EXPECT_EQ(zaya::jinja::python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(zaya::jinja::python_float_repr(0.00001), "1e-05");
  EXPECT_EQ(zaya::jinja::json_dumps(
                Value::from_json(nlohmann::ordered_json::parse(R"({"b":[1,{"c":"é"}],"a":{}})")), 2),
            "{\n  \"b\": [\n    1,\n    {\n      \"c\": \"é\"\n    }\n  ],\n  \"a\": {}\n}");
}

TEST(JinjaPerformance, TypicalChatRendersWellUnderAMillisecond) {
  Options opt = fixed_time_options();
  Template t = Template::parse(read_file(template_path("Qwen-Qwen3-0.6B.jinja")), "qwen3", opt);
  const nlohmann::ordered_json* ctx = nullptr;
  for (auto& c : cases()["cases"])
    if (c["template"] == "Qwen-Qwen3-0.6B.jinja" && c["conversation"] == "tools_user" &&
        c.contains("expected")) {
      ctx = &c["context"];
      break;
    }
  ASSERT_NE(ctx, nullptr);
  Value v = Value::from_json(*ctx);
  const int n = 2000;
  auto t0 = std::chrono::steady_clock::now();
  size_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += t.render(v).size();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
  std::printf("Qwen3 template, system + user with 2 tool definitions: %.1f us per render (%zu bytes)\n", us,
              bytes / n);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  EXPECT_LT(us, 20000.0);  // sanitizer builds are ~25x slower; the bar is for optimized builds
#else
  EXPECT_LT(us, 1000.0);
#endif
}
