#include "kernels/linear_backward.h"

#include "core/profile.h"
#include "kernels/gemm.h"

namespace zaya {

void linear_backward(float* dx, bool accumulate, float* dW, float* db, const float* dy, const float* x,
                     const Tensor& W, int64_t M) {
  ZAYA_PROFILE_SCOPE("linear_backward");
  const int64_t N = W.dim(0), K = W.dim(1);
  if (dx) gemm(M, K, N, 1.f, mat(dy, N), mat(W, K), accumulate ? 1.f : 0.f, dx, K);
  gemm(N, K, M, 1.f, mat(dy, N, /*trans=*/true), mat(x, K), 1.f, dW, K);
  if (db) {
    for (int64_t m = 0; m < M; m++) {
      for (int64_t n = 0; n < N; n++) db[n] += dy[m * N + n];
    }
  }
}

}  // namespace zaya
