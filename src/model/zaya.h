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
  DType compute = DType::F32;             // GEMM dtype: F32 or BF16
  Semantics semantics = Semantics::Auto;  // Auto: the checkpoint's own (legacy layouts: legacy), spec §8.4
  bool in_memory = false;                 // --no-mmap: matrices copied out of the mapping (load_weights)
  DType kv_cache = DType::F32;  // --kv-cache: how inference caches store keys and values (F32, BF16)
};

struct ZayaModel {
  ZayaConfig cfg;
  ZayaWeights w;
  // The key/value dtype a fresh cache takes at its first inference forward (zaya-cache.h); recording
  // (training) forwards always keep F32.
  DType kv_cache = DType::F32;
  // Loads config.json + safetensors from an HF checkpoint directory (or one .safetensors file beside a
  // config.json).
  static ZayaModel load(const std::string& dir, const LoadOptions& opt = {});
};

// What the backward needs from one block (spec §6.14), recorded by zaya_forward when
// ForwardOptions::record is set. T = B·S tokens, row-major; "sorted" = tokens in ExpertPlan order.
// With recomputation only x, rho and choice are kept per block (the rest stays empty); zaya_recompute_block
// refills a whole LayerActivations from them.
struct LayerActivations {
  std::vector<float> x;            // [T, H] block input
  std::vector<float> rstd_in;      // [T] input_layernorm 1/rms
  std::vector<float> h;            // [T, H] normed input (padded rows zeroed)
  std::vector<float> raw;          // [T, C] raw q/k frames U = [Q0 | K0]
  std::vector<float> mid;          // [B, S+t1-1, C] depthwise-conv intermediates (incl. σ < 0)
  std::vector<float> conv;         // [T, C] grouped-conv output before the q/k mixing
  std::vector<float> qk;           // [T, C] Q' | K' (after mixing, QK norm, temperature, RoPE)
  std::vector<float> vals;         // [T, Kv] V = [Vc | Vd]
  std::vector<float> lse;          // [T, Hq] attention log-sum-exp (-inf for queries seeing nothing)
  std::vector<float> ocat;         // [T, A] concatenated heads
  std::vector<float> a;            // [T, H] attention output (after o_proj)
  std::vector<float> y;            // [T, H] after the post-attention residual merge
  std::vector<float> rstd_post;    // [T]
  std::vector<float> u;            // [T, H] normed MoE input
  std::vector<float> rho;          // [T, R] router state after EDA (what block i+1 receives)
  std::vector<float> rstd_router;  // [T]
  std::vector<float> rnorm;        // [T, R] router-normed state
  std::vector<float> pre1, z1;     // [T, R] fc1 pre-activation and GELU output
  std::vector<float> pre2, z2;     // [T, R] fc2 pre-activation and GELU output
  std::vector<float> probs;        // [T, E+1] router probabilities
  std::vector<int32_t> choice;     // [T] (E = skip)
  std::vector<float> weight;       // [T] p[choice] (0 for a native skip)
  std::vector<float> p_skip;       // [T] p_E
  ExpertPlan plan;
  std::vector<float> gu, act, ye;  // sorted [n, 2I], [n, I], [n, H]: expert [a|b], silu(a)⊙b, output
  std::vector<float> m;            // [T, H] MoE output

  size_t bytes() const;  // bytes held by the vectors above (the plan included)
};

struct Activations {
  int64_t B = 0, S = 0;
  std::vector<int32_t> ids;   // [B, S]
  std::vector<int32_t> mask;  // [B, S] or empty
  bool zero_pads = false;     // padded rows of h were zeroed (spec §5.5)
  // Recomputation (ForwardOptions::recompute): layers[l] keeps only x, rho and choice; the backward re-runs
  // each block from them. block_bytes: the bytes of one block's full recording, measured by the forward
  // (what the backward holds at a time on top of bytes()).
  bool recompute = false;
  size_t block_bytes = 0;
  std::vector<LayerActivations> layers;
  std::vector<float> x_final, rstd_final, z;  // [T, H], [T], [T, H]

  size_t bytes() const;  // bytes kept: every layer's vectors + ids, mask and the final-norm vectors
};

struct ForwardOptions {
  bool all_logits = true;   // false: logits of the last position of each row only ([B, 1, V])
  bool tap_hidden = false;  // record hidden_states [L+2, B, S, H]
  bool tap_router = false;  // record router logits [L, B, S, E+1] and choices [L, B, S]
  // Training: keep every intermediate the backward needs. Needs a fresh cache (one whole sequence per
  // row); sliding-window trimming is skipped so all keys stay available. Null (inference): no copies.
  Activations* record = nullptr;
  // With `record`: keep per block only what re-running it needs (its input x [T, H], the router state it
  // passes on, its expert choices); zaya_backward recomputes each block's activations before its backward,
  // bitwise the same (same kernels, same inputs), so the gradients are identical. Saves ~all of the
  // per-block activation memory for one more forward of the blocks.
  bool recompute = false;
};

struct ForwardResult {
  std::vector<float> logits;         // [B, S, V] or [B, 1, V]
  std::vector<float> hidden;         // [L+2, B, S, H] when tapped
  std::vector<float> router_logits;  // [L, B, S, E+1] when tapped
  std::vector<int32_t> choice;       // [L, B, S] when tapped (index E = skip)
};

// Reusable activations of one forward call (grow on demand, kept across calls).
struct ForwardScratch {
  std::vector<float> x, h, u, a, qkv, raw, vc, dv, frames, mid, taps, conv_batch, conv, vals, ocat, rho,
      rho_prev, r1, r2, probs, m, z;
  std::vector<int32_t> choice;
  std::vector<float> weight, p_skip;
  std::vector<int64_t> positions;
  std::vector<int32_t> ids;    // [T] zaya_forward_seqs: the call's tokens, sequence after sequence
  std::vector<float> head_in;  // [rows, H] the hidden rows whose logits are wanted
  MoeScratch moe;
  MoeBackwardScratch moe_backward;  // zaya_backward's experts
  // zaya_backward's own gradient rows, kept between steps for the same reason as train_acts: fresh, they
  // are ~170 MB of page faults per step on mid.json, 4 x 512 (0.2-0.3 s in a VM). Zero-filled on each
  // call, as fresh vectors would be.
  struct Backward {
    std::vector<float> dz, dx, dm, dy, du, da, dh;  // [T, H]
    std::vector<float> docat;                       // [T, A]
    std::vector<float> logits;                      // [chunk, V] one chunk of logits, then of their gradient
    std::vector<uint16_t> z16, dlogits16;           // their bf16 copies, with bf16 weights
    std::vector<float> dweight, dlogit;             // [T], [T, E+1]
    std::vector<float> dr2, dr1, drho, drho_carry;  // [T, R]
    std::vector<float> dqk, dmixed, draw, dvals, dqkv;  // [T, C] x3, [T, Kv], [T, C+Kv]
    std::vector<float> frames, dframes;                 // [slots, P+S, C] one per thread slot
    std::vector<float> seq_grads;  // [B, n] each sequence's CCA parameter gradients, summed in order
    LayerActivations recomputed;   // with ForwardOptions::recompute: one block's, re-run from what was kept
  } backward;
  // A training step's recording (ForwardOptions::record), kept here between steps: its vectors keep their
  // capacity, so the next step's ~1 GB (mid.json, 4 x 512) is not page-faulted in and zero-filled again
  // (every element is assigned by the recording forward before the backward reads it).
  Activations train_acts;
};

// ids[B, S] (row-major), mask[B, S] (nullable; 1 = real token, 0 = padding) for the S new tokens.
// Advances `cache` by S tokens. Throws zaya::Error for token ids outside [0, vocab).
void zaya_forward(const ZayaModel& model, ZayaCache& cache, const int32_t* ids, const int32_t* mask,
                  int64_t B, int64_t S, const ForwardOptions& opt, ForwardResult& out,
                  ForwardScratch& scratch);

// Continuous batching: one forward over several sequences, each continuing its own one-row cache (B == 1)
// by its own number of new tokens — prefill chunks of arriving prompts and single decode tokens in one
// call. Projections, router, experts (grouped over all the call's tokens) and head run over all tokens at
// once; attention runs per sequence against its own cache. Each cache advances by its entry's n tokens.
struct SeqStep {
  ZayaCache* cache = nullptr;    // the sequence's state: B == 1, a distinct cache per entry
  const int32_t* ids = nullptr;  // [n] new tokens
  int64_t n = 0;                 // >= 1
  int64_t logits = 1;            // logits of the last `logits` new positions (0..n; 0 = none)
};
// logits[Σ entries' `logits`, V]: entry i's rows start at row logit_row[i] (in entry order, positions in
// order). Throws zaya::Error for token ids outside [0, vocab) or a malformed entry (the caches are then
// unchanged only if the error came before the blocks ran: validate ids first).
void zaya_forward_seqs(const ZayaModel& model, const std::vector<SeqStep>& seqs, std::vector<float>& logits,
                       std::vector<int64_t>& logit_row, ForwardScratch& scratch);

// Recomputation: re-runs block `li` (in [0, L)) of the recording forward that filled `acts` (with
// ForwardOptions::recompute) from what it kept — the block input acts.layers[li].x [T, H] and the previous
// block's router state acts.layers[li-1].rho [T, R] — and records all of the block's intermediates into
// `out` exactly as a recording forward without recomputation keeps them in layers[li] (bitwise: the same
// block code, kernels and inputs; run it at the forward's OpenMP thread count). `out` and `scratch` are
// reused across calls. Throws zaya::Error when `acts` is not a recomputation recording of this model.
void zaya_recompute_block(const ZayaModel& model, const Activations& acts, int64_t li, LayerActivations& out,
                          ForwardScratch& scratch);

}  // namespace zaya
