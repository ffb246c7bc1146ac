#include "core/dtype.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace zaya {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::F16:
      return 2;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
    case DType::U32:
      return 4;
    case DType::I8:
    case DType::F8_E4M3:
    case DType::Q8_0:
      return 1;
    case DType::MXFP4:
      ZAYA_ASSERT(false, "MXFP4 packs two elements per byte: sizes come from dtype_row_bytes");
  }
  return 0;
}

size_t dtype_row_bytes(DType t, int64_t cols) {
  if (t == DType::MXFP4) {
    ZAYA_ASSERT(cols % 2 == 0, "an MXFP4 row holds whole bytes (two elements each)");
    return size_t(cols / 2);
  }
  return size_t(cols) * dtype_size(t);
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::U8:
      return "U8";
    case DType::U32:
      return "U32";
    case DType::I8:
      return "I8";
    case DType::F8_E4M3:
      return "F8_E4M3";
    case DType::Q8_0:
      return "Q8_0";
    case DType::MXFP4:
      return "MXFP4";
  }
  return "?";
}

bool dtype_from_name(const std::string& s, DType* out) {
  static const struct {
    const char* name;
    DType t;
  } kNames[] = {{"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16},
                {"I32", DType::I32}, {"I64", DType::I64},   {"U8", DType::U8},
                {"U32", DType::U32}, {"I8", DType::I8},     {"F8_E4M3", DType::F8_E4M3}};
  for (const auto& n : kNames) {
    if (s == n.name) {
      *out = n.t;
      return true;
    }
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        exp--;
      }
      mant &= 0x3ff;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int32_t exp = int32_t((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
  return uint16_t(half);
}

void convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(w, 16));
  }
#endif
  for (; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

#if defined(__AVX2__)
namespace {
// f32_to_bf16 of 8 lanes as 32-bit words (the bf16 in the low half): NaN quieted, round to nearest even,
// subnormals kept; the same bits as the scalar function.
inline __m256i f32_to_bf16_words8(__m256i u) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
  // Signed compare is right here: both sides have the sign bit clear.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, odd)), 16);
  const __m256i quieted = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
  return _mm256_blendv_epi8(rounded, quieted, nan);
}
}  // namespace
#endif

void convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  // f32_to_bf16 on 16 lanes, the same bits (NaN quieted, round to nearest even, subnormals kept): the scalar
  // loop's NaN branch kept the compiler from vectorising it (11% of a bf16 Newton–Schulz, bench/optim_bench).
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(src + i);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, odd)), 16);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
  }
#elif defined(__AVX2__)
  // The same on 8 lanes (AVX2 machines: the scalar loop made every bf16 rounding of a training step scalar).
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = f32_to_bf16_words8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i hi = f32_to_bf16_words8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // packus works per 128-bit lane (lo0 hi0 lo1 hi1); the permute restores element order. Words are
    // <= 0xffff, so the unsigned saturation never bites.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
#endif
  for (; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

void convert_f32_to_bf16_threaded(uint16_t* dst, const float* src, int64_t n) {
  constexpr int64_t kPiece = int64_t(1) << 16;
#pragma omp parallel for schedule(static) if (n > 4 * kPiece)
  for (int64_t p = 0; p < n; p += kPiece) convert_f32_to_bf16(dst + p, src + p, std::min(kPiece, n - p));
}

void round_f32_to_bf16_values(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m256i w = f32_to_bf16_words8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(w, 16));
  }
#endif
  for (; i < n; i++) dst[i] = bf16_to_f32(f32_to_bf16(src[i]));
}

void convert_f16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

void convert_to_f32(float* dst, const void* src, DType src_type, int64_t n) {
  switch (src_type) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::BF16:
      convert_bf16_to_f32(dst, static_cast<const uint16_t*>(src), n);
      return;
    case DType::F16:
      convert_f16_to_f32(dst, static_cast<const uint16_t*>(src), n);
      return;
    default:
      fail(str_cat("cannot convert dtype ", dtype_name(src_type), " to F32: expected F32, BF16 or F16"));
  }
}

}  // namespace zaya
