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

Optimizer::Optimizer(const std::vector<ParamRef>& params, std::vector<ParamGroup> groups,
                     const OptimConfig& cfg)
    : cfg_(cfg), groups_(std::move(groups)), slots_(params.size()) {
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
      Slot& s = slots_[i];
      s.name = params[i].name;
      s.shape = params[i].shape;
      s.kind = group.kind;
      s.lr_scale = group.lr_scale;
      s.weight_decay = group.weight_decay;
      if (s.kind == OptimKind::AdamW) {
        s.exp_avg = Tensor::empty(DType::F32, s.shape);
        s.exp_avg_sq = Tensor::empty(DType::F32, s.shape);
      } else if (cfg_.muon.momentum != 0.0f) {
        s.momentum = Tensor::empty(DType::F32, s.shape);
      }
    }
  }
  for (size_t i = 0; i < params.size(); i++)
    ZAYA_CHECK(owner[i] >= 0, "parameter '", params[i].name, "' is in no optimizer group");
  step_tensor_ = Tensor::empty(DType::I64, {1});
}

void Optimizer::step(const std::vector<ParamRef>& params, float lr) {
  ZAYA_CHECK(params.size() == slots_.size(), "optimizer step: got ", params.size(), " parameters, built for ",
             slots_.size());
  const int64_t t = steps_ + 1;
  for (size_t i = 0; i < params.size(); i++) {
    const ParamRef& p = params[i];
    Slot& s = slots_[i];
    ZAYA_CHECK(p.name == s.name && p.shape == s.shape, "optimizer step: parameter ", i, " is '", p.name, "' ",
               shape_str(p.shape), ", built for '", s.name, "' ", shape_str(s.shape));
    ZAYA_ASSERT(p.value && p.grad, "every parameter needs value and gradient buffers");
    const float group_lr = lr * s.lr_scale;
    if (s.kind == OptimKind::AdamW) {
      adamw_update(p.value, p.grad, s.exp_avg.f32(), s.exp_avg_sq.f32(), shape_numel(p.shape), group_lr,
                   s.weight_decay, cfg_.adamw, t);
    } else {
      // Leading dims are a batch of independent matrices (experts [E, R, C]).
      const int64_t rows = p.shape[p.shape.size() - 2], cols = p.shape.back();
      const int64_t batch = shape_numel(p.shape) / std::max<int64_t>(1, rows * cols);
      float* momentum = s.momentum.defined() ? s.momentum.f32() : nullptr;
      muon_update(p.value, p.grad, momentum, batch, rows, cols, group_lr, s.weight_decay, cfg_.muon,
                  scratch_);
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
    if (s.exp_avg.defined()) out.push_back({"optim." + s.name + ".exp_avg", s.exp_avg});
    if (s.exp_avg_sq.defined()) out.push_back({"optim." + s.name + ".exp_avg_sq", s.exp_avg_sq});
    if (s.momentum.defined()) out.push_back({"optim." + s.name + ".momentum", s.momentum});
  }
  return out;
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
