#include "model/zaya-cache.h"

#include <algorithm>
#include <cstring>

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

void ZayaCache::reserve(const ZayaConfig& cfg, int64_t n) {
  ZAYA_PROFILE_SCOPE("cache_reserve");  // a regrowth copies the keys and faults in fresh pages
  const int64_t Hk = cfg.num_key_value_heads, d = cfg.head_dim;
  for (auto& l : layers) {
    if (l.len + n <= l.cap) continue;
    int64_t cap = std::max<int64_t>({l.len + n, 2 * l.cap, 64});
    std::vector<float, UninitAllocator<float>> k(B * Hk * cap * d), v(B * Hk * cap * d);
    // Nothing to keep in an empty cache, whose l.k.data() may be null (memcpy from null is UB even for 0
    // bytes).
    for (int64_t bh = 0; l.len > 0 && bh < B * Hk; bh++) {
      std::memcpy(k.data() + bh * cap * d, l.k.data() + bh * l.cap * d, l.len * d * sizeof(float));
      std::memcpy(v.data() + bh * cap * d, l.v.data() + bh * l.cap * d, l.len * d * sizeof(float));
    }
    l.k.swap(k);
    l.v.swap(v);
    l.cap = cap;
  }
}

void ZayaCache::assign_state(const ZayaConfig& cfg, const ZayaCache& src) {
  if (layers.size() != src.layers.size() || B != src.B) *this = ZayaCache(cfg, src.B);
  const int64_t Hk = cfg.num_key_value_heads, d = cfg.head_dim;
  seen = src.seen;
  has_state = src.has_state;
  key_valid = src.key_valid;
  for (size_t li = 0; li < layers.size(); li++) {
    ZayaLayerCache& l = layers[li];
    const ZayaLayerCache& s = src.layers[li];
    if (l.cap < s.len) {
      l.cap = s.len;
      l.k.clear();  // no copy of the old keys (resize would move them), no zeroing of the new
      l.v.clear();
      l.k.resize(B * Hk * l.cap * d);
      l.v.resize(B * Hk * l.cap * d);
    }
    for (int64_t bh = 0; s.len > 0 && bh < B * Hk; bh++) {
      std::memcpy(l.k.data() + bh * l.cap * d, s.k.data() + bh * s.cap * d, s.len * d * sizeof(float));
      std::memcpy(l.v.data() + bh * l.cap * d, s.v.data() + bh * s.cap * d, s.len * d * sizeof(float));
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
  for (const auto& l : layers) n += (l.k.size() + l.v.size() + l.conv.size() + l.dv.size()) * sizeof(float);
  return n;
}

}  // namespace zaya
