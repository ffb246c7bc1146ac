// The ZAYA1 model: config + weights + the forward pass (spec §5) through the CCA cache (spec §7).
// One algorithm serves a full forward, prefill, chunked prefill and decode: a forward over S new tokens
// continues whatever the cache holds (a fresh cache = a fresh sequence).
#pragma once

#include <string>
#include <vector>

#include "kernels/moe.h"
#include "model/zaya-cache.h"
#include "model/zaya-config.h"
#include "model/zaya-weights.h"

namespace zaya {

struct LoadOptions {
  DType compute = DType::F32;     // GEMM dtype: F32 or BF16
  bool legacy_semantics = false;  // legacy checkpoints: skip passthrough (+ ZAYA1-base router eps 1e-6)
};

struct ZayaModel {
  ZayaConfig cfg;
  ZayaWeights w;
  // Loads config.json + safetensors from an HF checkpoint directory (or one .safetensors file beside a
  // config.json).
  static ZayaModel load(const std::string& dir, const LoadOptions& opt = {});
};

struct ForwardOptions {
  bool all_logits = true;   // false: logits of the last position of each row only ([B, 1, V])
  bool tap_hidden = false;  // record hidden_states [L+2, B, S, H]
  bool tap_router = false;  // record router logits [L, B, S, E+1] and choices [L, B, S]
};

struct ForwardResult {
  std::vector<float> logits;         // [B, S, V] or [B, 1, V]
  std::vector<float> hidden;         // [L+2, B, S, H] when tapped
  std::vector<float> router_logits;  // [L, B, S, E+1] when tapped
  std::vector<int32_t> choice;       // [L, B, S] when tapped (index E = skip)
};

// Reusable activations of one forward call (grow on demand, kept across calls).
struct ForwardScratch {
  std::vector<float> x, h, u, a, qkv, raw, vc, dv, frames, mid, conv, vals, ocat, rho, rho_prev, r1, r2,
      probs, m, z;
  std::vector<int32_t> choice;
  std::vector<float> weight, p_skip;
  std::vector<int64_t> positions;
  MoeScratch moe;
};

// ids[B, S] (row-major), mask[B, S] (nullable; 1 = real token, 0 = padding) for the S new tokens.
// Advances `cache` by S tokens. Throws zaya::Error for token ids outside [0, vocab).
void zaya_forward(const ZayaModel& model, ZayaCache& cache, const int32_t* ids, const int32_t* mask,
                  int64_t B, int64_t S, const ForwardOptions& opt, ForwardResult& out,
                  ForwardScratch& scratch);

}  // namespace zaya
