#include "model/zaya-flops.h"

#include <algorithm>

namespace zaya {

double forward_flops_per_token(const ZayaConfig& c, int64_t S) {
  const double H = c.hidden_size, A = c.q_dim(), Kv = c.kv_dim(), C = c.conv_channels(), d = c.head_dim;
  const double R = c.router_hidden_size, E = c.num_experts, I = c.moe_intermediate_size, V = c.vocab_size;
  double total = 2.0 * H * V;  // LM head
  for (int64_t l = 0; l < c.num_hidden_layers; l++) {
    double proj = 2.0 * H * (A + Kv) + 2.0 * H * Kv + 2.0 * A * H;  // q, k, v_cur + v_del, o
    double conv = 2.0 * C * c.cca_time0 + 2.0 * C * d * c.cca_time1;
    double router = 2.0 * (H * R + 2 * R * R + R * (E + 1));
    double expert = 2.0 * 3.0 * H * I;  // top-1
    // Mean number of visible keys over positions 0..S-1 (window-limited on sliding layers).
    double ctx = 0;
    int64_t W = c.layer_types[l] == LayerType::HybridSliding ? c.sliding_window : S;
    for (int64_t t = 0; t < S; t++) ctx += double(std::min<int64_t>(t + 1, W));
    ctx /= double(S);
    double attn = 2.0 * 2.0 * A * ctx;  // scores and weighted values
    total += proj + conv + router + expert + attn;
  }
  return total;
}

}  // namespace zaya
