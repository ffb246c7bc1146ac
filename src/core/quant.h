// Quantized weight formats: what the numbers mean, how a float row becomes one, and back. The kernels that
// multiply with them are in kernels/quant_gemm.h; the files that hold them in io/quant_config.h.
//
// Every format quantizes along the last dim (a Linear's input dim K), so rows stay independent: a row of
// a [..., rows, cols] weight is `cols` elements plus its scales, and slicing rows (one expert, a fused
// qkv part) slices both.
//
//   Q8_0     int8 q, one fp16 scale d per block of 32:      x ≈ q·d,  d = amax/127, q = round(x/d)
//            (ggml's Q8_0: 8.5 bits a weight; rounding half away from zero, q from the unrounded d)
//   MXFP4    E2M1 q (two per byte: element 2k in the low nibble, 2k+1 in the high one, as compressed-tensors
//            packs), one E8M0 scale per block of 32:  x ≈ e2m1(q)·2^(e−127),  e = floor(log2 amax) − 2 + 127
//            (OCP MX v1.0; 4.25 bits a weight); q is the nearest of ±{0, 0.5, 1, 1.5, 2, 3, 4, 6} to
//            x/2^(e−127), a tie going to the smaller magnitude (compressed-tensors' argmin), beyond 6 → 6
//   F8_E4M3  float8 e4m3fn q, one fp32 scale s per row:  x ≈ f8(q)·s,  s = amax/448,  q = f8(x/s)
//            (compressed-tensors "float-quantized", strategy channel: Zyphra's FP8 experts) with
//            round-to-nearest-even, saturating at ±448
//
// In memory a quantized Tensor holds the elements in `data` (int8, packed pairs or e4m3 bytes) and the
// scales in `scales` (Q8_0: F16 [..., rows, cols/32]; MXFP4: U8 [..., rows, cols/32]; F8_E4M3: F32
// [..., rows, 1]).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace zaya {

constexpr int64_t kQuantBlock = 32;  // elements per scale block (Q8_0, MXFP4)

// True for the dtypes that need `scales` to be read as weights: Q8_0, MXFP4, F8_E4M3.
bool is_quantized(DType t);
// The dtype and shape of the scales a quantized weight of `shape` carries.
DType quant_scales_dtype(DType t);
Shape quant_scales_shape(DType t, const Shape& shape);
// Throws a zaya::Error naming `what` unless W is a well-formed quantized tensor: rank >= 2, cols a
// multiple of 32 (Q8_0, MXFP4), scales present with the dtype and shape above.
void check_quantized(const Tensor& W, const std::string& what);

// Parses "q8_0" / "mxfp4" / "fp8" (any case) into the weight format; false when unknown.
bool quant_scheme_from_name(const std::string& name, DType* out);
const char* quant_scheme_name(DType t);  // "q8_0", "mxfp4", "fp8"

// Element codecs.
float e2m1_to_f32(unsigned nibble);  // nibble = sign<<3 | index into {0, .5, 1, 1.5, 2, 3, 4, 6}
float e8m0_to_f32(uint8_t e);        // 2^(e−127); e = 255 is NaN
float f8e4m3_to_f32(uint8_t b);      // e4m3fn: bias 7, no infinities, S.1111.111 is NaN
uint8_t f32_to_f8e4m3(float x);      // round to nearest even, saturating at ±448; NaN -> 0x7f

// One row of `cols` floats into each format (cols % 32 == 0 for Q8_0 and MXFP4).
void quantize_row_q8_0(int8_t* q, uint16_t* scales_f16, const float* x, int64_t cols);
void quantize_row_mxfp4(uint8_t* packed, uint8_t* scales_e8m0, const float* x, int64_t cols);
void quantize_row_f8e4m3(uint8_t* q, float* scale, const float* x, int64_t cols);

// Row `row` (counted over all leading dims) of a quantized or float weight, as floats: out[cols].
void dequantize_row(float* out, const Tensor& W, int64_t row);
// `rows` consecutive rows from `row0` as bf16 (exact for Q8_0 and MXFP4 elements; their scales applied in
// fp32 first, then rounded once): out[rows, cols]. For the prefill path (dequantize a tile, bf16 GEMM).
void dequantize_rows_bf16(uint16_t* out, const Tensor& W, int64_t row0, int64_t rows);

// src (F32 or BF16, rank >= 2) quantized along its last dim into `scheme` (Q8_0, MXFP4 or F8_E4M3).
Tensor quantize(const Tensor& src, DType scheme);
// A quantized W as a float tensor (to = F32 or BF16).
Tensor dequantize(const Tensor& W, DType to);
// Rows [row0, row0 + rows) of a rank-2 view over W's leading dims (a view into W's data and scales).
Tensor quant_rows(const Tensor& W, int64_t row0, int64_t rows);

}  // namespace zaya
