#include "eval/tasks.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "eval/py_random.h"
#include "io/strict_json.h"

namespace zaya::eval {

namespace fs = std::filesystem;
using nlohmann::json;

const char* output_type_name(OutputType type) {
  switch (type) {
    case OutputType::MultipleChoice:
      return "multiple_choice";
    case OutputType::Loglikelihood:
      return "loglikelihood";
    case OutputType::GenerateUntil:
      return "generate_until";
  }
  return "?";
}

// ---- Registry ------------------------------------------------------------------------------------

namespace {

Task make_mc_task(const std::string& name, const std::string& eval_split, bool excludes_doc,
                  const std::string& source) {
  Task t;
  t.name = name;
  t.version = 1.0;
  t.output_type = OutputType::MultipleChoice;
  t.metrics = {"acc", "acc_norm"};
  t.filters = {"none"};
  t.eval_split = eval_split;
  t.fewshot_split = "train";
  t.fewshot_excludes_eval_doc = excludes_doc;
  t.source = source;
  return t;
}

std::vector<Task> make_registry() {
  std::vector<Task> tasks;
  // hellaswag.yaml: validation scored (test_split null), few-shot from train; fewshot split and test split
  // both unset, so lm-eval passes the eval doc to the sampler.
  tasks.push_back(
      make_mc_task("hellaswag", "validation", true, "lm_eval/tasks/hellaswag/{hellaswag.yaml,utils.py}"));
  // arc_easy.yaml / arc_challenge.yaml: test scored, few-shot from train (test_split set: no exclusion).
  tasks.push_back(make_mc_task("arc_easy", "test", false, "lm_eval/tasks/arc/arc_easy.yaml"));
  tasks.push_back(make_mc_task("arc_challenge", "test", false, "lm_eval/tasks/arc/arc_challenge.yaml"));
  tasks.push_back(make_mc_task("piqa", "validation", true, "lm_eval/tasks/piqa/piqa.yaml"));
  Task wino = make_mc_task("winogrande", "validation", true,
                           "lm_eval/tasks/winogrande/{default.yaml,preprocess_winogrande.py}");
  wino.metrics = {"acc"};
  tasks.push_back(wino);
  // mmlu/default/_default_template_yaml: test scored, few-shot from dev with the first_n sampler; the
  // YAML sets no num_fewshot (0), the customary MMLU setting (and the one asked for here) is 5.
  Task mmlu =
      make_mc_task("mmlu", "test", false, "lm_eval/tasks/mmlu/default/{_default_template_yaml,_mmlu.yaml}");
  mmlu.metrics = {"acc"};
  mmlu.fewshot_split = "dev";
  mmlu.sampling = FewshotSampling::FirstN;
  mmlu.default_num_fewshot = 5;
  tasks.push_back(mmlu);
  Task lambada;
  lambada.name = "lambada_openai";
  lambada.version = 1.0;
  lambada.output_type = OutputType::Loglikelihood;
  lambada.metrics = {"perplexity", "acc"};
  lambada.filters = {"none"};
  lambada.eval_split = "test";
  // Only a test split: lm-eval falls back to test docs for few-shot and does not drop the doc; we do.
  lambada.fewshot_split = "test";
  lambada.fewshot_excludes_eval_doc = true;
  lambada.source = "lm_eval/tasks/lambada/lambada_openai.yaml";
  tasks.push_back(lambada);
  Task gsm;
  gsm.name = "gsm8k";
  gsm.version = 3.0;
  gsm.output_type = OutputType::GenerateUntil;
  gsm.metrics = {"exact_match"};
  gsm.filters = {"strict-match", "flexible-extract"};
  gsm.default_num_fewshot = 5;
  gsm.eval_split = "test";
  gsm.fewshot_split = "train";
  gsm.until = {"Question:", "</s>", "<|im_end|>"};
  gsm.source = "lm_eval/tasks/gsm8k/gsm8k.yaml";
  tasks.push_back(gsm);
  return tasks;
}

}  // namespace

const std::vector<Task>& list_tasks() {
  static const std::vector<Task> tasks = make_registry();
  return tasks;
}

const Task* find_task(const std::string& name) {
  for (const Task& t : list_tasks())
    if (t.name == name) return &t;
  return nullptr;
}

Task generic_task(const std::string& name) {
  Task t = make_mc_task(name, "test", true, "zaya generic JSONL schema (context, choices, gold)");
  t.version = 0;
  return t;
}

// ---- Text rules ---------------------------------------------------------------------------------

namespace {

// Python's str.replace(from, to): every non-overlapping occurrence, left to right, in one pass.
std::string replace_all(const std::string& text, const std::string& from, const std::string& to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(text, pos, hit - pos);
    out += to;
  }
  out.append(text, pos, std::string::npos);
  return out;
}

// re.sub(r"\[.*?\]", "", text): from each '[', the shortest run to the next ']' with no newline between.
std::string remove_bracketed(const std::string& text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '[') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != ']' && text[j] != '\n') j++;
      if (j < text.size() && text[j] == ']') {
        i = j + 1;
        continue;
      }
    }
    out += text[i++];
  }
  return out;
}

}  // namespace

std::string hellaswag_preprocess(const std::string& text) {
  std::string t = python_strip(text);
  t = replace_all(t, " [title]", ". ");
  t = remove_bracketed(t);
  return replace_all(t, "  ", " ");
}

std::string mmlu_description(const std::string& subject) {
  return "The following are multiple choice questions (with answers) about " +
         replace_all(subject, "_", " ") + ".\n\n";
}

// ---- JSONL reading -------------------------------------------------------------------------------

namespace {

struct Record {
  std::string where;  // FILE:LINE
  json value;
};

std::vector<Record> read_jsonl(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ZAYA_CHECK(f.good(), path, ": cannot read (expected a JSONL file: one JSON object a line)");
  std::vector<Record> records;
  std::string line;
  for (int64_t line_no = 1; std::getline(f, line); line_no++) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (python_strip(line).empty()) continue;
    Record r;
    r.where = str_cat(path, ":", line_no);
    r.value = parse_json_strict(line.data(), line.size(), r.where);
    ZAYA_CHECK(r.value.is_object(), r.where, ": expected a JSON object, got ", json_type_phrase(r.value));
    records.push_back(std::move(r));
  }
  return records;
}

const json& field(const Record& r, const char* name) {
  auto it = r.value.find(name);
  ZAYA_CHECK(it != r.value.end(), r.where, ": missing field '", name, "'");
  return *it;
}

std::string string_field(const Record& r, const char* name) {
  const json& v = field(r, name);
  ZAYA_CHECK(v.is_string(), r.where, ": field '", name, "' must be a string, got ", json_type_phrase(v));
  return v.get<std::string>();
}

std::vector<std::string> string_list(const Record& r, const json& v, const std::string& name) {
  ZAYA_CHECK(v.is_array() && !v.empty(), r.where, ": field '", name,
             "' must be a non-empty array of strings, got ", json_type_phrase(v));
  std::vector<std::string> out;
  for (const json& e : v) {
    ZAYA_CHECK(e.is_string(), r.where, ": field '", name, "' must hold strings, got ", json_type_phrase(e));
    out.push_back(e.get<std::string>());
  }
  return out;
}

// An integer given as a JSON integer or as a string of digits (HF exports labels both ways).
int64_t int_field(const Record& r, const char* name) {
  const json& v = field(r, name);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    const std::string s = python_strip(v.get<std::string>());
    bool digits = !s.empty() && s.size() < 10;
    for (char c : s) digits = digits && c >= '0' && c <= '9';
    ZAYA_CHECK(digits, r.where, ": field '", name, "' must be an integer, got \"", s, "\"");
    return std::stoll(s);
  }
  fail(str_cat(r.where, ": field '", name, "' must be an integer, got ", json_type_phrase(v)));
}

void check_gold(const Record& r, const char* name, int64_t gold, size_t n) {
  ZAYA_CHECK(gold >= 0 && gold < int64_t(n), r.where, ": field '", name, "' is ", gold, ", outside the ", n,
             " choices");
}

// ---- One reader per format: the record -> lm-eval's doc_to_text / doc_to_choice / doc_to_target -------

// hellaswag/utils.py process_docs: query = preprocess(activity_label + ": " + ctx_a + " " +
// ctx_b.capitalize()); choices = preprocessed endings; gold = int(label). doc_to_text "{{query}}".
Doc read_hellaswag(const Record& r) {
  Doc d;
  const std::string ctx = string_field(r, "ctx_a") + " " + python_capitalize(string_field(r, "ctx_b"));
  d.text = hellaswag_preprocess(string_field(r, "activity_label") + ": " + ctx);
  for (const std::string& e : string_list(r, field(r, "endings"), "endings"))
    d.choices.push_back(hellaswag_preprocess(e));
  const int64_t gold = int_field(r, "label");
  check_gold(r, "label", gold, d.choices.size());
  d.gold = int(gold);
  return d;
}

// arc_easy.yaml: "Question: {{question}}\nAnswer:", choices.text, gold = choices.label.index(answerKey).
Doc read_arc(const Record& r) {
  Doc d;
  d.text = "Question: " + string_field(r, "question") + "\nAnswer:";
  const json& choices = field(r, "choices");
  ZAYA_CHECK(choices.is_object(), r.where, ": field 'choices' must be an object {text, label}, got ",
             json_type_phrase(choices));
  ZAYA_CHECK(choices.contains("text") && choices.contains("label"), r.where,
             ": field 'choices' must have 'text' and 'label'");
  d.choices = string_list(r, choices["text"], "choices.text");
  const std::vector<std::string> labels = string_list(r, choices["label"], "choices.label");
  ZAYA_CHECK(labels.size() == d.choices.size(), r.where, ": 'choices.label' has ", labels.size(),
             " entries, 'choices.text' ", d.choices.size());
  const std::string key = string_field(r, "answerKey");
  const auto it = std::find(labels.begin(), labels.end(), key);
  ZAYA_CHECK(it != labels.end(), r.where, ": field 'answerKey' \"", key, "\" is not one of choices.label");
  d.gold = int(it - labels.begin());
  return d;
}

// piqa.yaml: "Question: {{goal}}\nAnswer:", choices [sol1, sol2], gold = label.
Doc read_piqa(const Record& r) {
  Doc d;
  d.text = "Question: " + string_field(r, "goal") + "\nAnswer:";
  d.choices = {string_field(r, "sol1"), string_field(r, "sol2")};
  const int64_t gold = int_field(r, "label");
  check_gold(r, "label", gold, 2);
  d.gold = int(gold);
  return d;
}

// preprocess_winogrande.py: the blank '_' splits the sentence; each option fills it to make one context
// (sentence[:i] + option); the shared target is sentence[i+1:].strip(); gold = {"1": 0, "2": 1}[answer].
Doc read_winogrande(const Record& r) {
  Doc d;
  const std::string sentence = string_field(r, "sentence");
  const size_t blank = sentence.find('_');
  ZAYA_CHECK(blank != std::string::npos, r.where, ": field 'sentence' has no blank '_'");
  d.multiple_input = true;
  d.choices = {sentence.substr(0, blank) + string_field(r, "option1"),
               sentence.substr(0, blank) + string_field(r, "option2")};
  d.target = python_strip(sentence.substr(blank + 1));
  const std::string answer = string_field(r, "answer");
  ZAYA_CHECK(answer == "1" || answer == "2", r.where, ": field 'answer' must be \"1\" or \"2\", got \"",
             answer, "\"");
  d.gold = answer == "1" ? 0 : 1;
  return d;
}

// mmlu _default_template_yaml: "{{question.strip()}}\nA. {{choices[0]}}\nB. ...\nD. {{choices[3]}}\nAnswer:",
// choices ["A", "B", "C", "D"], gold = answer (an index; a letter A-D is accepted too).
Doc read_mmlu(const Record& r, const std::string& subject_from_file) {
  Doc d;
  const std::vector<std::string> options = string_list(r, field(r, "choices"), "choices");
  ZAYA_CHECK(options.size() == 4, r.where, ": field 'choices' must have 4 entries, got ", options.size());
  d.text = python_strip(string_field(r, "question"));
  const char* letters[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; i++) d.text += str_cat("\n", letters[i], ". ", options[size_t(i)]);
  d.text += "\nAnswer:";
  d.choices = {"A", "B", "C", "D"};
  const json& answer = field(r, "answer");
  int64_t gold = -1;
  if (answer.is_string() && answer.get<std::string>().size() == 1 && answer.get<std::string>()[0] >= 'A' &&
      answer.get<std::string>()[0] <= 'D')
    gold = answer.get<std::string>()[0] - 'A';
  else
    gold = int_field(r, "answer");
  check_gold(r, "answer", gold, 4);
  d.gold = int(gold);
  auto it = r.value.find("subject");
  if (it != r.value.end() && it->is_string() && !it->get<std::string>().empty())
    d.subject = it->get<std::string>();
  else
    d.subject = subject_from_file;
  ZAYA_CHECK(!d.subject.empty(), r.where,
             ": missing field 'subject' (needed when the MMLU split is one file, not one file per subject)");
  return d;
}

// lambada_openai.yaml: text.split(' ')[:-1] joined by ' ' -> context, ' ' + text.split(' ')[-1] -> target.
Doc read_lambada(const Record& r) {
  Doc d;
  const std::string text = string_field(r, "text");
  const size_t last_space = text.rfind(' ');
  d.text = last_space == std::string::npos ? std::string() : text.substr(0, last_space);
  d.target = " " + (last_space == std::string::npos ? text : text.substr(last_space + 1));
  return d;
}

// gsm8k.yaml: "Question: {{question}}\nAnswer:", target "{{answer}}" (the full worked answer).
Doc read_gsm8k(const Record& r) {
  Doc d;
  d.text = "Question: " + string_field(r, "question") + "\nAnswer:";
  d.target = string_field(r, "answer");
  return d;
}

// The generic schema: {"context": str, "choices": [str...], "gold": int}.
Doc read_generic(const Record& r) {
  Doc d;
  d.text = string_field(r, "context");
  d.choices = string_list(r, field(r, "choices"), "choices");
  const int64_t gold = int_field(r, "gold");
  check_gold(r, "gold", gold, d.choices.size());
  d.gold = int(gold);
  return d;
}

Doc read_doc(const std::string& task, const Record& r, const std::string& subject_from_file) {
  Doc d;
  if (task == "hellaswag")
    d = read_hellaswag(r);
  else if (task == "arc_easy" || task == "arc_challenge")
    d = read_arc(r);
  else if (task == "piqa")
    d = read_piqa(r);
  else if (task == "winogrande")
    d = read_winogrande(r);
  else if (task == "mmlu")
    d = read_mmlu(r, subject_from_file);
  else if (task == "lambada_openai")
    d = read_lambada(r);
  else if (task == "gsm8k")
    d = read_gsm8k(r);
  else
    d = read_generic(r);
  d.where = r.where;
  d.raw = r.value;
  return d;
}

// SPLIT.jsonl, or for MMLU also SPLIT/*.jsonl (one file per subject, name order).
std::vector<Doc> read_split(const std::string& task, const std::string& dir, const std::string& split) {
  std::vector<std::pair<std::string, std::string>> files;  // path, subject from the file name
  const std::string single = dir + "/" + split + ".jsonl";
  if (fs::is_regular_file(single)) {
    files.push_back({single, ""});
  } else if (task == "mmlu" && fs::is_directory(dir + "/" + split)) {
    for (const auto& e : fs::directory_iterator(dir + "/" + split))
      if (e.is_regular_file() && e.path().extension() == ".jsonl")
        files.push_back({e.path().string(), e.path().stem().string()});
    std::sort(files.begin(), files.end());
    ZAYA_CHECK(!files.empty(), dir, "/", split, "/: no .jsonl files");
  } else {
    fail(str_cat(single, ": not found (task '", task, "' reads its ", split, " split from DATA_DIR/", task,
                 "/", split, ".jsonl", task == "mmlu" ? " or DATA_DIR/mmlu/" + split + "/SUBJECT.jsonl" : "",
                 ")"));
  }
  std::vector<Doc> docs;
  for (const auto& [path, subject] : files)
    for (const Record& r : read_jsonl(path)) docs.push_back(read_doc(task, r, subject));
  return docs;
}

}  // namespace

TaskData load_task(const std::string& name, const std::string& data_dir, bool with_fewshot) {
  TaskData data;
  const Task* known = find_task(name);
  data.task = known ? *known : generic_task(name);
  const std::string dir = data_dir + "/" + name;
  ZAYA_CHECK(fs::is_directory(dir), dir, ": not found (expected DATA_DIR/", name, "/", data.task.eval_split,
             ".jsonl)");
  data.eval_docs = read_split(name, dir, data.task.eval_split);
  ZAYA_CHECK(!data.eval_docs.empty(), dir, "/", data.task.eval_split, ".jsonl: no documents");
  if (!known && !fs::is_regular_file(dir + "/train.jsonl")) data.task.fewshot_split = "test";
  if (with_fewshot) {
    if (data.task.fewshot_split == data.task.eval_split) {
      data.fewshot_docs = data.eval_docs;
      data.task.fewshot_excludes_eval_doc = true;
    } else {
      data.fewshot_docs = read_split(name, dir, data.task.fewshot_split);
    }
  }
  return data;
}

// ---- Few-shot contexts ---------------------------------------------------------------------------

namespace {

// lm-eval's per-task few-shot stream: one per lm-eval task (so one per MMLU subject).
struct FewshotStream {
  std::vector<const Doc*> pool;
  PyRandom rng;
  explicit FewshotStream(uint64_t seed) : rng(seed) {}
};

// lm_eval/api/samplers.py: ContextSampler.sample (Random.sample(pool, k), or k + 1 and the eval doc
// dropped, the first k kept) and FirstNSampler.sample (pool[:k] without the eval doc).
std::vector<const Doc*> draw_examples(const Task& task, FewshotStream& stream, const Doc& doc, int k) {
  std::vector<const Doc*> out;
  if (k <= 0) return out;
  const std::vector<const Doc*>& pool = stream.pool;
  if (task.sampling == FewshotSampling::FirstN) {
    for (const Doc* p : pool) {
      if (task.fewshot_excludes_eval_doc && p->raw == doc.raw) continue;
      if (int(out.size()) < k) out.push_back(p);
    }
    ZAYA_CHECK(int(out.size()) == k, task.name, ": ", k, " few-shot examples asked for, the ",
               task.fewshot_split, " split has ", out.size(),
               doc.subject.empty() ? "" : " for " + doc.subject);
    return out;
  }
  const size_t draw = size_t(k) + (task.fewshot_excludes_eval_doc ? 1 : 0);
  ZAYA_CHECK(draw <= pool.size(), task.name, ": ", k, " few-shot examples asked for (drawing ", draw,
             "), the ", task.fewshot_split, " split has ", pool.size());
  for (size_t i : stream.rng.sample_indices(pool.size(), draw)) {
    if (task.fewshot_excludes_eval_doc && pool[i]->raw == doc.raw) continue;
    if (int(out.size()) < k) out.push_back(pool[i]);
  }
  ZAYA_CHECK(int(out.size()) == k, task.name, ": the few-shot pool repeats ", doc.where, "; could not draw ",
             k, " other examples");
  return out;
}

// ConfigurableTask.fewshot_context + build_qa_turn: description, then each example as question +
// target_delimiter + answer + fewshot_delimiter. The doc's own question is added by the caller.
std::string fewshot_prefix(const Task& task, const Doc& doc, const std::vector<const Doc*>& examples) {
  std::string out = task.name == "mmlu" ? mmlu_description(doc.subject) : "";
  for (const Doc* ex : examples) {
    const std::string& question = ex->multiple_input ? ex->choices[size_t(ex->gold)] : ex->text;
    const std::string& answer =
        (ex->multiple_input || ex->gold < 0) ? ex->target : ex->choices[size_t(ex->gold)];
    out += question + task.target_delimiter + answer + task.fewshot_delimiter;
  }
  return out;
}

std::vector<std::string> contexts_for(const Task& task, FewshotStream& stream, const Doc& doc, int k) {
  const std::string prefix = fewshot_prefix(task, doc, draw_examples(task, stream, doc, k));
  if (!doc.multiple_input) return {prefix + doc.text};
  std::vector<std::string> out;
  for (const std::string& c : doc.choices) out.push_back(prefix + c);
  return out;
}

std::string result_name(const Task& task, const Doc& doc) {
  return task.name == "mmlu" ? "mmlu_" + doc.subject : task.name;
}

// Walks the eval docs in order with one few-shot stream per result name (per MMLU subject).
template <typename Fn>
void for_each_context(const TaskData& data, int k, uint64_t seed, OutputType expected, Fn&& fn) {
  const Task& task = data.task;
  ZAYA_CHECK(task.output_type == expected, task.name, ": a ", output_type_name(task.output_type),
             " task, not ", output_type_name(expected));
  if (k < 0) k = task.default_num_fewshot;
  ZAYA_CHECK(k == 0 || !data.fewshot_docs.empty(), task.name, ": ", k, "-shot needs the few-shot split (",
             task.fewshot_split, "), which was not loaded");
  std::map<std::string, FewshotStream> streams;
  for (const Doc& doc : data.eval_docs) {
    const std::string name = result_name(task, doc);
    auto it = streams.find(name);
    if (it == streams.end()) {
      it = streams.emplace(name, FewshotStream(seed)).first;
      for (const Doc& p : data.fewshot_docs)
        if (p.subject == doc.subject) it->second.pool.push_back(&p);
    }
    fn(doc, name, contexts_for(task, it->second, doc, k));
  }
}

}  // namespace

std::vector<std::string> build_fewshot_context(const Task& task, const std::vector<Doc>& pool, const Doc& doc,
                                               int k, uint64_t seed) {
  FewshotStream stream(seed);
  for (const Doc& p : pool) stream.pool.push_back(&p);
  return contexts_for(task, stream, doc, k);
}

std::vector<McItem> build_mc_items(const TaskData& data, int k, uint64_t seed) {
  std::vector<McItem> items;
  for_each_context(data, k, seed, OutputType::MultipleChoice,
                   [&](const Doc& doc, const std::string& name, std::vector<std::string> contexts) {
                     McItem it;
                     it.id = doc.where;
                     it.task = name;
                     it.contexts = std::move(contexts);
                     if (doc.multiple_input) {
                       it.continuations = {data.task.target_delimiter + doc.target};
                     } else {
                       for (const std::string& c : doc.choices)
                         it.continuations.push_back(data.task.target_delimiter + c);
                     }
                     for (const std::string& c : doc.choices) {
                       it.choice_chars.push_back(python_len(c));
                       it.choice_bytes.push_back(int64_t(c.size()));
                     }
                     it.gold = doc.gold;
                     items.push_back(std::move(it));
                   });
  return items;
}

std::vector<LlItem> build_ll_items(const TaskData& data, int k, uint64_t seed) {
  std::vector<LlItem> items;
  for_each_context(data, k, seed, OutputType::Loglikelihood,
                   [&](const Doc& doc, const std::string& name, std::vector<std::string> contexts) {
                     items.push_back(LlItem{doc.where, name, std::move(contexts[0]), doc.target});
                   });
  return items;
}

std::vector<GenItem> build_gen_items(const TaskData& data, int k, uint64_t seed) {
  std::vector<GenItem> items;
  for_each_context(
      data, k, seed, OutputType::GenerateUntil,
      [&](const Doc& doc, const std::string& name, std::vector<std::string> contexts) {
        items.push_back(GenItem{doc.where, name, std::move(contexts[0]), doc.target, data.task.until});
      });
  return items;
}

}  // namespace zaya::eval

namespace zaya::eval {

std::string mmlu_category(const std::string& subject) {
  // lm_eval/tasks/mmlu/default/mmlu_SUBJECT.yaml: "tag": "CATEGORY_tasks".
  static const std::map<std::string, std::string> categories = {
      {"_humanities", ""},
      {"_other", ""},
      {"_social_sciences", ""},
      {"_stem", ""},
      {"abstract_algebra", "mmlu_stem"},
      {"anatomy", "mmlu_stem"},
      {"astronomy", "mmlu_stem"},
      {"business_ethics", "mmlu_other"},
      {"clinical_knowledge", "mmlu_other"},
      {"college_biology", "mmlu_stem"},
      {"college_chemistry", "mmlu_stem"},
      {"college_computer_science", "mmlu_stem"},
      {"college_mathematics", "mmlu_stem"},
      {"college_medicine", "mmlu_other"},
      {"college_physics", "mmlu_stem"},
      {"computer_security", "mmlu_stem"},
      {"conceptual_physics", "mmlu_stem"},
      {"econometrics", "mmlu_social_sciences"},
      {"electrical_engineering", "mmlu_stem"},
      {"elementary_mathematics", "mmlu_stem"},
      {"formal_logic", "mmlu_humanities"},
      {"global_facts", "mmlu_other"},
      {"high_school_biology", "mmlu_stem"},
      {"high_school_chemistry", "mmlu_stem"},
      {"high_school_computer_science", "mmlu_stem"},
      {"high_school_european_history", "mmlu_humanities"},
      {"high_school_geography", "mmlu_social_sciences"},
      {"high_school_government_and_politics", "mmlu_social_sciences"},
      {"high_school_macroeconomics", "mmlu_social_sciences"},
      {"high_school_mathematics", "mmlu_stem"},
      {"high_school_microeconomics", "mmlu_social_sciences"},
      {"high_school_physics", "mmlu_stem"},
      {"high_school_psychology", "mmlu_social_sciences"},
      {"high_school_statistics", "mmlu_stem"},
      {"high_school_us_history", "mmlu_humanities"},
      {"high_school_world_history", "mmlu_humanities"},
      {"human_aging", "mmlu_other"},
      {"human_sexuality", "mmlu_social_sciences"},
      {"international_law", "mmlu_humanities"},
      {"jurisprudence", "mmlu_humanities"},
      {"logical_fallacies", "mmlu_humanities"},
      {"machine_learning", "mmlu_stem"},
      {"management", "mmlu_other"},
      {"marketing", "mmlu_other"},
      {"medical_genetics", "mmlu_other"},
      {"miscellaneous", "mmlu_other"},
      {"moral_disputes", "mmlu_humanities"},
      {"moral_scenarios", "mmlu_humanities"},
      {"nutrition", "mmlu_other"},
      {"philosophy", "mmlu_humanities"},
      {"prehistory", "mmlu_humanities"},
      {"professional_accounting", "mmlu_other"},
      {"professional_law", "mmlu_humanities"},
      {"professional_medicine", "mmlu_other"},
      {"professional_psychology", "mmlu_social_sciences"},
      {"public_relations", "mmlu_social_sciences"},
      {"security_studies", "mmlu_social_sciences"},
      {"sociology", "mmlu_social_sciences"},
      {"us_foreign_policy", "mmlu_social_sciences"},
      {"virology", "mmlu_other"},
      {"world_religions", "mmlu_humanities"},
  };
  const auto it = categories.find(subject);
  return it == categories.end() ? "" : it->second;
}

}  // namespace zaya::eval
