// Fuzz target for lm-eval task files (eval/tasks.h: JSONL records in the Hugging Face datasets' fields, read
// by `zaya eval run`). Input: byte 0 picks the task (b % 8: hellaswag, arc_easy, piqa, winogrande, mmlu,
// lambada_openai, gsm8k, or the generic schema under another name) and the few-shot count k = (b / 8) % 4;
// the rest is JSONL text, written as the task's scored split and as its few-shot split. load_task throws
// zaya::Error or returns documents, whose requests are then built with k shots as lm-eval builds them (or
// zaya::Error: too few documents for k). Properties (a violation aborts, which the driver reports as a
// crash): a multiple-choice item's gold answer is one of its choices, and its per-choice lists agree.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/tasks.h"
#include "fuzz_temp_dir.h"

namespace {

namespace fs = std::filesystem;

const char* const kTasks[] = {"hellaswag", "arc_easy",       "piqa",  "winogrande",
                              "mmlu",      "lambada_openai", "gsm8k", "my_task"};
constexpr size_t kCount = sizeof(kTasks) / sizeof(kTasks[0]);

// DATA_DIR: a folder per task under a per-process temporary directory.
const std::string& data_dir() {
  static const std::string root = [] {
    const std::string r = zaya::fuzz::temp_dir("zaya_eval_tasks_fuzz");
    for (const char* t : kTasks) fs::create_directories(r + "/" + t);
    return r;
  }();
  return root;
}

zaya::eval::Task task_named(const std::string& name) {
  const zaya::eval::Task* t = zaya::eval::find_task(name);
  return t ? *t : zaya::eval::generic_task(name);
}

void write_file(const std::string& path, const char* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data, std::streamsize(size));
}

[[noreturn]] void violated(const char* what, const std::string& id) {
  std::fprintf(stderr, "eval_tasks_fuzz: %s (%s)\n", what, id.c_str());
  std::abort();
}

}  // namespace

// Built-in seeds: each task's scored split from tests/data/eval, with k = 0 and k = 1.
extern "C" size_t LLVMFuzzerSeedCount() {
  return 2 * kCount;
}
extern "C" std::vector<uint8_t> LLVMFuzzerSeed(size_t i) {
  const size_t task = i % kCount;
  const zaya::eval::Task t = task_named(kTasks[task]);
  std::ifstream f(
      std::string(ZAYA_SOURCE_DIR) + "/tests/data/eval/" + kTasks[task] + "/" + t.eval_split + ".jsonl",
      std::ios::binary);
  std::vector<uint8_t> bytes{uint8_t(task + (i / kCount) * kCount)};
  bytes.insert(bytes.end(), std::istreambuf_iterator<char>(f), {});
  return bytes;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string name = kTasks[data[0] % kCount];
  const int k = (data[0] / kCount) % 4;
  const zaya::eval::Task t = task_named(name);
  const std::string dir = data_dir() + "/" + name;
  const char* text = reinterpret_cast<const char*>(data + 1);
  write_file(dir + "/" + t.eval_split + ".jsonl", text, size - 1);
  if (!t.fewshot_split.empty() && t.fewshot_split != t.eval_split)
    write_file(dir + "/" + t.fewshot_split + ".jsonl", text, size - 1);
  try {
    const zaya::eval::TaskData d = zaya::eval::load_task(name, data_dir(), k > 0);
    switch (d.task.output_type) {
      case zaya::eval::OutputType::MultipleChoice:
        for (const zaya::eval::McItem& it : zaya::eval::build_mc_items(d, k)) {
          const size_t n = it.num_choices();
          if (it.gold < 0 || size_t(it.gold) >= n) violated("gold is not one of the choices", it.id);
          if (it.choice_bytes.size() != n || (it.contexts.size() != 1 && it.contexts.size() != n) ||
              (it.continuations.size() != 1 && it.continuations.size() != n))
            violated("per-choice lists disagree in length", it.id);
        }
        break;
      case zaya::eval::OutputType::Loglikelihood:
        zaya::eval::build_ll_items(d, k);
        break;
      case zaya::eval::OutputType::GenerateUntil:
        zaya::eval::build_gen_items(d, k);
        break;
    }
  } catch (const zaya::Error&) {
  }
  return 0;
}
