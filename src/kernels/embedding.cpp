#include "kernels/embedding.h"

#include <vector>

namespace zaya {

void embedding_backward(float* dembed, float* dalpha, float* dbeta, const float* dx0, const int32_t* ids,
                        int64_t T, const Tensor& embed, const float* alpha, const float* beta,
                        int64_t pad_id) {
  const int64_t H = embed.dim(1);
  std::vector<float> e(H);
  for (int64_t t = 0; t < T; t++) {
    const int32_t id = ids[t];
    const char* src = static_cast<const char*>(embed.data) + size_t(id) * H * dtype_size(embed.dtype);
    convert_to_f32(e.data(), src, embed.dtype, H);
    const float* g = dx0 + t * H;
    for (int64_t i = 0; i < H; i++) {
      dalpha[i] += g[i] * (e[i] + beta[i]);
      dbeta[i] += g[i] * alpha[i];
    }
    if (id == pad_id) continue;
    float* row = dembed + int64_t(id) * H;
    for (int64_t i = 0; i < H; i++) row[i] += g[i] * alpha[i];
  }
}

}  // namespace zaya
