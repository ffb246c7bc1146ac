// ZAYA1 MoE pieces: top-1 choice with balancing biases and the skip class (spec §5.6-5.7), and the SwiGLU
// experts over tokens sorted by expert (the MegaBlocks plan: gather, grouped GEMM, scatter; spec §5.8).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace zaya {

// probs[T, E+1] (softmax already applied), bias[E+1] fp32 → choice[T] = argmax(p + β) (lowest index on
// ties; index E = skip) and weight[T] = p[choice] (0 for skip in native semantics).
void route_top1(int32_t* choice, float* weight, const float* probs, const float* bias, int64_t T, int64_t E);

// Tokens sorted by expert: perm[n_routed] lists token indices grouped by expert, offsets[E+1] the row ranges.
// Skip tokens (choice == E) are left out.
struct ExpertPlan {
  std::vector<int64_t> perm;
  std::vector<int64_t> offsets;
};
ExpertPlan plan_experts(const int32_t* choice, int64_t T, int64_t E);

// out[T,H] = Σ slots weight · SwiGLU_expert(u) per token; skip tokens get 0, or p_skip[t] · u[t] when
// `skip_passthrough` (legacy semantics). gate_up [E, 2I, H], down [E, H, I] (F32 or BF16).
// Scratch buffers grow as needed; keep them across calls to avoid reallocation.
struct MoeScratch {
  std::vector<float> x, gu, act, y;
};
void moe_experts_forward(float* out, const float* u, const int32_t* choice, const float* weight,
                         const float* p_skip, const ExpertPlan& plan, const Tensor& gate_up,
                         const Tensor& down, int64_t T, int64_t H, int64_t I, int64_t E,
                         bool skip_passthrough, MoeScratch& scratch, DType quant_tile = DType::BF16);

// ---- Backward (spec §6.11-6.13) ----

// Router weight gather backward: dlogits[T, E+1] (overwritten) from ḡw[T], the gradient of the gathered
// weight w = p[choice] where p = softmax(logits): ḡℓ_j = ḡw·p_K·(1[j = K] − p_j). The top-1 choice itself
// passes no gradient; a native skip row has ḡw = 0 (its weight is the constant 0) and gets zeros.
void route_top1_backward(float* dlogits, const float* dweight, const float* probs, const int32_t* choice,
                         int64_t T, int64_t E);

// Backward of moe_experts_forward over tokens sorted by expert (per-expert GEMMs, spec §6.11-6.12):
//   du[T, H]            += ḡu through the experts (and p_E·ḡm for legacy passthrough skips)
//   dweight[T]          out: ḡw = ḡm·y_e for routed tokens, ḡm·u for passthrough skips, 0 for native skips
//   dgate_up[E, 2I, H], ddown[E, H, I]  += fp32 weight gradients (experts never chosen get none); with
//                       `overwrite` they are written instead (=, and zeros for experts never chosen): their
//                       old contents are never read, so a step need not clear 0.9 of mid.json's gradient
//                       memory first (ZayaGrads::zero_except_experts), nor its dW products read it back
//   dout[T, H] = ḡm; u, choice, weight, p_skip (read only for passthrough), plan, gate_up, down as in the
//   forward; the forward's sorted intermediates gu[n, 2I] (gate|up pre-activations), act[n, I] (silu(a)⊙b),
//   y[n, H] (expert outputs before the weight), n = plan.offsets[E].
// scratch: the backward's working rows (grown as needed, never read before written); keep it across calls:
// fresh zero-filled buffers cost ~50 MB of page faults and memset a mid.json layer, 0.18 s of a 3 s step.
struct MoeBackwardScratch {
  std::vector<float> x, dy, dact, dgu, dx;        // fp32 rows ([n, H], [n, H], [n, I], [n, 2I], [n, H])
  std::vector<uint16_t> dy16, act16, dgu16, x16;  // their bf16 copies, with bf16 weights
};
void moe_experts_backward(float* du, float* dweight, float* dgate_up, float* ddown, const float* dout,
                          const float* u, const int32_t* choice, const float* weight, const float* p_skip,
                          const ExpertPlan& plan, const Tensor& gate_up, const Tensor& down, const float* gu,
                          const float* act, const float* y, int64_t T, int64_t H, int64_t I, int64_t E,
                          bool skip_passthrough, bool overwrite, MoeBackwardScratch& scratch);

}  // namespace zaya
