// Vectorised row primitives for softmax-like loops (cross-entropy, attention): max, exp with a shift and a
// double-precision sum, scaling, dot products. AVX-512 when the build targets it, AVX2 (8-lane vectors with
// the AVX-512 path's lane chains and reduction trees: the same bits) on CPUs without it, plain loops
// otherwise; all give the same results to within the exp error below.
//
// exp accuracy: |exp_f32(x) − exp(x)| ≤ 2 ulp of fp32 on [−87, 88] (Cephes polynomial on |r| ≤ ln2/2 after
// the exact 2^n split; tested in tests/kernels_test.cpp). Inputs below −104 give 0, +inf stays +inf, NaN
// stays NaN (so a non-finite logit still surfaces as a non-finite loss).
#pragma once

#include <cstdint>

namespace zaya {

// max over x[0, n); −inf for n == 0.
float row_max(const float* x, int64_t n);

// out[i] = exp(x[i] − shift) for i < n (out may alias x, or be null to only sum). Returns Σ exp(x[i] − shift)
// accumulated in double.
double exp_shift_sum(float* out, const float* x, int64_t n, float shift);

// x[i] *= s.
void scale_row(float* x, int64_t n, float s);

// Σ x[i]·y[i] over n floats (16-lane fma chains, then the lanes summed; the tail in order).
float dot_f32(const float* x, const float* y, int64_t n);

// out[j] = dot_f32(x, ys + j·ldy, n) for j < m, bit for bit: the same chain and sum per dot, up to 8 of them
// interleaved (one dot is a single latency-bound chain; the grouped CCA convolution of a decode step runs
// one per output and sequence).
void dot_f32_many(float* out, const float* x, const float* ys, int64_t ldy, int64_t m, int64_t n);

// out[j·ldo + i] = dot_f32(xs + i·ldx, ys + j·ldy, n) for i < nx, j < ny, bit for bit: every pair of rows,
// as a grouped convolution of a batched decode step needs (xs: one group's weight rows, ys: the positions'
// inputs). On AVX-512, with n a multiple of 16 and 16+ y-rows: 4 x-rows by 4 y-rows at a time (8 loads per
// 16 fmas, where dot_f32_many loads 9 per 8), the 16 sums of a block in one transposed tree with dot_f32's
// pairings. Otherwise one x-row at a time over up to 8 y-rows (dot_f32_many): with few y-rows the x stream
// sets the pace, and read in order it comes faster (ZAYA1-8B's conv weights, Zen 5: 4 y-rows 38 vs 45 us a
// layer, 12: 64 vs 75; 16: 200 vs 137, 64: 780 vs 405; docs/quantization.md). gemm_small_f32's dot form
// has the same bits for n a multiple of 16 but takes 4 y-rows (its A) against all x-rows in turn, so a
// group's 128 kB of weights came from L2 once per 4 positions: 201-226 us at 16.
void dot_f32_grid(float* out, int64_t ldo, const float* xs, int64_t ldx, int64_t nx, const float* ys,
                  int64_t ldy, int64_t ny, int64_t n);

// One exp, same polynomial as exp_shift_sum (tests compare it with std::exp).
float exp_f32(float x);

}  // namespace zaya
