// Fuzzes the tokenizer: the tokenizer.json loader on mutated small synthetic tokenizer files, and
// encode/decode/StreamDecoder on arbitrary bytes (invalid UTF-8 included) with two fixed synthetic
// tokenizers (Gemma-like: "▁" normalizer + BPE with byte fallback; and GPT-2 style byte-level BPE).
//
// Input: the first byte selects the mode; the rest is the payload.
//   even first byte: the payload is a tokenizer.json text. Loading must either succeed or throw
//                    zaya::Error; a loaded tokenizer then encodes and decodes a few texts.
//   odd first byte:  the payload is text. encode() must not crash and must round-trip: for the Gemma-like
//                    tokenizer decode(encode(x)) == x with invalid UTF-8 repaired to U+FFFD and "▁" read
//                    as a space, for the byte-level one decode(encode(x)) == repaired x. The payload is
//                    also decoded as token ids, directly and streamed, and both must agree.
// Any violated property aborts, which the driver reports as a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using nlohmann::json;

namespace {

const uint8_t* g_input = nullptr;  // the input being run, saved when a property fails
size_t g_input_size = 0;

// Saves the input to tokenizer_fuzz_crash.bin (replay: tokenizer_fuzz tokenizer_fuzz_crash.bin) and aborts.
[[noreturn]] void violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "tokenizer_fuzz: property violated: %s (%s)\n", what, detail.c_str());
  if (FILE* f = std::fopen("tokenizer_fuzz_crash.bin", "wb")) {
    std::fwrite(g_input, 1, g_input_size, f);
    std::fclose(f);
    std::fprintf(stderr, "tokenizer_fuzz: input saved to tokenizer_fuzz_crash.bin\n");
  }
  std::abort();
}

// Adds token to vocab (if new) and returns its id.
int add_token(json& vocab, const std::string& token) {
  if (!vocab.contains(token)) vocab[token] = int(vocab.size());
  return vocab[token].get<int>();
}

// A small Gemma-like tokenizer.json: special tokens, 256 byte tokens, some characters, merges that build
// a few English words, added tokens ("\n", "▁▁", <start_of_turn>), normalizer " " -> "▁", Split
// pre-tokenizer, <bos> template, Replace/ByteFallback/Fuse decoder.
std::string gemma_like_json() {
  json vocab = json::object();
  for (const char* t : {"<pad>", "<eos>", "<bos>", "<unk>"}) add_token(vocab, t);
  for (int b = 0; b < 256; b++) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add_token(vocab, name);
  }
  for (const char* c : {"▁", "\n", "\t", ".", ",", "!", "?", "'", "-", "(", ")", "é", "ü", "中", "文", "😀"})
    add_token(vocab, c);
  for (char c = 'a'; c <= 'z'; c++) add_token(vocab, std::string(1, c));
  for (char c = 'A'; c <= 'Z'; c++) add_token(vocab, std::string(1, c));
  for (char c = '0'; c <= '9'; c++) add_token(vocab, std::string(1, c));
  const std::vector<std::pair<std::string, std::string>> merge_list = {
      {"▁", "t"},  {"h", "e"},   {"▁t", "he"},  {"i", "n"},   {"▁", "a"},     {"a", "n"},
      {"an", "d"}, {"▁", "and"}, {"▁", "▁"},    {"▁▁", "▁"},  {"o", "n"},     {"e", "r"},
      {"▁", "o"},  {"▁o", "n"},  {"in", "g"},   {"▁", "s"},   {"e", "s"},     {"r", "e"},
      {"▁", "w"},  {"o", "r"},   {"▁w", "or"},  {"l", "d"},   {"▁wor", "ld"}, {"H", "e"},
      {"l", "l"},  {"He", "ll"}, {"Hell", "o"}, {"中", "文"}, {".", "▁"},     {"\n", "\n"}};
  json merges = json::array();
  for (const auto& [a, b] : merge_list) {
    add_token(vocab, a + b);
    merges.push_back({a, b});
  }
  int n = int(vocab.size());
  json added = json::array({
      {{"id", 0}, {"content", "<pad>"}, {"special", true}},
      {{"id", 1}, {"content", "<eos>"}, {"special", true}},
      {{"id", 2}, {"content", "<bos>"}, {"special", true}},
      {{"id", 3}, {"content", "<unk>"}, {"special", true}},
      {{"id", vocab["\n"]}, {"content", "\n"}, {"special", false}},
      {{"id", vocab["▁▁"]}, {"content", "▁▁"}, {"special", false}},
      {{"id", n}, {"content", "<start_of_turn>"}, {"special", true}},
      {{"id", n + 1}, {"content", "<end_of_turn>"}, {"special", true}},
  });
  json doc = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}},
      {"pre_tokenizer",
       {{"type", "Split"},
        {"pattern", {{"String", " "}}},
        {"behavior", "MergedWithPrevious"},
        {"invert", false}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {2}}, {"tokens", {"<bos>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  return doc.dump();
}

// A small GPT-2 style byte-level tokenizer.json (old "left right" merge strings).
std::string byte_level_json() {
  json vocab = json::object();
  std::vector<std::string> byte_symbol(256);
  for (int b = 0; b < 256; b++) {
    zaya::utf8_append(byte_symbol[size_t(b)], zaya::byte_to_code_point(uint8_t(b)));
    add_token(vocab, byte_symbol[size_t(b)]);
  }
  const std::vector<std::pair<std::string, std::string>> merge_list = {
      {"Ġ", "t"},  {"h", "e"},   {"Ġt", "he"}, {"i", "n"}, {"Ġ", "a"}, {"a", "n"},
      {"an", "d"}, {"Ġ", "and"}, {"Ġ", "Ġ"},   {"o", "n"}, {"e", "r"}, {"Ċ", "Ċ"}};
  json merges = json::array();
  for (const auto& [a, b] : merge_list) {
    add_token(vocab, a + b);
    merges.push_back(a + " " + b);
  }
  int n = int(vocab.size());
  json doc = {
      {"added_tokens", json::array({{{"id", n}, {"content", "<|endoftext|>"}, {"special", true}}})},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
  return doc.dump();
}

const zaya::Tokenizer& gemma_like() {
  static const zaya::Tokenizer tok = zaya::Tokenizer::from_json(gemma_like_json(), "gemma_like.json");
  return tok;
}

const zaya::Tokenizer& byte_level() {
  static const zaya::Tokenizer tok = zaya::Tokenizer::from_json(byte_level_json(), "byte_level.json");
  return tok;
}

std::string replace_metaspace(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, "\u2581") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// decode(ids) and the streamed decode of ids must agree (ids taken modulo the vocabulary).
void check_decoders(const zaya::Tokenizer& tok, const uint8_t* data, size_t size) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size && ids.size() < 64; i += 2)
    ids.push_back(int32_t((data[i] | (data[i + 1] << 8)) % tok.vocab_size()));
  for (bool skip : {false, true}) {
    std::string whole = tok.decode(ids, skip);
    if (!zaya::utf8_is_valid(whole)) violated("decode() returned invalid UTF-8", "");
    zaya::StreamDecoder stream(tok, skip);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    if (streamed != whole) violated("streamed decode differs from decode()", whole);
  }
}

void exercise(const zaya::Tokenizer& tok, std::string_view text) {
  std::vector<int32_t> ids = tok.encode(text);
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size())
      violated("encode() returned an id out of range", std::to_string(id));
  }
  std::string decoded = tok.decode(tok.encode(text, false));
  if (!zaya::utf8_is_valid(decoded)) violated("decode() returned invalid UTF-8", "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  g_input = data;
  g_input_size = size;
  std::string payload(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    try {
      zaya::Tokenizer tok = zaya::Tokenizer::from_json(payload, "fuzz.json");
      exercise(tok, "Hello world, the end.\n<bos>\xff\xfe 中文 😀");
      exercise(tok, payload.substr(0, 256));
      check_decoders(tok, data, size);
    } catch (const zaya::Error&) {
      // A clear error is the expected outcome for a broken file.
    }
    return 0;
  }
  const zaya::Tokenizer& g = gemma_like();
  std::string repaired = zaya::utf8_repair(payload);
  std::string round = g.decode(g.encode(payload, false));
  if (round != replace_metaspace(repaired)) violated("Gemma-like round trip", repaired);
  std::vector<int32_t> with_bos = g.encode(payload);
  if (with_bos.empty() || with_bos[0] != 2) violated("Gemma-like encode() must start with <bos>", "");
  const zaya::Tokenizer& b = byte_level();
  if (b.decode(b.encode(payload)) != repaired) violated("byte-level round trip", repaired);
  check_decoders(g, data, size);
  check_decoders(b, data, size);
  return 0;
}

extern "C" size_t LLVMFuzzerSeedCount() {
  return 6;
}

extern "C" std::vector<uint8_t> LLVMFuzzerSeed(size_t i) {
  std::string seed;
  switch (i) {
    case 0:
      seed = std::string(1, '\0') + gemma_like_json();
      break;
    case 1:
      seed = std::string(1, '\2') + byte_level_json();
      break;
    case 2:
      seed = "\1Hello world, the end.\n\nand then <start_of_turn>user\n中文 😀 é ü<end_of_turn>  x";
      break;
    case 3:
      seed = "\3  leading\ttabs\r\n▁▁ literal ▁ and <bos> <eo <0x41> \xc3\xa9 \xf0\x9f\x98\x80";
      break;
    case 4:
      seed = "\5\xff\xfe\xc0\xaf\xe2\x82 invalid \xed\xa0\x80 utf8 \xf4\x90\x80\x80";
      break;
    default:
      seed = std::string(1, '\4') +
             R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})";
      break;
  }
  return std::vector<uint8_t>(seed.begin(), seed.end());
}
