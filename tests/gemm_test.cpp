// GEMM seam, backends, linear_forward and grouped expert GEMMs against a double-precision reference loop.
#include "kernels/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_info.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/grouped_gemm.h"
#include "test_util.h"

namespace zaya {
namespace {

// A matrix stored row-major as [rows, cols] with row stride ld >= cols, values uniform in [-1, 1]. When
// `bf16` it is stored as bf16 (`bits`); when `bf16` or `on_bf16_grid` the values are exactly representable
// in bf16, so a product computed in bf16 has accumulation order as its only error.
struct Stored {
  int64_t rows = 0, cols = 0, ld = 0;
  bool bf16 = false;
  std::vector<float> f32;      // the values, always (rounded to bf16 when bf16)
  std::vector<uint16_t> bits;  // bf16 storage when bf16

  MatRef ref(bool trans) const {
    if (bf16) return {bits.data(), DType::BF16, ld, trans};
    return {f32.data(), DType::F32, ld, trans};
  }
};

Stored make_stored(int64_t rows, int64_t cols, int64_t pad, bool bf16, std::mt19937& rng,
                   bool on_bf16_grid = false) {
  Stored s;
  s.rows = rows, s.cols = cols, s.ld = cols + pad, s.bf16 = bf16;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  s.f32.assign(size_t(std::max<int64_t>(rows * s.ld, 1)), std::numeric_limits<float>::quiet_NaN());
  if (bf16) s.bits.assign(s.f32.size(), 0x7fc0);  // padding holds NaN: reading it would show
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) {
      float v = dist(rng);
      if (bf16 || on_bf16_grid) v = bf16_to_f32(f32_to_bf16(v));
      if (bf16) s.bits[r * s.ld + c] = f32_to_bf16(v);
      s.f32[r * s.ld + c] = v;
    }
  }
  return s;
}

// Element (r, c) of op(X), as stored in `s` with the given transpose.
double at(const Stored& s, bool trans, int64_t r, int64_t c) {
  return trans ? s.f32[c * s.ld + r] : s.f32[r * s.ld + c];
}

// Checks C against alpha*op(A)·op(B) + beta*C0 in double; the error bound is relative to the magnitude of
// the terms summed (sum |a||b| plus |beta c0|), so cancellation does not inflate it.
void expect_matches(int64_t M, int64_t N, int64_t K, float alpha, const Stored& A, bool ta, const Stored& B,
                    bool tb, float beta, const std::vector<float>& C0, const std::vector<float>& C,
                    int64_t ldc, double rtol) {
  int bad = 0;
  for (int64_t m = 0; m < M; m++) {
    for (int64_t n = 0; n < N; n++) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        double p = at(A, ta, m, k) * at(B, tb, k, n);
        acc += p;
        mag += std::fabs(p);
      }
      double c0 = beta == 0.0f ? 0.0 : double(C0[m * ldc + n]);
      double want = double(alpha) * acc + double(beta) * c0;
      double scale = std::fabs(alpha) * mag + std::fabs(beta * c0) + 1e-30;
      double got = C[m * ldc + n];
      if (!(std::fabs(got - want) <= rtol * scale) && bad++ < 5) {
        ADD_FAILURE() << "C[" << m << "," << n << "] = " << got << ", expected " << want << " (scale "
                      << scale << ")";
      }
    }
  }
  // Padding between rows of C is never written.
  for (int64_t m = 0; m < M; m++) {
    for (int64_t n = N; n < ldc; n++) {
      const float got = C[m * ldc + n], was = C0[m * ldc + n];
      const bool same = got == was || (std::isnan(got) && std::isnan(was));
      if (!same && bad++ < 5) ADD_FAILURE() << "padding C[" << m << "," << n << "] written";
    }
  }
  EXPECT_EQ(bad, 0);
}

struct Case {
  int64_t M, N, K;
};

const std::vector<Case> kOddCases = {
    {1, 1, 1},    {1, 3, 17},   {3, 1, 17},     {17, 3, 1},     {3, 17, 65}, {65, 17, 3},
    {17, 65, 33}, {65, 65, 65}, {130, 97, 257}, {257, 33, 130}, {600, 9, 19}};  // a transposed A wider than a
                                                                                // 512-column strip

// Runs every case x transpose combo x (alpha, beta) x padding for one backend and operand dtypes.
void check_backend(GemmBackend backend, DType a_type, DType b_type, double rtol) {
  std::mt19937 rng(42);
  const bool a_bf16 = a_type == DType::BF16, b_bf16 = b_type == DType::BF16;
  // alpha/beta pairs: plain, scaled, accumulate, and both at once.
  const std::vector<std::pair<float, float>> scalars = {
      {1.0f, 0.0f}, {0.5f, 0.0f}, {1.0f, 1.0f}, {-1.5f, 0.25f}};
  for (const Case& c : kOddCases) {
    for (int ta = 0; ta < 2; ta++) {
      for (int tb = 0; tb < 2; tb++) {
        for (int pad = 0; pad < 2; pad++) {
          for (auto [alpha, beta] : scalars) {
            SCOPED_TRACE(testing::Message() << gemm_backend_name(backend) << " M=" << c.M << " N=" << c.N
                                            << " K=" << c.K << " ta=" << ta << " tb=" << tb << " pad=" << pad
                                            << " alpha=" << alpha << " beta=" << beta);
            const bool grid = a_bf16 || b_bf16;  // a bf16 product rounds both operands
            Stored A = ta ? make_stored(c.K, c.M, pad * 5, a_bf16, rng, grid)
                          : make_stored(c.M, c.K, pad * 5, a_bf16, rng, grid);
            Stored B = tb ? make_stored(c.N, c.K, pad * 3, b_bf16, rng, grid)
                          : make_stored(c.K, c.N, pad * 3, b_bf16, rng, grid);
            const int64_t ldc = c.N + pad * 7;
            std::vector<float> C0(size_t(c.M * ldc));
            std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
            for (float& v : C0) v = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : dist(rng);
            std::vector<float> C = C0;
            gemm_with(backend, c.M, c.N, c.K, alpha, A.ref(ta), B.ref(tb), beta, C.data(), ldc);
            expect_matches(c.M, c.N, c.K, alpha, A, ta, B, tb, beta, C0, C, ldc, rtol);
            if (testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST(Gemm, Fp32AllBackends) {
  for (GemmBackend b :
       {GemmBackend::Auto, GemmBackend::OneDnn, GemmBackend::OneDnnRuntimeM, GemmBackend::OneDnnRuntimeMK,
        GemmBackend::Small, GemmBackend::OpenBlas, GemmBackend::Reference, GemmBackend::RowInvariant}) {
    check_backend(b, DType::F32, DType::F32, 1e-5);
  }
}

TEST(Gemm, Bf16AllBackends) {
  for (GemmBackend b : {GemmBackend::Auto, GemmBackend::OneDnn, GemmBackend::OneDnnRuntimeM,
                        GemmBackend::OneDnnRuntimeMK, GemmBackend::Reference, GemmBackend::RowInvariant}) {
    check_backend(b, DType::BF16, DType::BF16, 1e-3);
  }
}

// An fp32 operand paired with a bf16 one is rounded to bf16: with fp32 values already on the bf16 grid the
// rounding is exact, so the product must match as tightly as pure bf16.
TEST(Gemm, MixedFp32Bf16) {
  check_backend(GemmBackend::Auto, DType::F32, DType::BF16, 1e-3);
  check_backend(GemmBackend::Auto, DType::BF16, DType::F32, 1e-3);
  check_backend(GemmBackend::RowInvariant, DType::F32, DType::BF16, 1e-3);
  check_backend(GemmBackend::RowInvariant, DType::BF16, DType::F32, 1e-3);
}

TEST(Gemm, MixedRoundsTheFp32Operand) {
  // 1 + 2^-10 is not a bf16 value; rounded to bf16 it becomes exactly 1, so A·B == 1 * 3 in bf16 mode.
  const float a = 1.0f + 1.0f / 1024.0f;
  const uint16_t b = f32_to_bf16(3.0f);
  float c = 0;
  gemm(1, 1, 1, 1.0f, mat(&a, 1), MatRef{&b, DType::BF16, 1, false}, 0.0f, &c, 1);
  EXPECT_EQ(c, 3.0f);
}

// Where oneDNN has no bf16 matmul (AVX2-only CPUs), bf16 products widen their operands to fp32: forced here
// so that every machine runs that path. The same tolerance as the native bf16 products (both accumulate in
// fp32), the mixed-dtype rounding kept (an fp32 operand still enters as its bf16 value).
TEST(Gemm, Bf16WidenedToFp32WhereOneDnnHasNoBf16) {
  const bool native = gemm_onednn_bf16();
  set_gemm_onednn_bf16(false);
  EXPECT_FALSE(gemm_onednn_bf16());
  for (GemmBackend b :
       {GemmBackend::Auto, GemmBackend::OneDnn, GemmBackend::OneDnnRuntimeM, GemmBackend::OneDnnRuntimeMK}) {
    check_backend(b, DType::BF16, DType::BF16, 1e-3);
    check_backend(b, DType::F32, DType::BF16, 1e-3);
    check_backend(b, DType::BF16, DType::F32, 1e-3);
  }
  // An fp32 operand off the bf16 grid is rounded element-wise (the vector rounding, whole and tail lanes),
  // transposed or not: the product equals the product of its rounded copy, bitwise.
  {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const int64_t M = 37, N = 21, K = 45;
    std::vector<float> x(size_t(M * K)), x_rounded(x.size());
    std::vector<uint16_t> w(size_t(K * N));
    for (float& v : x) v = dist(rng);
    for (uint16_t& v : w) v = f32_to_bf16(dist(rng));
    for (size_t i = 0; i < x.size(); i++) x_rounded[i] = bf16_to_f32(f32_to_bf16(x[i]));
    for (bool ta : {false, true}) {
      SCOPED_TRACE(ta ? "A transposed" : "A plain");
      const int64_t lda = ta ? M : K;  // x read as stored [M, K] or [K, M]
      std::vector<float> c1(size_t(M * N)), c2(size_t(M * N));
      const MatRef wb{w.data(), DType::BF16, N, false};
      gemm(M, N, K, 1.0f, mat(x.data(), lda, ta), wb, 0.0f, c1.data(), N);
      gemm(M, N, K, 1.0f, mat(x_rounded.data(), lda, ta), wb, 0.0f, c2.data(), N);
      EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)), 0);
    }
  }
  const float a = 1.0f + 1.0f / 1024.0f;  // rounds to exactly 1 in bf16
  const uint16_t three = f32_to_bf16(3.0f);
  float c = 0;
  gemm(1, 1, 1, 1.0f, mat(&a, 1), MatRef{&three, DType::BF16, 1, false}, 0.0f, &c, 1);
  EXPECT_EQ(c, 3.0f);
  set_gemm_onednn_bf16(true);
  EXPECT_EQ(gemm_onednn_bf16(), native);  // back to what this CPU has
}

// On AVX-512 CPUs whose bf16 matmul is slower than fp32 (cpu_fast_bf16_matmul false: an Intel Xeon without
// AMX), bf16 products of kWidenBf16MinDim+ rows and columns widen to fp32: there the default product equals
// the all-widened one bit for bit; smaller ones (and every product on CPUs with a fast bf16 matmul) stay
// oneDNN bf16.
TEST(Gemm, Bf16WidensByShapeWhereBf16MatmulIsSlow) {
  if (!gemm_onednn_bf16()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU: every bf16 product widens";
  if (std::getenv("ZAYA_ONEDNN_BF16")) GTEST_SKIP() << "ZAYA_ONEDNN_BF16 overrides the CPU's default";
  const bool by_shape = !cpu_fast_bf16_matmul();
  EXPECT_EQ(gemm_bf16_widens(kWidenBf16MinDim, kWidenBf16MinDim), by_shape);
  EXPECT_EQ(gemm_bf16_widens(2048, 1024), by_shape);
  EXPECT_FALSE(gemm_bf16_widens(kWidenBf16MinDim - 1, 4096));  // decode-sized: oneDNN bf16 everywhere
  EXPECT_FALSE(gemm_bf16_widens(4096, kWidenBf16MinDim - 1));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t M = 64, N = 48, K = 80;
  std::vector<uint16_t> a(size_t(M * K)), b(size_t(N * K));
  for (uint16_t& v : a) v = f32_to_bf16(dist(rng));
  for (uint16_t& v : b) v = f32_to_bf16(dist(rng));
  const MatRef A{a.data(), DType::BF16, K, false}, B{b.data(), DType::BF16, K, true};
  std::vector<float> c_default(size_t(M * N)), c_widened(size_t(M * N));
  gemm(M, N, K, 1.0f, A, B, 0.0f, c_default.data(), N);
  set_gemm_onednn_bf16(false);
  gemm(M, N, K, 1.0f, A, B, 0.0f, c_widened.data(), N);
  set_gemm_onednn_bf16(true);
  if (by_shape) {
    EXPECT_EQ(std::memcmp(c_default.data(), c_widened.data(), c_default.size() * sizeof(float)), 0);
  }
  const test::Diff d = test::diff(c_default.data(), c_widened.data(), c_default.size());
  EXPECT_TRUE(d.within(0, 1e-5)) << d.str();  // either way the same bf16 product, fp32 sums
}

TEST(Gemm, ZeroSizes) {
  std::vector<float> A(64, 1.0f), B(64, 1.0f);
  for (GemmBackend b : {GemmBackend::Auto, GemmBackend::OneDnn, GemmBackend::Small, GemmBackend::OpenBlas,
                        GemmBackend::Reference, GemmBackend::RowInvariant}) {
    SCOPED_TRACE(gemm_backend_name(b));
    // M == 0 or N == 0: nothing touched, null C allowed.
    gemm_with(b, 0, 4, 4, 1.0f, mat(A.data(), 4), mat(B.data(), 4), 0.0f, nullptr, 4);
    gemm_with(b, 4, 0, 4, 1.0f, mat(A.data(), 4), mat(B.data(), 1), 0.0f, nullptr, 1);
    // K == 0: C = beta * C (beta == 0 clears, even NaN).
    std::vector<float> C(16, 2.0f);
    gemm_with(b, 4, 4, 0, 1.0f, mat(nullptr, 0), mat(nullptr, 4), 0.5f, C.data(), 4);
    for (float v : C) EXPECT_EQ(v, 1.0f);
    std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());
    gemm_with(b, 4, 4, 0, 1.0f, mat(nullptr, 0), mat(nullptr, 4), 0.0f, C.data(), 4);
    for (float v : C) EXPECT_EQ(v, 0.0f);
    // alpha == 0 behaves like K == 0.
    std::fill(C.begin(), C.end(), 3.0f);
    gemm_with(b, 4, 4, 4, 0.0f, mat(A.data(), 4), mat(B.data(), 4), 1.0f, C.data(), 4);
    for (float v : C) EXPECT_EQ(v, 3.0f);
  }
}

TEST(Gemm, BadArgumentsThrow) {
  std::vector<float> A(64, 1.0f), B(64, 1.0f), C(64);
  // Row stride shorter than the stored row.
  EXPECT_THROW(gemm(4, 4, 4, 1.0f, mat(A.data(), 3), mat(B.data(), 4), 0.0f, C.data(), 4), Error);
  EXPECT_THROW(gemm(4, 4, 4, 1.0f, mat(A.data(), 4), mat(B.data(), 4, true), 0.0f, C.data(), 3), Error);
  EXPECT_THROW(gemm(8, 4, 2, 1.0f, mat(A.data(), 4, true), mat(B.data(), 4), 0.0f, C.data(), 4), Error);
  EXPECT_THROW(gemm(-1, 4, 4, 1.0f, mat(A.data(), 4), mat(B.data(), 4), 0.0f, C.data(), 4), Error);
  EXPECT_THROW(gemm(4, 4, 4, 1.0f, mat(nullptr, 4), mat(B.data(), 4), 0.0f, C.data(), 4), Error);
  // Unsupported dtype, and bf16 on the fp32-only OpenBLAS backend.
  MatRef i32{A.data(), DType::I32, 4, false};
  EXPECT_THROW(gemm(4, 4, 4, 1.0f, i32, mat(B.data(), 4), 0.0f, C.data(), 4), Error);
  std::vector<uint16_t> Bb(64, 0x3f80);
  EXPECT_THROW(gemm_with(GemmBackend::OpenBlas, 4, 4, 4, 1.0f, mat(A.data(), 4),
                         MatRef{Bb.data(), DType::BF16, 4}, 0.0f, C.data(), 4),
               Error);
  EXPECT_THROW(gemm_with(GemmBackend::Small, 4, 4, 4, 1.0f, mat(A.data(), 4),
                         MatRef{Bb.data(), DType::BF16, 4}, 0.0f, C.data(), 4),
               Error);
}

// Concurrent calls from inside an OpenMP region (each thread its own product, shapes differing per thread so
// the primitive cache is hit from several threads) give the same results as serial calls.
// The promise: a call gives the same bits wherever it is made, on the calling thread inside a parallel
// region or from outside one, for each backend (results are a function of the shape, the dtypes, the backend
// and the call's thread count, which is 1 for these small products either way). Different backends may
// differ in the last bits (OpenBLAS's result depends on the kernel OPENBLAS_CORETYPE selects), so each is
// compared with itself.
TEST(Gemm, ConcurrentCallsInsideParallelRegion) {
  std::mt19937 rng(7);
  const int tasks = 8;
  std::vector<Stored> As, Bs;
  for (int t = 0; t < tasks; t++) {
    As.push_back(make_stored(33 + t % 3, 65, 0, t % 2 == 1, rng));
    Bs.push_back(make_stored(47, 65, 0, t % 2 == 1, rng));
  }
  for (GemmBackend b : {GemmBackend::Auto, GemmBackend::OneDnn, GemmBackend::OneDnnRuntimeM}) {
    std::vector<std::vector<float>> want(tasks), got(tasks);
    for (int t = 0; t < tasks; t++) {
      want[t].assign(size_t(As[t].rows * 47), 0.0f);
      got[t].assign(size_t(As[t].rows * 47), NAN);
      gemm_with(b, As[t].rows, 47, 65, 1.0f, As[t].ref(false), Bs[t].ref(true), 0.0f, want[t].data(), 47);
    }
#pragma omp parallel for num_threads(2) schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++) {
      gemm_with(b, As[t].rows, 47, 65, 1.0f, As[t].ref(false), Bs[t].ref(true), 0.0f, got[t].data(), 47);
    }
    for (int t = 0; t < tasks; t++) EXPECT_EQ(got[t], want[t]) << gemm_backend_name(b) << " task " << t;
  }
}

// A product large enough to use every thread from outside a parallel region runs on the calling thread only
// inside one, so there it equals the same call made outside with one thread, bit for bit (fp32 and bf16,
// each backend).
TEST(Gemm, CallInsideRegionEqualsOneThreadCall) {
  std::mt19937 rng(11);
  const int64_t M = 96, N = 160, K = 200;  // 6.1 MFLOP: above the single-thread threshold
  for (bool bf16 : {false, true}) {
    Stored A = make_stored(M, K, 0, bf16, rng), B = make_stored(N, K, 0, bf16, rng);
    for (GemmBackend b : {GemmBackend::Auto, GemmBackend::OneDnn, GemmBackend::OneDnnRuntimeM}) {
      SCOPED_TRACE(std::string(gemm_backend_name(b)) + (bf16 ? " bf16" : " fp32"));
      std::vector<float> want(size_t(M * N)), got(size_t(M * N), NAN);
      const int saved = num_threads();
      set_num_threads(1);
      gemm_with(b, M, N, K, 1.0f, A.ref(false), B.ref(true), 0.0f, want.data(), N);
      set_num_threads(saved);
#pragma omp parallel num_threads(2)
      {
#pragma omp single
        gemm_with(b, M, N, K, 1.0f, A.ref(false), B.ref(true), 0.0f, got.data(), N);
      }
      EXPECT_EQ(got, want);
    }
  }
}

// The small-product kernel computes exactly the documented order (kernels/gemm_small.h), written out here
// in scalar code: bitwise equality, for every layout, odd sizes (vector tails, partial row and column
// blocks), padded strides, alpha and beta. Since the order depends only on K and B's layout, a row's result
// is the same whatever M is and wherever the row sits. Auto sends tiny fp32 products here, so their bits do
// not depend on OPENBLAS_CORETYPE or the CPU.
namespace {
float documented_sum(const Stored& A, bool ta, const Stored& B, bool tb, int64_t m, int64_t n, int64_t K) {
  auto a = [&](int64_t k) { return ta ? A.f32[size_t(k * A.ld + m)] : A.f32[size_t(m * A.ld + k)]; };
  auto b = [&](int64_t k) { return tb ? B.f32[size_t(n * B.ld + k)] : B.f32[size_t(k * B.ld + n)]; };
  if (!tb) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k++) acc = std::fma(a(k), b(k), acc);
    return acc;
  }
  float lane[16] = {};
  for (int64_t k = 0; k < K; k++) lane[k % 16] = std::fma(a(k), b(k), lane[k % 16]);
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) lane[l] += lane[l + w];
  return lane[0];
}
}  // namespace

TEST(Gemm, SmallKernelComputesTheDocumentedOrder) {
  std::mt19937 rng(5);
  int checked = 0;
  for (int64_t M : {1, 3, 4, 7}) {
    for (int64_t N : {1, 5, 16, 17, 64, 70}) {
      for (int64_t K : {1, 15, 16, 33}) {
        for (int layout = 0; layout < 4; layout++) {
          const bool ta = layout & 1, tb = layout & 2;
          SCOPED_TRACE(::testing::Message() << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb);
          Stored A = ta ? make_stored(K, M, 2, false, rng) : make_stored(M, K, 3, false, rng);
          Stored B = tb ? make_stored(N, K, 1, false, rng) : make_stored(K, N, 2, false, rng);
          for (auto [alpha, beta] :
               {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}, std::pair{-1.25f, 0.75f}}) {
            const int64_t ldc = N + 3;
            std::vector<float> C0(size_t(M * ldc));
            for (float& v : C0) v = std::uniform_real_distribution<float>(-1, 1)(rng);
            std::vector<float> C = C0;
            gemm_with(GemmBackend::Small, M, N, K, alpha, A.ref(ta), B.ref(tb), beta, C.data(), ldc);
            for (int64_t m = 0; m < M; m++) {
              for (int64_t n = 0; n < N; n++) {
                const float t = alpha * documented_sum(A, ta, B, tb, m, n, K);
                const float want = beta == 0.0f ? t : std::fma(beta, C0[size_t(m * ldc + n)], t);
                ASSERT_EQ(C[size_t(m * ldc + n)], want) << "C[" << m << ", " << n << "]";
              }
              for (int64_t n = N; n < ldc; n++) ASSERT_EQ(C[size_t(m * ldc + n)], C0[size_t(m * ldc + n)]);
            }
            checked++;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 6 * 4 * 4 * 3);
  // Auto sends a tiny fp32 product to this kernel: the same bits.
  Stored A = make_stored(8, 32, 0, false, rng), B = make_stored(24, 32, 0, false, rng);
  std::vector<float> a(8 * 24), s(8 * 24);
  gemm(8, 24, 32, 1.0f, A.ref(false), B.ref(true), 0.0f, a.data(), 24);
  gemm_with(GemmBackend::Small, 8, 24, 32, 1.0f, A.ref(false), B.ref(true), 0.0f, s.data(), 24);
  EXPECT_EQ(a, s);
}

// The batch-invariant backend computes, in fp32, exactly the small kernel's documented order (checked
// above), on tiles spread over the threads: bitwise equal to Small for every layout, beyond one tile in M
// and N, from outside a parallel region (two threads) and inside one.
TEST(Gemm, RowInvariantFp32EqualsSmallKernel) {
  std::mt19937 rng(17);
  const int64_t M = 133, N = 150, K = 301;
  for (int layout = 0; layout < 4; layout++) {
    const bool ta = layout & 1, tb = layout & 2;
    SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb);
    Stored A = ta ? make_stored(K, M, 3, false, rng) : make_stored(M, K, 2, false, rng);
    Stored B = tb ? make_stored(N, K, 1, false, rng) : make_stored(K, N, 4, false, rng);
    for (float beta : {0.0f, 0.75f}) {
      const int64_t ldc = N + 5;
      std::vector<float> C0(size_t(M * ldc));
      for (float& v : C0) v = std::uniform_real_distribution<float>(-1, 1)(rng);
      std::vector<float> small = C0, rows = C0, in_region = C0;
      gemm_with(GemmBackend::Small, M, N, K, 1.5f, A.ref(ta), B.ref(tb), beta, small.data(), ldc);
      gemm_with(GemmBackend::RowInvariant, M, N, K, 1.5f, A.ref(ta), B.ref(tb), beta, rows.data(), ldc);
#pragma omp parallel num_threads(2)
      {
#pragma omp single
        gemm_with(GemmBackend::RowInvariant, M, N, K, 1.5f, A.ref(ta), B.ref(tb), beta, in_region.data(),
                  ldc);
      }
      EXPECT_EQ(rows, small);
      EXPECT_EQ(in_region, small);
    }
  }
}

// The batch-invariant bf16 dot form (B stored [N, K]) computes gemm_rows.h's documented vdpbf16ps order,
// written out here in scalar code: lane l over the pairs (32j + 2l, 32j + 2l + 1), the product at 2l + 1
// then at 2l fused into the lane, then the tree (l + 8, l + 4, l + 2, l + 1), alpha, beta. Bitwise, on every
// build: the AVX512-BF16 kernel, the AVX2 emulation or the scalar one (normal values: no flushed denormals).
// K covers whole 32-element chunks, a partial chunk, an odd tail and a single element.
TEST(Gemm, RowInvariantBf16ComputesTheDocumentedOrder) {
  std::mt19937 rng(23);
  for (int64_t K : {1, 15, 31, 32, 33, 64, 301}) {
    const int64_t M = 5, N = 7;
    Stored A = make_stored(M, K, 3, true, rng), B = make_stored(N, K, 1, true, rng);
    for (float beta : {0.0f, 0.75f}) {
      const int64_t ldc = N + 2;
      std::vector<float> C0(size_t(M * ldc));
      for (float& v : C0) v = std::uniform_real_distribution<float>(-1, 1)(rng);
      std::vector<float> C = C0;
      gemm_with(GemmBackend::RowInvariant, M, N, K, 1.5f, A.ref(false), B.ref(true), beta, C.data(), ldc);
      for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
          float lane[16] = {};
          for (int64_t k0 = 0; k0 < K; k0 += 32)
            for (int l = 0; l < 16; l++)
              for (int64_t k : {k0 + 2 * l + 1, k0 + 2 * l})
                if (k < K)
                  lane[l] = std::fma(A.f32[size_t(m * A.ld + k)], B.f32[size_t(n * B.ld + k)], lane[l]);
          for (int w = 8; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) lane[l] += lane[l + w];
          const float t = 1.5f * lane[0];
          const float want = beta == 0.0f ? t : std::fma(beta, C0[size_t(m * ldc + n)], t);
          ASSERT_EQ(C[size_t(m * ldc + n)], want) << "K=" << K << " C[" << m << ", " << n << "]";
        }
    }
  }
}

// The switch: Auto follows it, and it reads back.
TEST(Gemm, BatchInvariantSwitchSelectsRowInvariant) {
  const bool saved = gemm_batch_invariant();
  std::mt19937 rng(3);
  Stored A = make_stored(37, 96, 0, true, rng), B = make_stored(200, 96, 0, true, rng);
  std::vector<float> want(37 * 200), got(37 * 200);
  gemm_with(GemmBackend::RowInvariant, 37, 200, 96, 1.0f, A.ref(false), B.ref(true), 0.0f, want.data(), 200);
  set_gemm_batch_invariant(true);
  EXPECT_TRUE(gemm_batch_invariant());
  gemm(37, 200, 96, 1.0f, A.ref(false), B.ref(true), 0.0f, got.data(), 200);
  EXPECT_EQ(got, want);
  set_gemm_batch_invariant(false);
  EXPECT_FALSE(gemm_batch_invariant());
  set_gemm_batch_invariant(saved);
}

TEST(Gemm, PrimitiveCacheIsReused) {
  std::vector<float> A(32 * 32, 0.5f), B(32 * 32, 0.25f), C(32 * 32);
  gemm_with(GemmBackend::OneDnn, 31, 29, 23, 1.0f, mat(A.data(), 23), mat(B.data(), 23, true), 0.0f, C.data(),
            29);
  const int64_t before = gemm_cached_primitives();
  for (int i = 0; i < 5; i++) {
    gemm_with(GemmBackend::OneDnn, 31, 29, 23, 1.0f, mat(A.data(), 23), mat(B.data(), 23, true), 0.0f,
              C.data(), 29);
  }
  EXPECT_EQ(gemm_cached_primitives(), before);
  // A runtime-M primitive serves every M of its (N, K) shape.
  gemm_with(GemmBackend::OneDnnRuntimeM, 3, 29, 23, 1.0f, mat(A.data(), 23), mat(B.data(), 23, true), 0.0f,
            C.data(), 29);
  const int64_t with_runtime = gemm_cached_primitives();
  for (int64_t m = 1; m <= 32; m++) {
    gemm_with(GemmBackend::OneDnnRuntimeM, m, 29, 23, 1.0f, mat(A.data(), 23), mat(B.data(), 23, true), 0.0f,
              C.data(), 29);
  }
  EXPECT_EQ(gemm_cached_primitives(), with_runtime);
  // A runtime-M/K primitive serves every M and K of its N.
  gemm_with(GemmBackend::OneDnnRuntimeMK, 3, 29, 23, 1.0f, mat(A.data(), 32), mat(B.data(), 32, true), 0.0f,
            C.data(), 29);
  const int64_t with_runtime_mk = gemm_cached_primitives();
  for (int64_t k = 1; k <= 32; k += 3) {
    gemm_with(GemmBackend::OneDnnRuntimeMK, 32 - k, 29, k, 1.0f, mat(A.data(), 32), mat(B.data(), 32, true),
              0.0f, C.data(), 29);
  }
  EXPECT_EQ(gemm_cached_primitives(), with_runtime_mk);
}

TEST(Gemm, LinearForward) {
  std::mt19937 rng(3);
  const int64_t M = 19, N = 37, K = 70;
  for (DType wt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(wt));
    Stored x = make_stored(M, K, 0, /*bf16=*/false, rng, /*on_bf16_grid=*/true);  // exact in both modes
    Stored w = make_stored(N, K, 0, wt == DType::BF16, rng);
    Tensor W = Tensor::empty(wt, {N, K});
    for (int64_t i = 0; i < N * K; i++) {
      if (wt == DType::BF16) {
        W.bf16()[i] = w.bits[i];
      } else {
        W.f32()[i] = w.f32[i];
      }
    }
    std::vector<float> bias(N);
    for (int64_t n = 0; n < N; n++) bias[n] = 0.125f * float(n);
    std::vector<float> out(M * N, std::numeric_limits<float>::quiet_NaN()), no_bias(M * N);
    linear_forward(out.data(), x.f32.data(), W, bias.data(), M);
    linear_forward(no_bias.data(), x.f32.data(), W, nullptr, M);
    std::vector<float> zeros(M * N, 0.0f);
    expect_matches(M, N, K, 1.0f, x, false, w, true, 0.0f, zeros, no_bias, N, 1e-5);
    for (int64_t i = 0; i < M * N; i++) EXPECT_NEAR(out[i], no_bias[i] + bias[i % N], 1e-6);
  }
  Tensor bad = Tensor::empty(DType::F32, {2, 3, 4});
  std::vector<float> buf(64);
  EXPECT_THROW(linear_forward(buf.data(), buf.data(), bad, nullptr, 1), Error);
}

// Expert GEMMs with some experts empty (first, middle, last) match per-expert reference products.
TEST(GroupedGemm, MatchesPerExpertReference) {
  std::mt19937 rng(11);
  const int64_t E = 6, N = 40, K = 72;
  const std::vector<int64_t> rows = {0, 5, 1, 0, 33, 0};
  std::vector<int64_t> offsets = {0};
  for (int64_t r : rows) offsets.push_back(offsets.back() + r);
  const int64_t T = offsets.back();
  Stored x = make_stored(T, K, 0, /*bf16=*/false, rng, /*on_bf16_grid=*/true);
  for (DType wt : {DType::F32, DType::BF16}) {
    Tensor W = Tensor::empty(wt, {E, N, K});
    std::vector<Stored> we;
    for (int64_t e = 0; e < E; e++) {
      we.push_back(make_stored(N, K, 0, wt == DType::BF16, rng));
      for (int64_t i = 0; i < N * K; i++) {
        if (wt == DType::BF16) {
          W.bf16()[e * N * K + i] = we[e].bits[i];
        } else {
          W.f32()[e * N * K + i] = we[e].f32[i];
        }
      }
    }
    for (GroupedSchedule s :
         {GroupedSchedule::Auto, GroupedSchedule::Sequential, GroupedSchedule::ExpertParallel}) {
      for (GemmBackend b : {GemmBackend::Auto, GemmBackend::OneDnn, GemmBackend::OneDnnRuntimeM}) {
        SCOPED_TRACE(testing::Message()
                     << dtype_name(wt) << " " << grouped_schedule_name(s) << " " << gemm_backend_name(b));
        std::vector<float> out(T * N, std::numeric_limits<float>::quiet_NaN());
        grouped_linear_forward_with(s, b, out.data(), x.f32.data(), W, offsets.data(), E);
        for (int64_t e = 0; e < E; e++) {
          const int64_t r = rows[e];
          if (r == 0) continue;
          Stored xe;
          xe.rows = r, xe.cols = K, xe.ld = K;
          xe.f32.assign(x.f32.begin() + offsets[e] * K, x.f32.begin() + offsets[e + 1] * K);
          std::vector<float> oe(out.begin() + offsets[e] * N, out.begin() + offsets[e + 1] * N);
          std::vector<float> zeros(r * N, 0.0f);
          expect_matches(r, N, K, 1.0f, xe, false, we[e], true, 0.0f, zeros, oe, N, 1e-5);
        }
      }
    }
  }
}

TEST(GroupedGemm, AllEmptyAndBadInput) {
  const int64_t E = 4, N = 8, K = 8;
  Tensor W = Tensor::empty(DType::F32, {E, N, K});
  std::vector<int64_t> empty = {0, 0, 0, 0, 0};
  grouped_linear_forward(nullptr, nullptr, W, empty.data(), E);  // nothing to do, nothing touched

  std::vector<float> buf(64);
  std::vector<int64_t> decreasing = {0, 3, 2, 4, 4};
  EXPECT_THROW(grouped_linear_forward(buf.data(), buf.data(), W, decreasing.data(), E), Error);
  std::vector<int64_t> not_zero = {1, 2, 3, 4, 5};
  EXPECT_THROW(grouped_linear_forward(buf.data(), buf.data(), W, not_zero.data(), E), Error);
  EXPECT_THROW(grouped_linear_forward(buf.data(), buf.data(), W, empty.data(), E + 1), Error);  // E mismatch
  Tensor flat = Tensor::empty(DType::F32, {N, K});
  EXPECT_THROW(grouped_linear_forward(buf.data(), buf.data(), flat, empty.data(), E), Error);
}

TEST(Threads, Helpers) {
  EXPECT_GE(num_threads(), 1);
  EXPECT_FALSE(in_parallel_region());
  EXPECT_EQ(threads_here(), num_threads());
  int inside = 0;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    inside = threads_here();
  }
  EXPECT_EQ(inside, 1);  // 1 inside an active region; 1 also when OpenMP runs a single thread
  const int saved = num_threads();
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(saved);
  EXPECT_THROW(set_num_threads(0), Error);
}

// The short-spin decision of the OpenMP waiting policy (core/threads.h): /proc/stat's runnable count, and
// spin only where every thread of ours has a CPU besides the other runnable tasks.
TEST(Threads, ShortSpinOnlyOnAnIdleMachine) {
  EXPECT_EQ(procs_running_from_proc_stat("cpu  1 2 3\nctxt 99\nprocs_running 3\nprocs_blocked 0\n"), 3);
  EXPECT_EQ(procs_running_from_proc_stat("procs_running 1"), 1);              // no trailing newline
  EXPECT_EQ(procs_running_from_proc_stat("cpu 1 2\nprocs_blocked 0\n"), -1);  // absent
  EXPECT_EQ(procs_running_from_proc_stat("procs_running x\n"), -1);           // not a count
  EXPECT_EQ(procs_running_from_proc_stat("procs_running -4\n"), -1);
  EXPECT_EQ(procs_running_from_proc_stat(""), -1);
  EXPECT_TRUE(short_spin_fits(0, 2, 2));
  EXPECT_FALSE(short_spin_fits(1, 2, 2));  // one busy neighbour on 2 CPUs: spinning measured -21-29%
  EXPECT_TRUE(short_spin_fits(1, 1, 2));
  EXPECT_TRUE(short_spin_fits(6, 2, 8));
  EXPECT_FALSE(short_spin_fits(7, 2, 8));
  EXPECT_FALSE(short_spin_fits(-1, 2, 8));  // unknown: do not spin
  EXPECT_FALSE(short_spin_fits(0, 0, 8));
}

TEST(Gemm, PeakIsPositive) {
  for (DType t : {DType::F32, DType::BF16}) {
    double g = measure_gemm_peak_gflops(t);
    EXPECT_TRUE(std::isfinite(g) && g > 0) << dtype_name(t) << ": " << g;
  }
  EXPECT_THROW(measure_gemm_peak_gflops(DType::I32), Error);
}

}  // namespace
}  // namespace zaya
