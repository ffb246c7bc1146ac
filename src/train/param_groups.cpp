#include "train/param_groups.h"

#include "core/error.h"

namespace zaya::train {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

GroupId zaya_param_group(const std::string& name, const Shape& shape) {
  ZAYA_CHECK(!ends_with(name, "balancing_biases"), "parameter '", name,
             "' is the balancing-bias buffer: it is updated by the balancing controller, not an optimizer");
  // Order matters: the specific patterns come before the generic ".weight"/".bias" suffixes.
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return GroupId::Embedding;
  if (contains(name, ".mlp.experts.")) return GroupId::Expert;
  if (contains(name, ".conv_qk_") && ends_with(name, ".weight")) return GroupId::Conv;
  if (ends_with(name, "qk_norm.temp")) return GroupId::Temperature;
  if (ends_with(name, "layernorm.weight") || ends_with(name, "norm.weight")) return GroupId::Norm;
  if (ends_with(name, ".bias") || ends_with(name, "_bias")) return GroupId::Bias;
  if (ends_with(name, "_scale")) return GroupId::Scale;
  if (ends_with(name, ".weight") && shape.size() == 2) return GroupId::Matrix;
  fail(str_cat("parameter '", name, "' ", shape_str(shape), ": no ZAYA1 optimizer group matches this name"));
}

std::vector<ParamGroup> zaya_param_groups(const std::vector<ParamRef>& params, const OptimConfig& cfg) {
  std::vector<ParamGroup> groups(kNumGroups);
  for (int g = 0; g < kNumGroups; g++) {
    const GroupConfig& gc = cfg.groups[g];
    groups[g] = {GroupId(g), gc.kind, gc.lr_scale, cfg.group_weight_decay(GroupId(g)), {}};
  }
  for (size_t i = 0; i < params.size(); i++) {
    GroupId g = zaya_param_group(params[i].name, params[i].shape);
    ZAYA_CHECK(groups[int(g)].kind != OptimKind::Muon || params[i].shape.size() >= 2, "optimizer group '",
               group_name(g), "' uses Muon, but parameter '", params[i].name, "' has shape ",
               shape_str(params[i].shape), ": Muon needs matrices (>= 2 dims)");
    groups[int(g)].params.push_back(i);
  }
  std::vector<ParamGroup> used;
  for (ParamGroup& g : groups)
    if (!g.params.empty()) used.push_back(std::move(g));
  return used;
}

}  // namespace zaya::train
