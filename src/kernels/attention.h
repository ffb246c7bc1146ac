// Causal (optionally sliding-window) GQA/MHA attention with fp32 softmax (spec §5.5g, backward §6.5).
#pragma once

#include <cstdint>

namespace zaya {

struct AttentionArgs {
  int64_t S;          // new queries
  int64_t Hq, Hk, d;  // heads and head dim (κ(h) = h / (Hq/Hk))
  int64_t n_keys;     // keys available (cached + new), stored at absolute positions key_pos0 + i
  int64_t key_pos0;
  int64_t key_stride;  // elements between consecutive heads in k/v (>= n_keys * d)
  int64_t window;      // sliding window W (query i sees keys i-W < j <= i); 0 = global
};

// One sequence row:
//   out[S, Hq*d]; q[S, q_stride] holding Q'[S, Hq, d] at the row start; k, v [Hk, key_stride/d, d];
//   q_pos[S] absolute query positions; key_valid[n_keys] (nullable) 0 for padded keys.
// A query with no visible key (a padding query) gets a zero output. lse[S, Hq] (nullable) receives the
// log-sum-exp of each query row for the backward.
void attention_forward(float* out, float* lse, const float* q, int64_t q_stride, const float* k,
                       const float* v, const int64_t* q_pos, const uint8_t* key_valid,
                       const AttentionArgs& a);

}  // namespace zaya
