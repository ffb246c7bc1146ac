// Tensor: a typed, shaped view of contiguous row-major memory plus a shared owner. The owner is an
// aligned heap buffer or a memory-mapped file region, so a checkpoint tensor can be used in place
// (no copy) when its stored dtype equals the compute dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace zaya {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 32, 512]"

// 64-byte aligned, zero-filled allocation owned by a shared_ptr.
std::shared_ptr<void> aligned_alloc_shared(size_t nbytes);

// A zero-filled allocation on 2 MiB-aligned anonymous pages advised as huge (transparent huge pages,
// MADV_HUGEPAGE), owned by a shared_ptr; rounded up to whole 2 MiB pages. For big long-lived buffers that
// decode streams (packed weights, weights copied out of a mapping): a stream through 4 KiB pages misses the
// TLB every 64 cache lines, and under a virtual machine's nested page tables each miss is a long walk.
// Measured on the project's Zen 4 VM, two threads streaming 1 GiB: 27.5 GB/s on 4 KiB pages, 33.5-34.6 GB/s
// on huge ones (medians of 30). Not for a training step's short-lived buffers: glibc's heap reuses those
// without page faults, and routing the 2-32 MiB ones to fresh mappings made a mid step ~8% slower.
// commit: write every page now (as the heap path's memset does), so no first-touch fault lands in a timed
// loop; false leaves that to the caller's first writes (a copy that should not commit all of it at once).
constexpr size_t kHugePageBytes = size_t(2) << 20;
std::shared_ptr<void> huge_alloc_shared(size_t nbytes, bool commit = true);

struct Tensor {
  DType dtype = DType::F32;
  Shape shape;
  void* data = nullptr;
  std::shared_ptr<void> owner;  // keeps `data` alive (heap buffer or mapped file)
  // Quantized weights (core/quant.h): one scale per block of the last dim, shape [..., rows, cols / 32] for
  // Q8_0 (F16) and MXFP4 (U8, E8M0), [..., rows, 1] for F8_E4M3 (F32, per row). Null for float tensors.
  std::shared_ptr<const Tensor> scales;
  // A derived copy of the weights re-laid for the decode kernels (kernels/quant_gemm.h: pack_for_decode),
  // or null. Kernels that do not know it read `data`; clone() drops it (a clone is made to be modified).
  std::shared_ptr<const void> decode_pack;

  Tensor() = default;
  static Tensor empty(DType dtype, const Shape& shape);  // zero-filled
  static Tensor view(DType dtype, const Shape& shape, void* data, std::shared_ptr<void> owner);

  bool defined() const { return data != nullptr; }
  int64_t numel() const { return shape_numel(shape); }
  size_t nbytes() const;  // bytes of `data` (not of scales)
  int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
  int ndim() const { return int(shape.size()); }

  float* f32() const;      // checks dtype == F32
  uint16_t* bf16() const;  // checks dtype == BF16
  int32_t* i32() const;    // checks dtype == I32

  // A copy converted to `to` (F32 <-> BF16 / F16 -> F32; quantized -> F32 or BF16 dequantizes). Same dtype:
  // returns *this (shared, no copy).
  Tensor to(DType to) const;
  Tensor clone() const;
};

}  // namespace zaya
