// The compressed CCA cache (spec §7): per block, keys after QK-norm/temperature/RoPE and values
// [B, Hk, cap, d]; the last P raw q/k frames [B, P, C] (conv state); the delayed-value state [B, Kv/2].
// Keys and values are fp32, or bf16 (ZayaCache::kv_dtype: each rounded once to nearest even as it is stored,
// half the bytes a decode step's attention reads; `--kv-cache bf16`); the states are always fp32.
// Sliding-window blocks keep only the last W-1 keys after each call.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "model/zaya-config.h"

namespace zaya {

// An allocator whose resize() leaves new elements uninitialised: a cache's key capacity (a server slot
// reserves its whole context) is then neither zeroed nor even touched until keys are written, so its pages
// are mapped only as the context fills (reserving 4096 tokens of mid.json zeroed 32 MB, ~0.1 s on this
// VM, on the engine thread). Only [0, len) of a layer's keys is ever read.
template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

struct ZayaLayerCache {
  std::vector<float, UninitAllocator<float>> k, v;  // [B, Hk, cap, d]; keys past len are uninitialised
  std::vector<uint16_t, UninitAllocator<uint16_t>> k16, v16;  // the same in bf16 (kv_dtype BF16; k, v empty)
  int64_t cap = 0;                                            // key capacity per (row, head)
  int64_t len = 0;                                            // keys stored
  int64_t start = 0;                                          // absolute position of the first stored key
  std::vector<float> conv;                                    // [B, P, C] last P raw frames, oldest first
  std::vector<float> dv;  // [B, Kv/2] v_proj_delayed output of the last token
};

struct ZayaCache {
  int64_t B = 0;
  int64_t seen = 0;             // tokens processed per row (positions), not the trimmed length
  DType kv_dtype = DType::F32;  // how the layers store keys and values: F32 (k, v) or BF16 (k16, v16)
  bool has_state = false;
  std::vector<ZayaLayerCache> layers;
  std::vector<std::vector<uint8_t>> key_valid;  // [B][seen]: 0 for padded positions

  ZayaCache() = default;
  ZayaCache(const ZayaConfig& cfg, int64_t batch);
  void reset();
  // Makes room for `n` more keys in every layer (amortised doubling).
  void reserve(const ZayaConfig& cfg, int64_t n);
  // Stores keys and values as `dt` (F32 or BF16) from now on. Only while no layer holds a key (a fresh or
  // reset cache): the capacity is kept, the other storage freed. Recording (training) forwards need F32.
  void set_kv_dtype(DType dt);
  // Bytes held by K/V and the fixed states.
  size_t bytes() const;
  // Makes this cache hold exactly `src`'s state (same batch) and storage dtype, keeping this cache's key
  // capacity when it is large enough (a serving slot keeps its ctx_size allocation).
  void assign_state(const ZayaConfig& cfg, const ZayaCache& src);
  ZayaCache compact_copy(const ZayaConfig& cfg) const;
};

}  // namespace zaya
