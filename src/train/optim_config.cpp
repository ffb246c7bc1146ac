#include "train/optim_config.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/suggest.h"
#include "io/strict_json.h"

namespace zaya::train {

const char* optim_kind_name(OptimKind k) {
  return k == OptimKind::Muon ? "muon" : "adamw";
}

const char* group_name(GroupId g) {
  switch (g) {
    case GroupId::Matrix:
      return "matrix";
    case GroupId::Expert:
      return "expert";
    case GroupId::Embedding:
      return "embedding";
    case GroupId::Conv:
      return "conv";
    case GroupId::Norm:
      return "norm";
    case GroupId::Bias:
      return "bias";
    case GroupId::Scale:
      return "scale";
    case GroupId::Temperature:
      return "temperature";
  }
  return "?";
}

std::array<GroupConfig, kNumGroups> OptimConfig::default_groups() {
  std::array<GroupConfig, kNumGroups> g{};
  g[int(GroupId::Matrix)].kind = OptimKind::Muon;
  g[int(GroupId::Expert)].kind = OptimKind::Muon;
  return g;
}

float OptimConfig::group_weight_decay(GroupId g) const {
  const GroupConfig& c = groups[int(g)];
  if (c.weight_decay) return *c.weight_decay;
  bool multi_dim =
      g == GroupId::Matrix || g == GroupId::Expert || g == GroupId::Embedding || g == GroupId::Conv;
  return multi_dim ? weight_decay : 0.0f;
}

namespace {

// Reads the fields of one JSON object, naming "<what>: field '<path>'" in every error, and rejects keys
// that no reader asked for (finish()).
class Fields {
 public:
  Fields(const nlohmann::json& j, std::string what, std::string path)
      : j_(j), what_(std::move(what)), path_(std::move(path)) {
    ZAYA_CHECK(j.is_object(), where(""), "expected an object, got ", json_type_phrase(j));
  }

  std::string full(const std::string& key) const {
    return path_.empty() ? key : key.empty() ? path_ : path_ + "." + key;
  }
  std::string where(const std::string& key) const {
    return full(key).empty() ? what_ + ": " : str_cat(what_, ": field '", full(key), "': ");
  }
  const nlohmann::json* get(const std::string& key) {
    seen_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  Fields sub(const std::string& key) {
    const nlohmann::json* v = get(key);
    static const nlohmann::json empty = nlohmann::json::object();
    return Fields(v ? *v : empty, what_, path_.empty() ? key : path_ + "." + key);
  }
  bool has(const std::string& key) const { return j_.contains(key); }

  // A finite number in [lo, hi] (open at lo when lo_open).
  void number(const std::string& key, float* out, double lo, double hi, bool lo_open = false) {
    const nlohmann::json* v = get(key);
    if (!v) return;
    ZAYA_CHECK(v->is_number(), where(key), "expected a number, got ", json_type_phrase(*v));
    double x = v->get<double>();
    bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
    ZAYA_CHECK(ok, where(key), "expected a number in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", x);
    *out = float(x);
  }
  void integer(const std::string& key, int64_t* out, int64_t lo, int64_t hi) {
    const nlohmann::json* v = get(key);
    if (!v) return;
    ZAYA_CHECK(v->is_number_integer(), where(key), "expected an integer, got ", json_type_phrase(*v));
    int64_t x =
        v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v->get<int64_t>();
    ZAYA_CHECK(x >= lo && x <= hi, where(key), "expected an integer in [", lo, ", ", hi, "], got ", x);
    *out = x;
  }
  void boolean(const std::string& key, bool* out) {
    const nlohmann::json* v = get(key);
    if (!v) return;
    ZAYA_CHECK(v->is_boolean(), where(key), "expected true or false, got ", json_type_phrase(*v));
    *out = v->get<bool>();
  }
  // One of `choices`; returns its index or -1 when the key is absent.
  int choice(const std::string& key, const std::vector<std::string>& choices) {
    const nlohmann::json* v = get(key);
    if (!v) return -1;
    std::string list;
    for (const std::string& c : choices) list += (list.empty() ? "\"" : ", \"") + c + "\"";
    ZAYA_CHECK(v->is_string(), where(key), "expected one of ", list, ", got ", json_type_phrase(*v));
    for (size_t i = 0; i < choices.size(); i++)
      if (v->get<std::string>() == choices[i]) return int(i);
    fail(str_cat(where(key), "expected one of ", list, ", got \"", v->get<std::string>(), "\""));
  }
  // A two-element array of numbers in [lo, hi).
  void pair(const std::string& key, float* a, float* b, double lo, double hi) {
    const nlohmann::json* v = get(key);
    if (!v) return;
    ZAYA_CHECK(v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number(), where(key),
               "expected an array of two numbers, got ",
               v->is_array() ? "another array" : json_type_phrase(*v));
    for (int i = 0; i < 2; i++) {
      double x = (*v)[i].get<double>();
      ZAYA_CHECK(std::isfinite(x) && x >= lo && x < hi, where(key), "entry ", i, ": expected a number in [",
                 lo, ", ", hi, "), got ", x);
      *(i == 0 ? a : b) = float(x);
    }
  }
  // Every key must have been asked for (the parse functions ask for all they know before finishing).
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (seen_.count(it.key())) continue;
      fail(str_cat(what_, ": field '", full(it.key()), "' is not a known field",
                   did_you_mean(it.key(), {seen_.begin(), seen_.end()}, path_.empty() ? "" : path_ + ".")));
    }
  }

 private:
  const nlohmann::json& j_;
  std::string what_, path_;
  std::set<std::string> seen_;
};

const std::vector<std::string> kKinds = {"adamw", "muon"};

void parse_group(Fields f, GroupConfig* g) {
  int kind = f.choice("optimizer", kKinds);
  if (kind >= 0) g->kind = kind == 1 ? OptimKind::Muon : OptimKind::AdamW;
  f.number("lr_scale", &g->lr_scale, 0, 1e6);
  if (f.has("weight_decay")) {
    float wd = 0;
    f.number("weight_decay", &wd, 0, 1e3);
    g->weight_decay = wd;
  }
  f.finish();
}

}  // namespace

OptimConfig parse_optim_config(const nlohmann::json& j, const std::string& what, const std::string& path) {
  OptimConfig c;
  Fields top(j, what, path);
  top.number("lr", &c.lr, 0, 1e3);
  top.number("weight_decay", &c.weight_decay, 0, 1e3);
  top.number("grad_clip", &c.grad_clip, 0, 1e30);

  Fields adamw = top.sub("adamw");
  adamw.pair("betas", &c.adamw.beta1, &c.adamw.beta2, 0, 1);
  adamw.number("eps", &c.adamw.eps, 0, 1, /*lo_open=*/true);
  adamw.finish();

  Fields muon = top.sub("muon");
  muon.number("momentum", &c.muon.momentum, 0, 0.999999);
  muon.boolean("nesterov", &c.muon.nesterov);
  int64_t ns_steps = c.muon.ns_steps;
  muon.integer("ns_steps", &ns_steps, 1, 100);
  c.muon.ns_steps = int(ns_steps);
  if (const nlohmann::json* v = muon.get("ns_coefficients")) {
    bool ok = v->is_array() && v->size() == 3;
    for (size_t i = 0; ok && i < 3; i++) ok = (*v)[i].is_number() && std::isfinite((*v)[i].get<double>());
    ZAYA_CHECK(ok, muon.where("ns_coefficients"), "expected an array of three finite numbers (a, b, c)");
    for (int i = 0; i < 3; i++) c.muon.ns_coefficients[i] = (*v)[i].get<float>();
  }
  const int ns_dtype = muon.choice("ns_dtype", {"bf16", "fp32"});
  if (ns_dtype >= 0) c.muon.ns_dtype = ns_dtype == 0 ? DType::BF16 : DType::F32;
  int rms = muon.choice("rms_match", {"none", "moonlight", "keller_jordan"});
  if (rms >= 0) c.muon.rms_match = RmsMatch(rms);
  muon.number("rms_match_scale", &c.muon.rms_match_scale, 0, 1e6, /*lo_open=*/true);
  muon.finish();

  Fields groups = top.sub("groups");
  for (int g = 0; g < kNumGroups; g++) {
    const char* name = group_name(GroupId(g));
    if (groups.has(name)) parse_group(groups.sub(name), &c.groups[g]);
  }
  groups.finish();

  Fields s = top.sub("schedule");
  int kind = s.choice("kind", {"constant", "cosine", "wsd"});
  if (kind >= 0) c.schedule.kind = ScheduleKind(kind);
  s.integer("warmup_steps", &c.schedule.warmup_steps, 0, INT64_MAX / 2);
  s.integer("total_steps", &c.schedule.total_steps, 0, INT64_MAX / 2);
  s.number("min_lr_fraction", &c.schedule.min_lr_fraction, 0, 1);
  s.number("decay_fraction", &c.schedule.decay_fraction, 0, 1);
  int shape = s.choice("decay_shape", {"linear", "1-sqrt"});
  if (shape >= 0) c.schedule.decay_shape = DecayShape(shape);
  s.finish();
  if (c.schedule.kind != ScheduleKind::Constant) {
    ZAYA_CHECK(c.schedule.total_steps > c.schedule.warmup_steps, s.where("total_steps"),
               "expected more than warmup_steps (", c.schedule.warmup_steps,
               ") for a decaying schedule, got ", c.schedule.total_steps);
  }

  Fields b = top.sub("balancer");
  int rule = b.choice("rule", {"adam", "sign", "rprop"});
  if (rule >= 0) c.balancer.rule = BalanceRule(rule);
  b.number("lr", &c.balancer.lr, 0, 1e3);
  b.pair("betas", &c.balancer.beta1, &c.balancer.beta2, 0, 1);
  b.number("eps", &c.balancer.eps, 0, 1, /*lo_open=*/true);
  b.number("sign_rate", &c.balancer.sign_rate, 0, 1e3);
  b.number("rprop_init", &c.balancer.rprop_init, 0, 1e3, /*lo_open=*/true);
  b.number("rprop_min", &c.balancer.rprop_min, 0, 1e3, /*lo_open=*/true);
  b.number("rprop_max", &c.balancer.rprop_max, 0, 1e3, /*lo_open=*/true);
  b.number("rprop_up", &c.balancer.rprop_up, 1, 1e3);
  b.number("rprop_down", &c.balancer.rprop_down, 0, 1, /*lo_open=*/true);
  ZAYA_CHECK(c.balancer.rprop_min <= c.balancer.rprop_init && c.balancer.rprop_init <= c.balancer.rprop_max,
             b.where("rprop_init"), "expected rprop_min <= rprop_init <= rprop_max, got ",
             c.balancer.rprop_min, " / ", c.balancer.rprop_init, " / ", c.balancer.rprop_max);
  if (const nlohmann::json* v = b.get("skip_target"); v && !v->is_null()) {
    ZAYA_CHECK(v->is_number() && v->get<double>() >= 0 && v->get<double>() <= 1, b.where("skip_target"),
               "expected null (skip bias fixed) or a fraction in [0, 1], got ",
               v->is_number() ? std::to_string(v->get<double>()) : json_type_phrase(*v));
    c.balancer.skip_target = v->get<float>();
  }
  b.finish();

  top.finish();
  return c;
}

}  // namespace zaya::train
