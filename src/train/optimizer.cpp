#include "train/optimizer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "train/adamw.h"
#include "train/muon.h"

namespace zaya::train {

Optimizer::Optimizer(const std::vector<ParamRef>& params, const OptimConfig& cfg)
    : Optimizer(params, zaya_param_groups(params, cfg), cfg) {}

namespace {

// Every parameter as one shard.
std::vector<ParamShard> whole_params(const std::vector<ParamRef>& params) {
  std::vector<ParamShard> shards;
  for (size_t i = 0; i < params.size(); i++) shards.push_back({i, 0, shape_numel(params[i].shape)});
  return shards;
}

// Elements of one matrix of a Muon parameter (leading dims are a batch of independent matrices).
int64_t matrix_numel(const Shape& shape) {
  return shape[shape.size() - 2] * shape.back();
}

}  // namespace

Optimizer::Optimizer(const std::vector<ParamRef>& params, std::vector<ParamGroup> groups,
                     const OptimConfig& cfg)
    : Optimizer(params, std::move(groups), cfg, whole_params(params)) {}

Optimizer::Optimizer(const std::vector<ParamRef>& params, std::vector<ParamGroup> groups,
                     const OptimConfig& cfg, const std::vector<ParamShard>& shards)
    : cfg_(cfg), groups_(std::move(groups)), num_params_(params.size()) {
  std::vector<int> owner(params.size(), -1);
  for (size_t g = 0; g < groups_.size(); g++) {
    const ParamGroup& group = groups_[g];
    for (size_t i : group.params) {
      ZAYA_CHECK(i < params.size(), "optimizer group '", group_name(group.id), "' lists parameter ", i,
                 " of ", params.size());
      ZAYA_CHECK(owner[i] < 0, "parameter '", params[i].name, "' is in two optimizer groups");
      owner[i] = int(g);
      ZAYA_CHECK(group.kind != OptimKind::Muon || params[i].shape.size() >= 2, "parameter '", params[i].name,
                 "' has shape ", shape_str(params[i].shape), ": Muon needs matrices (>= 2 dims)");
    }
  }
  for (size_t i = 0; i < params.size(); i++)
    ZAYA_CHECK(owner[i] >= 0, "parameter '", params[i].name, "' is in no optimizer group");

  std::vector<ParamShard> sorted = shards;
  std::sort(sorted.begin(), sorted.end(), [](const ParamShard& a, const ParamShard& b) {
    return a.param != b.param ? a.param < b.param : a.begin < b.begin;
  });
  for (size_t k = 0; k < sorted.size(); k++) {
    const ParamShard& sh = sorted[k];
    ZAYA_CHECK(sh.param < params.size(), "optimizer shard ", k, " names parameter ", sh.param, " of ",
               params.size());
    const ParamRef& p = params[sh.param];
    const ParamGroup& group = groups_[size_t(owner[sh.param])];
    const int64_t n = shape_numel(p.shape);
    ZAYA_CHECK(0 <= sh.begin && sh.begin < sh.end && sh.end <= n, "optimizer shard [", sh.begin, ", ", sh.end,
               ") of '", p.name, "' does not lie in its ", n, " elements");
    ZAYA_CHECK(k == 0 || sorted[k - 1].param != sh.param || sorted[k - 1].end <= sh.begin,
               "optimizer shards of '", p.name, "' overlap at element ", sh.begin);
    if (group.kind == OptimKind::Muon)
      ZAYA_CHECK(sh.begin % matrix_numel(p.shape) == 0 && sh.end % matrix_numel(p.shape) == 0,
                 "optimizer shard [", sh.begin, ", ", sh.end, ") of Muon parameter '", p.name, "' ",
                 shape_str(p.shape), " cuts a matrix (Newton-Schulz needs whole matrices)");
    Slot s;
    s.param = sh.param;
    s.begin = sh.begin;
    s.end = sh.end;
    s.name = p.name;
    s.shape = p.shape;
    s.kind = group.kind;
    s.lr_scale = group.lr_scale;
    s.weight_decay = group.weight_decay;
    // A part of a parameter keeps flat state; a whole one keeps the parameter's shape (checkpoint layout).
    const Shape state_shape = sh.begin == 0 && sh.end == n ? p.shape : Shape{sh.end - sh.begin};
    if (s.kind == OptimKind::AdamW) {
      s.exp_avg = Tensor::empty(DType::F32, state_shape);
      s.exp_avg_sq = Tensor::empty(DType::F32, state_shape);
    } else if (cfg_.muon.momentum != 0.0f) {
      s.momentum = Tensor::empty(DType::F32, state_shape);
    }
    slots_.push_back(std::move(s));
  }
  step_tensor_ = Tensor::empty(DType::I64, {1});
}

void Optimizer::step(const std::vector<ParamRef>& params, float lr, float grad_scale) {
  ZAYA_CHECK(params.size() == num_params_, "optimizer step: got ", params.size(), " parameters, built for ",
             num_params_);
  const int64_t t = steps_ + 1;
  for (Slot& s : slots_) {
    const ParamRef& p = params[s.param];
    ZAYA_CHECK(p.name == s.name && p.shape == s.shape, "optimizer step: parameter ", s.param, " is '", p.name,
               "' ", shape_str(p.shape), ", built for '", s.name, "' ", shape_str(s.shape));
    ZAYA_ASSERT(p.value && p.grad, "every parameter needs value and gradient buffers");
    const float group_lr = lr * s.lr_scale;
    float* value = p.value + s.begin;
    const float* grad = p.grad + s.begin;
    if (s.kind == OptimKind::AdamW) {
      adamw_update(value, grad, s.exp_avg.f32(), s.exp_avg_sq.f32(), s.end - s.begin, group_lr,
                   s.weight_decay, cfg_.adamw, t, grad_scale);
    } else {
      // Leading dims are a batch of independent matrices (experts [E, R, C]); a shard holds whole ones.
      const int64_t rows = p.shape[p.shape.size() - 2], cols = p.shape.back();
      const int64_t batch = (s.end - s.begin) / std::max<int64_t>(1, rows * cols);
      float* momentum = s.momentum.defined() ? s.momentum.f32() : nullptr;
      muon_update(value, grad, momentum, batch, rows, cols, group_lr, s.weight_decay, cfg_.muon, scratch_,
                  grad_scale);
    }
  }
  steps_ = t;
  static_cast<int64_t*>(step_tensor_.data)[0] = steps_;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_tensors() {
  static_cast<int64_t*>(step_tensor_.data)[0] = steps_;
  std::vector<std::pair<std::string, Tensor>> out;
  out.push_back({"optim.step", step_tensor_});
  for (const Slot& s : slots_) {
    const bool whole = s.begin == 0 && s.end == shape_numel(s.shape);
    const std::string at = whole ? "" : str_cat("@", s.begin);
    if (s.exp_avg.defined()) out.push_back({"optim." + s.name + ".exp_avg" + at, s.exp_avg});
    if (s.exp_avg_sq.defined()) out.push_back({"optim." + s.name + ".exp_avg_sq" + at, s.exp_avg_sq});
    if (s.momentum.defined()) out.push_back({"optim." + s.name + ".momentum" + at, s.momentum});
  }
  return out;
}

std::vector<Optimizer::StateSlice> Optimizer::state_slices() {
  static_cast<int64_t*>(step_tensor_.data)[0] = steps_;
  std::vector<StateSlice> out;
  out.push_back({"optim.step", step_tensor_, step_tensor_.shape, 0});
  for (const Slot& s : slots_) {
    for (const auto& [moment, t] : {std::pair<const char*, const Tensor*>{"exp_avg", &s.exp_avg},
                                    {"exp_avg_sq", &s.exp_avg_sq},
                                    {"momentum", &s.momentum}}) {
      if (!t->defined()) continue;
      out.push_back({str_cat("optim.", s.name, ".", moment),
                     Tensor::view(DType::F32, {s.end - s.begin}, t->data, nullptr), s.shape, s.begin});
    }
  }
  return out;
}

void Optimizer::load_state_slices(const std::function<void(const StateSlice&)>& fetch,
                                  const std::string& what) {
  for (const StateSlice& s : state_slices()) fetch(s);
  steps_ = static_cast<const int64_t*>(step_tensor_.data)[0];
  ZAYA_CHECK(steps_ >= 0, what, ": optim.step is negative (", steps_, ")");
}

void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& saved,
                           const std::string& what) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : saved) by_name[name] = &t;
  std::vector<std::string> missing, unexpected, mismatched;
  std::vector<std::pair<std::string, Tensor>> live = state_tensors();
  std::set<std::string> expected;
  for (const auto& [name, t] : live) {
    expected.insert(name);
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      missing.push_back(name);
    } else if (it->second->dtype != t.dtype || it->second->shape != t.shape) {
      mismatched.push_back(str_cat(name, ": ", dtype_name(it->second->dtype), " ",
                                   shape_str(it->second->shape), ", expected ", dtype_name(t.dtype), " ",
                                   shape_str(t.shape)));
    }
  }
  for (const auto& [name, t] : saved)
    if (!expected.count(name)) unexpected.push_back(name);
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 10; i++) s += (i ? ", " : "") + v[i];
    return v.size() > 10 ? str_cat(s, " and ", v.size() - 10, " more") : s;
  };
  std::string problems;
  if (!missing.empty()) problems += str_cat("; missing: ", list(missing));
  if (!unexpected.empty()) problems += str_cat("; unexpected: ", list(unexpected));
  if (!mismatched.empty()) problems += str_cat("; mismatched: ", list(mismatched));
  ZAYA_CHECK(problems.empty(), what, ": optimizer state does not match the model", problems);
  for (auto& [name, t] : live) std::memcpy(t.data, by_name[name]->data, t.nbytes());
  steps_ = static_cast<const int64_t*>(step_tensor_.data)[0];
  ZAYA_CHECK(steps_ >= 0, what, ": optim.step is negative (", steps_, ")");
}

size_t Optimizer::state_bytes() const {
  auto bytes_of = [](const Tensor& t) { return t.defined() ? t.nbytes() : size_t(0); };
  size_t bytes = bytes_of(step_tensor_);
  for (const Slot& s : slots_) bytes += bytes_of(s.exp_avg) + bytes_of(s.exp_avg_sq) + bytes_of(s.momentum);
  return bytes;
}

}  // namespace zaya::train
