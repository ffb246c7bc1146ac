// Quantized weight formats (core/quant.h) and the products with them (kernels/quant_gemm.h).
//
// Kernel tolerance: every output equals the fp64 product of the dequantized weights with the fp32
// activations the kernel uses within 1e-5 of Σ|w·a| (the bar of issue 14). The kernel sums in fp32: its
// error is a few ulps of the sum of magnitudes (measured up to ~4e-7 relative at K = 2048), so 1e-5 is
// ~25x the measured error and still catches a wrong scale, a lost block or a misplaced nibble (errors of
// the size of a weight, >= 1e-3 relative).
#include "core/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_info.h"
#include "core/error.h"
#include "core/mem_bandwidth.h"
#include "core/tensor.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "kernels/quant_gemm.h"
#include "test_util.h"

namespace zaya {
namespace {

constexpr DType kFormats[] = {DType::Q8_0, DType::MXFP4, DType::F8_E4M3};
// The streaming kernel also serves BF16 weights (decode with few rows).
constexpr DType kStreamed[] = {DType::Q8_0, DType::MXFP4, DType::F8_E4M3, DType::BF16};

Tensor random_f32(const Shape& shape, uint32_t seed, float scale = 1.0f);
Tensor weight_in(DType f, const Shape& shape, uint32_t seed) {
  Tensor w = random_f32(shape, seed, 0.05f);
  return f == DType::BF16 ? w.to(DType::BF16) : quantize(w, f);
}

Tensor random_f32(const Shape& shape, uint32_t seed, float scale) {
  Tensor t = Tensor::empty(DType::F32, shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); i++) t.f32()[i] = dist(rng);
  return t;
}

// fp64 reference: out[m, n] = Σ_k dequant(W)[n, k] · a[m, k], and the bound 1e-5 · Σ_k |w·a| per output.
void reference(std::vector<double>* out, std::vector<double>* bound, const Tensor& W, int64_t expert,
               const float* a, int64_t M) {
  const int64_t N = W.dim(-2), K = W.dim(-1);
  out->assign(size_t(M * N), 0.0);
  bound->assign(size_t(M * N), 0.0);
  std::vector<float> w(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; n++) {
    dequantize_row(w.data(), W, expert * N + n);
    for (int64_t m = 0; m < M; m++) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        s += double(w[size_t(k)]) * a[m * K + k];
        mag += std::fabs(double(w[size_t(k)]) * a[m * K + k]);
      }
      (*out)[size_t(m * N + n)] = s;
      (*bound)[size_t(m * N + n)] = 1e-5 * mag + 1e-30;
    }
  }
}

// The worst |got - want| / bound; > 1 fails. NaN or inf counts as infinitely wrong.
double worst_ratio(const float* got, const std::vector<double>& want, const std::vector<double>& bound) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); i++) {
    if (!std::isfinite(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / bound[i]);
  }
  return worst;
}

TEST(QuantFormat, Fp8CodesRoundTrip) {
  for (int b = 0; b < 256; b++) {
    const float v = f8e4m3_to_f32(uint8_t(b));
    if (std::isnan(v)) {
      EXPECT_TRUE((b & 0x7f) == 0x7f) << b;
      continue;
    }
    const uint8_t back = f32_to_f8e4m3(v);
    if (v == 0.0f) {
      EXPECT_EQ(back & 0x7f, 0) << b;
    } else {
      EXPECT_EQ(back, b) << "code " << b << " value " << v;
    }
  }
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f32_to_f8e4m3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(f32_to_f8e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(1.0625f), 0x38);  // 1 + 1/16: a tie between 1 and 1.125 -> even (1)
  EXPECT_EQ(f32_to_f8e4m3(1.1875f), 0x3a);  // 1.1875: a tie between 1.125 and 1.25 -> even (1.25)
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.5f, -10)), 0x01);  // 0.75 of the smallest subnormal -> it
}

TEST(QuantFormat, Q8_0Blocks) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; i++) x[i] = (i < 32 ? 0.01f : 3.0f) * float(i - 20);
  std::vector<int8_t> q(64);
  std::vector<uint16_t> d(2);
  quantize_row_q8_0(q.data(), d.data(), x.data(), 64);
  // Block 0: amax = 0.2 (i = 0 -> -0.2) -> d = 0.2/127, the extreme element exactly -127.
  EXPECT_EQ(q[0], -127);
  EXPECT_NEAR(f16_to_f32(d[0]), 0.2f / 127.0f, 1e-6);
  EXPECT_EQ(q[20], 0);
  for (int i = 0; i < 64; i++) {
    const float dd = f16_to_f32(d[i / 32]);
    EXPECT_LE(std::fabs(float(q[i]) * dd - x[i]), 0.5f * dd + std::fabs(x[i]) * 1e-3f) << i;
  }
}

TEST(QuantFormat, Mxfp4BlocksAndPacking) {
  // One block whose amax is 6: the scale is 2^(floor(log2 6) - 2) = 1, so the elements are E2M1 values.
  std::vector<float> x = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f, 3.0f, 4.0f,  6.0f,
                          -0.5f, -6.0f, 0.25f, 0.75f, 2.5f, 5.0f, -0.2f, 1.2f};
  x.resize(32, 0.0f);
  std::vector<uint8_t> p(16), e(1);
  quantize_row_mxfp4(p.data(), e.data(), x.data(), 32);
  EXPECT_EQ(e[0], 127);
  // Element 2k in the low nibble, 2k+1 in the high one.
  EXPECT_EQ(p[0], 0x10);  // 0 | 0.5 << 4
  EXPECT_EQ(p[1], 0x32);
  EXPECT_EQ(p[2], 0x54);
  EXPECT_EQ(p[3], 0x76);
  EXPECT_EQ(p[4], 0xF9);  // -0.5 -> 0x9, -6 -> 0xF
  EXPECT_EQ(p[5], 0x10);  // ties to the smaller magnitude: 0.25 -> 0, 0.75 -> 0.5
  EXPECT_EQ(p[6], 0x64);  // 2.5 -> 2, 5 -> 4
  EXPECT_EQ(p[7], 0x28);  // -0.2 -> -0 (0x8), 1.2 -> 1
  Tensor src = Tensor::empty(DType::F32, {1, 32});
  std::copy(x.begin(), x.end(), src.f32());
  Tensor q = quantize(src, DType::MXFP4);
  std::vector<float> back(32);
  dequantize_row(back.data(), q, 0);
  EXPECT_EQ(back[7], 6.0f);
  EXPECT_EQ(back[9], -6.0f);
  EXPECT_EQ(back[13], 4.0f);
  // A block of small values gets a small scale: amax 0.1 -> 2^(-4 - 2).
  std::vector<float> y(32, 0.0f);
  y[3] = 0.1f;
  quantize_row_mxfp4(p.data(), e.data(), y.data(), 32);
  EXPECT_EQ(e[0], 127 - 6);
  EXPECT_EQ(e8m0_to_f32(e[0]), std::ldexp(1.0f, -6));
}

TEST(QuantFormat, QuantizeDequantizeErrorBounds) {
  Tensor w = random_f32({16, 256}, 3, 0.05f);
  for (DType f : kFormats) {
    Tensor q = quantize(w, f);
    check_quantized(q, "test");
    Tensor back = q.to(DType::F32);
    double worst = 0;
    for (int64_t i = 0; i < w.numel(); i++) {
      const double rel = std::fabs(back.f32()[i] - w.f32()[i]) / 0.05;
      worst = std::max(worst, rel);
    }
    // Relative to the weights' std: Q8_0 ~1/127 of a block's amax, FP8 2^-4 of the value, MXFP4 a quarter
    // of the block's top binade. Loose bounds: a broken format is off by O(1).
    const double bound = f == DType::Q8_0 ? 0.03 : f == DType::F8_E4M3 ? 0.25 : 1.2;
    EXPECT_LT(worst, bound) << quant_scheme_name(f);
  }
}

TEST(QuantFormat, MalformedScalesAreErrors) {
  Tensor q = quantize(random_f32({8, 64}, 1), DType::Q8_0);
  Tensor bad = q;
  bad.scales = std::make_shared<const Tensor>(Tensor::empty(DType::F16, {8, 3}));
  EXPECT_THROW(check_quantized(bad, "w"), Error);
  bad.scales = std::make_shared<const Tensor>(Tensor::empty(DType::F32, {8, 2}));
  EXPECT_THROW(check_quantized(bad, "w"), Error);
  bad.scales = nullptr;
  EXPECT_THROW(check_quantized(bad, "w"), Error);
  std::vector<float> out(8), in(64, 1.0f);
  EXPECT_THROW(quant_linear_forward(out.data(), 8, in.data(), 1, bad), Error);
  EXPECT_THROW(quantize(random_f32({4, 40}, 1), DType::MXFP4), Error);  // 40 is not whole blocks
}

// The fp32 streaming kernels: the one decode takes on this build (StreamF32), and the AVX2 one that builds
// without AVX-512 take, which every AVX2 build tests here too.
// The product of W ([N, K]) with a's M rows on `path`, after checking that each row computed alone gives its
// row of it bitwise (batch invariance); `what` names the case in failures.
std::vector<float> expect_rows_equal_alone(QuantPath path, const Tensor& W, const Tensor& a,
                                           const std::string& what) {
  const int64_t N = W.dim(0), K = W.dim(1), M = a.dim(0);
  std::vector<float> all(size_t(M * N));
  quant_linear_forward_with(path, all.data(), N, a.f32(), M, W);
  for (int64_t m = 0; m < M; m++) {
    std::vector<float> one(static_cast<size_t>(N));
    quant_linear_forward_with(path, one.data(), N, a.f32() + m * K, 1, W);
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + m * N, size_t(N) * 4)) << what << " m=" << m;
  }
  return all;
}

std::vector<QuantPath> stream_paths() {
  std::vector<QuantPath> paths = {QuantPath::StreamF32};
  if (quant_avx2_stream_available()) paths.push_back(QuantPath::StreamAvx2);
  return paths;
}

// The fp32 streaming kernel at every row count a decode step or a prefill chunk gives, for each format.
TEST(QuantGemm, StreamEqualsDequantizedProduct) {
  for (DType f : kStreamed) {
    for (int64_t K : {32, 96, 544, 2048}) {
      const int64_t N = 37;
      Tensor W = weight_in(f, {N, K}, 11 + uint32_t(K));
      for (int64_t M : {1, 2, 3, 5, 8, 13, 16, 17, 40}) {
        Tensor a = random_f32({M, K}, 7 + uint32_t(M));
        std::vector<double> want, bound;
        reference(&want, &bound, W, 0, a.f32(), M);
        for (QuantPath path : stream_paths()) {
          std::vector<float> got(size_t(M * N), NAN);
          quant_linear_forward_with(path, got.data(), N, a.f32(), M, W);
          EXPECT_LE(worst_ratio(got.data(), want, bound), 1.0)
              << quant_scheme_name(f) << " K=" << K << " M=" << M
              << " avx2=" << (path == QuantPath::StreamAvx2);
        }
      }
    }
  }
}

// Every e4m3 code through kernel `path`: 256 codes as 8 rows of 32 against identity activations, every
// row M once. Each code widens exactly (subnormals, both zeros, ±448); the two NaN codes (0x7f, 0xff) make
// their rows NaN. DequantGemm rounds each scaled weight to bf16: there the row scales are powers of two, so
// that every scaled code is still a bf16 value.
void check_every_fp8_code(QuantPath path) {
  const int64_t N = 8, K = 32;
  Tensor W = quantize(random_f32({N, K}, 51), DType::F8_E4M3);
  auto* codes = static_cast<uint8_t*>(W.data);
  for (int b = 0; b < 256; b++) codes[b] = uint8_t(b);
  if (path == QuantPath::DequantGemm) {
    ASSERT_EQ(W.scales->dtype, DType::F32);  // one fp32 scale per row
    auto* scales = static_cast<float*>(const_cast<void*>(W.scales->data));
    for (int64_t n = 0; n < N; n++) scales[n] = std::ldexp(1.0f, -int(n % 4));
  }
  std::vector<float> eye(size_t(K * K), 0.0f);
  for (int64_t k = 0; k < K; k++) eye[size_t(k * K + k)] = 1.0f;
  std::vector<double> want, bound;
  reference(&want, &bound, W, 0, eye.data(), K);
  std::vector<float> got(size_t(K * N));
  quant_linear_forward_with(path, got.data(), N, eye.data(), K, W);
  int nan_rows = 0;  // a NaN weight makes its row NaN for every activation row (NaN · 0)
  for (int64_t m = 0; m < K; m++)
    for (int64_t n = 0; n < N; n++) {
      const size_t i = size_t(m * N + n);
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << "code " << n * K + m;
        nan_rows += m == 0;
      } else {
        EXPECT_EQ(got[i], float(want[i])) << "code " << n * K + m << " (" << int(codes[n * K + m]) << ")";
      }
    }
  EXPECT_EQ(nan_rows, 2);  // the rows of 0x7f and 0xff
}

// The streaming kernel decode takes on this build (AVX-512 where the CPU has it: FP8 widens through fp16
// there, where the NaN codes would land on ±480 unless the kernel maps them).
TEST(QuantGemm, StreamF32WidensEveryFp8Code) {
  check_every_fp8_code(QuantPath::StreamF32);
}

// The prefill path: rows dequantized to bf16 (every e4m3 value is a bf16 value), then one GEMM.
TEST(QuantGemm, DequantGemmWidensEveryFp8Code) {
  check_every_fp8_code(QuantPath::DequantGemm);
}

// The AVX2 streaming kernel.
TEST(QuantGemm, StreamAvx2WidensEveryFp8Code) {
  if (!quant_avx2_stream_available()) GTEST_SKIP() << "this build has no AVX2 streaming kernel";
  check_every_fp8_code(QuantPath::StreamAvx2);
}

// The prefill path rounds weights and activations to bf16: compare with the product of those bf16 values.
TEST(QuantGemm, DequantGemmEqualsBf16Product) {
  for (DType f : kFormats) {
    const int64_t N = 70, K = 288, M = 48;  // K: 9 blocks, an odd count
    Tensor W = quantize(random_f32({N, K}, 5, 0.05f), f);
    Tensor a = random_f32({M, K}, 6);
    Tensor wb = W.to(DType::BF16), ab = a.to(DType::BF16);
    std::vector<float> got(size_t(M * N)), want(size_t(M * N));
    quant_linear_forward_with(QuantPath::DequantGemm, got.data(), N, a.f32(), M, W);
    gemm_with(GemmBackend::Reference, M, N, K, 1.0f, mat(ab, K), mat(wb, K, true), 0.0f, want.data(), N);
    // Same bf16 operands, fp32 accumulation in another order: ~1e-6 of the output scale.
    const test::Diff d = test::diff(got.data(), want.data(), got.size());
    EXPECT_TRUE(d.within(0, 1e-5)) << quant_scheme_name(f) << ": " << d.str();
    // Into fp32 tiles (an fp32-compute model): the exact dequantized weights, fp32 activations.
    std::vector<double> ref, bound;
    reference(&ref, &bound, W, 0, a.f32(), M);
    quant_linear_forward_with(QuantPath::DequantGemm, got.data(), N, a.f32(), M, W, DType::F32);
    EXPECT_LE(worst_ratio(got.data(), ref, bound), 1.0) << quant_scheme_name(f) << " fp32 tiles";
  }
}

// Prefill's dequantized tiles hold exactly dequantize_row's values (F32 tiles) or their bf16 rounding (BF16
// tiles), in the natural element order: an identity activation matrix reads them back through the GEMM
// (one nonzero product per output: exact).
TEST(QuantGemm, DequantTilesEqualDequantizeRow) {
  for (DType f : kFormats) {
    const int64_t N = 40, K = 96;
    Tensor W = quantize(random_f32({N, K}, 17, 0.05f), f);
    std::vector<float> eye(size_t(K * K), 0.0f);
    for (int64_t k = 0; k < K; k++) eye[size_t(k * K + k)] = 1.0f;
    std::vector<float> deq(static_cast<size_t>(K));
    for (DType tile : {DType::F32, DType::BF16}) {
      std::vector<float> got(size_t(K * N), NAN);
      quant_linear_forward_with(QuantPath::DequantGemm, got.data(), N, eye.data(), K, W, tile);
      for (int64_t n = 0; n < N; n++) {
        dequantize_row(deq.data(), W, n);
        for (int64_t k = 0; k < K; k++) {
          const float want = tile == DType::F32 ? deq[size_t(k)] : bf16_to_f32(f32_to_bf16(deq[size_t(k)]));
          ASSERT_EQ(got[size_t(k * N + n)], want)
              << quant_scheme_name(f) << " tile " << dtype_name(tile) << " row " << n << " col " << k;
        }
      }
    }
  }
}

// The fp32 streaming kernel: row m of the result depends on row m of the input only, bitwise equal whatever
// M and the thread count.
TEST(QuantGemm, StreamIsBatchInvariant) {
  // The second shape has weight rows of 4-8 kB: a thread's tile spans several of the 256 kB slices that
  // rows beyond 8 revisit in L2, so the slicing is covered too.
  for (auto [N, K] : {std::pair<int64_t, int64_t>{300, 512}, {1024, 4096}})
    for (DType f : kStreamed) {
      const int64_t M = 19;
      Tensor W = weight_in(f, {N, K}, 9);
      Tensor a = random_f32({M, K}, 10);
      for (QuantPath path : stream_paths()) {
        expect_rows_equal_alone(
            path, W, a,
            std::string(quant_scheme_name(f)) + " avx2=" + (path == QuantPath::StreamAvx2 ? "1" : "0"));
      }
    }
}

// Experts: every routed row equals the single-matrix product with its expert's weights, bitwise, both
// with a few rows an expert (streamed) and with many (dequantized GEMM for the large ones).
TEST(QuantGemm, GroupedEqualsPerExpert) {
  for (DType f : kStreamed) {
    const int64_t E = 5, N = 48, K = 128;
    Tensor W = weight_in(f, {E, N, K}, 21);
    for (std::vector<int64_t> counts :
         {std::vector<int64_t>{1, 0, 2, 1, 0}, std::vector<int64_t>{3, 40, 0, 17, 1}}) {
      std::vector<int64_t> offsets{0};
      for (int64_t c : counts) offsets.push_back(offsets.back() + c);
      const int64_t T = offsets.back();
      Tensor a = random_f32({T, K}, 22);
      std::vector<float> got(size_t(T * N), NAN);
      grouped_linear_forward(got.data(), a.f32(), W, offsets.data(), E);
      for (int64_t e = 0; e < E; e++) {
        const int64_t rows = counts[size_t(e)];
        if (rows == 0) continue;
        Tensor We = f == DType::BF16 ? Tensor::view(DType::BF16, {N, K}, W.bf16() + e * N * K, W.owner)
                                     : quant_rows(W, e * N, N);
        std::vector<float> want(size_t(rows * N));
        quant_linear_forward_with(rows <= kQuantStreamMaxRows ? QuantPath::Stream : QuantPath::DequantGemm,
                                  want.data(), N, a.f32() + offsets[e] * K, rows, We);
        EXPECT_EQ(0, std::memcmp(want.data(), got.data() + offsets[e] * N, want.size() * 4))
            << quant_scheme_name(f) << " expert " << e << " rows " << rows;
      }
    }
  }
}

// ---- The bf16 dot kernel (BF16 / FP8 weights, activations rounded to bf16) ----

constexpr DType kDotted[] = {DType::BF16, DType::F8_E4M3};

#define BF16_DOT_OR_SKIP() \
  if (!quant_bf16_dot_available()) GTEST_SKIP() << "this build has no AVX512-BF16 dot kernel"

// Equal to the fp64 product of the dequantized weights with the activations the kernel uses (rounded to
// bf16) within 1e-5 of Σ|w·a|, at every row count (register blocks of 1 to 6 rows and their remainders)
// and K of 1 to 64 blocks. The error the rounding of the activations adds, against fp32 activations, stays
// under 2^-8 of Σ|w·a| (each product moves by at most 2^-9 of itself, the bf16 half-ulp); its largest ratio
// to Σ|w·a| is printed (issue 14's separate report).
TEST(QuantGemm, Bf16DotEqualsBf16ActivationProduct) {
  BF16_DOT_OR_SKIP();
  for (DType f : kDotted) {
    double worst_act_error = 0;
    for (int64_t K : {32, 96, 544, 2048}) {
      const int64_t N = 37;  // 9 register blocks of 4 weight rows and a remainder of 1
      Tensor W = weight_in(f, {N, K}, 41 + uint32_t(K));
      for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 16, 17, 40}) {
        Tensor a = random_f32({M, K}, 43 + uint32_t(M));
        Tensor ar = a.to(DType::BF16).to(DType::F32);
        std::vector<double> want, bound, want32, bound32;
        reference(&want, &bound, W, 0, ar.f32(), M);
        reference(&want32, &bound32, W, 0, a.f32(), M);
        std::vector<float> got(size_t(M * N), NAN);
        quant_linear_forward_with(QuantPath::Bf16Dot, got.data(), N, a.f32(), M, W);
        EXPECT_LE(worst_ratio(got.data(), want, bound), 1.0)
            << quant_scheme_name(f) << " K=" << K << " M=" << M;
        for (size_t i = 0; i < got.size(); i++) {
          const double mag = bound32[i] / 1e-5;
          const double err = std::fabs(double(got[i]) - want32[i]) / mag;
          worst_act_error = std::max(worst_act_error, err);
          ASSERT_LE(err, std::ldexp(1.0, -8)) << quant_scheme_name(f) << " K=" << K << " M=" << M;
        }
      }
    }
    std::printf("bf16 dot kernel, %s: bf16 activations add at most %.2e of sum|w*a| against fp32 ones\n",
                f == DType::BF16 ? "bf16" : "fp8", worst_act_error);
  }
}

// Every e4m3 code, subnormals and NaN among them, widens exactly: W holds the 256 codes (8 rows of 32) and
// the activations are the identity, so out[m, n] is one weight times 1, times its row's scale: it equals the
// dequantized weight bit for bit (and a row with a NaN code is NaN wherever it meets a 0).
TEST(QuantGemm, Bf16DotWidensEveryFp8Code) {
  BF16_DOT_OR_SKIP();
  check_every_fp8_code(QuantPath::Bf16Dot);
}

// With BF16 weights its sums are gemm()'s batch-invariant bf16 dot form: bitwise the RowInvariant GEMM of
// the same operands, at any M.
TEST(QuantGemm, Bf16DotOnBf16WeightsEqualsInvariantGemm) {
  BF16_DOT_OR_SKIP();
  const int64_t N = 300, K = 512;
  Tensor W = weight_in(DType::BF16, {N, K}, 52);
  for (int64_t M : {1, 5, 19}) {
    Tensor a = random_f32({M, K}, 53 + uint32_t(M));
    std::vector<float> got(size_t(M * N)), want(size_t(M * N));
    quant_linear_forward_with(QuantPath::Bf16Dot, got.data(), N, a.f32(), M, W);
    gemm_with(GemmBackend::RowInvariant, M, N, K, 1.0f, mat(a.f32(), K), mat(W, K, true), 0.0f, want.data(),
              N);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "M=" << M;
  }
}

// Row m of the result depends on row m of the input only: bitwise equal whatever M (register blocks of
// 6 rows and remainders) and the thread count; and in gemm's batch-invariant mode the decode path (Stream)
// takes the same kernel at every M, so it is invariant there too.
TEST(QuantGemm, Bf16DotIsBatchInvariant) {
  BF16_DOT_OR_SKIP();
  for (DType f : kDotted)
    for (QuantPath path : {QuantPath::Bf16Dot, QuantPath::Stream}) {
      const int64_t N = 1024, K = 4096, M = 19;
      Tensor W = weight_in(f, {N, K}, 54);
      Tensor a = random_f32({M, K}, 55);
      const bool saved = gemm_batch_invariant();
      set_gemm_batch_invariant(path == QuantPath::Stream);
      expect_rows_equal_alone(
          path, W, a,
          std::string(quant_scheme_name(f)) + (path == QuantPath::Stream ? " (invariant mode)" : ""));
      set_gemm_batch_invariant(saved);
    }
}

// Decode's choice (Stream) follows the documented rule: for BF16 and FP8 weights in a bf16-compute model,
// the bf16 dot kernel's bits from bf16_dot_min_rows(format) rows on, the fp32 kernel's below (on Zen 5 a
// BF16 product takes the dot kernel from one row). Both are computed and compared bitwise, so a rule that
// picked the wrong kernel on either side of the threshold turns this red on any CPU with the dot kernel.
TEST(QuantGemm, StreamTakesBf16DotFromItsMinRows) {
  BF16_DOT_OR_SKIP();
  if (!cpu_fast_bf16_dot()) GTEST_SKIP() << "decode keeps the fp32 kernel on this CPU (cpu_fast_bf16_dot)";
  for (DType f : kDotted) {
    const int64_t N = 64, K = 256;
    Tensor W = weight_in(f, {N, K}, 57);
    for (int64_t M = 1; M <= 5; M++) {
      Tensor a = random_f32({M, K}, 58 + uint32_t(M));
      std::vector<float> got(size_t(M * N)), dot(size_t(M * N)), f32(size_t(M * N));
      quant_linear_forward_with(QuantPath::Stream, got.data(), N, a.f32(), M, W);
      quant_linear_forward_with(QuantPath::Bf16Dot, dot.data(), N, a.f32(), M, W);
      quant_linear_forward_with(QuantPath::StreamF32, f32.data(), N, a.f32(), M, W);
      ASSERT_NE(0, std::memcmp(dot.data(), f32.data(), dot.size() * 4));  // the two kernels differ here
      const std::vector<float>& want = M >= bf16_dot_min_rows(f) ? dot : f32;
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
          << quant_scheme_name(f) << " M=" << M << " (bf16_dot_min_rows " << bf16_dot_min_rows(f) << ")";
    }
  }
  EXPECT_EQ(bf16_dot_min_rows(DType::BF16), cpu_full_width_avx512() ? 1 : kBf16DotMinRows);
  EXPECT_EQ(bf16_dot_min_rows(DType::F8_E4M3), kBf16DotMinRows);
}

// Formats it does not take are an error, not a wrong answer.
TEST(QuantGemm, Bf16DotRejectsOtherFormats) {
  BF16_DOT_OR_SKIP();
  std::vector<float> a(64, 1.0f), out(4);
  for (DType f : {DType::Q8_0, DType::MXFP4}) {
    Tensor W = quantize(random_f32({4, 64}, 56), f);
    EXPECT_THROW(quant_linear_forward_with(QuantPath::Bf16Dot, out.data(), 4, a.data(), 1, W), Error);
  }
}

// ---- The VNNI kernel over packed weights (int8 activations) ----

constexpr DType kPacked[] = {DType::Q8_0, DType::MXFP4};
// Every format pack_for_decode packs whose source a loaded model releases (prefill reads the pack).
constexpr DType kReleasedPacked[] = {DType::Q8_0, DType::MXFP4, DType::F8_E4M3};
// Every format pack_for_decode packs as 3-D experts.
constexpr DType kExpertPacked[] = {DType::Q8_0, DType::MXFP4, DType::F8_E4M3, DType::BF16};

// W quantized and packed for the VNNI kernel; skips the test on CPUs without AVX512-VNNI (no pack made).
#define PACKED_OR_SKIP(W) \
  pack_for_decode(W);     \
  if (!has_decode_pack(W)) GTEST_SKIP() << "no AVX512-VNNI decode kernel on this CPU"

// The activations the kernel uses, dequantized: q · d per block.
std::vector<float> dequantized_activations(const ActQ8& aq, int64_t M, int64_t K) {
  std::vector<float> out(size_t(M * K));
  for (int64_t i = 0; i < M * K; i++) out[size_t(i)] = float(aq.q[size_t(i)]) * aq.d[size_t(i / 32)];
  return out;
}

// Activation quantization (ActQ8) against the definition, element by element: per block of 32, d = amax / 127
// and q = round-to-nearest-even(x · 127 / amax) clamped to ±127, Σq for the weights' offset; a block with a
// NaN or an infinity gets q = 0 and d = NaN; an all-zero block, and one whose 127 / amax overflows float
// (amax < ~4e-37), q = 0. Blocks with exact ties (x · 127 / amax = k + 1/2) check the rounding mode. The
// build's quantizer is vectorized on AVX-512; this is its scalar definition.
TEST(QuantGemm, ActivationQuantizationMatchesItsDefinition) {
  const int64_t K = 32 * 12, M = 3;
  Tensor a = random_f32({M, K}, 91);
  float* x = a.f32();
  auto block = [&](int64_t m, int64_t b) { return x + m * K + b * 32; };
  std::fill(block(0, 1), block(0, 1) + 32, 0.0f);                       // all zero
  block(0, 2)[5] = NAN;                                                 // NaN
  block(0, 3)[31] = -INFINITY;                                          // infinity
  for (int i = 0; i < 32; i++) block(0, 4)[i] = 1e-38f * float(i % 5);  // 127 / amax overflows
  for (int i = 0; i < 32; i++) block(1, 0)[i] = -float(i + 1);          // negative only
  // Ties: amax = 127 so x · 127 / amax = x; half-integers round to even.
  for (int i = 0; i < 32; i++) block(1, 1)[i] = i == 0 ? 127.0f : float(i) - 15.5f;
  for (int i = 0; i < 32; i++) block(1, 2)[i] = i == 0 ? -127.0f : 0.5f * float(i % 7) - 1.5f;
  for (int i = 0; i < 32; i++) block(2, 0)[i] = 3e37f * (i % 2 ? 1.0f : -1.0f);  // large
  ActQ8 got;
  quantize_activations(&got, x, M, K);
  const int64_t nb = K / 32;
  ASSERT_EQ(got.q.size(), size_t(M * K));
  ASSERT_EQ(got.d.size(), size_t(M * nb));
  ASSERT_EQ(got.neg_sum128.size(), size_t(M * nb));
  for (int64_t m = 0; m < M; m++)
    for (int64_t b = 0; b < nb; b++) {
      const float* v = block(m, b);
      float amax = 0.0f;
      bool finite = true;
      for (int i = 0; i < 32; i++)
        finite = finite && std::isfinite(v[i]), amax = std::max(amax, std::fabs(v[i]));
      const float inv = amax > 0.0f && std::isfinite(127.0f / amax) ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int i = 0; i < 32; i++) {
        const int q = finite ? int(std::clamp(std::nearbyint(v[i] * inv), -127.0f, 127.0f)) : 0;
        sum += q;
        ASSERT_EQ(int(got.q[size_t(m * K + b * 32 + i)]), q)
            << "row " << m << " block " << b << " element " << i;
      }
      const float d = got.d[size_t(m * nb + b)];
      if (finite) {
        EXPECT_EQ(d, amax / 127.0f) << "row " << m << " block " << b;
      } else {
        EXPECT_TRUE(std::isnan(d)) << "row " << m << " block " << b;
      }
      EXPECT_EQ(got.neg_sum128[size_t(m * nb + b)], -128 * sum) << "row " << m << " block " << b;
    }
  // The ties really were ties: 0.5 -> 0, 1.5 -> 2, -0.5 -> -0, -1.5 -> -2.
  EXPECT_EQ(int(got.q[size_t(K + 32 + 16)]), 0);   // 16 - 15.5 = 0.5
  EXPECT_EQ(int(got.q[size_t(K + 32 + 17)]), 2);   // 1.5
  EXPECT_EQ(int(got.q[size_t(K + 32 + 14)]), -2);  // -1.5
}

// The int8-activation kernels: the VNNI one over a pack (AVX512-VNNI CPUs: QuantPath::Stream on a packed
// W) and the AVX2 one on W's own layout (QuantPath::Int8Avx2; decode's choice in builds without AVX-512).
struct Int8Kernel {
  const char* name;
  bool packed;
  QuantPath path;
};
constexpr Int8Kernel kInt8Kernels[] = {{"vnni", true, QuantPath::Stream},
                                       {"avx2", false, QuantPath::Int8Avx2}};

// W as `k` reads it (packed for the VNNI kernel); false where this CPU or build has no such kernel.
bool ready_for(const Int8Kernel& k, Tensor& W) {
  if (!k.packed) return quant_avx2_stream_available();
  pack_for_decode(W);
  return has_decode_pack(W);
}

// a[M, K] quantized as the int8 kernels quantize it (returned), and the fp64 product of W's dequantized
// weights with those dequantized activations (want) with its bound 1e-5 · Σ|w·a| (bound). MXFP4's kernels
// read the activations deinterleaved per block: the same values, so the same int8 ones.
ActQ8 int8_reference(std::vector<double>* want, std::vector<double>* bound, const Tensor& W, const float* a,
                     int64_t M, int64_t K) {
  ActQ8 aq;
  quantize_activations(&aq, a, M, K);
  const std::vector<float> ad = dequantized_activations(aq, M, K);
  reference(want, bound, W, 0, ad.data(), M);
  return aq;
}

// Equal to the fp64 product of the dequantized weights with the dequantized int8 activations within 1e-5
// of Σ|w·a| (the integer dots are exact; the fp32 scaling and sum round); and the error the activations'
// rounding adds, against fp32 activations, stays under its bound Σ_k |w_k| · d_b(k) / 2 (half a step per
// element). The largest ratio of that error to Σ|w·a| is printed: issue 14's separate report. Both int8
// kernels, each where the machine has it.
TEST(QuantGemm, PackedEqualsQuantizedActivationProduct) {
  int ran = 0;
  for (const Int8Kernel& kernel : kInt8Kernels)
    for (DType f : kPacked) {
      double worst_act_error = 0;
      for (int64_t K : {32, 96, 2048}) {
        const int64_t N = 48;
        Tensor W = weight_in(f, {N, K}, 31 + uint32_t(K));
        if (!ready_for(kernel, W)) break;
        ran++;
        for (int64_t M : {1, 2, 3, 4, 5, 8, 13, 16, 17, 40}) {
          Tensor a = random_f32({M, K}, 37 + uint32_t(M));
          std::vector<double> want, bound;
          const ActQ8 aq = int8_reference(&want, &bound, W, a.f32(), M, K);
          std::vector<float> got(size_t(M * N), NAN);
          quant_linear_forward_with(kernel.path, got.data(), N, a.f32(), M, W);
          EXPECT_LE(worst_ratio(got.data(), want, bound), 1.0)
              << kernel.name << " " << quant_scheme_name(f) << " K=" << K << " M=" << M;
          // Against fp32 activations.
          std::vector<double> exact, mag;
          reference(&exact, &mag, W, 0, a.f32(), M);
          std::vector<float> wrow(static_cast<size_t>(K));
          for (int64_t n = 0; n < N; n++) {
            dequantize_row(wrow.data(), W, n);
            for (int64_t m = 0; m < M; m++) {
              double step = 0;
              for (int64_t k = 0; k < K; k++)
                step += std::fabs(wrow[size_t(k)]) * aq.d[size_t((m * K + k) / 32)] / 2;
              const double err = std::fabs(double(got[size_t(m * N + n)]) - exact[size_t(m * N + n)]);
              const double sum_mag = mag[size_t(m * N + n)] / 1e-5;
              EXPECT_LE(err, step + mag[size_t(m * N + n)])
                  << kernel.name << " " << quant_scheme_name(f) << " K=" << K << " m=" << m;
              worst_act_error = std::max(worst_act_error, err / sum_mag);
            }
          }
        }
      }
      if (worst_act_error > 0)
        std::printf(
            "  %s kernel, %s weights: activation int8 rounding adds at most %.2e of sum|w*a| to an output\n",
            kernel.name, quant_scheme_name(f), worst_act_error);
    }
  if (ran == 0) GTEST_SKIP() << "no int8-activation kernel on this CPU";
}

// Bitwise the same rows whatever M, for the int8 kernels too (the serving engine's batch invariance).
TEST(QuantGemm, PackedIsBatchInvariant) {
  int ran = 0;
  for (const Int8Kernel& kernel : kInt8Kernels)
    for (DType f : kPacked) {
      const int64_t N = 1024, K = 2048, M = 19;
      Tensor W = weight_in(f, {N, K}, 41);
      if (!ready_for(kernel, W)) continue;
      ran++;
      Tensor a = random_f32({M, K}, 42);
      expect_rows_equal_alone(kernel.path, W, a, std::string(kernel.name) + " " + quant_scheme_name(f));
    }
  if (ran == 0) GTEST_SKIP() << "no int8-activation kernel on this CPU";
}

// Experts: packed grouped rows equal the packed single-matrix product of their expert, bitwise.
TEST(QuantGemm, PackedGroupedEqualsPerExpert) {
  for (DType f : kExpertPacked) {
    const int64_t E = 5, N = 48, K = 128;
    Tensor W = weight_in(f, {E, N, K}, 51);
    PACKED_OR_SKIP(W);
    const std::vector<int64_t> counts{3, 0, 1, 9, 2};
    std::vector<int64_t> offsets{0};
    for (int64_t c : counts) offsets.push_back(offsets.back() + c);
    const int64_t T = offsets.back();
    Tensor a = random_f32({T, K}, 52);
    std::vector<float> got(size_t(T * N), NAN);
    grouped_linear_forward(got.data(), a.f32(), W, offsets.data(), E);
    for (int64_t e = 0; e < E; e++) {
      const int64_t rows = counts[size_t(e)];
      if (rows == 0) continue;
      Tensor We = quant_rows(W, e * N, N);
      pack_for_decode(We);
      std::vector<float> want(size_t(rows * N));
      quant_linear_forward_with(QuantPath::Stream, want.data(), N, a.f32() + offsets[e] * K, rows, We);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data() + offsets[e] * N, want.size() * 4))
          << quant_scheme_name(f) << " expert " << e;
    }
  }
}

// Prefill dequantizes from the pack when there is one (so the checkpoint's pages can go): bitwise the same
// tiles, bf16 and fp32, as from the checkpoint's own layout.
TEST(QuantGemm, PackedPrefillEqualsUnpacked) {
  for (DType f : kReleasedPacked) {
    const int64_t N = 64, K = 288, M = 40;
    Tensor W = weight_in(f, {N, K}, 71);
    Tensor Wp = W;
    PACKED_OR_SKIP(Wp);
    Tensor a = random_f32({M, K}, 72);
    for (DType tile : {DType::BF16, DType::F32}) {
      std::vector<float> want(size_t(M * N)), got(size_t(M * N));
      quant_linear_forward_with(QuantPath::DequantGemm, want.data(), N, a.f32(), M, W, tile);
      quant_linear_forward_with(QuantPath::DequantGemm, got.data(), N, a.f32(), M, Wp, tile);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
          << quant_scheme_name(f) << " " << dtype_name(tile);
    }
  }
}

// BF16 experts with a pack read only the pack (a loaded model releases their pages): decode's streamed rows
// and prefill's many rows (bf16 tiles unpacked for the GEMM) give bitwise what the unpacked experts give
// on the same bf16 GEMM, in a decode-sized call (60 rows) and a larger one (the grouped GEMM path unpacked).
TEST(QuantGemm, PackedBf16ExpertsPrefillEqualsUnpacked) {
  const int64_t E = 3, N = 48, K = 128;
  Tensor W = weight_in(DType::BF16, {E, N, K}, 73);
  Tensor Wp = W;
  PACKED_OR_SKIP(Wp);
  for (const std::vector<int64_t>& counts :
       {std::vector<int64_t>{40, 0, 20}, std::vector<int64_t>{40, 0, 90}}) {
    std::vector<int64_t> offsets{0};
    for (int64_t c : counts) offsets.push_back(offsets.back() + c);
    const int64_t T = offsets.back();
    Tensor a = random_f32({T, K}, 74);
    std::vector<float> want(size_t(T * N)), got(size_t(T * N), NAN);
    grouped_linear_forward(want.data(), a.f32(), W, offsets.data(), E);
    grouped_linear_forward(got.data(), a.f32(), Wp, offsets.data(), E);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << "T=" << T;
  }
}

// Rows that are not whole groups of 16 keep the fp32 kernel; NaN activations stay NaN on the packed one.
TEST(QuantGemm, PackedEdgeCases) {
  Tensor odd = quantize(random_f32({40, 64}, 61), DType::Q8_0);
  pack_for_decode(odd);
  EXPECT_FALSE(has_decode_pack(odd));
  Tensor W = quantize(random_f32({16, 64}, 62), DType::MXFP4);
  PACKED_OR_SKIP(W);
  std::vector<float> a(64, 1.0f), out(16);
  a[40] = NAN;
  quant_linear_forward(out.data(), 16, a.data(), 1, W);
  for (float v : out) EXPECT_TRUE(std::isnan(v));
}

// BF16 and FP8 matrices packed for decode (pack_for_decode): the float packed kernels against the fp64
// product, at the row counts of decode and past them (BF16: blocks of 16, 8, 4, 2, 1 rows; FP8: 8, 4, 2, 1;
// several passes for 3, 5, 13, 17, 40), with column groups that fill their blocks of groups and leave some
// over (N = 48: 3 groups; 400: 25). Bound 1e-5 of Σ|w·a| per output: measured worst 0.03 of it (both formats:
// one fp32 chain over K = 2048).
TEST(QuantGemm, FloatPackedEqualsFp32Product) {
  for (DType f : {DType::BF16, DType::F8_E4M3}) {
    for (int64_t N : {48, 400}) {
      for (int64_t K : {32, 96, 2048}) {
        Tensor W = weight_in(f, {N, K}, 81 + uint32_t(K + N));
        PACKED_OR_SKIP(W);
        double worst = 0;
        for (int64_t M : {1, 2, 3, 4, 5, 8, 13, 16, 17, 40}) {
          Tensor a = random_f32({M, K}, 83 + uint32_t(M));
          std::vector<double> want, bound;
          reference(&want, &bound, W, 0, a.f32(), M);
          std::vector<float> got(size_t(M * N), NAN);
          quant_linear_forward_with(QuantPath::PackedF32, got.data(), N, a.f32(), M, W);
          const double r = worst_ratio(got.data(), want, bound);
          EXPECT_LE(r, 1.0) << dtype_name(f) << " N=" << N << " K=" << K << " M=" << M;
          worst = std::max(worst, r);
        }
        if (K == 2048 && N == 400)
          std::printf("  %s packed kernel: worst error %.3f of the bound\n", dtype_name(f), worst);
      }
    }
  }
}

// The bf16 dot kernel over the bf16 pack (Zen 5's decode for packed dense bf16 matrices): against the fp64
// product of the weights with the bf16-rounded activations it uses, within 1e-5 of Σ|w·a| (one fp32 chain of
// vdpbf16ps over K / 2 pairs; measured worst printed), at the row counts of float_packed_tile's blocks and
// past them. Bitwise the same rows whatever M (batch invariant); a grouped call over packed experts gives
// each expert what its own call gives.
TEST(QuantGemm, PackedBf16DotEqualsBf16ActivationProduct) {
  BF16_DOT_OR_SKIP();
  double worst = 0;
  for (int64_t N : {48, 400}) {
    for (int64_t K : {32, 96, 2048}) {
      Tensor W = weight_in(DType::BF16, {N, K}, 101 + uint32_t(K + N));
      PACKED_OR_SKIP(W);
      for (int64_t M : {1, 2, 3, 4, 5, 8, 13, 16, 17, 40}) {
        Tensor a = random_f32({M, K}, 103 + uint32_t(M));
        Tensor ar = a.to(DType::BF16).to(DType::F32);
        std::vector<double> want, bound;
        reference(&want, &bound, W, 0, ar.f32(), M);
        std::vector<float> got(size_t(M * N), NAN);
        quant_linear_forward_with(QuantPath::PackedBf16Dot, got.data(), N, a.f32(), M, W);
        const double r = worst_ratio(got.data(), want, bound);
        EXPECT_LE(r, 1.0) << "N=" << N << " K=" << K << " M=" << M;
        worst = std::max(worst, r);
      }
    }
  }
  std::printf("  packed bf16 dot kernel: worst error %.3f of the bound\n", worst);
  const int64_t N = 1024, K = 2048, M = 19;
  Tensor W = weight_in(DType::BF16, {N, K}, 105);
  PACKED_OR_SKIP(W);
  Tensor a = random_f32({M, K}, 106);
  expect_rows_equal_alone(QuantPath::PackedBf16Dot, W, a, "packed bf16 dot");
  // No pack: a clear error, not the weights' own layout read as a pack.
  Tensor plain = weight_in(DType::BF16, {32, 64}, 107);
  std::vector<float> out(32);
  EXPECT_THROW(quant_linear_forward_with(QuantPath::PackedBf16Dot, out.data(), 32, a.f32(), 1, plain), Error);
}

// Bitwise the same rows whatever M (each output is one chain of fmas over k in order), and the same
// columns whatever N's split into tiles; NaN activations stay NaN.
TEST(QuantGemm, FloatPackedIsBatchInvariant) {
  for (DType f : {DType::BF16, DType::F8_E4M3}) {
    SCOPED_TRACE(dtype_name(f));
    const int64_t N = 1024, K = 2048, M = 19;
    Tensor W = weight_in(f, {N, K}, 91);
    PACKED_OR_SKIP(W);
    Tensor a = random_f32({M, K}, 92);
    const std::vector<float> all = expect_rows_equal_alone(QuantPath::PackedF32, W, a, "float packed");
    std::vector<float> nan_in(a.f32(), a.f32() + 4 * K), out(size_t(4 * N));
    nan_in[size_t(2 * K + 17)] = NAN;
    quant_linear_forward_with(QuantPath::PackedF32, out.data(), N, nan_in.data(), 4, W);
    for (int64_t n = 0; n < N; n++) {
      EXPECT_TRUE(std::isnan(out[size_t(2 * N + n)])) << n;
      EXPECT_EQ(out[size_t(n)], all[size_t(n)]) << n;  // the other rows keep their values
    }
    // Not whole groups of 16 rows, or K not whole blocks: no pack, the streaming kernel.
    Tensor odd = weight_in(f, {40, 64}, 93), short_k = weight_in(f, {32, 48}, 94);
    pack_for_decode(odd);
    pack_for_decode(short_k);
    EXPECT_FALSE(has_decode_pack(odd));
    EXPECT_FALSE(has_decode_pack(short_k));
  }
}

// Every e4m3 code but the two NaNs through the FP8 packed kernel, each exactly its value times its row's
// scale: 16 rows of 32 (the 254 codes, then again from the start), identity activations. Subnormals widen
// through fp16 subnormals, both zeros stay zero, ±448 stay finite. A matrix holding a NaN code is not
// packed: the streaming kernel keeps its rows NaN.
TEST(QuantGemm, Fp8PackedWidensEveryCode) {
  const int64_t N = 16, K = 32;
  Tensor W = quantize(random_f32({N, K}, 95), DType::F8_E4M3);
  auto* codes = static_cast<uint8_t*>(W.data);
  std::vector<uint8_t> finite;
  for (int c = 0; c < 256; c++)
    if ((c & 0x7F) != 0x7F) finite.push_back(uint8_t(c));
  for (int64_t i = 0; i < N * K; i++) codes[i] = finite[size_t(i) % finite.size()];
  Tensor with_nan = W.clone();
  static_cast<uint8_t*>(with_nan.data)[77] = 0xFF;
  PACKED_OR_SKIP(W);
  std::vector<float> eye(size_t(K * K), 0.0f);
  for (int64_t k = 0; k < K; k++) eye[size_t(k * K + k)] = 1.0f;
  std::vector<double> want, bound;
  reference(&want, &bound, W, 0, eye.data(), K);
  std::vector<float> got(size_t(K * N), NAN);
  quant_linear_forward_with(QuantPath::Stream, got.data(), N, eye.data(), K, W);
  for (int64_t m = 0; m < K; m++)
    for (int64_t n = 0; n < N; n++) {
      const size_t i = size_t(m * N + n);
      EXPECT_EQ(got[i], float(want[i])) << "code " << int(codes[n * K + m]);
    }
  pack_for_decode(with_nan);
  EXPECT_FALSE(has_decode_pack(with_nan));
  quant_linear_forward_with(QuantPath::Stream, got.data(), N, eye.data(), K, with_nan);
  for (int64_t m = 0; m < K; m++) EXPECT_TRUE(std::isnan(got[size_t(m * N + 77 / K)])) << m;
}

TEST(QuantGemm, NanActivationIsNotHidden) {
  for (DType f : kPacked) {
    Tensor W = quantize(random_f32({4, 64}, 1), f);
    std::vector<float> a(64, 1.0f), out(4);
    a[17] = NAN;
    quant_linear_forward(out.data(), 4, a.data(), 1, W);
    for (float v : out) EXPECT_TRUE(std::isnan(v)) << quant_scheme_name(f);
    if (!quant_avx2_stream_available()) continue;
    std::fill(out.begin(), out.end(), 0.0f);
    quant_linear_forward_with(QuantPath::Int8Avx2, out.data(), 4, a.data(), 1, W);
    for (float v : out) EXPECT_TRUE(std::isnan(v)) << quant_scheme_name(f) << " int8 avx2";
  }
}

// Every kind of E8M0 scale reaches the AVX2 int8 kernel as the format defines it, both in its groups of 8
// blocks (converted as a vector) and in a tail block (one by one): codes 0 (2^-127, a subnormal once halved)
// and 1 with huge activations, 253 and 254 (up to 2^127) with tiny ones, each against the fp64 product of
// the dequantized operands; and 255 (NaN) makes its row NaN, leaving the other rows as they were.
TEST(QuantGemm, Int8Avx2ReadsEveryE8m0Scale) {
  if (!quant_avx2_stream_available()) GTEST_SKIP() << "this build has no AVX2 kernels";
  const int64_t N = 6, K = 9 * 32, nb = K / 32, M = 3;  // 9 blocks: a group of 8 and a tail
  struct Case {
    uint8_t even, odd;
    float act_scale;
  };
  for (const Case c : {Case{0, 1, 1e30f}, Case{254, 253, 1e-30f}, Case{127, 127, 1.0f}}) {
    Tensor W = weight_in(DType::MXFP4, {N, K}, 81);
    uint8_t* codes = static_cast<uint8_t*>(const_cast<void*>(W.scales->data));
    for (int64_t n = 0; n < N; n++)
      for (int64_t b = 0; b < nb; b++) codes[n * nb + b] = (n + b) % 2 ? c.odd : c.even;
    Tensor a = random_f32({M, K}, 82, c.act_scale);
    std::vector<double> want, bound;
    int8_reference(&want, &bound, W, a.f32(), M, K);
    std::vector<float> got(size_t(M * N), NAN);
    quant_linear_forward_with(QuantPath::Int8Avx2, got.data(), N, a.f32(), M, W);
    EXPECT_LE(worst_ratio(got.data(), want, bound), 1.0) << "codes " << int(c.even) << "/" << int(c.odd);
    // A NaN scale (code 255) in row 2's tail block and in row 4's first group, over blocks of +1.0 (code 2)
    // met by positive activations: read as infinity, the rows would come out +inf, not NaN.
    for (int64_t i = 0; i < M * K; i++) a.f32()[i] = std::fabs(a.f32()[i]);
    quant_linear_forward_with(QuantPath::Int8Avx2, got.data(), N, a.f32(), M, W);
    uint8_t* nibbles = static_cast<uint8_t*>(W.data);
    for (int64_t at : {2 * nb + nb - 1, 4 * nb + 3}) {
      codes[at] = 255;
      std::memset(nibbles + at * 16, 0x22, 16);
    }
    std::vector<float> nan_rows(size_t(M * N), 0.0f);
    quant_linear_forward_with(QuantPath::Int8Avx2, nan_rows.data(), N, a.f32(), M, W);
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        const size_t i = size_t(m * N + n);
        if (n == 2 || n == 4)
          EXPECT_TRUE(std::isnan(nan_rows[i])) << "m=" << m << " n=" << n;
        else
          EXPECT_EQ(nan_rows[i], got[i]) << "m=" << m << " n=" << n;
      }
  }
}

// The AVX2 int8 kernel takes Q8_0 and MXFP4 only: other formats are a clear error, not a wrong product.
TEST(QuantGemm, Int8Avx2RejectsOtherFormats) {
  if (!quant_avx2_stream_available()) GTEST_SKIP() << "this build has no AVX2 kernels";
  std::vector<float> a(64, 1.0f), out(4);
  for (DType f : {DType::F8_E4M3, DType::BF16}) {
    Tensor W = weight_in(f, {4, 64}, 3);
    EXPECT_THROW(quant_linear_forward_with(QuantPath::Int8Avx2, out.data(), 4, a.data(), 1, W), Error)
        << dtype_name(f);
  }
}

// huge_alloc_shared: 2 MiB-aligned, whole huge pages, zero (committed or not), writable to its last byte.
TEST(HugeAlloc, AlignedZeroAndWritable) {
  for (bool commit : {true, false}) {
    for (size_t n : {size_t(1), size_t(3) << 20, size_t(5) << 20}) {
      std::shared_ptr<void> p = huge_alloc_shared(n, commit);
      ASSERT_NE(p.get(), nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % kHugePageBytes, 0u) << n;
      const auto* b = static_cast<const uint8_t*>(p.get());
      for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(b[i], 0) << n << " at " << i;
      EXPECT_EQ(b[n - 1], 0);
      std::memset(p.get(), 0x5a, n);
      EXPECT_EQ(b[n - 1], 0x5a);
    }
  }
}

// A size that would wrap the rounding to whole huge pages is an error, not a small buffer.
TEST(HugeAlloc, ImpossibleSizeIsAClearError) {
  EXPECT_THROW(huge_alloc_shared(SIZE_MAX), Error);
  EXPECT_THROW(huge_alloc_shared(SIZE_MAX - kHugePageBytes), Error);
}

// The read-bandwidth probe measures a finite positive rate again and again from one buffer (its value is a
// property of the machine; `zaya bench decode` reports it).
TEST(ReadBandwidth, ProbeMeasuresRepeatedly) {
  const ReadBandwidthProbe probe(size_t(8) << 20);
  EXPECT_EQ(probe.bytes(), size_t(8) << 20);
  for (int i = 0; i < 2; i++) {
    const double gbs = probe.measure(1);
    EXPECT_TRUE(std::isfinite(gbs) && gbs > 0) << gbs;
  }
}

}  // namespace
}  // namespace zaya
