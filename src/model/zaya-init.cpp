#include "model/zaya-init.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace zaya {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

InitKind init_kind(const std::string& n) {
  if (n == "model.embed_tokens.weight") return InitKind::Embedding;
  if (ends_with(n, "balancing_biases")) return InitKind::BalancingBias;
  if (ends_with(n, "qk_norm.temp") || ends_with(n, ".bias") || ends_with(n, "hidden_states_bias") ||
      ends_with(n, "residual_bias") || n == "model.input_hidden_states_bias")
    return InitKind::Zeros;
  if (ends_with(n, "layernorm.weight") || ends_with(n, "norm.weight") || ends_with(n, "_scale") ||
      ends_with(n, "router_states_scale"))
    return InitKind::Ones;
  return InitKind::Normal;  // linear, conv, expert and lm_head weights
}

void init_tensor(void* dst, const std::string& name, const Shape& shape, DType dtype, const ZayaConfig& cfg,
                 uint64_t seed) {
  ZAYA_CHECK(dtype == DType::F32 || dtype == DType::BF16, "init: dtype must be F32 or BF16");
  const int64_t n = shape_numel(shape);
  const InitKind kind = init_kind(name);
  const float stddev = float(cfg.initializer_range);
  const uint64_t base = splitmix64(seed ^ hash_name(name));
  auto store = [&](int64_t i, float v) {
    if (dtype == DType::F32)
      static_cast<float*>(dst)[i] = v;
    else
      static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
  };
  constexpr int64_t kBlock = 1 << 20;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t blk = 0; blk < blocks; blk++) {
    int64_t lo = blk * kBlock, hi = std::min(n, lo + kBlock);
    uint64_t state = splitmix64(base + uint64_t(blk));
    for (int64_t i = lo; i < hi; i += 2) {
      float v0 = 0, v1 = 0;
      switch (kind) {
        case InitKind::Zeros:
          break;
        case InitKind::Ones:
          v0 = v1 = 1.f;
          break;
        case InitKind::BalancingBias:
          break;
        case InitKind::Normal:
        case InitKind::Embedding: {
          // Box-Muller on two 24-bit uniforms in (0, 1].
          state = splitmix64(state);
          float u1 = (float((state >> 40) & 0xffffff) + 1.0f) / 16777216.0f;
          float u2 = float((state >> 8) & 0xffffff) / 16777216.0f;
          float r = std::sqrt(-2.0f * std::log(u1)) * stddev;
          v0 = r * std::cos(6.2831853071795864f * u2);
          v1 = r * std::sin(6.2831853071795864f * u2);
          break;
        }
      }
      store(i, v0);
      if (i + 1 < hi) store(i + 1, v1);
    }
  }
  if (kind == InitKind::BalancingBias) store(n - 1, -1.0f);  // the skip class starts at -1
  if (kind == InitKind::Embedding && cfg.pad_token_id >= 0 && cfg.pad_token_id < shape[0]) {
    for (int64_t i = 0; i < shape[1]; i++) store(cfg.pad_token_id * shape[1] + i, 0.f);
  }
}

}  // namespace zaya

#include "model/zaya-weights.h"

namespace zaya {

ZayaWeights init_weights(const ZayaConfig& cfg, DType compute, uint64_t seed) {
  ZayaWeights w;
  w.compute = compute;
  for (const NamedParam& p : named_params(cfg, w)) {
    DType dt = p.is_matrix ? compute : DType::F32;
    *p.slot = Tensor::empty(dt, p.shape);
    init_tensor(p.slot->data, p.name, p.shape, dt, cfg, seed);
  }
  if (cfg.tie_word_embeddings) w.lm_head = w.embed;
  fuse_qkv(cfg, w);
  return w;
}

}  // namespace zaya
