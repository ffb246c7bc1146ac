#include "train/train_config.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/suggest.h"
#include "io/strict_json.h"

namespace zaya::train {

using json = nlohmann::json;

namespace {

const std::set<std::string>& known_keys(const std::string& section) {
  static const std::map<std::string, std::set<std::string>> keys = {
      {"",
       {"model", "data", "tokenizer", "optim", "batch", "steps", "max_minutes", "dtype", "recompute", "eval",
        "out", "log", "save_dtype", "sample", "checkpoint", "fault", "comment"}},
      {"model", {"config", "init_from", "seed", "semantics"}},
      {"data", {"train", "val", "seed"}},
      {"batch", {"micro_batch", "seq_len", "grad_accum"}},
      {"eval", {"every", "batches", "tasks"}},
      {"eval.tasks[]", {"task", "data_dir", "limit", "num_fewshot"}},
      {"log", {"every"}},
      {"checkpoint", {"every", "keep_last", "keep_every", "dir", "async", "io_threads", "on_error"}},
      {"fault", {"max_bad_steps", "spike_zscore", "spike_window"}},
      {"sample", {"prompt", "max_new_tokens", "temperature", "top_k"}}};
  return keys.at(section);
}

// One object of TRAIN.json; messages name a field by its JSON path ("batch.micro_batch").
struct Section {
  const json& j;
  std::string src;   // the file, for messages
  std::string path;  // "" for the top level, else the section's key ("batch")

  std::string name(const std::string& k) const { return path.empty() ? k : path + "." + k; }
  // "train.json: field 'batch.micro_batch'"
  std::string field(const std::string& k) const { return src + ": field '" + name(k) + "'"; }

  void check_keys() const {
    ZAYA_CHECK(j.is_object(), src, ": field '", path, "' must be an object");
    const std::set<std::string>& known = known_keys(path);
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (known.count(it.key())) continue;
      fail(str_cat(field(it.key()), " is not a known field",
                   did_you_mean(it.key(), {known.begin(), known.end()}, path.empty() ? "" : path + ".")));
    }
  }
  const json* get(const char* k) const { return j.contains(k) && !j[k].is_null() ? &j[k] : nullptr; }
  int64_t integer(const char* k, int64_t def, int64_t min) const {
    const json* v = get(k);
    if (!v) return def;
    ZAYA_CHECK(v->is_number_integer() && v->get<int64_t>() >= min, field(k), " must be an integer >= ", min,
               ", got ", v->dump());
    return v->get<int64_t>();
  }
  double number(const char* k, double def) const {
    const json* v = get(k);
    if (!v) return def;
    ZAYA_CHECK(v->is_number(), field(k), " must be a number, got ", v->dump());
    return v->get<double>();
  }
  bool boolean(const char* k, bool def) const {
    const json* v = get(k);
    if (!v) return def;
    ZAYA_CHECK(v->is_boolean(), field(k), " must be true or false, got ", v->dump());
    return v->get<bool>();
  }
  std::string string(const char* k, const std::string& def) const {
    const json* v = get(k);
    if (!v) return def;
    ZAYA_CHECK(v->is_string(), field(k), " must be a string, got ", v->dump());
    return v->get<std::string>();
  }
};

// A dataset is named by its PREFIX (PREFIX.bin + PREFIX.idx, from zaya data prepare); the path of either file
// is accepted too.
std::string dataset_prefix(const std::string& p) {
  namespace fs = std::filesystem;
  for (const char* ext : {".bin", ".idx"}) {
    const size_t n = p.size();
    if (n > 4 && p.compare(n - 4, 4, ext) == 0 && !fs::exists(p + ".bin") &&
        fs::exists(p.substr(0, n - 4) + ".idx"))
      return p.substr(0, n - 4);
  }
  return p;
}

}  // namespace

TrainConfig parse_train_config(const std::string& text, const std::string& src) {
  json j = parse_json_strict(text.data(), text.size(), src);
  TrainConfig c;
  c.source = src;
  c.text = text;
  Section top{j, src, ""};
  ZAYA_CHECK(j.is_object(), src, ": expected a JSON object");
  top.check_keys();
  auto sub = [&](const char* name) -> Section {
    static const json empty = json::object();
    const json* v = top.get(name);
    Section s{v ? *v : empty, src, name};
    s.check_keys();
    return s;
  };
  Section model = sub("model");
  c.model_config = (model.string("config", ""));
  c.init_from = (model.string("init_from", ""));
  c.init_seed = uint64_t(model.integer("seed", 0, 0));
  const std::string semantics = model.string("semantics", "auto");
  ZAYA_CHECK(
      c.model_config.empty() != c.init_from.empty(), src,
      ": field 'model' needs exactly one of 'config' (train from scratch) or 'init_from' (an HF checkpoint)");
  Section data = sub("data");
  c.train_data = dataset_prefix(data.string("train", ""));
  ZAYA_CHECK(!c.train_data.empty(), src, ": field 'data.train' (a prepared dataset prefix) is required");
  c.val_data = dataset_prefix(data.string("val", ""));
  c.data_seed = uint64_t(data.integer("seed", 1, 0));
  c.tokenizer = (top.string("tokenizer", ""));
  c.steps = top.integer("steps", c.steps, 1);
  // The schedule's horizon defaults to the run length.
  json optim = top.get("optim") ? j["optim"] : json::object();
  if (optim.is_object() && optim.contains("schedule") && optim["schedule"].is_object() &&
      !optim["schedule"].contains("total_steps"))
    optim["schedule"]["total_steps"] = c.steps;
  c.optim = parse_optim_config(optim, src, "optim");
  Section batch = sub("batch");
  c.micro_batch = batch.integer("micro_batch", c.micro_batch, 1);
  c.seq_len = batch.integer("seq_len", c.seq_len, 1);
  c.grad_accum = batch.integer("grad_accum", c.grad_accum, 1);
  c.max_minutes = top.number("max_minutes", 0);
  std::string dt = top.string("dtype", "fp32");
  ZAYA_CHECK(dt == "fp32" || dt == "bf16", src, ": field 'dtype' must be \"fp32\" or \"bf16\", got \"", dt,
             "\"");
  c.dtype = dt == "bf16" ? DType::BF16 : DType::F32;
  c.recompute = top.boolean("recompute", false);
  Section eval = sub("eval");
  c.eval_every = eval.integer("every", c.eval_every, 0);
  c.eval_batches = eval.integer("batches", c.eval_batches, 1);
  if (const json* tasks = eval.get("tasks")) {
    ZAYA_CHECK(tasks->is_array(), eval.field("tasks"),
               " must be an array of {\"task\", \"data_dir\", ...}, got ", tasks->dump());
    for (size_t i = 0; i < tasks->size(); i++) {
      Section t{(*tasks)[i], src, "eval.tasks[]"};
      t.check_keys();
      TrainConfig::EvalTask et;
      et.task = t.string("task", "");
      et.data_dir = t.string("data_dir", "");
      ZAYA_CHECK(!et.task.empty() && !et.data_dir.empty(), src, ": field 'eval.tasks[", i,
                 "]' needs \"task\" (a task name, docs/eval.md) and \"data_dir\"");
      et.limit = t.integer("limit", 0, 0);
      et.num_fewshot = int(t.integer("num_fewshot", -1, -1));
      c.eval_tasks.push_back(et);
    }
    ZAYA_CHECK(c.eval_tasks.empty() || !c.tokenizer.empty(), src,
               ": field 'eval.tasks' needs 'tokenizer' (the tasks' text is tokenized with it)");
  }
  c.out_dir = (top.string("out", c.out_dir));
  c.log_every = sub("log").integer("every", 1, 1);
  c.save_dtype = top.string("save_dtype", "bf16");
  ZAYA_CHECK(c.save_dtype == "fp32" || c.save_dtype == "bf16", src,
             ": field 'save_dtype' must be fp32 or bf16");
  Section ckpt = sub("checkpoint");
  c.ckpt_every = ckpt.integer("every", 0, 0);
  c.ckpt_keep_last = ckpt.integer("keep_last", c.ckpt_keep_last, 1);
  c.ckpt_keep_every = ckpt.integer("keep_every", 0, 0);
  c.ckpt_dir = ckpt.string("dir", c.out_dir + "/checkpoints");
  c.ckpt_async = ckpt.boolean("async", true);
  c.ckpt_io_threads = ckpt.integer("io_threads", c.ckpt_io_threads, 1);
  c.ckpt_on_error = ckpt.string("on_error", c.ckpt_on_error);
  ZAYA_CHECK(c.ckpt_on_error == "continue" || c.ckpt_on_error == "stop", src,
             ": field 'checkpoint.on_error' must be \"continue\" or \"stop\", got \"", c.ckpt_on_error, "\"");
  Section fault = sub("fault");
  c.max_bad_steps = fault.integer("max_bad_steps", c.max_bad_steps, 0);
  c.spike_zscore = fault.number("spike_zscore", 0);
  ZAYA_CHECK(c.spike_zscore == 0 || c.spike_zscore >= 1, src,
             ": field 'fault.spike_zscore' must be 0 (off) or at least 1, got ", c.spike_zscore);
  c.spike_window = fault.integer("spike_window", c.spike_window, 2);
  Section sample = sub("sample");
  c.sample_prompt = sample.string("prompt", c.sample_prompt);
  c.sample_tokens = sample.integer("max_new_tokens", c.sample_tokens, 0);
  c.sample_temperature = float(sample.number("temperature", c.sample_temperature));
  c.sample_top_k = sample.integer("top_k", c.sample_top_k, 0);

  const std::string model_json = c.init_from.empty() ? c.model_config : c.init_from + "/config.json";
  c.model = load_config(model_json);
  // A legacy config trains with the legacy code's semantics unless told otherwise (spec §8.4); the final
  // model's config.json records them, so it loads the same way.
  apply_semantics(c.model, parse_semantics(semantics, src + ": field 'model.semantics'"), model_json);
  return c;
}

TrainConfig load_train_config(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ZAYA_CHECK(f.good(), path, ": cannot open the training config");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_train_config(ss.str(), path);
}

}  // namespace zaya::train
