// Fuzzes the Jinja interpreter: the input is a template, parsed and rendered with a small fixed chat context
// (messages with tool calls, tools, special tokens) under tight limits. Any input must either render or raise
// zaya::Error; nothing else may escape, nothing may crash, and the limits keep every input fast.
// Seeds: the real chat templates of tests/data/chat_templates, the ZAYA1 template, and feature snippets.
#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "serve/jinja.h"

namespace {

const char* kSnippets[] = {
    "{% for m in messages %}{{ loop.index }}{{ m.role | upper }}{% if not loop.last %},{% endif %}{% endfor "
    "%}",
    "{% set ns = namespace(x=0) %}{% for i in range(5) if i is odd %}{% set ns.x = ns.x + i %}{% endfor %}{{ "
    "ns.x }}",
    "{% macro f(a, b=2) %}{{ a ~ b }}{{ caller() if caller is defined }}{% endmacro %}{{ f(1) }}{% call f(3) "
    "%}x{% endcall %}",
    "{{ tools | tojson(indent=2) }}{{ messages[::-1] | map(attribute='content') | select | join('|') }}",
    "{{ 'a,b'.split(',') }}{{ (1, 2) }}{{ {'k': [1.5, none, true]} | dictsort }}{{ 7 // 2 ** 2 % 3 }}",
    "  {%- if x -%}\n  {{ x }}\n{%- elif y %}\n{% raw %}{{ }}{% endraw %}{# c #}{% else +%} z {% endif %}\n",
};

std::vector<std::string> load_seeds() {
  std::vector<std::string> seeds(std::begin(kSnippets), std::end(kSnippets));
  std::string dir = std::string(ZAYA_SOURCE_DIR) + "/tests/data/chat_templates/";
  std::vector<std::string> files = {std::string(ZAYA_SOURCE_DIR) + "/configs/chat_templates/zaya1.jinja"};
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 6 && n.compare(n.size() - 6, 6, ".jinja") == 0) files.push_back(dir + n);
    }
    closedir(d);
  }
  std::sort(files.begin() + 1, files.end());
  for (auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!ss.str().empty()) seeds.push_back(ss.str());
  }
  return seeds;
}

const std::vector<std::string>& seeds() {
  static const std::vector<std::string> s = load_seeds();
  return s;
}

const zaya::jinja::Value& context() {
  static const zaya::jinja::Value v = zaya::jinja::Value::from_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "sunny"},
      {"role": "assistant", "content": "<think>\nok\n</think>\n\nIt is sunny."},
      {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
      "required": ["city"]}}}],
    "documents": null, "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<bos>", "eos_token": "<eos>", "x": 1, "y": "two"
  })"));
  return v;
}

}  // namespace

extern "C" size_t LLVMFuzzerSeedCount() {
  return seeds().size();
}
extern "C" std::vector<uint8_t> LLVMFuzzerSeed(size_t i) {
  const std::string& s = seeds()[i];
  return std::vector<uint8_t>(s.begin(), s.end());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  zaya::jinja::Options opt;
  opt.max_steps = 200000;
  opt.max_output_bytes = 1 << 20;
  opt.max_call_depth = 50;
  opt.now = 1741945613;
  try {
    zaya::jinja::Template t = zaya::jinja::Template::parse(text, "fuzz.jinja", opt);
    t.render(context());
  } catch (const zaya::Error&) {
  }
  return 0;
}
