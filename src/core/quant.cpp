// Quantized weight formats (see quant.h for the definitions).
#include "core/quant.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace zaya {

namespace {

constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

int64_t cols_of(const Tensor& W) {
  return W.shape.empty() ? 1 : W.shape.back();
}

// Bits of a float's unbiased exponent (x finite, > 0, normal).
int float_exponent(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  int e = int((u >> 23) & 0xff);
  if (e == 0) return int(std::floor(std::log2(double(x))));  // subnormal float: not reached by weights
  return e - 127;
}

// Nearest E2M1 magnitude index to a >= 0, a tie to the smaller one, anything past 6 to 6 (index 7).
unsigned e2m1_index(float a) {
  if (a <= 0.25f) return 0;
  if (a <= 0.75f) return 1;
  if (a <= 1.25f) return 2;
  if (a <= 1.75f) return 3;
  if (a <= 2.5f) return 4;
  if (a <= 3.5f) return 5;
  if (a <= 5.0f) return 6;
  return 7;
}

// max |x[j]| over one block of kQuantBlock values.
float block_amax(const float* x) {
  float amax = 0.0f;
  for (int64_t j = 0; j < kQuantBlock; j++) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

}  // namespace

bool is_quantized(DType t) {
  return t == DType::Q8_0 || t == DType::MXFP4 || t == DType::F8_E4M3;
}

DType quant_scales_dtype(DType t) {
  switch (t) {
    case DType::Q8_0:
      return DType::F16;
    case DType::MXFP4:
      return DType::U8;
    case DType::F8_E4M3:
      return DType::F32;
    default:
      fail(str_cat(dtype_name(t), " is not a quantized weight format"));
  }
}

Shape quant_scales_shape(DType t, const Shape& shape) {
  ZAYA_CHECK(!shape.empty(), "a quantized weight has at least one dim");
  Shape s = shape;
  s.back() = t == DType::F8_E4M3 ? 1 : shape.back() / kQuantBlock;
  return s;
}

void check_quantized(const Tensor& W, const std::string& what) {
  ZAYA_CHECK(is_quantized(W.dtype), what, ": ", dtype_name(W.dtype), " is not a quantized weight format");
  ZAYA_CHECK(W.ndim() >= 2, what, ": a quantized weight must be at least 2-D [rows, cols], got ",
             shape_str(W.shape));
  if (W.dtype != DType::F8_E4M3) {
    ZAYA_CHECK(W.shape.back() % kQuantBlock == 0, what, ": ", dtype_name(W.dtype),
               " needs the last dim to be a multiple of ", kQuantBlock, ", got ", shape_str(W.shape));
  }
  ZAYA_CHECK(W.scales != nullptr, what, ": ", dtype_name(W.dtype), " weight without scales");
  const Shape want = quant_scales_shape(W.dtype, W.shape);
  ZAYA_CHECK(W.scales->shape == want && W.scales->dtype == quant_scales_dtype(W.dtype), what, ": scales are ",
             dtype_name(W.scales->dtype), " ", shape_str(W.scales->shape), ", expected ",
             dtype_name(quant_scales_dtype(W.dtype)), " ", shape_str(want), " for a ", dtype_name(W.dtype),
             " weight of shape ", shape_str(W.shape));
}

bool quant_scheme_from_name(const std::string& name, DType* out) {
  std::string n = name;
  for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (n == "q8_0") {
    *out = DType::Q8_0;
  } else if (n == "mxfp4") {
    *out = DType::MXFP4;
  } else if (n == "fp8" || n == "f8_e4m3") {
    *out = DType::F8_E4M3;
  } else {
    return false;
  }
  return true;
}

const char* quant_scheme_name(DType t) {
  switch (t) {
    case DType::Q8_0:
      return "q8_0";
    case DType::MXFP4:
      return "mxfp4";
    case DType::F8_E4M3:
      return "fp8";
    default:
      return dtype_name(t);
  }
}

float e2m1_to_f32(unsigned nibble) {
  const float v = kE2M1[nibble & 7];
  return (nibble & 8) ? -v : v;
}

float e8m0_to_f32(uint8_t e) {
  if (e == 255) return std::nanf("");
  return std::ldexp(1.0f, int(e) - 127);
}

float f8e4m3_to_f32(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7) {
    v = std::nanf("");
  } else if (e == 0) {
    v = std::ldexp(float(m), -9);  // subnormal: m/8 · 2^-6
  } else {
    v = std::ldexp(1.0f + float(m) / 8.0f, e - 7);
  }
  return (b & 0x80) ? -v : v;
}

uint8_t f32_to_f8e4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a < std::ldexp(1.0f, -6)) {  // subnormal range: steps of 2^-9; 8 steps is the smallest normal (0x08)
    return uint8_t(sign | uint8_t(std::nearbyint(a * 512.0f)));
  }
  if (a >= 448.0f) return uint8_t(sign | 0x7e);
  int e = float_exponent(a);
  int mq = int(std::nearbyint((std::ldexp(a, -e) - 1.0f) * 8.0f));  // exact product; rint = ties to even
  if (mq == 8) {
    mq = 0;
    e++;
  }
  const int E = e + 7;
  if (E > 15 || (E == 15 && mq == 7)) return uint8_t(sign | 0x7e);
  return uint8_t(sign | (E << 3) | mq);
}

void quantize_row_q8_0(int8_t* q, uint16_t* scales_f16, const float* x, int64_t cols) {
  ZAYA_ASSERT(cols % kQuantBlock == 0, "Q8_0 rows are whole blocks of 32");
  for (int64_t b = 0; b < cols / kQuantBlock; b++) {
    const float* xb = x + b * kQuantBlock;
    const float amax = block_amax(xb);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int64_t j = 0; j < kQuantBlock; j++) q[b * kQuantBlock + j] = int8_t(std::lround(xb[j] * id));
    scales_f16[b] = f32_to_f16(d);
  }
}

void quantize_row_mxfp4(uint8_t* packed, uint8_t* scales_e8m0, const float* x, int64_t cols) {
  ZAYA_ASSERT(cols % kQuantBlock == 0, "MXFP4 rows are whole blocks of 32");
  for (int64_t b = 0; b < cols / kQuantBlock; b++) {
    const float* xb = x + b * kQuantBlock;
    const float amax = block_amax(xb);
    int e = amax > 0.0f && std::isfinite(amax) ? float_exponent(amax) - 2 + 127 : 0;
    e = std::clamp(e, 0, 254);
    scales_e8m0[b] = uint8_t(e);
    const int shift = 127 - e;  // x / 2^(e-127), exact
    for (int64_t j = 0; j < kQuantBlock; j += 2) {
      unsigned nib[2];
      for (int k = 0; k < 2; k++) {
        const float v = xb[j + k];
        nib[k] = e2m1_index(std::ldexp(std::fabs(v), shift)) | (std::signbit(v) ? 8u : 0u);
      }
      packed[(b * kQuantBlock + j) / 2] = uint8_t(nib[0] | (nib[1] << 4));
    }
  }
}

void quantize_row_f8e4m3(uint8_t* q, float* scale, const float* x, int64_t cols) {
  float amax = 0.0f;
  for (int64_t j = 0; j < cols; j++) amax = std::max(amax, std::fabs(x[j]));
  const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
  for (int64_t j = 0; j < cols; j++) q[j] = f32_to_f8e4m3(x[j] / s);
  *scale = s;
}

void dequantize_row(float* out, const Tensor& W, int64_t row) {
  const int64_t cols = cols_of(W);
  const char* base = static_cast<const char*>(W.data) + size_t(row) * dtype_row_bytes(W.dtype, cols);
  switch (W.dtype) {
    case DType::F32:
    case DType::BF16:
    case DType::F16:
      convert_to_f32(out, base, W.dtype, cols);
      return;
    case DType::Q8_0: {
      const auto* q = reinterpret_cast<const int8_t*>(base);
      const uint16_t* d = static_cast<const uint16_t*>(W.scales->data) + row * (cols / kQuantBlock);
      for (int64_t b = 0; b < cols; b += kQuantBlock) {  // one scale a block: the inner loop vectorises
        const float scale = f16_to_f32(d[b / kQuantBlock]);
        for (int64_t j = b; j < b + kQuantBlock; j++) out[j] = float(q[j]) * scale;
      }
      return;
    }
    case DType::MXFP4: {
      const auto* p = reinterpret_cast<const uint8_t*>(base);
      const uint8_t* e = static_cast<const uint8_t*>(W.scales->data) + row * (cols / kQuantBlock);
      for (int64_t j = 0; j < cols; j += 2) {
        const float d = e8m0_to_f32(e[j / kQuantBlock]);
        out[j] = e2m1_to_f32(p[j / 2] & 15) * d;
        out[j + 1] = e2m1_to_f32(p[j / 2] >> 4) * d;
      }
      return;
    }
    case DType::F8_E4M3: {
      const auto* q = reinterpret_cast<const uint8_t*>(base);
      const float s = W.scales ? static_cast<const float*>(W.scales->data)[row] : 1.0f;
      for (int64_t j = 0; j < cols; j++) out[j] = f8e4m3_to_f32(q[j]) * s;
      return;
    }
    default:
      fail(str_cat("cannot read a ", dtype_name(W.dtype), " tensor as weights"));
  }
}

void dequantize_rows_bf16(uint16_t* out, const Tensor& W, int64_t row0, int64_t rows) {
  const int64_t cols = cols_of(W);
  std::vector<float> tmp(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; r++) {
    dequantize_row(tmp.data(), W, row0 + r);
    convert_f32_to_bf16(out + r * cols, tmp.data(), cols);
  }
}

Tensor quantize(const Tensor& src, DType scheme) {
  ZAYA_CHECK(is_quantized(scheme), "quantize: ", dtype_name(scheme), " is not a quantized weight format");
  ZAYA_CHECK(src.ndim() >= 2, "quantize: the weight must be at least 2-D, got ", shape_str(src.shape));
  const int64_t cols = cols_of(src), rows = src.numel() / std::max<int64_t>(cols, 1);
  if (scheme != DType::F8_E4M3) {
    ZAYA_CHECK(cols % kQuantBlock == 0, "quantize: ", quant_scheme_name(scheme),
               " needs the last dim to be a multiple of ", kQuantBlock, ", got ", shape_str(src.shape));
  }
  Tensor out = Tensor::empty(scheme, src.shape);
  Tensor scales = Tensor::empty(quant_scales_dtype(scheme), quant_scales_shape(scheme, src.shape));
  const int64_t nb = scales.shape.back();
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; r++) {
    convert_to_f32(row.data(), static_cast<const char*>(src.data) + size_t(r * cols) * dtype_size(src.dtype),
                   src.dtype, cols);
    char* q = static_cast<char*>(out.data) + size_t(r) * dtype_row_bytes(scheme, cols);
    switch (scheme) {
      case DType::Q8_0:
        quantize_row_q8_0(reinterpret_cast<int8_t*>(q), static_cast<uint16_t*>(scales.data) + r * nb,
                          row.data(), cols);
        break;
      case DType::MXFP4:
        quantize_row_mxfp4(reinterpret_cast<uint8_t*>(q), static_cast<uint8_t*>(scales.data) + r * nb,
                           row.data(), cols);
        break;
      default:
        quantize_row_f8e4m3(reinterpret_cast<uint8_t*>(q), static_cast<float*>(scales.data) + r, row.data(),
                            cols);
        break;
    }
  }
  out.scales = std::make_shared<const Tensor>(std::move(scales));
  return out;
}

Tensor dequantize(const Tensor& W, DType to) {
  ZAYA_CHECK(to == DType::F32 || to == DType::BF16, "dequantize: the target must be F32 or BF16, not ",
             dtype_name(to));
  const int64_t cols = cols_of(W), rows = W.numel() / std::max<int64_t>(cols, 1);
  Tensor out = Tensor::empty(to, W.shape);
  std::vector<float> tmp(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; r++) {
    float* dst = to == DType::F32 ? out.f32() + r * cols : tmp.data();
    dequantize_row(dst, W, r);
    if (to == DType::BF16) convert_f32_to_bf16(out.bf16() + r * cols, tmp.data(), cols);
  }
  return out;
}

Tensor quant_rows(const Tensor& W, int64_t row0, int64_t rows) {
  const int64_t cols = cols_of(W), total = W.numel() / std::max<int64_t>(cols, 1);
  ZAYA_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= total, "row slice must lie inside the weight");
  Tensor v =
      Tensor::view(W.dtype, {rows, cols},
                   static_cast<char*>(W.data) + size_t(row0) * dtype_row_bytes(W.dtype, cols), W.owner);
  if (W.scales) {
    const Tensor& s = *W.scales;
    const int64_t nb = s.shape.back();
    v.scales = std::make_shared<const Tensor>(Tensor::view(
        s.dtype, {rows, nb}, static_cast<char*>(s.data) + size_t(row0 * nb) * dtype_size(s.dtype), s.owner));
  }
  return v;
}

}  // namespace zaya
