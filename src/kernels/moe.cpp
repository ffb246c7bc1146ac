#include "kernels/moe.h"

#include <algorithm>
#include <cstring>

#include "core/profile.h"
#include "core/threads.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
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
                         bool skip_passthrough, MoeScratch& s, DType quant_tile) {
  ZAYA_PROFILE_SCOPE("moe_experts");
  const int64_t n = plan.offsets[E];
  s.x.resize(std::max<int64_t>(n, 1) * H);
  s.gu.resize(std::max<int64_t>(n, 1) * 2 * I);
  s.act.resize(std::max<int64_t>(n, 1) * I);
  s.y.resize(std::max<int64_t>(n, 1) * H);
  // Gather the routed tokens in expert order.
  parallel_for_static(n, n * H > 65536, [&](int64_t r) {
    std::memcpy(s.x.data() + r * H, u + plan.perm[r] * H, H * sizeof(float));
  });
  {
    ZAYA_PROFILE_SCOPE("moe_gate_up");
    grouped_linear_forward(s.gu.data(), s.x.data(), gate_up, plan.offsets.data(), E, quant_tile);
  }
  swiglu_forward(s.act.data(), s.gu.data(), n, I);
  {
    ZAYA_PROFILE_SCOPE("moe_down");
    grouped_linear_forward(s.y.data(), s.act.data(), down, plan.offsets.data(), E, quant_tile);
  }
  // Scatter back with the router weight; skip tokens get zero (or p_E · u for legacy passthrough).
  parallel_for_static(T, T * H > 65536, [&](int64_t t) {
    float* o = out + t * H;
    if (choice[t] == E && skip_passthrough) {
      for (int64_t i = 0; i < H; i++) o[i] = p_skip[t] * u[t * H + i];
    } else {
      std::memset(o, 0, H * sizeof(float));
    }
  });
  parallel_for_static(n, n * H > 65536, [&](int64_t r) {
    int64_t t = plan.perm[r];
    float w = weight[t];
    float* o = out + t * H;
    const float* y = s.y.data() + r * H;
    for (int64_t i = 0; i < H; i++) o[i] = w * y[i];
  });
}

void route_top1_backward(float* dlogits, const float* dweight, const float* probs, const int32_t* choice,
                         int64_t T, int64_t E) {
  for (int64_t t = 0; t < T; t++) {
    const float* p = probs + t * (E + 1);
    float* g = dlogits + t * (E + 1);
    const int32_t K = choice[t];
    const float a = dweight[t] * p[K];
    for (int64_t j = 0; j <= E; j++) g[j] = a * ((j == K ? 1.f : 0.f) - p[j]);
  }
}

namespace {

// Expert e's slice of a stacked [E, rows, cols] weight as a GEMM operand.
MatRef expert_mat(const Tensor& W, int64_t e, bool trans) {
  const int64_t rows = W.dim(1), cols = W.dim(2);
  const char* base = static_cast<const char*>(W.data) + size_t(e) * rows * cols * dtype_size(W.dtype);
  return {base, W.dtype, cols, trans};
}

}  // namespace

namespace {
// fn(e) for every expert with rows, scheduled as grouped_linear_forward's (GroupedSchedule::Auto): an expert
// with at least a thread's share of the rows alone with every thread on its GEMMs, the others spread over the
// threads, each GEMM on its thread. fn(e) must write only expert e's outputs.
template <typename Fn>
void for_each_expert(const int64_t* offsets, int64_t E, const Fn& fn) {
  const int threads = threads_here();
  std::vector<int64_t> whole, spread;
  plan_grouped_experts(GroupedSchedule::Auto, offsets, E, threads, &whole, &spread);
  for (int64_t e : whole) fn(e);
  parallel_for_dynamic(spread.size(), threads, [&](size_t i, int) { fn(spread[i]); });
}
}  // namespace

void moe_experts_backward(float* du, float* dweight, float* dgate_up, float* ddown, const float* dout,
                          const float* u, const int32_t* choice, const float* weight, const float* p_skip,
                          const ExpertPlan& plan, const Tensor& gate_up, const Tensor& down, const float* gu,
                          const float* act, const float* y, int64_t T, int64_t H, int64_t I, int64_t E,
                          bool skip_passthrough, bool overwrite, MoeBackwardScratch& scratch) {
  ZAYA_PROFILE_SCOPE("moe_experts_backward");
  const int64_t n = plan.offsets[E];
  // Skip tokens: native gives nothing; legacy passthrough m = p_E·u.
  for (int64_t t = 0; t < T; t++) {
    dweight[t] = 0.f;
    if (choice[t] != E || !skip_passthrough) continue;
    const float* g = dout + t * H;
    double dot = 0;
    for (int64_t i = 0; i < H; i++) dot += double(g[i]) * u[t * H + i];
    dweight[t] = float(dot);
    for (int64_t i = 0; i < H; i++) du[t * H + i] += p_skip[t] * g[i];
  }
  // Expert token counts change every step, so no product may build a primitive per count: the input-gradient
  // products take oneDNN's runtime-M primitive (one per weight shape), the weight-gradient products (K = the
  // expert's token count) the runtime-M/K one with bf16 weights, OpenBLAS in fp32 (its fastest fp32 path).
  // With bf16 weights the products take bf16 inputs with fp32 accumulation, as the forward's do; each
  // activation is rounded once (row by row, as it is made) rather than once per product.
  const bool bf16 = down.dtype == DType::BF16;
  // Every element a product reads is written first (the gather fills rows [0, n), each expert's products
  // rows [o0, o0 + ne) of [0, n)), so the scratch rows need no clearing.
  auto &x = scratch.x, &dy = scratch.dy, &dact = scratch.dact, &dgu = scratch.dgu, &dx = scratch.dx;
  auto &dy16 = scratch.dy16, &act16 = scratch.act16, &dgu16 = scratch.dgu16, &x16 = scratch.x16;
  const size_t rows_n = size_t(std::max<int64_t>(n, 1));
  auto grow = [rows_n](auto& v, int64_t cols) {
    if (v.size() < rows_n * size_t(cols)) v.resize(rows_n * size_t(cols));
  };
  grow(dact, I), grow(dgu, 2 * I), grow(dx, H);
  if (bf16) {
    grow(dy16, H), grow(x16, H), grow(act16, I), grow(dgu16, 2 * I);
  } else {
    grow(x, H), grow(dy, H);
  }
  // src[n, cols] fp32 -> dst bf16 (round to nearest even), rows over the threads.
  auto rows_bf16 = [n](uint16_t* dst, const float* src, int64_t cols) {
#pragma omp parallel for schedule(static) if (n * cols > 65536)
    for (int64_t r = 0; r < n; r++) convert_f32_to_bf16(dst + r * cols, src + r * cols, cols);
  };
  {
    ZAYA_PROFILE_SCOPE("moe_experts_backward.gather");
    // Routed rows gathered in expert order (perm is a permutation: each r writes its own token's dweight):
    // x = u and ḡy = w·ḡm per row (bf16 copies only, with bf16 weights), ḡw = ḡm·y.
#pragma omp parallel for schedule(static) if (n * H > 65536)
    for (int64_t r = 0; r < n; r++) {
      thread_local std::vector<float> dy_row;
      const int64_t t = plan.perm[r];
      const float* g = dout + t * H;
      const float* yr = y + r * H;
      float* dyr = bf16 ? (dy_row.resize(H), dy_row.data()) : dy.data() + r * H;
      // ḡw in fp64 on 16 running sums (lane i mod 16, then added in lane order): one sum made the row wait on
      // each add's latency (the gather was 2.2 ms of a mid.json layer's backward).
      constexpr int kLanes = 16;
      double lane[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= H; i += kLanes) {
#pragma omp simd
        for (int j = 0; j < kLanes; j++) lane[j] += double(g[i + j]) * yr[i + j];
      }
      for (int j = 0; i < H; i++, j++) lane[j] += double(g[i]) * yr[i];
      double dot = 0;
      for (int j = 0; j < kLanes; j++) dot += lane[j];
      for (i = 0; i < H; i++) dyr[i] = weight[t] * g[i];
      dweight[t] = float(dot);
      if (bf16) {
        convert_f32_to_bf16(dy16.data() + r * H, dyr, H);
        convert_f32_to_bf16(x16.data() + r * H, u + t * H, H);
      } else {
        std::memcpy(x.data() + r * H, u + t * H, H * sizeof(float));
      }
    }
    if (bf16) rows_bf16(act16.data(), act, I);
  }
  // Operand r0 rows into a [*, cols] activation: bf16 copy when the weights are bf16, the fp32 rows
  // otherwise.
  auto rows = [&](const std::vector<uint16_t>& v16, const float* v32, int64_t r0, int64_t cols, bool trans) {
    return bf16 ? MatRef{v16.data() + r0 * cols, DType::BF16, cols, trans}
                : mat(v32 + r0 * cols, cols, trans);
  };
  const GemmBackend weight_grad = bf16 ? GemmBackend::OneDnnRuntimeMK : GemmBackend::OpenBlas;
  const float grad_beta = overwrite ? 0.f : 1.f;  // write or add the weight gradients
  if (overwrite) {
    for (int64_t e = 0; e < E; e++) {
      if (plan.offsets[e + 1] > plan.offsets[e]) continue;  // written by its products below
      std::fill_n(ddown + e * H * I, H * I, 0.f);
      std::fill_n(dgate_up + e * 2 * I * H, 2 * I * H, 0.f);
    }
  }
  // (Stage times under ZAYA_PROFILE: the gather, each pair of products and the scatter; the rest of
  // moe_experts_backward is the bf16 rounding and the SwiGLU backward.)
  {
    ZAYA_PROFILE_SCOPE("moe_experts_backward.down");
    for_each_expert(plan.offsets.data(), E, [&](int64_t e) {
      const int64_t o0 = plan.offsets[e], ne = plan.offsets[e + 1] - o0;
      // y = ψ·D_eᵀ:  ḡD_e += ḡyᵀ·ψ (= with overwrite),  ḡψ = ḡy·D_e.
      gemm_with(weight_grad, H, I, ne, 1.f, rows(dy16, dy.data(), o0, H, /*trans=*/true),
                rows(act16, act, o0, I, false), grad_beta, ddown + e * H * I, I);
      gemm_with(GemmBackend::OneDnnRuntimeM, ne, I, H, 1.f, rows(dy16, dy.data(), o0, H, false),
                expert_mat(down, e, false), 0.f, dact.data() + o0 * I, I);
    });
  }
  swiglu_backward(dgu.data(), dact.data(), gu, n, I);
  if (bf16) rows_bf16(dgu16.data(), dgu.data(), 2 * I);
  {
    ZAYA_PROFILE_SCOPE("moe_experts_backward.gate_up");
    for_each_expert(plan.offsets.data(), E, [&](int64_t e) {
      const int64_t o0 = plan.offsets[e], ne = plan.offsets[e + 1] - o0;
      // [a|b] = x·G_eᵀ:  ḡG_e += [ḡa|ḡb]ᵀ·x,  ḡx = [ḡa|ḡb]·G_e.
      gemm_with(weight_grad, 2 * I, H, ne, 1.f, rows(dgu16, dgu.data(), o0, 2 * I, /*trans=*/true),
                rows(x16, x.data(), o0, H, false), grad_beta, dgate_up + e * 2 * I * H, H);
      gemm_with(GemmBackend::OneDnnRuntimeM, ne, H, 2 * I, 1.f, rows(dgu16, dgu.data(), o0, 2 * I, false),
                expert_mat(gate_up, e, false), 0.f, dx.data() + o0 * H, H);
    });
  }
  ZAYA_PROFILE_SCOPE("moe_experts_backward.scatter");
#pragma omp parallel for schedule(static) if (n * H > 65536)
  for (int64_t r = 0; r < n; r++) {
    float* d = du + plan.perm[r] * H;
    for (int64_t i = 0; i < H; i++) d[i] += dx[r * H + i];
  }
}

}  // namespace zaya
