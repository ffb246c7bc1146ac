#include "kernels/linear_backward.h"

#include <vector>

#include "core/dtype.h"
#include "core/profile.h"
#include "kernels/gemm.h"

namespace zaya {

void linear_backward(float* dx, bool accumulate, float* dW, float* db, const float* dy, const float* x,
                     const Tensor& W, int64_t M) {
  ZAYA_PROFILE_SCOPE("linear_backward");
  const int64_t N = W.dim(0), K = W.dim(1);
  MatRef dy_ref = mat(dy, N), x_ref = mat(x, K);
  // bf16 weights: both products in bf16 with fp32 accumulation (mixed precision, as the forward's), with dy
  // and x rounded once here; the gradient itself accumulates in fp32.
  thread_local std::vector<uint16_t> dy16, x16;
  if (W.dtype == DType::BF16) {
    dy16.resize(M * N);
    x16.resize(M * K);
    convert_f32_to_bf16_threaded(dy16.data(), dy, M * N);
    convert_f32_to_bf16_threaded(x16.data(), x, M * K);
    dy_ref = {dy16.data(), DType::BF16, N, false};
    x_ref = {x16.data(), DType::BF16, K, false};
  }
  if (dx) gemm(M, K, N, 1.f, dy_ref, mat(W, K), accumulate ? 1.f : 0.f, dx, K);
  MatRef dy_t = dy_ref;
  dy_t.trans = true;
  gemm(N, K, M, 1.f, dy_t, x_ref, 1.f, dW, K);
  if (db) {
    for (int64_t m = 0; m < M; m++) {
      for (int64_t n = 0; n < N; n++) db[n] += dy[m * N + n];
    }
  }
}

}  // namespace zaya
