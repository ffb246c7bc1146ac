#include "kernels/moe.h"

#include <cstring>

#include "core/profile.h"
#include "kernels/elementwise.h"
#include "kernels/grouped_gemm.h"

namespace zaya {

void route_top1(int32_t* choice, float* weight, const float* probs, const float* bias, int64_t T, int64_t E) {
  for (int64_t t = 0; t < T; t++) {
    const float* p = probs + t * (E + 1);
    int32_t best = 0;
    float best_score = p[0] + bias[0];
    for (int64_t e = 1; e <= E; e++) {
      float s = p[e] + bias[e];
      if (s > best_score) {  // strict: the lowest index wins ties
        best_score = s;
        best = int32_t(e);
      }
    }
    choice[t] = best;
    weight[t] = best == E ? 0.f : p[best];
  }
}

ExpertPlan plan_experts(const int32_t* choice, int64_t T, int64_t E) {
  ExpertPlan plan;
  plan.offsets.assign(E + 1, 0);
  for (int64_t t = 0; t < T; t++) {
    if (choice[t] < E) plan.offsets[choice[t] + 1]++;
  }
  for (int64_t e = 0; e < E; e++) plan.offsets[e + 1] += plan.offsets[e];
  plan.perm.resize(plan.offsets[E]);
  std::vector<int64_t> cursor(plan.offsets.begin(), plan.offsets.end() - 1);
  for (int64_t t = 0; t < T; t++) {
    if (choice[t] < E) plan.perm[cursor[choice[t]]++] = t;
  }
  return plan;
}

void moe_experts_forward(float* out, const float* u, const int32_t* choice, const float* weight,
                         const float* p_skip, const ExpertPlan& plan, const Tensor& gate_up,
                         const Tensor& down, int64_t T, int64_t H, int64_t I, int64_t E,
                         bool skip_passthrough, MoeScratch& s) {
  ZAYA_PROFILE_SCOPE("moe_experts");
  const int64_t n = plan.offsets[E];
  s.x.resize(std::max<int64_t>(n, 1) * H);
  s.gu.resize(std::max<int64_t>(n, 1) * 2 * I);
  s.act.resize(std::max<int64_t>(n, 1) * I);
  s.y.resize(std::max<int64_t>(n, 1) * H);
  // Gather the routed tokens in expert order.
#pragma omp parallel for schedule(static) if (n * H > 65536)
  for (int64_t r = 0; r < n; r++) std::memcpy(s.x.data() + r * H, u + plan.perm[r] * H, H * sizeof(float));
  grouped_linear_forward(s.gu.data(), s.x.data(), gate_up, plan.offsets.data(), E);
  swiglu_forward(s.act.data(), s.gu.data(), n, I);
  grouped_linear_forward(s.y.data(), s.act.data(), down, plan.offsets.data(), E);
  // Scatter back with the router weight; skip tokens get zero (or p_E · u for legacy passthrough).
#pragma omp parallel for schedule(static) if (T * H > 65536)
  for (int64_t t = 0; t < T; t++) {
    float* o = out + t * H;
    if (choice[t] == E && skip_passthrough) {
      for (int64_t i = 0; i < H; i++) o[i] = p_skip[t] * u[t * H + i];
    } else {
      std::memset(o, 0, H * sizeof(float));
    }
  }
#pragma omp parallel for schedule(static) if (n * H > 65536)
  for (int64_t r = 0; r < n; r++) {
    int64_t t = plan.perm[r];
    float w = weight[t];
    float* o = out + t * H;
    const float* y = s.y.data() + r * H;
    for (int64_t i = 0; i < H; i++) o[i] = w * y[i];
  }
}

}  // namespace zaya
