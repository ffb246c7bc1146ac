// Element types and conversions. bf16 is stored as uint16_t (the top half of an IEEE float32);
// fp32 -> bf16 rounds to nearest even, as PyTorch and safetensors writers do.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace zaya {

// F32 … U32, I8 and F8_E4M3 are storage types (safetensors spellings). Q8_0 and MXFP4 are quantized weight
// formats (core/quant.h): Q8_0 holds one int8 per element, MXFP4 two E2M1 values per byte; their per-block
// scales live in Tensor::scales. F8_E4M3 weights may carry per-row scales the same way.
enum class DType : uint8_t { F32, BF16, F16, I32, I64, U8, U32, I8, F8_E4M3, Q8_0, MXFP4 };

// Bytes per element; MXFP4 (half a byte) has none: use dtype_row_bytes.
size_t dtype_size(DType t);
// Bytes of `cols` consecutive elements (cols even for MXFP4).
size_t dtype_row_bytes(DType t, int64_t cols);
const char* dtype_name(DType t);                         // safetensors spelling: "F32", "BF16", ...
bool dtype_from_name(const std::string& s, DType* out);  // false when unknown

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                         // round to nearest even
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Bulk conversions (vectorised by the compiler; n elements).
void convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n);
void convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n);
// The same, in 64K-element pieces over the OpenMP threads when n is large (a memory-bound pass one core
// cannot saturate); inside a parallel region it runs on the calling thread. The same bits either way.
void convert_f32_to_bf16_threaded(uint16_t* dst, const float* src, int64_t n);
// dst[i] = bf16_to_f32(f32_to_bf16(src[i])): fp32 values rounded to bf16 precision, kept in fp32 (dst may be
// src).
void round_f32_to_bf16_values(float* dst, const float* src, int64_t n);
void convert_f16_to_f32(float* dst, const uint16_t* src, int64_t n);
// Converts n elements of any float dtype to f32.
void convert_to_f32(float* dst, const void* src, DType src_type, int64_t n);

}  // namespace zaya
