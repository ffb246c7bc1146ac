#include "model/zaya-cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/profile.h"

namespace zaya {

ZayaCache::ZayaCache(const ZayaConfig& cfg, int64_t batch) : B(batch) {
  layers.resize(cfg.num_hidden_layers);
  for (auto& l : layers) {
    l.conv.assign(B * cfg.conv_state_len() * cfg.conv_channels(), 0.f);
    l.dv.assign(B * cfg.kv_dim() / 2, 0.f);
  }
  key_valid.resize(B);
}

void ZayaCache::reset() {
  seen = 0;
  has_state = false;
  for (auto& l : layers) {
    l.len = 0;
    l.start = 0;
    std::fill(l.conv.begin(), l.conv.end(), 0.f);
    std::fill(l.dv.begin(), l.dv.end(), 0.f);
  }
  for (auto& kv : key_valid) kv.clear();
}

namespace {

// dst's rows [0, len) of every (row, head) = src's, for [B·Hk][cap][d] layouts of capacities dst_cap,
// src_cap.
template <typename T>
void copy_keys(T* dst, int64_t dst_cap, const T* src, int64_t src_cap, int64_t BH, int64_t len, int64_t d) {
  // An empty cache's data() may be null (memcpy from null is UB even for 0 bytes).
  for (int64_t bh = 0; len > 0 && bh < BH; bh++)
    std::memcpy(dst + bh * dst_cap * d, src + bh * src_cap * d, size_t(len * d) * sizeof(T));
}

// Grows one layer's keys and values (of element type T) from l.cap to cap, keeping the stored ones.
template <typename Vec>
void regrow(Vec& k, Vec& v, const ZayaLayerCache& l, int64_t BH, int64_t cap, int64_t d) {
  Vec nk(BH * cap * d), nv(BH * cap * d);
  copy_keys(nk.data(), cap, k.data(), l.cap, BH, l.len, d);
  copy_keys(nv.data(), cap, v.data(), l.cap, BH, l.len, d);
  k.swap(nk);
  v.swap(nv);
}

}  // namespace

void ZayaCache::reserve(const ZayaConfig& cfg, int64_t n) {
  ZAYA_PROFILE_SCOPE("cache_reserve");  // a regrowth copies the keys and faults in fresh pages
  const int64_t BH = B * cfg.num_key_value_heads, d = cfg.head_dim;
  for (auto& l : layers) {
    if (l.len + n <= l.cap) continue;
    const int64_t cap = std::max<int64_t>({l.len + n, 2 * l.cap, 64});
    if (kv_dtype == DType::BF16)
      regrow(l.k16, l.v16, l, BH, cap, d);
    else
      regrow(l.k, l.v, l, BH, cap, d);
    l.cap = cap;
  }
}

void ZayaCache::set_kv_dtype(DType dt) {
  ZAYA_CHECK(dt == DType::F32 || dt == DType::BF16, "the key/value cache stores F32 or BF16, not ",
             dtype_name(dt));
  if (dt == kv_dtype) return;
  for (const auto& l : layers)
    ZAYA_CHECK(l.len == 0, "the key/value cache's dtype can change only while it holds no keys");
  kv_dtype = dt;
  for (auto& l : layers) {
    const size_t n = l.k.size() + l.k16.size();  // one of them is empty
    decltype(l.k)().swap(l.k);
    decltype(l.v)().swap(l.v);
    decltype(l.k16)().swap(l.k16);
    decltype(l.v16)().swap(l.v16);
    if (dt == DType::BF16) {
      l.k16.resize(n);
      l.v16.resize(n);
    } else {
      l.k.resize(n);
      l.v.resize(n);
    }
  }
}

void ZayaCache::assign_state(const ZayaConfig& cfg, const ZayaCache& src) {
  if (layers.size() != src.layers.size() || B != src.B) *this = ZayaCache(cfg, src.B);
  const int64_t BH = B * cfg.num_key_value_heads, d = cfg.head_dim;
  for (auto& l : layers) l.len = 0;  // its keys are replaced: the storage may switch
  set_kv_dtype(src.kv_dtype);
  seen = src.seen;
  has_state = src.has_state;
  key_valid = src.key_valid;
  const bool bf16 = kv_dtype == DType::BF16;
  for (size_t li = 0; li < layers.size(); li++) {
    ZayaLayerCache& l = layers[li];
    const ZayaLayerCache& s = src.layers[li];
    if (l.cap < s.len) {
      l.cap = s.len;
      // No copy of the old keys (resize would move them), no zeroing of the new.
      l.k.clear(), l.v.clear(), l.k16.clear(), l.v16.clear();
      if (bf16) {
        l.k16.resize(BH * l.cap * d);
        l.v16.resize(BH * l.cap * d);
      } else {
        l.k.resize(BH * l.cap * d);
        l.v.resize(BH * l.cap * d);
      }
    }
    if (bf16) {
      copy_keys(l.k16.data(), l.cap, s.k16.data(), s.cap, BH, s.len, d);
      copy_keys(l.v16.data(), l.cap, s.v16.data(), s.cap, BH, s.len, d);
    } else {
      copy_keys(l.k.data(), l.cap, s.k.data(), s.cap, BH, s.len, d);
      copy_keys(l.v.data(), l.cap, s.v.data(), s.cap, BH, s.len, d);
    }
    l.len = s.len;
    l.start = s.start;
    l.conv = s.conv;
    l.dv = s.dv;
  }
}

ZayaCache ZayaCache::compact_copy(const ZayaConfig& cfg) const {
  ZayaCache c(cfg, B);
  c.assign_state(cfg, *this);
  return c;
}

size_t ZayaCache::bytes() const {
  size_t n = 0;
  for (const auto& l : layers)
    n += (l.k.size() + l.v.size() + l.conv.size() + l.dv.size()) * sizeof(float) +
         (l.k16.size() + l.v16.size()) * sizeof(uint16_t);
  return n;
}

}  // namespace zaya
