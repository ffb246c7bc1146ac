// lm-evaluation-harness tasks read from local JSONL files: each task's prompt (doc_to_text / doc_to_choice /
// doc_to_target), preprocessing (process_docs), splits and few-shot rules as the task's YAML in
// EleutherAI/lm-evaluation-harness@4e7e0d4 (lm_eval/tasks/...) defines them, and the requests those
// prompts become (lm_eval/api/task.py ConfigurableTask.fewshot_context / construct_requests).
//
// Data-dir layout: one folder per task, one JSON object a line, the Hugging Face dataset's field names.
// The first split listed is scored; the second gives the few-shot examples (read only when k > 0).
//   hellaswag/{validation,train}.jsonl       Rowan/hellaswag: activity_label ctx_a ctx_b endings label
//   arc_easy/{test,train}.jsonl              allenai/ai2_arc ARC-Easy: question choices{text,label} answerKey
//   arc_challenge/{test,train}.jsonl         allenai/ai2_arc ARC-Challenge: the same fields
//   piqa/{validation,train}.jsonl            baber/piqa: goal sol1 sol2 label
//   winogrande/{validation,train}.jsonl      allenai/winogrande (xl): sentence option1 option2 answer
//   mmlu/{test,dev}.jsonl                    cais/mmlu "all": question subject choices answer
//   mmlu/{test,dev}/SUBJECT.jsonl            or one file per subject (the subject field optional there)
//   lambada_openai/test.jsonl                EleutherAI/lambada_openai: text
//   gsm8k/{test,train}.jsonl                 openai/gsm8k main: question answer
//   NAME/{test,train}.jsonl                  any other NAME, the generic schema:
//     {"context": str, "choices": [str, ...], "gold": int}; requests (context, " " + choice), metrics acc
//     and acc_norm; few-shot from train.jsonl when present, else from test.jsonl without the item itself.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/py_str.h"

namespace zaya::eval {

enum class OutputType { MultipleChoice, Loglikelihood, GenerateUntil };
const char* output_type_name(OutputType type);  // lm-eval's spelling: "multiple_choice", ...

enum class FewshotSampling {
  Random,  // lm-eval "default" sampler: Random(seed).sample(pool, k) (k + 1 then the doc dropped, see below)
  FirstN,  // lm-eval "first_n": the first k of the pool, in file order (MMLU)
};

// What lm-eval's YAML says about a task.
struct Task {
  std::string name;    // "hellaswag"; the results key (MMLU subjects: "mmlu_SUBJECT")
  double version = 0;  // metadata.version
  OutputType output_type = OutputType::MultipleChoice;
  std::vector<std::string> metrics;  // "acc", "acc_norm", "perplexity", "exact_match"
  std::vector<std::string> filters;  // filter keys: {"none"}; GSM8K {"strict-match", "flexible-extract"}
  int default_num_fewshot = 0;       // k when the user gives none
  std::string eval_split;            // file stem of the scored split: "validation", "test"
  std::string fewshot_split;         // file stem few-shot examples come from
  FewshotSampling sampling = FewshotSampling::Random;
  // lm-eval hands the eval doc to the sampler (fewshot_config.split == test_split, both unset for
  // HellaSwag/PIQA/Winogrande): draw k + 1 and drop the doc. Otherwise draw k (the pool is another split).
  bool fewshot_excludes_eval_doc = false;
  std::string target_delimiter = " ";      // between a question and its answer
  std::string fewshot_delimiter = "\n\n";  // after each few-shot example
  std::vector<std::string> until;          // generate_until stop sequences (GSM8K)
  std::string source;                      // the lm-eval file these rules come from
};

// The registered tasks (in a fixed order) and lookup by name; find_task returns nullptr for an unknown name.
const std::vector<Task>& list_tasks();
const Task* find_task(const std::string& name);
// The generic JSONL task (see the layout above) under the name `name`.
Task generic_task(const std::string& name);

// One document after the task's process_docs, in lm-eval's doc_to_* terms.
struct Doc {
  std::string where;                 // "FILE:LINE": error messages and item ids
  nlohmann::json raw;                // the record as read; few-shot exclusion compares these (rm_eval_doc)
  std::string subject;               // MMLU subject ("" elsewhere)
  std::string text;                  // doc_to_text (unused by multiple-input tasks)
  std::vector<std::string> choices;  // doc_to_choice; multiple-input tasks: one context per option
  int gold = -1;                     // index of the right choice (multiple choice), else -1
  std::string target;                // doc_to_target as text: the continuation (loglikelihood, multiple
                                     // input) or the reference answer (GSM8K)
  bool multiple_input = false;       // Winogrande: choices are contexts, target the shared continuation
};

struct TaskData {
  Task task;
  std::vector<Doc> eval_docs;     // the scored split, file order
  std::vector<Doc> fewshot_docs;  // the few-shot split (empty unless loaded)
};

// Reads the task `name` (a registered task, or the generic schema for any other name) from
// DATA_DIR/name/. The few-shot split is read when `with_fewshot` (k > 0). Throws zaya::Error naming the
// file, the line and the field for a missing file, bad JSON or a missing/mistyped field.
TaskData load_task(const std::string& name, const std::string& data_dir, bool with_fewshot);

// ---- Requests, after few-shot contexts are built -------------------------------------------------

// A multiple-choice item: one loglikelihood request (context(i), continuation(i)) per choice.
struct McItem {
  std::string id;                          // the doc's "FILE:LINE"
  std::string task;                        // the result it counts in (MMLU: "mmlu_SUBJECT")
  std::vector<std::string> contexts;       // [1] shared by every choice, or [n] one per choice (Winogrande)
  std::vector<std::string> continuations;  // [n] target_delimiter + choice, or [1] shared (Winogrande)
  std::vector<int64_t> choice_chars;       // [n] len(doc_to_choice[i]) in code points: acc_norm's divisor
  std::vector<int64_t> choice_bytes;       // [n] utf-8 bytes of doc_to_choice[i] (acc_bytes)
  int gold = 0;                            // index of the right choice
  size_t num_choices() const { return choice_chars.size(); }
  const std::string& context(size_t i) const { return contexts.size() == 1 ? contexts[0] : contexts[i]; }
  const std::string& continuation(size_t i) const {
    return continuations.size() == 1 ? continuations[0] : continuations[i];
  }
};

// A loglikelihood item (LAMBADA): perplexity from ll, acc from is_greedy.
struct LlItem {
  std::string id, task;
  std::string context;       // few-shot prefix + doc_to_text
  std::string continuation;  // doc_to_target (" " + last word for LAMBADA)
};

// A generation item (GSM8K): greedy until a stop sequence, then the answer filters.
struct GenItem {
  std::string id, task;
  std::string context;             // few-shot prefix + doc_to_text ("Question: ...\nAnswer:")
  std::string reference;           // doc_to_target: the full reference answer ("... #### 72")
  std::vector<std::string> until;  // stop sequences (the caller adds the tokenizer's EOS text, as lm-eval's
                                   // HF backend does)
};

// lm-eval's few-shot context for `doc`: description + k examples from `pool` (each doc_to_text +
// target_delimiter + answer + fewshot_delimiter) + doc_to_text(doc); one string, or one per choice for
// multiple-input tasks. Draws with a fresh Random(seed): the context lm-eval builds for the first doc it
// visits. The pool never yields `doc` itself (compared by record) when the task excludes it.
std::vector<std::string> build_fewshot_context(const Task& task, const std::vector<Doc>& pool, const Doc& doc,
                                               int k, uint64_t seed);

// Every eval doc's items in file order, with one Random(seed) stream per lm-eval task (per MMLU subject)
// that advances doc after doc as lm-eval's sampler does: the same few-shot examples as lm-eval for every
// doc. k < 0 means the task's default. Each checks the output type and that the pool has enough docs.
std::vector<McItem> build_mc_items(const TaskData& data, int k, uint64_t seed = 1234);
std::vector<LlItem> build_ll_items(const TaskData& data, int k, uint64_t seed = 1234);
std::vector<GenItem> build_gen_items(const TaskData& data, int k, uint64_t seed = 1234);

// ---- Task-specific text rules, exposed for tests ----------------------------------------------------

// lm_eval/tasks/hellaswag/utils.py preprocess: strip, " [title]" -> ". ", drop "[...]" (no newline inside),
// then "  " -> " " once, left to right.
std::string hellaswag_preprocess(const std::string& text);
// MMLU's description: "The following are multiple choice questions (with answers) about {subject with
// '_' -> ' '}.\n\n" (lm_eval/tasks/mmlu/_generate_configs.py).
std::string mmlu_description(const std::string& subject);
// The lm-eval group of an MMLU subject ("mmlu_stem", "mmlu_humanities", "mmlu_social_sciences",
// "mmlu_other"; mmlu/default/mmlu_SUBJECT.yaml "tag"), "" for a subject lm-eval does not have.
std::string mmlu_category(const std::string& subject);

}  // namespace zaya::eval
