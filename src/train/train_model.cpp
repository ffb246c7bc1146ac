#include "train/train_model.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "model/zaya-init.h"

namespace zaya::train {

namespace {

// Owned fp32 master weights: the initialisation, then (when continuing from a checkpoint) the checkpoint's
// values copied in by name. Owned memory matters: mapped checkpoint views are read-only.
ZayaModel make_master(const ZayaConfig& cfg, const std::string& init_from, uint64_t seed) {
  ZayaModel m;
  m.cfg = cfg;
  m.w = init_weights(cfg, DType::F32, seed);
  if (!init_from.empty()) {
    ZayaModel loaded = ZayaModel::load(init_from, {DType::F32, cfg.semantics});
    m.cfg = loaded.cfg;
    auto dst = named_params(m.cfg, m.w);
    auto src = named_params(loaded.cfg, loaded.w);
    for (size_t i = 0; i < dst.size(); i++)
      std::memcpy(dst[i].slot->data, src[i].slot->data, src[i].slot->nbytes());
  }
  return m;
}

ZayaModel make_compute(const ZayaModel& master, DType dtype) {
  if (dtype == DType::F32) return master;
  ZayaModel c = master;
  c.w.compute = dtype;
  for (auto& p : named_params(c.cfg, c.w))
    if (p.is_matrix) *p.slot = p.slot->to(dtype);
  if (c.cfg.tie_word_embeddings) c.w.lm_head = c.w.embed;
  fuse_qkv(c.cfg, c.w);
  return c;
}

}  // namespace

TrainModel TrainModel::create(const ZayaConfig& cfg, const std::string& init_from, uint64_t seed,
                              DType compute) {
  TrainModel t;
  t.master = make_master(cfg, init_from, seed);
  t.compute = make_compute(t.master, compute);
  t.grads = ZayaGrads::zeros(t.master.cfg);
  ZayaWeights m = t.master.w;  // named_params needs a mutable structure; tensors are shared
  auto gs = t.grads.named(t.master.cfg);
  std::map<std::string, Tensor*> grad_by_name;
  for (auto& g : gs) grad_by_name[g.name] = g.slot;
  for (auto& v : named_params(t.master.cfg, m)) {
    if (v.is_buffer) continue;
    t.params.push_back({v.name, v.shape, v.slot->f32(), grad_by_name.at(v.name)->f32()});
  }
  return t;
}

void TrainModel::refresh_compute() {
  if (compute.w.compute == DType::F32) return;
  ZayaWeights m = master.w, cw = compute.w;
  auto src = named_params(master.cfg, m);
  auto dst = named_params(compute.cfg, cw);
  for (size_t i = 0; i < src.size(); i++) {
    if (!src[i].is_matrix) continue;
    convert_f32_to_bf16_threaded(dst[i].slot->bf16(), src[i].slot->f32(), src[i].slot->numel());
  }
}

size_t TrainModel::weight_bytes() const {
  size_t n = 0;
  for (const auto& p : params) n += size_t(shape_numel(p.shape)) * sizeof(float);
  return n;
}

}  // namespace zaya::train
