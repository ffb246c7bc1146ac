// Causal (optionally sliding-window) GQA/MHA attention with fp32 softmax (spec §5.5g, backward §6.5).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace zaya {

struct AttentionArgs {
  int64_t S;          // new queries
  int64_t Hq, Hk, d;  // heads and head dim (κ(h) = h / (Hq/Hk))
  int64_t n_keys;     // keys available (cached + new), stored at absolute positions key_pos0 + i
  int64_t key_pos0;
  int64_t key_stride;  // elements between consecutive heads in k/v (>= n_keys * d)
  int64_t window;      // sliding window W (query i sees keys i-W < j <= i); 0 = global
  // BF16: the Q·Kᵀ and P·V products of the blocked GEMM path take bf16 inputs (fp32 accumulation, fp32
  // softmax), as a bf16 model's attention does. F32 everywhere else (and always for training, whose
  // backward recomputes the probabilities in fp32 from the saved log-sum-exp). Chunks of 8+ queries with
  // head_dim a multiple of 16 on AVX-512 take the fused kernel (attention.cpp), fp32 whatever this says.
  DType gemm_dtype = DType::F32;
};

// One sequence row:
//   out[S, Hq*d]; q[S, q_stride] holding Q'[S, Hq, d] at the row start; k, v [Hk, key_stride/d, d];
//   q_pos[S] absolute query positions; key_valid[n_keys] (nullable) 0 for padded keys.
// A query with no visible key (a padding query) gets a zero output. lse[S, Hq] (nullable) receives the
// log-sum-exp of each query row for the backward.
void attention_forward(float* out, float* lse, const float* q, int64_t q_stride, const float* k,
                       const float* v, const int64_t* q_pos, const uint8_t* key_valid,
                       const AttentionArgs& a);

// attention_forward over a bf16 key/value cache (model/zaya-cache.h): k, v [Hk, key_stride/d, d] bf16. The
// same outputs, bit for bit, as attention_forward over fp32 copies of the same keys and values: decode's
// per-row path widens blocks of keys and values into scratch as it reaches them (half the bytes from memory),
// longer calls widen the visible keys and values once.
void attention_forward_kv16(float* out, float* lse, const float* q, int64_t q_stride, const uint16_t* k,
                            const uint16_t* v, const int64_t* q_pos, const uint8_t* key_valid,
                            const AttentionArgs& a);

// Backward of attention_forward for one sequence row (spec §6.5), token-major layout:
//   q[S, q_stride] with Q'[t, h] at column h·d; k[n_keys, k_stride] and v[n_keys, v_stride] with head j at
//   column j·d (key i at absolute position key_pos0 + i); dout[S, Hq·d] = ḡO; lse[S, Hq] from the forward.
//   dq (stride q_stride), dk (k_stride), dv (v_stride) receive += gradients. The probabilities are
//   recomputed from Q', K' and lse; masked and padded keys get none; queries without a visible key (lse
//   = -inf) have a constant zero output and pass no gradient. a.key_stride is unused.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, int64_t q_stride,
                        const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* lse,
                        const int64_t* q_pos, const uint8_t* key_valid, const AttentionArgs& a);

}  // namespace zaya
