#include "core/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/quant.h"

namespace zaya {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::shared_ptr<void> huge_alloc_shared(size_t nbytes, bool commit) {
  ZAYA_CHECK(nbytes <= SIZE_MAX - 2 * kHugePageBytes, "cannot allocate ", nbytes, " bytes: too large");
  const size_t rounded = (std::max<size_t>(nbytes, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  // Over-map by one huge page and keep the 2 MiB-aligned part: the kernel backs only aligned 2 MiB ranges
  // with huge pages.
  const size_t mapped = rounded + kHugePageBytes;
  void* m = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ZAYA_CHECK(m != MAP_FAILED, "out of memory allocating ", nbytes, " bytes: ", std::strerror(errno));
  const uintptr_t base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (base + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > base) ::munmap(m, aligned - base);
  const uintptr_t end = base + mapped, used_end = aligned + rounded;
  if (end > used_end) ::munmap(reinterpret_cast<void*>(used_end), end - used_end);
  void* p = reinterpret_cast<void*>(aligned);
  // A hint: where transparent huge pages are off (or `never`), the range keeps 4 KiB pages and works the
  // same.
  (void)::madvise(p, rounded, MADV_HUGEPAGE);
  // Anonymous pages read as zero already; writing them commits the memory now, as the heap path's memset
  // does, so that no first-touch fault lands in a timed loop (and reads never see the shared zero page).
  if (commit) std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [rounded](void* q) { ::munmap(q, rounded); });
}

std::shared_ptr<void> aligned_alloc_shared(size_t nbytes) {
  size_t rounded = (nbytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  ZAYA_CHECK(p != nullptr, "out of memory allocating ", nbytes, " bytes");
  std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

Tensor Tensor::empty(DType dtype, const Shape& shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.owner = aligned_alloc_shared(t.nbytes());
  t.data = t.owner.get();
  return t;
}

Tensor Tensor::view(DType dtype, const Shape& shape, void* data, std::shared_ptr<void> owner) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.data = data;
  t.owner = std::move(owner);
  return t;
}

float* Tensor::f32() const {
  ZAYA_ASSERT(dtype == DType::F32, "tensor accessed as F32 must hold F32");
  return static_cast<float*>(data);
}

uint16_t* Tensor::bf16() const {
  ZAYA_ASSERT(dtype == DType::BF16, "tensor accessed as BF16 must hold BF16");
  return static_cast<uint16_t*>(data);
}

int32_t* Tensor::i32() const {
  ZAYA_ASSERT(dtype == DType::I32, "tensor accessed as I32 must hold I32");
  return static_cast<int32_t*>(data);
}

size_t Tensor::nbytes() const {
  if (dtype == DType::MXFP4) {
    const int64_t cols = shape.empty() ? 1 : shape.back();
    return cols == 0 ? 0 : size_t(numel() / cols) * dtype_row_bytes(dtype, cols);
  }
  return size_t(numel()) * dtype_size(dtype);
}

Tensor Tensor::to(DType target) const {
  if (target == dtype) return *this;
  if (is_quantized(dtype) || scales) return dequantize(*this, target);
  Tensor out = Tensor::empty(target, shape);
  int64_t n = numel();
  if (target == DType::F32) {
    convert_to_f32(out.f32(), data, dtype, n);
  } else if (target == DType::BF16 && dtype == DType::F32) {
    convert_f32_to_bf16(out.bf16(), f32(), n);
  } else if (target == DType::BF16 && dtype == DType::F16) {
    Tensor tmp = to(DType::F32);
    convert_f32_to_bf16(out.bf16(), tmp.f32(), n);
  } else {
    fail(str_cat("cannot convert a ", dtype_name(dtype), " tensor to ", dtype_name(target)));
  }
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(dtype, shape);
  if (nbytes()) std::memcpy(out.data, data, nbytes());
  if (scales) out.scales = std::make_shared<const Tensor>(scales->clone());
  return out;
}

}  // namespace zaya
