// Grouped GEMM for Mixture-of-Experts layers (the MegaBlocks plan): tokens are sorted by expert, so expert e
// owns the contiguous rows [offsets[e], offsets[e+1]) of the input and output.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/gemm.h"

namespace zaya {

// out[r, :] = in[r, :] · W[e]ᵀ for every row r in [offsets[e], offsets[e+1]), for each expert e < E.
//   out     [T, N] fp32, T = offsets[E]
//   in      [T, K] fp32, rows sorted by expert
//   W       [E, N, K] F32 or BF16 (per-expert Linear weights, [out, in] each)
//   offsets [E+1] non-decreasing, offsets[0] == 0
// Experts with no rows are skipped. Throws on a malformed W or offsets.
// Each expert's product goes through gemm_with(backend): with Auto and gemm's batch-invariant mode on
// (set_gemm_batch_invariant), a token's output row depends only on its input row and its expert's weights,
// never on which other tokens were routed with it, the schedule or the thread a product ran on
// (tests/batch_invariance_test.cpp).
// A quantized W (kernels/quant_gemm.h) dequantizes its many-row experts into `quant_tile` (F32 or BF16).
void grouped_linear_forward(float* out, const float* in, const Tensor& W, const int64_t* offsets, int64_t E,
                            DType quant_tile = DType::BF16);

// How the expert GEMMs share the threads (for benchmarks; grouped_linear_forward uses Auto):
//   Sequential      one expert at a time, each GEMM on all threads
//   ExpertParallel  experts spread over the threads (largest first), each GEMM on one thread
//   Auto            experts holding at least 1/threads of the rows one at a time, the rest spread
enum class GroupedSchedule { Auto, Sequential, ExpertParallel };
const char* grouped_schedule_name(GroupedSchedule schedule);

// The schedule's split of the non-empty experts of `offsets` ([E+1]) for `threads` threads: `whole` run one
// at a time with every thread on each GEMM, `spread` (largest first) one GEMM per thread. (The experts'
// backward schedules its products the same way: kernels/moe.cpp.)
void plan_grouped_experts(GroupedSchedule schedule, const int64_t* offsets, int64_t E, int threads,
                          std::vector<int64_t>* whole, std::vector<int64_t>* spread);

void grouped_linear_forward_with(GroupedSchedule schedule, GemmBackend backend, float* out, const float* in,
                                 const Tensor& W, const int64_t* offsets, int64_t E);

}  // namespace zaya
