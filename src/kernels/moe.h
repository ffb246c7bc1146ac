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
                         bool skip_passthrough, MoeScratch& scratch);

}  // namespace zaya
