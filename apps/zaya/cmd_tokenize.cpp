// zaya tokenize: encode text to token ids, or decode ids to text, with a Hugging Face tokenizer.json.
//   zaya tokenize --tokenizer FILE (--text T | --input FILE) [--no-special] [--json]
//   zaya tokenize --tokenizer FILE --decode "1,2,3" | "[1, 2, 3]" [--skip-special] [--json]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

// "1,2,3", "1 2 3" or "[1, 2, 3]" -> ids; throws naming the first entry that is not an integer.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string item;
  auto flush = [&] {
    if (item.empty()) return;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ZAYA_CHECK(used == item.size() && v >= INT32_MIN && v <= INT32_MAX, "--decode: '", item,
               "' is not a token id (expected integers like \"1,2,3\" or \"[1, 2, 3]\")");
    ids.push_back(int32_t(v));
    item.clear();
  };
  for (size_t i = 0; i < text.size(); i++) {
    char c = text[i];
    bool bracket = (c == '[' && i == text.find_first_not_of(" \t\n")) ||
                   (c == ']' && i == text.find_last_not_of(" \t\n"));
    if (c == ',' || c == ' ' || c == '\t' || c == '\n' || bracket)
      flush();
    else
      item.push_back(c);
  }
  flush();
  return ids;
}

std::string read_input(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZAYA_CHECK(in.good(), "cannot open input file '", path, "'");
  std::ostringstream s;
  s << in.rdbuf();
  ZAYA_CHECK(!in.bad(), "cannot read input file '", path, "'");
  return s.str();
}

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Encode text to token ids, or decode token ids to text, with a tokenizer.json"};
  std::string tokenizer_path, text, input, decode;
  bool no_special = false, skip_special = false, json_out = false;
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json (Hugging Face format)")->required();
  auto* text_opt = app.add_option("--text", text, "text to encode");
  auto* input_opt = app.add_option("--input", input, "file whose bytes are encoded")->excludes(text_opt);
  app.add_option("--decode", decode, "token ids to decode: \"1,2,3\" or \"[1, 2, 3]\"")
      ->excludes(text_opt)
      ->excludes(input_opt);
  app.add_flag("--no-special", no_special,
               "encode without the special tokens the post-processor adds (<bos>)");
  app.add_flag("--skip-special", skip_special, "decode without special tokens");
  app.add_flag("--json", json_out, "print {\"ids\": [...]} or {\"text\": \"...\"}");
  ZAYA_PARSE(app, argc, argv);
  bool decoding = app.count("--decode") > 0;
  ZAYA_CHECK(decoding || app.count("--text") || app.count("--input"),
             "nothing to do: give --text TEXT, --input FILE or --decode IDS");

  zaya::Tokenizer tok = zaya::Tokenizer::load(tokenizer_path);
  if (decoding) {
    std::string out = tok.decode(parse_ids(decode), skip_special);
    if (json_out)
      std::printf("%s\n", nlohmann::json{{"text", out}}.dump().c_str());
    else
      std::printf("%s\n", out.c_str());
    return 0;
  }
  std::vector<int32_t> ids = tok.encode(app.count("--input") ? read_input(input) : text, !no_special);
  if (json_out) {
    std::printf("%s\n", nlohmann::json{{"ids", ids}}.dump().c_str());
  } else {
    std::string line;
    for (size_t i = 0; i < ids.size(); i++) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace

static zaya::app::Register reg("tokenize", "encode/decode text with a tokenizer.json", cmd_tokenize);
