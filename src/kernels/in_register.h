// A loaded vector kept in a register. GCC folds a loaded vector that several fmas use into each of them as a
// memory operand (dot_f32_grid: 20 loads per 16 fmas instead of 8; the attention value sum: 16 + 4 per 16
// instead of 4 + 4). The Zen 5 VMs measured serve about one 64-byte load a cycle (0.93 zmm loads a cycle)
// against two fmas, so those loops ran at the L1's pace; an empty asm constraint ("+v": the value is in a
// vector register and may have changed) makes the compiler load it once. No instruction is emitted.
#pragma once

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>

namespace zaya {

#if defined(__AVX512F__)
inline __m512 in_register(__m512 v) {
  asm("" : "+v"(v));
  return v;
}
#endif

inline __m256 in_register(__m256 v) {
  asm("" : "+v"(v));
  return v;
}

}  // namespace zaya

#endif
