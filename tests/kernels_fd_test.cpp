// Finite-difference checks of every backward kernel (spec §6) against its forward.
//
// Method: each forward is reduced to a scalar objective f = Σ r ⊙ out with a fixed random r, accumulated in
// double; the analytic gradient is the backward kernel run with ḡout = r. Central differences
// (f(x+h) − f(x−h)) / 2h are taken for every input entry.
//
// Tolerance (the kernels compute in fp32, only the objective and the differences are double):
//   rounding: an fp32 forward perturbs f by about 1e-7·Σ|r·out| ≈ 1e-6 for these sizes, so the difference
//             quotient carries ≈ 1e-6 / 2h = 5e-5 of noise at h = 1e-2;
//   truncation: O(h²·f''') ≈ 1e-4 for O(1) inputs.
// In practice the errors are smaller than these estimates (measured, every check printed at the end of the
// binary: the worst uses 0.33 of its bar, grouped-expert gate_up_proj 1.7e-4 and the CCA conv frames), so the
// bar is |fd − analytic| ≤ 2.5e-4 + 2.5e-3·|analytic| (atol, rtol), ~3x the worst, unless a test says
// otherwise. The QK-norm clamp branch uses inputs of size 1e-9 (below ε_q) with h = 1e-11 and a tolerance
// relative to the largest gradient. A NaN on either side fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "kernels/cca.h"
#include "kernels/delayed_values.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/linear_backward.h"
#include "kernels/loss.h"
#include "kernels/moe.h"
#include "kernels/norm.h"
#include "test_util.h"

using namespace zaya;

namespace {

std::mt19937 g_rng(1234);

std::vector<float> randn(int64_t n, float scale = 1.f) {
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(g_rng);
  return v;
}

double dot(const float* a, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < r.size(); i++) s += double(a[i]) * r[i];
  return s;
}

// Every fd_check's worst error and the fraction of its bar it used, printed at the end of the binary.
struct FdRecord {
  std::string what;
  double used = 0, worst_err = 0;
};
std::vector<FdRecord> g_fd_log;
struct FdLogPrinter {
  ~FdLogPrinter() {
    for (const FdRecord& r : g_fd_log)
      std::printf("fd %-40s worst |fd - analytic| %.2e, %.3f of the bar\n", r.what.c_str(), r.worst_err,
                  r.used);
  }
} g_fd_log_printer;

struct FdTol {
  double h = 1e-2;
  double atol = 2.5e-4;
  double rtol = 2.5e-3;
};
// The clamp branch (inputs of 1e-9, h = 1e-11): a bar relative to the largest gradient (~√d/ε_q); measured
// worst 4.4e-6 of it, bar 2e-5 (4.5x).
double kClampAtolFraction = 2e-5;

// Compares analytic[i] with the central difference of f() in x[i], i < n. `skip` (nullable) exempts entries.
void fd_check(const std::string& what, float* x, const float* analytic, int64_t n,
              const std::function<double()>& f, const FdTol& tol = {},
              const std::function<bool(int64_t)>& skip = nullptr) {
  SCOPED_TRACE(what);
  int failures = 0;
  double used = 0, worst_err = 0;  // the largest err / (atol + rtol |analytic|) and |fd - analytic| seen
  for (int64_t i = 0; i < n; i++) {
    if (skip && skip(i)) continue;
    const float x0 = x[i];
    x[i] = float(x0 + tol.h);
    const double hp = double(x[i]) - x0;  // the step actually taken in fp32
    const double fp = f();
    x[i] = float(x0 - tol.h);
    const double hm = x0 - double(x[i]);
    const double fm = f();
    x[i] = x0;
    const double fd = (fp - fm) / (hp + hm);
    const double err = test::abs_diff(fd, analytic[i]);  // +inf for a NaN on either side
    const double bar = tol.atol + tol.rtol * std::fabs(analytic[i]);
    used = std::max(used, err / bar);
    worst_err = std::max(worst_err, err);
    if (!(err <= bar) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << ", finite difference " << fd;
  }
  g_fd_log.push_back({what, used, worst_err});
}

void fd_check(const std::string& what, std::vector<float>& x, const std::vector<float>& analytic,
              const std::function<double()>& f, const FdTol& tol = {},
              const std::function<bool(int64_t)>& skip = nullptr) {
  ASSERT_EQ(x.size(), analytic.size());
  fd_check(what, x.data(), analytic.data(), int64_t(x.size()), f, tol, skip);
}

Tensor tensor_from(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(DType::F32, shape);
  std::memcpy(t.data, v.data(), v.size() * sizeof(float));
  return t;
}

}  // namespace

// ---- Norms and element-wise ops ----

// N = 3: one block of rows; 70: three (rmsnorm_backward sums ḡg per 32-row block, then over the blocks).
TEST(KernelsFd, RmsNorm) {
  for (const int64_t N : {int64_t(3), int64_t(70)}) {
    SCOPED_TRACE(N);
    const int64_t D = 8;
    const float eps = 1e-5f;
    auto x = randn(N * D), g = randn(D), r = randn(N * D);
    std::vector<float> out(N * D), rstd(N), dx(N * D), dg(D, 0.f);
    auto f = [&] {
      rmsnorm_forward(out.data(), rstd.data(), x.data(), g.data(), N, D, eps);
      return dot(out.data(), r);
    };
    f();
    rmsnorm_backward(dx.data(), dg.data(), r.data(), x.data(), g.data(), rstd.data(), N, D, false);
    fd_check("x", x, dx, f);
    fd_check("g", g, dg, f);
    // accumulate adds into din; dg accumulates across calls.
    std::vector<float> acc(N * D, 1.f), dg2 = dg;
    rmsnorm_backward(acc.data(), dg2.data(), r.data(), x.data(), g.data(), rstd.data(), N, D, true);
    for (int64_t i = 0; i < N * D; i++) EXPECT_NEAR(acc[i], 1.f + dx[i], 2.4e-7f * (1.f + std::abs(dx[i])));
    for (int64_t i = 0; i < D; i++) EXPECT_NEAR(dg2[i], 2.f * dg[i], 1e-6f * std::abs(dg[i]));
  }
}

// H = 5: the scalar loop; 37: two 16-column vector steps (AVX-512 builds) and a scalar tail.
TEST(KernelsFd, ResidualScale) {
  for (const int64_t H : {int64_t(5), int64_t(37)}) {
    SCOPED_TRACE(H);
    const int64_t N = 3;
    auto o = randn(N * H), res = randn(N * H), hb = randn(H), hs = randn(H), rb = randn(H), rs = randn(H),
         r = randn(N * H);
    std::vector<float> out(N * H), d_o(N * H), d_r(N * H), dhb(H, 0.f), dhs(H, 0.f), drb(H, 0.f), drs(H, 0.f);
    auto f = [&] {
      residual_scale_forward(out.data(), o.data(), res.data(), hb.data(), hs.data(), rb.data(), rs.data(), N,
                             H);
      return dot(out.data(), r);
    };
    residual_scale_backward(d_o.data(), d_r.data(), dhb.data(), dhs.data(), drb.data(), drs.data(), r.data(),
                            o.data(), res.data(), hb.data(), hs.data(), rb.data(), rs.data(), N, H, false);
    fd_check("o", o, d_o, f);
    fd_check("r", res, d_r, f);
    fd_check("hidden_bias", hb, dhb, f);
    fd_check("hidden_scale", hs, dhs, f);
    fd_check("residual_bias", rb, drb, f);
    fd_check("residual_scale", rs, drs, f);
    // accumulate_dr adds into d_r (the block input feeds two consumers); d_o may be dout itself.
    std::vector<float> acc(N * H, 1.f), in_place = r;
    residual_scale_backward(in_place.data(), acc.data(), dhb.data(), dhs.data(), drb.data(), drs.data(),
                            in_place.data(), o.data(), res.data(), hb.data(), hs.data(), rb.data(), rs.data(),
                            N, H, true);
    for (int64_t i = 0; i < N * H; i++) {
      // The add may be fused with the product (one rounding, not two): within 2 ulp of the addends' size.
      EXPECT_NEAR(acc[i], 1.f + d_r[i], 2.4e-7f * (1.f + std::abs(d_r[i]))) << i;
      EXPECT_EQ(in_place[i], d_o[i]) << i;
    }
  }
}

TEST(KernelsFd, GeluExactErf) {
  const int64_t n = 24;
  std::vector<float> x(n), r = randn(n), dx(n), y(n);
  for (int64_t i = 0; i < n; i++) x[i] = -4.f + 8.f * float(i) / float(n - 1);
  auto f = [&] {
    y = x;
    gelu_forward(y.data(), n);
    return dot(y.data(), r);
  };
  gelu_backward(dx.data(), r.data(), x.data(), n);
  fd_check("x", x, dx, f);
}

// The vectorised GELU (libmvec erff / expf, threaded in chunks) against the fp64 formula over [-10, 10] and
// a length that is neither a multiple of 16 nor of the chunk. Absolute bounds: forward 2e-6 = 2 ulp of the
// largest |y| (10) (measured 6.9e-7; the scalar std::erf form 4.4e-7), backward 1e-6 for values ≤ 1.13
// (measured 1.7e-7). NaN stays NaN.
TEST(KernelsFd, GeluMatchesDoubleFormula) {
  const int64_t n = 3 * 4096 + 77;
  std::vector<float> x(n), y(n), dy(n, 1.0f), dx(n);
  for (int64_t i = 0; i < n; i++) x[i] = -10.f + 20.f * float(i) / float(n - 1);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  y = x;
  gelu_forward(y.data(), n);
  gelu_backward(dx.data(), dy.data(), x.data(), n);
  double worst_y = 0, worst_dx = 0, scalar_y = 0;
  for (int64_t i = 0; i < n; i++) {
    if (i == 5) {
      EXPECT_TRUE(std::isnan(y[i]) && std::isnan(dx[i]));
      continue;
    }
    const double v = x[i], cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    const double want_y = v * cdf, want_dx = cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    // Absolute error, as the cancellation in 1 + erf(x) for x < 0 makes every fp32 form's relative error
    // grow there; beside it, the scalar std::erf form's own error.
    worst_y = std::max(worst_y, std::fabs(y[i] - want_y));
    const float xs = x[i], scalar = 0.5f * xs * (1.0f + std::erf(xs * 0.70710678f));
    scalar_y = std::max(scalar_y, std::fabs(scalar - want_y));
    worst_dx = std::max(worst_dx, std::fabs(dx[i] - want_dx));
  }
  std::printf("gelu: max abs error forward %.2e (scalar erff form %.2e), backward %.2e\n", worst_y, scalar_y,
              worst_dx);
  EXPECT_LT(worst_y, 2e-6);
  EXPECT_LT(worst_dx, 1e-6);
}

TEST(KernelsFd, SwiGlu) {
  // I = 4: a partial vector only; 37: two whole 16-lane vectors and a partial one.
  for (int64_t I : {4, 37}) {
    const int64_t N = 3;
    auto gu = randn(N * 2 * I, 1.5f), r = randn(N * I);
    std::vector<float> out(N * I), dgu(N * 2 * I);
    auto f = [&] {
      swiglu_forward(out.data(), gu.data(), N, I);
      return dot(out.data(), r);
    };
    swiglu_backward(dgu.data(), r.data(), gu.data(), N, I);
    fd_check("gate_up, I " + std::to_string(I), gu, dgu, f);
    // The forward against its formula with std::exp (the vector exp is within a few ulp of it); run afresh:
    // fd_check leaves `out` from its last perturbed call.
    swiglu_forward(out.data(), gu.data(), N, I);
    for (int64_t k = 0; k < N * I; k++) {
      const float a = gu[(k / I) * 2 * I + k % I], b = gu[(k / I) * 2 * I + I + k % I];
      EXPECT_NEAR(out[k], a / (1.0f + std::exp(-a)) * b, 1e-6f * (1.0f + std::fabs(a * b))) << k;
    }
  }
}

TEST(KernelsFd, Softmax) {
  const int64_t N = 3, D = 6;
  auto x = randn(N * D, 2.f), r = randn(N * D);
  std::vector<float> y(N * D), dx(N * D);
  auto f = [&] {
    y = x;
    softmax_forward(y.data(), N, D);
    return dot(y.data(), r);
  };
  f();
  softmax_backward(dx.data(), r.data(), y.data(), N, D);
  fd_check("x", x, dx, f);
}

// Router top-1 weight gather (spec §6.13): w = softmax(ℓ)[K] with the choice K held fixed; a native skip has
// the constant weight 0.
TEST(KernelsFd, RouterTop1Gather) {
  const int64_t T = 5, E = 3;
  auto logits = randn(T * (E + 1), 1.5f), r = randn(T);
  logits[2 * (E + 1) + E] = 4.f;  // token 2 routes to the skip class
  std::vector<float> bias = {0.f, 0.1f, -0.1f, 0.f};
  std::vector<float> probs(T * (E + 1)), weight(T), dlogits(T * (E + 1));
  std::vector<int32_t> choice(T);
  probs = logits;
  softmax_forward(probs.data(), T, E + 1);
  route_top1(choice.data(), weight.data(), probs.data(), bias.data(), T, E);
  ASSERT_EQ(choice[2], E);
  std::vector<float> dweight(T);
  for (int64_t t = 0; t < T; t++) dweight[t] = choice[t] == E ? 0.f : r[t];
  auto f = [&] {
    std::vector<float> p = logits;
    softmax_forward(p.data(), T, E + 1);
    double s = 0;
    for (int64_t t = 0; t < T; t++)
      if (choice[t] < E) s += double(r[t]) * p[t * (E + 1) + choice[t]];
    return s;
  };
  route_top1_backward(dlogits.data(), dweight.data(), probs.data(), choice.data(), T, E);
  fd_check("logits", logits, dlogits, f);
  for (int64_t j = 0; j <= E; j++) EXPECT_EQ(dlogits[2 * (E + 1) + j], 0.f);
}

// Cross-entropy with the LM head (spec §6.1): mean CE of z·Wᵀ + b over counted targets.
TEST(KernelsFd, CrossEntropyWithHead) {
  const int64_t N = 4, H = 6, V = 7;
  auto z = randn(N * H), W = randn(V * H), b = randn(V);
  std::vector<int32_t> targets = {3, -100, 0, 6};
  std::vector<float> logits(N * V), dz(N * H), db(V, 0.f);
  Tensor Wt = tensor_from(W, {V, H});
  auto head = [&] {
    for (int64_t n = 0; n < N; n++)
      for (int64_t v = 0; v < V; v++) {
        double s = b[v];
        for (int64_t i = 0; i < H; i++) s += double(z[n * H + i]) * Wt.f32()[v * H + i];
        logits[n * V + v] = float(s);
      }
  };
  auto f = [&] {
    head();
    int64_t count = 0;
    return cross_entropy_forward(nullptr, logits.data(), targets.data(), N, V, &count);
  };
  head();
  int64_t count = 0;
  std::vector<float> dlogits(N * V);
  double sum = cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), N, V, 1.f / 3.f, &count);
  EXPECT_EQ(count, 3);
  EXPECT_NEAR(sum / 3.0, f(), 1e-6);
  for (int64_t v = 0; v < V; v++) EXPECT_EQ(dlogits[1 * V + v], 0.f);  // ignored row
  std::vector<float> dW(V * H, 0.f);
  linear_backward(dz.data(), false, dW.data(), db.data(), dlogits.data(), z.data(), Wt, N);
  fd_check("z", z, dz, f);
  fd_check("W", Wt.f32(), dW.data(), V * H, f);
  fd_check("b", b, db, f);
  std::vector<int32_t> bad = {7, 0, 0, 0};
  EXPECT_THROW(cross_entropy_backward(dlogits.data(), logits.data(), bad.data(), N, V, 1.f, nullptr), Error);
}

// Embedding + input scaling with the padding_idx rule (spec §6.2).
TEST(KernelsFd, EmbeddingPadRow) {
  const int64_t V = 6, H = 4, T = 5, pad = 0;
  auto emb = randn(V * H), alpha = randn(H), beta = randn(H), r = randn(T * H);
  std::vector<int32_t> ids = {2, 0, 5, 2, 0};  // repeats and the pad id
  Tensor E = tensor_from(emb, {V, H});
  auto f = [&] {
    double s = 0;
    for (int64_t t = 0; t < T; t++)
      for (int64_t i = 0; i < H; i++)
        s += double(r[t * H + i]) * ((E.f32()[ids[t] * H + i] + beta[i]) * alpha[i]);
    return s;
  };
  std::vector<float> demb(V * H, 0.f), dalpha(H, 0.f), dbeta(H, 0.f);
  embedding_backward(demb.data(), dalpha.data(), dbeta.data(), r.data(), ids.data(), T, E, alpha.data(),
                     beta.data(), pad);
  fd_check("embed (rows other than pad)", E.f32(), demb.data(), V * H, f, {},
           [&](int64_t i) { return i / H == pad; });
  for (int64_t i = 0; i < H; i++) EXPECT_EQ(demb[pad * H + i], 0.f) << "pad row gets no lookup gradient";
  fd_check("input_scale", alpha, dalpha, f);
  fd_check("input_bias", beta, dbeta, f);
}

// ---- CCA pieces ----

TEST(KernelsFd, PartialRope) {
  for (int64_t r_dim : {4, 8}) {
    const int64_t d = 8, pos = 37;
    std::vector<float> inv(r_dim / 2);
    rope_inv_freq(inv.data(), r_dim, 1e4);
    auto x = randn(d), r = randn(d);
    auto f = [&] {
      std::vector<float> y = x;
      rope_apply(y.data(), pos, r_dim, inv.data());
      return dot(y.data(), r);
    };
    std::vector<float> g = r;
    rope_apply_inverse(g.data(), pos, r_dim, inv.data());
    fd_check("x, rotary_dim " + std::to_string(r_dim), x, g, f);
    // The two-step form (angles once per position, then each head) is rope_apply bit for bit.
    std::vector<float> one = x, two = x, cs(r_dim / 2), sn(r_dim / 2);
    rope_apply(one.data(), pos, r_dim, inv.data());
    rope_angles(cs.data(), sn.data(), pos, r_dim, inv.data());
    rope_rotate(two.data(), cs.data(), sn.data(), r_dim);
    EXPECT_EQ(0, std::memcmp(one.data(), two.data(), d * sizeof(float))) << r_dim;
    // And the inverse: rope_rotate_inverse with those angles is rope_apply_inverse bit for bit.
    std::vector<float> inv_one = r, inv_two = r;
    rope_apply_inverse(inv_one.data(), pos, r_dim, inv.data());
    rope_rotate_inverse(inv_two.data(), cs.data(), sn.data(), r_dim);
    EXPECT_EQ(0, std::memcmp(inv_one.data(), inv_two.data(), d * sizeof(float))) << r_dim;
  }
}

namespace {

// cca_qk_forward (mixing, QK norm with temperature, RoPE) against cca_qk_backward for one configuration.
void check_cca_qk(const CcaDims& dm, int64_t rotary, float scale, const FdTol& tol, bool expect_clamped) {
  const int64_t S = 3, C = dm.C();
  auto conv = randn(S * C, scale), raw = randn(S * C, scale), temp = randn(dm.Hk), r = randn(S * C);
  std::vector<int64_t> pos = {5, 6, 7};
  const double theta = 1e4;
  std::vector<float> out(S * C);
  auto f = [&] {
    out = conv;
    cca_qk_forward(out.data(), raw.data(), temp.data(), pos.data(), S, dm, rotary, theta);
    return dot(out.data(), r);
  };
  std::vector<float> dmixed(S * C), draw(S * C, 0.f), dtemp(dm.Hk, 0.f);
  cca_qk_backward(dmixed.data(), draw.data(), dtemp.data(), r.data(), conv.data(), raw.data(), temp.data(),
                  pos.data(), S, dm, rotary, theta);
  FdTol t = tol;
  if (expect_clamped) {  // gradients ~ √d/ε_q: tolerance relative to the largest one
    double mx = 0;
    for (float v : dmixed) mx = std::max(mx, double(std::fabs(v)));
    t.atol = kClampAtolFraction * mx;
  }
  fd_check("conv (ḡQ̃|ḡK̃)", conv, dmixed, f, t);
  fd_check("raw (mixing)", raw, draw, f, t);
  // τ is O(1) in every case: the default step (the clamp test's h = 1e-11 would vanish in fp32 next to
  // it, 0/0 = NaN, which the old NaN-blind check passed).
  fd_check("temp", temp, dtemp, f);
}

}  // namespace

TEST(KernelsFd, CcaQkNormGqa) {
  check_cca_qk({4, 2, 8, 2, 2}, /*rotary=*/4, 1.f, {}, false);
}

TEST(KernelsFd, CcaQkNormMhaFullRotary) {
  check_cca_qk({2, 2, 8, 2, 2}, /*rotary=*/8, 1.f, {}, false);
}

// Every head vector below ε_q = 1.19e-7 in norm: the clamp branch ḡv = (τ√d/ε_q)·ḡ (spec §6.7).
TEST(KernelsFd, CcaQkNormClampBranch) {
  FdTol tol;
  tol.h = 1e-11;
  tol.rtol = 0;
  check_cca_qk({4, 2, 8, 2, 2}, /*rotary=*/4, 1e-9f, tol, true);
}

namespace {

void check_cca_conv(const CcaDims& dm, int64_t S, bool cached_frames, const FdTol& tol = {}) {
  SCOPED_TRACE("t0 " + std::to_string(dm.t0) + " t1 " + std::to_string(dm.t1) + " S " + std::to_string(S));
  const int64_t C = dm.C(), P = dm.P(), d = dm.d;
  auto frames = randn((P + S) * C);
  if (!cached_frames) std::fill(frames.begin(), frames.begin() + P * C, 0.f);
  auto w0 = randn(C * dm.t0), b0 = randn(C), w1 = randn(C * d * dm.t1, 0.5f), b1 = randn(C), r = randn(S * C);
  std::vector<float> out(S * C), mid((S + dm.t1 - 1) * C);
  auto f = [&] {
    cca_conv_forward(out.data(), mid.data(), frames.data(), w0.data(), b0.data(), w1.data(), b1.data(), S,
                     dm);
    return dot(out.data(), r);
  };
  f();
  std::vector<float> dframes((P + S) * C), dw0(w0.size(), 0.f), db0(C, 0.f), dw1(w1.size(), 0.f), db1(C, 0.f);
  cca_conv_backward(dframes.data(), dw0.data(), db0.data(), dw1.data(), db1.data(), r.data(), mid.data(),
                    frames.data(), w0.data(), w1.data(), S, dm);
  fd_check("frames", frames, dframes, f, tol);
  fd_check("w0", w0, dw0, f, tol);
  fd_check("b0 (incl. the σ < 0 intermediates)", b0, db0, f, tol);
  fd_check("w1", w1, dw1, f, tol);
  fd_check("b1", b1, db1, f, tol);
}

}  // namespace

TEST(KernelsFd, CcaConvShortChunk) {
  check_cca_conv({2, 1, 4, 3, 2}, 5, false);
  check_cca_conv({2, 1, 4, 2, 3}, 5, true);
  check_cca_conv({2, 1, 4, 1, 2}, 4, false);
}

// Head sizes of 16+ with t0 = t1 = 2 (ZAYA1-8B's): the depthwise step's and the taps' AVX-512 paths (16
// channels a step), d 24 also with their scalar tails.
// The map is linear in each input (no truncation error in a central difference), so the step is large: with
// the default 1e-2 the fp32 rounding of the 300-term objective (~1e-5 of ~100) divided by 2h reached 6e-4,
// over the bar, in the old scalar code and the new alike.
TEST(KernelsFd, CcaConvVectorPaths) {
  FdTol tol;
  tol.h = 0.25;
  check_cca_conv({2, 1, 32, 2, 2}, 3, true, tol);
  check_cca_conv({2, 1, 24, 2, 2}, 2, false, tol);
}

TEST(KernelsFd, CcaConvGemmPath) {
  check_cca_conv({2, 2, 4, 2, 2}, 17, false);  // S >= 16: the forward's per-group GEMMs
}

// The grouped convolution over its inference pack (cca_conv_pack: bf16 when every weight is a bf16 value,
// else fp32), against the fp64 sums of the weights as given: within 1e-6 of Σ|w·x| per output (one fp32 fma
// chain over the d·t1 terms; measured ≤ 1.9e-7), d = 16 … 128 (1, 2, 4 and 8 vectors of outputs), and every
// position's bits those of the same position alone (T = 1): the decode batch's rows do not depend on it.
TEST(KernelsFd, CcaConvPackSums) {
  const int64_t t1 = 2, T = 7;
  double worst = 0;
  for (int64_t d : {16, 32, 64, 128}) {
    for (bool bf16_values : {true, false}) {
      SCOPED_TRACE("d " + std::to_string(d) + (bf16_values ? " bf16 values" : " fp32 values"));
      const CcaDims dm{2, 1, d, 2, t1};
      const int64_t C = dm.C(), K = d * t1, groups = 3;
      auto w1 = randn(C * K, 0.5f), b1 = randn(C), taps = randn(T * groups * K);
      if (bf16_values)
        for (float& w : w1) w = bf16_to_f32(f32_to_bf16(w));
      const CcaConvPack pack = cca_conv_pack(w1.data(), C, d, t1);
#if !defined(__AVX512F__)
      EXPECT_TRUE(pack.empty());
      GTEST_SKIP() << "the pack and its kernel are AVX-512 only";
#endif
      ASSERT_FALSE(pack.empty());
      EXPECT_EQ(!pack.bf16.empty(), bf16_values);
      EXPECT_EQ(pack.bytes(), size_t(C * K) * (bf16_values ? 2 : 4));
      std::vector<float> out(T * C);
      cca_grouped_taps_forward(out.data(), taps.data(), w1.data(), b1.data(), T, true, dm, &pack);
      for (int64_t t = 0; t < T; t++) {
        for (int64_t o = 0; o < C; o++) {
          const int64_t g = o / d;
          double want = b1[o], mag = std::fabs(b1[o]);
          for (int64_t k = 0; k < K; k++) {
            const double term = double(w1[o * K + k]) * taps[(t * groups + g) * K + k];
            want += term;
            mag += std::fabs(term);
          }
          const double err = std::fabs(out[t * C + o] - want) / mag;
          worst = std::max(worst, err);
          ASSERT_LE(err, 1e-6) << "t " << t << " o " << o << " got " << out[t * C + o] << " want " << want;
        }
        std::vector<float> alone(C);
        cca_grouped_taps_forward(alone.data(), taps.data() + t * groups * K, w1.data(), b1.data(), 1, true,
                                 dm, &pack);
        EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + t * C, C * sizeof(float))) << "position " << t;
      }
    }
  }
  std::printf("largest error / Σ|w·x|: %.3g\n", worst);
}

TEST(KernelsFd, DelayedValuesSeed) {
  const int64_t S = 4, half = 3, Kv = 2 * half;
  auto vc = randn(S * half), dv = randn(S * half), seed = randn(half), r = randn(S * Kv);
  auto f = [&] {
    double s = 0;
    for (int64_t t = 0; t < S; t++)
      for (int64_t i = 0; i < half; i++) {
        s += double(r[t * Kv + i]) * vc[t * half + i];
        s += double(r[t * Kv + half + i]) * (t > 0 ? dv[(t - 1) * half + i] : seed[i]);
      }
    return s;
  };
  std::vector<float> dvc(S * half), ddv(S * half), dseed(half, 0.f);
  delayed_values_backward(dvc.data(), ddv.data(), half, dseed.data(), r.data(), S, half);
  fd_check("v_current", vc, dvc, f);
  fd_check("v_delayed (Dv)", dv, ddv, f);
  fd_check("seed = b_vd at t = 0", seed, dseed, f);
}

// ---- Attention ----

namespace {

// `every` > 1 checks only every `every`-th entry (long sequences: each difference is two forwards).
void check_attention(int64_t Hq, int64_t Hk, int64_t d, int64_t S, int64_t window, bool pad_first_keys,
                     int64_t every = 1) {
  SCOPED_TRACE("Hq " + std::to_string(Hq) + " Hk " + std::to_string(Hk) + " S " + std::to_string(S) + " W " +
               std::to_string(window) + (pad_first_keys ? " padded" : ""));
  const int64_t A = Hq * d, Kv = Hk * d;
  auto q = randn(S * A), k = randn(S * Kv), v = randn(S * Kv), r = randn(S * A);
  std::vector<int64_t> pos(S);
  for (int64_t s = 0; s < S; s++) pos[s] = s;
  std::vector<uint8_t> valid(S, 1);
  if (pad_first_keys) valid[0] = valid[1] = 0;
  AttentionArgs a;
  a.S = S;
  a.Hq = Hq;
  a.Hk = Hk;
  a.d = d;
  a.n_keys = S;
  a.key_pos0 = 0;
  a.key_stride = S * d;
  a.window = window;
  std::vector<float> out(S * A), lse(S * Hq), kh(Hk * S * d), vh(Hk * S * d);
  auto f = [&] {
    // The forward reads head-major [Hk, S, d] keys and values (the cache layout).
    for (int64_t j = 0; j < Hk; j++)
      for (int64_t s = 0; s < S; s++)
        for (int64_t i = 0; i < d; i++) {
          kh[(j * S + s) * d + i] = k[s * Kv + j * d + i];
          vh[(j * S + s) * d + i] = v[s * Kv + j * d + i];
        }
    attention_forward(out.data(), lse.data(), q.data(), A, kh.data(), vh.data(), pos.data(), valid.data(), a);
    return dot(out.data(), r);
  };
  f();
  std::vector<float> dq(S * A, 0.f), dk(S * Kv, 0.f), dv(S * Kv, 0.f);
  attention_backward(dq.data(), dk.data(), dv.data(), r.data(), q.data(), A, k.data(), Kv, v.data(), Kv,
                     lse.data(), pos.data(), valid.data(), a);
  auto sample = [&](int64_t i) { return i % every != 0; };
  fd_check("q", q, dq, f, {}, sample);
  fd_check("k", k, dk, f, {}, sample);
  fd_check("v", v, dv, f, {}, sample);
}

}  // namespace

TEST(KernelsFd, AttentionCausalGqa) {
  check_attention(4, 2, 8, 6, 0, false);
}

TEST(KernelsFd, AttentionSlidingMha) {
  check_attention(2, 2, 8, 7, 3, false);
}

TEST(KernelsFd, AttentionPaddedKeys) {
  check_attention(4, 2, 4, 6, 0, true);  // queries 0 and 1 see no key: zero output, no gradient
}

TEST(KernelsFd, AttentionBlockedPathSlidingGqa) {
  check_attention(2, 1, 4, 36, 5, true);  // S >= 32: the forward's blocked GEMM path
}

TEST(KernelsFd, AttentionSeveralQueryBlocks) {
  check_attention(2, 1, 4, 140, 0, false,
                  /*every=*/11);  // S > 128: more than one query block in forward and backward
}

// head_dim a multiple of 16: attention_forward's fused kernel on AVX-512 builds (16 queries x 16 keys a
// tile), with a partial last query block, padded keys and a window that ends inside key blocks.
TEST(KernelsFd, AttentionFusedPathPaddedGqa) {
  check_attention(4, 2, 16, 37, 0, true, /*every=*/5);
}

TEST(KernelsFd, AttentionFusedPathSlidingWindow) {
  check_attention(2, 1, 32, 40, 9, false, /*every=*/7);
}

namespace {

// attention_forward for S queries at positions n - S .. n - 1 of n keys (key_pos0 = 0), keys 0, 3, 31 and 50
// padded, against a double-precision softmax. Out and lse within 1e-5 (fp32 products over <= 128 terms and an
// fp32 softmax: measured <= 1e-6). nan_padded: the padded keys' key and value rows hold NaN, which a path
// that skips their zero weights never reads into an output (decode's per-row value sum masks its fmas).
void check_attention_against_double(int64_t S, int64_t Hq, int64_t Hk, int64_t d, int64_t n, int64_t window,
                                    bool nan_padded = false) {
  const int64_t G = Hq / Hk, p0 = n - S;
  SCOPED_TRACE("S " + std::to_string(S) + " Hq " + std::to_string(Hq) + " Hk " + std::to_string(Hk) + " d " +
               std::to_string(d) + " window " + std::to_string(window));
  auto q = randn(S * Hq * d), k = randn(Hk * n * d), v = randn(Hk * n * d);
  std::vector<int64_t> pos(S);
  for (int64_t t = 0; t < S; t++) pos[t] = p0 + t;
  std::vector<uint8_t> valid(n, 1);
  for (int64_t i : {0, 3, 31, 50})
    if (i < n) valid[i] = 0;
  if (nan_padded)
    for (int64_t j = 0; j < n; j++)
      if (!valid[j])
        for (int64_t h = 0; h < Hk; h++)
          for (int64_t c = 0; c < d; c++)
            k[(h * n + j) * d + c] = v[(h * n + j) * d + c] = std::numeric_limits<float>::quiet_NaN();
  AttentionArgs a;
  a.S = S, a.Hq = Hq, a.Hk = Hk, a.d = d, a.n_keys = n, a.key_pos0 = 0, a.key_stride = n * d;
  a.window = window;
  std::vector<float> out(S * Hq * d), lse(S * Hq);
  attention_forward(out.data(), lse.data(), q.data(), Hq * d, k.data(), v.data(), pos.data(), valid.data(),
                    a);
  double worst = 0;
  for (int64_t t = 0; t < S; t++) {
    for (int64_t h = 0; h < Hq; h++) {
      const float* kh = k.data() + (h / G) * n * d;
      const float* vh = v.data() + (h / G) * n * d;
      const int64_t first = window > 0 ? std::max<int64_t>(0, pos[t] - window + 1) : 0;
      std::vector<double> sc;
      std::vector<int64_t> keys;
      for (int64_t j = first; j <= pos[t]; j++) {
        if (!valid[j]) continue;
        double s = 0;
        for (int64_t c = 0; c < d; c++) s += double(q[(t * Hq + h) * d + c]) * kh[j * d + c];
        sc.push_back(s / std::sqrt(double(d)));
        keys.push_back(j);
      }
      double mx = -1e300, sum = 0;
      for (double s : sc) mx = std::max(mx, s);
      for (double s : sc) sum += std::exp(s - mx);
      for (int64_t c = 0; c < d; c++) {
        double o = 0;
        for (size_t i = 0; i < keys.size(); i++) o += std::exp(sc[i] - mx) / sum * vh[keys[i] * d + c];
        const float got = out[(t * Hq + h) * d + c];
        ASSERT_TRUE(std::isfinite(got)) << "t " << t << " h " << h;
        worst = std::max(worst, std::abs(got - o));
        ASSERT_NEAR(got, o, 1e-5) << "t " << t << " h " << h << " c " << c;
      }
      ASSERT_NEAR(lse[t * Hq + h], mx + std::log(sum), 1e-5) << "t " << t << " h " << h;
    }
  }
  std::printf("S %lld d %lld window %lld: max |out - reference| %.2g\n", (long long)S, (long long)d,
              (long long)window, worst);
}

}  // namespace

// A prefill chunk against a cache: head_dim 16 and 64 (the fused kernel), 8 (the GEMM path).
TEST(Kernels, AttentionChunkAgainstCacheMatchesDoubleReference) {
  for (int64_t d : {16, 64, 8})
    for (int64_t window : {0, 20}) check_attention_against_double(29, 4, 2, d, 75, window);
}

// Decode (fewer than 8 queries: the per-row path, where the query heads sharing a KV head take their scores
// together and split into parts when there are more threads than (query, KV head) pairs): ZAYA1-8B's head
// layout (8 query heads on 2 KV heads, d 128) and others, 1 and 8 threads, 70 keys (some dot_f32_grid blocks
// of 4 x 4, a tail) and 5 (fewer than its 16-key blocks); 300 keys with a window of 100 (the value sum's key
// blocks, 32 at d 128, starting off a block boundary and carried across several). The padded keys hold NaN:
// their zero weights must leave the value sums as they are (fails with the value sum's fma unmasked).
TEST(Kernels, AttentionDecodeRowsMatchDoubleReference) {
  const int threads = num_threads();
  for (int th : {1, 8}) {
    set_num_threads(th);
    for (int64_t S : {1, 3})
      for (auto [n, window] :
           std::vector<std::pair<int64_t, int64_t>>{{70, 0}, {70, 20}, {5, 0}, {5, 20}, {300, 100}}) {
        check_attention_against_double(S, 8, 2, 128, n, window, /*nan_padded=*/true);
        check_attention_against_double(S, 4, 1, 16, n, window, /*nan_padded=*/true);
        check_attention_against_double(S, 3, 3, 8, n, window, /*nan_padded=*/true);
      }
  }
  set_num_threads(threads);
}

// A decode query that sees no key (its position before the cache's first) gets zeros and a log-sum-exp of
// -inf, whatever the output buffer held before (NaN here).
TEST(Kernels, AttentionDecodeRowsWithNoVisibleKeyAreZero) {
  const int64_t Hq = 8, Hk = 2, d = 128, n = 40;
  std::vector<float> q = randn(Hq * d), k = randn(Hk * n * d), v = randn(Hk * n * d);
  std::vector<float> out(Hq * d, std::numeric_limits<float>::quiet_NaN()), lse(Hq, 0.f);
  const int64_t pos = 5;
  AttentionArgs a;
  a.S = 1, a.Hq = Hq, a.Hk = Hk, a.d = d, a.n_keys = n, a.key_pos0 = 10, a.key_stride = n * d;
  attention_forward(out.data(), lse.data(), q.data(), Hq * d, k.data(), v.data(), &pos, nullptr, a);
  for (int64_t i = 0; i < Hq * d; i++) ASSERT_EQ(out[i], 0.f) << "element " << i;
  for (int64_t h = 0; h < Hq; h++) EXPECT_EQ(lse[h], -std::numeric_limits<float>::infinity()) << "head " << h;
}

// A bf16 key/value cache (attention_forward_kv16) gives the bits of an fp32 cache holding the same values:
// decode's per-row path widens blocks of 32 keys (at d 128) as it goes, continuing each value chain across
// them; prefill chunks and batch-invariant calls widen everything once. Key counts below, at and beyond one
// block, windows, padded keys, a key stride beyond the stored keys, head dims with vector tails; 1 and 2
// threads. Fails when a block's value chains restart from zero, when a block's scores land at the wrong keys,
// or when the widened keys keep the cache's stride.
TEST(Kernels, AttentionBf16CacheEqualsF32CacheOfTheSameValues) {
  const int threads = num_threads();
  struct Case {
    int64_t S, Hq, Hk, d, n, window;
  };
  const std::vector<Case> cases = {{1, 8, 2, 128, 5, 0},     {1, 8, 2, 128, 32, 0},  {1, 8, 2, 128, 300, 0},
                                   {1, 8, 2, 128, 300, 100}, {3, 8, 2, 128, 70, 20}, {1, 4, 1, 24, 90, 0},
                                   {2, 3, 3, 8, 41, 0},      {12, 8, 2, 128, 60, 0}, {20, 4, 1, 24, 40, 16}};
  for (int th : {1, 2})
    for (bool invariant : {false, true})
      for (const Case& c : cases) {
        SCOPED_TRACE("S " + std::to_string(c.S) + " Hq " + std::to_string(c.Hq) + " d " +
                     std::to_string(c.d) + " keys " + std::to_string(c.n) + " window " +
                     std::to_string(c.window) + " threads " + std::to_string(th) +
                     (invariant ? " batch-invariant" : ""));
        set_num_threads(th);
        set_gemm_batch_invariant(invariant);
        const int64_t cap = c.n + 7;  // the stride between heads: room beyond the stored keys
        std::vector<float> q = randn(c.S * c.Hq * c.d), k32 = randn(c.Hk * cap * c.d),
                           v32 = randn(c.Hk * cap * c.d);
        std::vector<uint16_t> k16(k32.size()), v16(v32.size());
        convert_f32_to_bf16(k16.data(), k32.data(), int64_t(k32.size()));
        convert_f32_to_bf16(v16.data(), v32.data(), int64_t(v32.size()));
        round_f32_to_bf16_values(k32.data(), k32.data(), int64_t(k32.size()));
        round_f32_to_bf16_values(v32.data(), v32.data(), int64_t(v32.size()));
        std::vector<int64_t> pos(c.S);
        for (int64_t s = 0; s < c.S; s++) pos[s] = 1000 + c.n - c.S + s;  // the last S keys are the new ones
        std::vector<uint8_t> valid(c.n, 1);
        valid[1 % c.n] = 0;  // a padded key
        AttentionArgs a;
        a.S = c.S, a.Hq = c.Hq, a.Hk = c.Hk, a.d = c.d, a.n_keys = c.n, a.key_pos0 = 1000,
        a.key_stride = cap * c.d;
        a.window = c.window;
        std::vector<float> want(c.S * c.Hq * c.d), got(want.size(), std::numeric_limits<float>::quiet_NaN());
        attention_forward(want.data(), nullptr, q.data(), c.Hq * c.d, k32.data(), v32.data(), pos.data(),
                          valid.data(), a);
        attention_forward_kv16(got.data(), nullptr, q.data(), c.Hq * c.d, k16.data(), v16.data(), pos.data(),
                               valid.data(), a);
        for (size_t i = 0; i < want.size(); i++) {
          ASSERT_FALSE(std::isnan(got[i])) << "element " << i;
          ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
              << "element " << i << ": " << got[i] << " against " << want[i];
        }
      }
  set_gemm_batch_invariant(false);
  set_num_threads(threads);
}

// ---- Experts over sorted tokens, skip class ----

namespace {

void check_experts(bool passthrough) {
  SCOPED_TRACE(passthrough ? "legacy passthrough" : "native skip");
  const int64_t T = 7, H = 4, I = 3, E = 3;
  auto u = randn(T * H), r = randn(T * H);
  std::vector<int32_t> choice = {0, 2, 3, 0, 2, 3, 0};  // expert 1 unused, tokens 2 and 5 skip
  std::vector<float> weight = {0.3f, 0.5f, 0.f, 0.7f, 0.2f, 0.f, 0.4f};
  std::vector<float> p_skip = {0.1f, 0.2f, 0.6f, 0.1f, 0.3f, 0.45f, 0.2f};
  Tensor gate_up = tensor_from(randn(E * 2 * I * H), {E, 2 * I, H});
  Tensor down = tensor_from(randn(E * H * I), {E, H, I});
  ExpertPlan plan = plan_experts(choice.data(), T, E);
  MoeScratch sc;
  std::vector<float> out(T * H);
  auto f = [&] {
    moe_experts_forward(out.data(), u.data(), choice.data(), weight.data(), p_skip.data(), plan, gate_up,
                        down, T, H, I, E, passthrough, sc);
    return dot(out.data(), r);
  };
  f();
  std::vector<float> du(T * H, 0.f), dweight(T), dgu(E * 2 * I * H, 0.f), ddown(E * H * I, 0.f);
  MoeBackwardScratch bsc;
  moe_experts_backward(du.data(), dweight.data(), dgu.data(), ddown.data(), r.data(), u.data(), choice.data(),
                       weight.data(), p_skip.data(), plan, gate_up, down, sc.gu.data(), sc.act.data(),
                       sc.y.data(), T, H, I, E, passthrough, /*overwrite=*/false, bsc);
  fd_check("u", u, du, f);
  fd_check("weight (routed tokens)", weight, dweight, f, {}, [&](int64_t t) { return choice[t] == E; });
  if (passthrough) {
    fd_check("p_skip (skip tokens, ḡw = ḡm·u)", p_skip, dweight, f, {},
             [&](int64_t t) { return choice[t] != E; });
  } else {
    EXPECT_EQ(dweight[2], 0.f);
    EXPECT_EQ(dweight[5], 0.f);
  }
  fd_check("gate_up_proj", gate_up.f32(), dgu.data(), dgu.size(), f);
  fd_check("down_proj", down.f32(), ddown.data(), ddown.size(), f);
  for (int64_t i = 0; i < 2 * I * H; i++) EXPECT_EQ(dgu[1 * 2 * I * H + i], 0.f) << "unused expert";

  // overwrite: weight gradients written over stale contents (NaN here) are bitwise the ones added to zeros,
  // the unused expert's included; du and dweight are unchanged by the mode.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> du2(T * H, 0.f), dweight2(T), dgu2(dgu.size(), nan), ddown2(ddown.size(), nan);
  moe_experts_backward(du2.data(), dweight2.data(), dgu2.data(), ddown2.data(), r.data(), u.data(),
                       choice.data(), weight.data(), p_skip.data(), plan, gate_up, down, sc.gu.data(),
                       sc.act.data(), sc.y.data(), T, H, I, E, passthrough, /*overwrite=*/true, bsc);
  std::vector<float> dgu1(dgu.size(), 0.f), ddown1(ddown.size(), 0.f), du1(T * H, 0.f), dweight1(T);
  moe_experts_backward(du1.data(), dweight1.data(), dgu1.data(), ddown1.data(), r.data(), u.data(),
                       choice.data(), weight.data(), p_skip.data(), plan, gate_up, down, sc.gu.data(),
                       sc.act.data(), sc.y.data(), T, H, I, E, passthrough, /*overwrite=*/false, bsc);
  EXPECT_EQ(0, std::memcmp(dgu2.data(), dgu1.data(), dgu1.size() * 4)) << "gate_up gradient, overwrite";
  EXPECT_EQ(0, std::memcmp(ddown2.data(), ddown1.data(), ddown1.size() * 4)) << "down gradient, overwrite";
  EXPECT_EQ(0, std::memcmp(du2.data(), du1.data(), du1.size() * 4));
  EXPECT_EQ(0, std::memcmp(dweight2.data(), dweight1.data(), dweight1.size() * 4));
}

}  // namespace

TEST(KernelsFd, ExpertsNativeSkip) {
  check_experts(false);
}

TEST(KernelsFd, ExpertsLegacyPassthrough) {
  check_experts(true);
}

TEST(KernelsFd, LinearBackwardAccumulates) {
  const int64_t M = 3, N = 4, K = 5;
  auto x = randn(M * K), r = randn(M * N);
  Tensor W = tensor_from(randn(N * K), {N, K});
  auto b = randn(N);
  auto f = [&] {
    double s = 0;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double y = b[n];
        for (int64_t k = 0; k < K; k++) y += double(x[m * K + k]) * W.f32()[n * K + k];
        s += y * r[m * N + n];
      }
    return s;
  };
  std::vector<float> dx(M * K, 0.f), dW(N * K, 0.f), db(N, 0.f);
  linear_backward(dx.data(), false, dW.data(), db.data(), r.data(), x.data(), W, M);
  fd_check("x", x, dx, f);
  fd_check("W", W.f32(), dW.data(), N * K, f);
  fd_check("b", b, db, f);
  std::vector<float> dx2(M * K, 2.f);
  linear_backward(dx2.data(), true, dW.data(), nullptr, r.data(), x.data(), W, M);
  for (int64_t i = 0; i < M * K; i++) EXPECT_NEAR(dx2[i], 2.f + dx[i], 1e-5);
}
