// A libFuzzer-compatible driver for g++ builds (g++ has no -fsanitize=fuzzer), with a small coverage-guided
// loop like libFuzzer's.
//
//   TARGET [options] [CORPUS_DIR | FILE ...]
//
// 1. The corpus: the target's built-in seeds (optional LLVMFuzzerSeed()) plus every file under the given
//    directories / the given files (fuzz/corpus/<target>/: small real files of the format). Each runs once
//    first, so `TARGET crash.bin` replays a saved crash.
// 2. The mutation loop: pick a corpus input, apply 1-4 mutations (bit flips, truncations, inserted bytes,
//    extreme integers, JSON characters, duplicated chunks, erased chunks, splicing with another corpus
//    input, dictionary tokens: JSON tokens plus the quoted strings of the corpus, interesting numbers in
//    place of decimal numbers), run it. Stops after --iterations N or --seconds S, whichever comes first.
// 3. Coverage feedback, when zaya's code is built with -fsanitize-coverage=trace-pc (the sanitizer build,
//    ZAYA_FUZZ_COVERAGE): the compiler calls __sanitizer_cov_trace_pc() at every basic block; it records
//    the block (its hashed PC) and the edge from the previous block in two maps. A mutated input that
//    reaches a PC or an edge never seen before joins the corpus and is mutated further. Without the
//    instrumentation nothing is recorded and the loop mutates the starting corpus only (as before).
// 4. The seed varies per run (time-based) and is printed; --seed N or ZAYA_FUZZ_SEED=N reproduces a run
//    (the same inputs in the same order for the same corpus; --iterations makes the length exact).
//    A crash (signal, abort, failed ZAYA_ASSERT, uncaught exception, sanitizer report) writes the input
//    to a file, prints its path and the seed, and the process dies as it would have.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Optional: a target may provide valid seed inputs to mutate.
extern "C" __attribute__((weak)) size_t LLVMFuzzerSeedCount();
extern "C" __attribute__((weak)) std::vector<uint8_t> LLVMFuzzerSeed(size_t i);
// In the sanitizer runtime only (null otherwise): called after a sanitizer report, before the process dies.
extern "C" __attribute__((weak)) void __sanitizer_set_death_callback(void (*callback)(void));

// ---------------------------------------------------------------------------------------------------------
// Coverage: two byte maps of 2^22 entries (4 MB each; zaya's code has ~10^5 basic blocks, so few collide).
// The driver itself is compiled without -fsanitize-coverage, so only the target and zaya's code report.

namespace {
constexpr int kMapBits = 22;
constexpr size_t kMapSize = size_t(1) << kMapBits;
uint8_t g_pc_map[kMapSize];     // hashed PC of a basic block -> seen
uint8_t g_edge_map[kMapSize];   // hash(previous block, block) -> seen
size_t g_pcs = 0, g_edges = 0;  // distinct entries set in each map (racy across threads: a hint, not a count)
thread_local uint32_t t_prev = 0;  // the previous block on this thread (AFL-style edges)
}  // namespace

extern "C" __attribute__((no_sanitize_address, no_sanitize("undefined"))) void __sanitizer_cov_trace_pc() {
  const uint64_t pc = uint64_t(reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
  const uint32_t h = uint32_t((pc * 0x9E3779B97F4A7C15ull) >> (64 - kMapBits));
  if (!g_pc_map[h]) {
    g_pc_map[h] = 1;
    g_pcs++;
  }
  const uint32_t e = h ^ t_prev;
  t_prev = h >> 1;  // shifted so that A->B and B->A differ, and A->A is not 0
  if (!g_edge_map[e]) {
    g_edge_map[e] = 1;
    g_edges++;
  }
}

// UBSan's report ends the process through its own runtime, which does not call the death callback set in
// ASan's (they are two runtimes): abort() instead, so that the SIGABRT handler saves the input. Environment
// UBSAN_OPTIONS still apply on top.
extern "C" const char* __ubsan_default_options() {
  return "abort_on_error=1:print_stacktrace=1";
}

namespace {

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------------------------------------
// Crash reporting. The input being run is saved by the sanitizer's death callback or a signal handler (both
// async-signal-safe: open/write only), to a path fixed at startup.

const uint8_t* g_cur_data = nullptr;
size_t g_cur_size = 0;
// False outside LLVMFuzzerTestOneInput: a leak report at exit saves nothing.
std::atomic<bool> g_running{false};
std::atomic<int64_t> g_run_start_ms{0};  // steady clock at the start of the current input (the watchdog)
long g_cur_index = -1;                   // mutated input number, -1 for a corpus file
std::string g_crash_path;  // set at startup; the handlers only read them (no allocation after a crash)
std::string g_crash_note;  // " (seed S)\nfuzz: the input is saved to ...", formatted at startup

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w <= 0) return;
    c += w;
    n -= size_t(w);
  }
}

void write_long(int fd, long v) {
  char buf[24];
  int i = 23;
  buf[i] = '\0';
  bool neg = v < 0;
  unsigned long u = neg ? 0ul - (unsigned long)v : (unsigned long)v;
  do {
    buf[--i] = char('0' + u % 10);
    u /= 10;
  } while (u > 0);
  if (neg) buf[--i] = '-';
  write_all(fd, buf + i, size_t(23 - i));
}

void save_crash() {
  static volatile sig_atomic_t saved = 0;
  if (!g_running || saved) return;
  saved = 1;
  int fd = ::open(g_crash_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    write_all(fd, g_cur_data, g_cur_size);
    ::close(fd);
  }
  const char* head = "\nfuzz: CRASH on ";
  write_all(2, head, std::strlen(head));
  if (g_cur_index >= 0) {
    const char* m = "mutated input #";
    write_all(2, m, std::strlen(m));
    write_long(2, g_cur_index + 1);
  } else {
    const char* m = "a corpus file";
    write_all(2, m, std::strlen(m));
  }
  write_all(2, g_crash_note.data(), g_crash_note.size());
}

void on_fatal_signal(int sig) {
  save_crash();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_crash_handlers() {
  if (__sanitizer_set_death_callback) {
    // ASan/UBSan report SEGV, BUS, FPE themselves and then call this; abort() (a failed ZAYA_ASSERT, an
    // uncaught exception) is not theirs (handle_abort=0), so it gets the handler below.
    __sanitizer_set_death_callback(save_crash);
    ::signal(SIGABRT, on_fatal_signal);
    return;
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, on_fatal_signal);
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void run_one(const uint8_t* data, size_t size, long index) {
  // The target reads an exactly sized heap copy (as under libFuzzer), so that ASan reports a read one byte
  // past the input: a vector's spare capacity (after a truncation, say) would hide it. An empty input comes
  // as a null pointer, as an empty vector's data() may.
  std::unique_ptr<uint8_t[]> copy(size > 0 ? new uint8_t[size] : nullptr);
  if (size > 0) std::memcpy(copy.get(), data, size);
  data = copy.get();
  g_cur_data = data;
  g_cur_size = size;
  g_cur_index = index;
  g_run_start_ms = now_ms();
  g_running = true;
  LLVMFuzzerTestOneInput(data, size);
  g_running = false;
}

// A hang is a failure too: one input running longer than `timeout_s` is saved like a crash, then abort().
void watchdog(double timeout_s) {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (g_running && double(now_ms() - g_run_start_ms) > 1000 * timeout_s) {
      const char* m = "\nfuzz: TIMEOUT: one input ran longer than --timeout";
      write_all(2, m, std::strlen(m));
      save_crash();
      std::abort();
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Mutations.

// JSON tokens every target's format uses (safetensors headers, configs, manifests, tokenizer.json) or that
// parsers mishandle (huge / negative / fractional counts, escapes, surrogates, deep nesting).
// clang-format off
const char* const kJsonTokens[] = {
    "{", "}", "[", "]", "\"", ":", ",", "null", "true", "false", "0", "-1", "-0", "1.5", "1e308", "-1e308", "1e-9",
    "2147483647", "2147483648", "4294967295", "4294967296", "9223372036854775807", "9223372036854775808",
    "-9223372036854775808", "18446744073709551615", "18446744073709551616", "NaN", "\"\"", "[]", "{}",
    "[[[[[[[[", "\\u0000", "\\ud800", "\\\"", "\\\\", "\"\\u00e9\"", "[0,0]", "[1,2,3]", "1e+400"};

// Interesting values for decimal numbers found in the input.
const char* const kNumbers[] = {
    "0", "1", "-1", "2", "3", "7", "8", "63", "64", "255", "256", "65535", "65536", "2147483647", "2147483648",
    "-2147483649", "4294967296", "9223372036854775807", "-9223372036854775808", "18446744073709551615", "1e18",
    "1e400", "0.5", "-0.0", "1e-320"};
// clang-format on

struct Mutator {
  std::mt19937_64 rng;
  const std::vector<Bytes>* corpus = nullptr;
  std::vector<std::string> dict;  // kJsonTokens + quoted strings from the starting corpus
  size_t max_len = 4096;

  size_t below(size_t n) { return n == 0 ? 0 : size_t(rng() % n); }

  void insert(Bytes& in, size_t pos, const uint8_t* p, size_t n) {
    in.insert(in.begin() + long(pos), p, p + n);
  }

  // One mutation; returns false when it did not apply (e.g. an empty input).
  bool mutate_once(Bytes& in) {
    switch (rng() % 12) {
      case 0:  // flip a bit
        if (in.empty()) return false;
        in[below(in.size())] ^= uint8_t(1u << (rng() % 8));
        return true;
      case 1:  // truncate
        if (in.empty()) return false;
        in.resize(below(in.size()));
        return true;
      case 2: {  // insert random bytes
        size_t pos = below(in.size() + 1), cnt = 1 + below(16);
        for (size_t k = 0; k < cnt; k++) in.insert(in.begin() + long(pos), uint8_t(rng()));
        return true;
      }
      case 3: {  // overwrite 8 bytes with an extreme little-endian integer
        if (in.size() < 8) return false;
        const uint64_t vals[] = {0, ~0ull, 1ull << 63, 0x7fffffffffffffffull, uint64_t(in.size()), rng()};
        uint64_t v = vals[below(6)];
        std::memcpy(in.data() + below(in.size() - 7), &v, 8);
        return true;
      }
      case 4: {  // replace a byte with a JSON-significant character
        if (in.empty()) return false;
        const char chars[] = "{}[]\":,0-9e.\\ ";
        in[below(in.size())] = uint8_t(chars[below(sizeof(chars) - 1)]);
        return true;
      }
      case 5: {  // duplicate a chunk
        if (in.size() <= 2) return false;
        size_t a = below(in.size()), len = 1 + below(std::min<size_t>(64, in.size() - a));
        Bytes chunk(in.begin() + long(a), in.begin() + long(a + len));
        insert(in, below(in.size()), chunk.data(), chunk.size());
        return true;
      }
      case 6: {  // erase a chunk
        if (in.size() <= 1) return false;
        size_t a = below(in.size()), len = 1 + below(std::min<size_t>(64, in.size() - a));
        in.erase(in.begin() + long(a), in.begin() + long(a + len));
        return true;
      }
      case 7: {  // overwrite 1, 2 or 4 bytes with an interesting integer
        const size_t w = size_t(1) << below(3);
        if (in.size() < w) return false;
        const uint32_t vals[] = {0,      1,      0x7f,       0x80,        0xff,        0x7fff,
                                 0x8000, 0xffff, 0x7fffffff, 0x80000000u, 0xffffffffu, uint32_t(in.size())};
        uint32_t v = vals[below(12)];
        std::memcpy(in.data() + below(in.size() - w + 1), &v, w);
        return true;
      }
      case 8: {  // splice: a prefix of this input and a suffix of another corpus input
        if (!corpus || corpus->empty()) return false;
        const Bytes& other = (*corpus)[below(corpus->size())];
        if (other.empty()) return false;
        in.resize(below(in.size() + 1));
        size_t from = below(other.size());
        in.insert(in.end(), other.begin() + long(from), other.end());
        return true;
      }
      case 9: {  // insert a chunk of another corpus input
        if (!corpus || corpus->empty()) return false;
        const Bytes& other = (*corpus)[below(corpus->size())];
        if (other.empty()) return false;
        size_t a = below(other.size()), len = 1 + below(std::min<size_t>(256, other.size() - a));
        insert(in, below(in.size() + 1), other.data() + a, len);
        return true;
      }
      case 10: {  // a dictionary token, inserted or written over the bytes at a random place
        const std::string& t = dict[below(dict.size())];
        size_t pos = below(in.size() + 1);
        if (rng() % 2 && pos + t.size() <= in.size()) {
          std::memcpy(in.data() + pos, t.data(), t.size());
        } else {
          insert(in, pos, reinterpret_cast<const uint8_t*>(t.data()), t.size());
        }
        return true;
      }
      default: {  // replace a decimal number (the first one at or after a random place) by an interesting one
        if (in.empty()) return false;
        size_t a = below(in.size());
        while (a < in.size() && !(in[a] >= '0' && in[a] <= '9')) a++;
        if (a == in.size()) return false;
        if (a > 0 && in[a - 1] == '-') a--;
        size_t b = a + 1;
        while (b < in.size() && (std::strchr("0123456789.eE+-", in[b]) != nullptr)) b++;
        const char* num = kNumbers[below(sizeof(kNumbers) / sizeof(kNumbers[0]))];
        in.erase(in.begin() + long(a), in.begin() + long(b));
        insert(in, a, reinterpret_cast<const uint8_t*>(num), std::strlen(num));
        return true;
      }
    }
  }

  Bytes mutate(const Bytes& parent) {
    Bytes in = parent;
    int n_mut = 1 + int(rng() % 4);
    for (int m = 0, tries = 0; m < n_mut && tries < 16; tries++) m += mutate_once(in) ? 1 : 0;
    if (in.size() > max_len) in.resize(max_len);
    return in;
  }
};

// Quoted strings of 1..40 bytes from the corpus ("dtype", "data_offsets", "BF16", ...), as dictionary tokens.
void add_quoted_strings(const Bytes& in, std::set<std::string>* out) {
  for (size_t i = 0; i < in.size() && out->size() < 4096; i++) {
    if (in[i] != '"') continue;
    size_t j = i + 1;
    while (j < in.size() && j - i <= 41 && in[j] != '"' && in[j] != '\n') j++;
    if (j < in.size() && in[j] == '"' && j - i >= 2 && j - i <= 41) {
      out->insert(std::string(in.begin() + long(i), in.begin() + long(j + 1)));
      i = j;
    }
  }
}

bool read_file(const std::string& path, Bytes* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void usage(const char* argv0) {
  std::printf(
      "usage: %s [options] [CORPUS_DIR | FILE ...]\n"
      "  --iterations N  mutated inputs to run (default 10000; 0 = only the corpus; with --seconds and no\n"
      "                  --iterations: no limit)\n"
      "  --seconds S     time budget of the mutation loop (whichever of the two limits comes first)\n"
      "  --seed N        the run's random seed (default: ZAYA_FUZZ_SEED, else time-based; always printed)\n"
      "  --max-len N     inputs are cut to N bytes (default: max(4096, twice the largest corpus input))\n"
      "  --crash-dir D   where a crashing input is written (default: the working directory)\n"
      "  --timeout S     an input running longer than S seconds is a failure (default 60)\n"
      "  --no-feedback   mutate only the starting corpus even when the build has coverage\n",
      argv0);
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = -1;
  double seconds = 0, timeout = 60;
  bool have_seed = false, feedback_wanted = true;
  uint64_t seed = 0;
  size_t max_len = 0;
  std::string crash_dir = ".";
  std::vector<std::string> paths;
  for (int i = 1; i < argc; i++) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--iterations") && has_value) {
      iterations = std::atol(argv[++i]);
    } else if (!std::strcmp(argv[i], "--seconds") && has_value) {
      seconds = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--seed") && has_value) {
      seed = std::strtoull(argv[++i], nullptr, 10);
      have_seed = true;
    } else if (!std::strcmp(argv[i], "--timeout") && has_value) {
      timeout = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--max-len") && has_value) {
      max_len = size_t(std::atol(argv[++i]));
    } else if (!std::strcmp(argv[i], "--crash-dir") && has_value) {
      crash_dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--no-feedback")) {
      feedback_wanted = false;
    } else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      usage(argv[0]);
      return 0;
    } else if (argv[i][0] == '-' && argv[i][1] == '-') {
      std::fprintf(stderr, "fuzz: unknown option %s\n", argv[i]);
      usage(argv[0]);
      return 2;
    } else {
      paths.push_back(argv[i]);
    }
  }
  if (iterations < 0) iterations = seconds > 0 ? -1 : 10000;  // -1: no limit (the time budget stops it)
  if (!have_seed) {
    if (const char* env = std::getenv("ZAYA_FUZZ_SEED"); env && *env) {
      seed = std::strtoull(env, nullptr, 10);
    } else {
      // Time and pid: two runs started in the same nanosecond (ctest -j) still differ.
      seed = uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) ^
             (uint64_t(::getpid()) << 40);
      seed %= 1000000000000ull;  // short enough to copy from a log
    }
  }
  const std::string target = std::filesystem::path(argv[0]).filename().string();
  std::error_code ec;
  std::filesystem::path crash_file = std::filesystem::absolute(crash_dir, ec).lexically_normal() /
                                     (target + "-crash-" + std::to_string(seed) + ".bin");
  g_crash_path = crash_file.string();
  const std::string seed_str = std::to_string(seed);
  g_crash_note = " (seed " + seed_str + ")\nfuzz: the input is saved to " + g_crash_path +
                 "\nfuzz: replay it: " + argv[0] + " " + g_crash_path +
                 "\nfuzz: or rerun the sequence: " + argv[0] + " --seed " + seed_str +
                 " [the same corpus arguments] (mutated input #N comes again with --iterations N)\n";
  std::printf("fuzz: %s seed %llu (reproduce with --seed %llu or ZAYA_FUZZ_SEED=%llu)\n", target.c_str(),
              (unsigned long long)seed, (unsigned long long)seed, (unsigned long long)seed);
  std::fflush(stdout);
  install_crash_handlers();
  if (timeout > 0) std::thread(watchdog, timeout).detach();

  // The starting corpus: built-in seeds, then the files (directories: every regular file, sorted).
  std::vector<Bytes> corpus;
  if (LLVMFuzzerSeedCount) {
    for (size_t i = 0; i < LLVMFuzzerSeedCount(); i++) corpus.push_back(LLVMFuzzerSeed(i));
  }
  const size_t n_builtin = corpus.size();
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    if (std::filesystem::is_directory(p)) {
      std::vector<std::string> in_dir;
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file()) in_dir.push_back(e.path().string());
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else {
      files.push_back(p);
    }
  }
  for (const std::string& f : files) {
    Bytes b;
    if (!read_file(f, &b)) {
      std::fprintf(stderr, "fuzz: cannot read %s\n", f.c_str());
      return 2;
    }
    corpus.push_back(std::move(b));
  }

  // Every corpus input runs once (a crash file given on the command line replays here).
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < corpus.size(); i++) run_one(corpus[i].data(), corpus[i].size(), -1);
  const size_t pcs_corpus = g_pcs;
  const bool instrumented = g_pcs > 0;
  const bool feedback = instrumented && feedback_wanted;
  if (corpus.empty()) corpus.push_back({});

  Mutator mut;
  mut.rng.seed(seed);
  mut.corpus = &corpus;
  size_t largest = 0;
  std::set<std::string> dict(std::begin(kJsonTokens), std::end(kJsonTokens));
  for (const Bytes& b : corpus) {
    largest = std::max(largest, b.size());
    add_quoted_strings(b, &dict);
  }
  mut.dict.assign(dict.begin(), dict.end());
  mut.max_len = max_len > 0 ? max_len : std::max<size_t>(4096, 2 * largest);
  std::string budget = iterations < 0 ? "" : std::to_string(iterations) + " inputs";
  if (seconds > 0) budget += (budget.empty() ? "" : " or ") + std::to_string(int64_t(seconds)) + " s";
  std::printf(
      "fuzz: corpus %zu built-in seeds + %zu files, dictionary %zu tokens, max-len %zu; budget %s; coverage "
      "feedback %s\n",
      n_builtin, files.size(), mut.dict.size(), mut.max_len, budget.c_str(),
      feedback ? "on"
               : (instrumented ? "off (--no-feedback)"
                               : "off (this build has no -fsanitize-coverage=trace-pc: random mutations "
                                 "only)"));
  if (instrumented) std::printf("fuzz: the corpus alone covers %zu PCs, %zu edges\n", pcs_corpus, g_edges);
  std::fflush(stdout);

  const size_t start_size = corpus.size();
  long it = 0;
  double last_status = 0;
  for (; iterations < 0 || it < iterations; it++) {
    const double elapsed = seconds_since(t0);
    if (seconds > 0 && elapsed >= seconds) break;
    if (elapsed - last_status >= 10) {
      last_status = elapsed;
      std::printf("fuzz: #%ld  %.0f s  corpus %zu  pcs %zu  edges %zu  %.0f inputs/s\n", it, elapsed,
                  corpus.size(), g_pcs, g_edges, double(it) / elapsed);
      std::fflush(stdout);
    }
    // Half the parents are starting inputs, half any input (starting or found). Uniform over everything
    // would starve the real files: the found inputs are mostly cheap variants of one kind (tokenizer_fuzz:
    // texts) while a mutated tokenizer.json reaches the most code. (Weighting found inputs by the coverage
    // they added measured the same.) Without feedback nothing is found: every parent is a starting input, as
    // in the old driver.
    const size_t pick = mut.rng() % 2 ? mut.below(start_size) : mut.below(corpus.size());
    const Bytes& parent = corpus[pick];
    Bytes input = mut.mutate(parent);
    const size_t pcs_before = g_pcs, edges_before = g_edges;
    run_one(input.data(), input.size(), it);
    if (feedback && (g_pcs > pcs_before || g_edges > edges_before)) corpus.push_back(std::move(input));
  }
  const double elapsed = seconds_since(t0);
  std::printf("fuzz: %ld mutated inputs and %zu files ran without a crash in %.1f s (seed %llu)", it,
              files.size(), elapsed, (unsigned long long)seed);
  if (instrumented)
    std::printf("; coverage %zu PCs, %zu edges; corpus %zu -> %zu inputs", g_pcs, g_edges, start_size,
                corpus.size());
  std::printf("\n");
  return 0;
}
