// Triangular family, CUDA backend (twin: kernels/cpu/trisolve.cpp).
// tri_mask: one thread per element of contiguous [batch, rows, cols];
//   lower keeps j - i <= diagonal, upper keeps j - i >= diagonal.
// trisolve: one thread per (batch, column n) of X: forward (L X = B) or backward
// (L^T X = B) substitution down the column, reading earlier X values back from global
// memory (written by the same thread). The sum for X[i, n] runs in j order in the compute
// type, as on the CPU. Meant for the mixers' C x C blocks (C <= 64): O(C^2) per thread.
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

template <class T>
__global__ void tri_mask_kernel(TriMaskParams p) {
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  const int64_t n = p.batch * p.rows * p.cols;
  for (int64_t idx = global_thread(); idx < n; idx += grid_threads()) {
    const int64_t j = idx % p.cols;
    const int64_t i = (idx / p.cols) % p.rows;
    const bool keep = p.upper ? (j - i >= p.diagonal) : (j - i <= p.diagonal);
    out[idx] = keep ? in[idx] : element_from_double<T>(0.0);
  }
}

template <class T>
__global__ void trisolve_kernel(TrisolveParams p) {
  const int64_t total = p.batch * p.N;
  for (int64_t t = global_thread(); t < total; t += grid_threads()) {
    const int64_t b = t / p.N, n = t % p.N;
    const T* L = static_cast<const T*>(p.L) + b * p.l_batch;
    const T* B = static_cast<const T*>(p.B) + b * p.b_batch;
    T* X = static_cast<T*>(p.X) + b * p.C * p.N;
    for (int64_t s = 0; s < p.C; ++s) {
      const int64_t i = p.transpose ? p.C - 1 - s : s;
      T acc = B[i * p.b_row + n * p.b_col];
      if (!p.transpose) {
        for (int64_t j = 0; j < i; ++j) acc -= L[i * p.l_row + j * p.l_col] * X[j * p.N + n];
      } else {
        for (int64_t j = i + 1; j < p.C; ++j) acc -= L[j * p.l_row + i * p.l_col] * X[j * p.N + n];
      }
      X[i * p.N + n] = acc;
    }
  }
}

}  // namespace

void tri_mask(DType dtype, const TriMaskParams& p, uintptr_t stream) {
  const int64_t n = p.batch * p.rows * p.cols;
  if (n == 0) return;
  visit_float_dtype(dtype, "cuda", "tri_mask", [&](auto t) {
    auto kernel = tri_mask_kernel<decltype(t)>;
    LT_LAUNCH(kernel, grid_for(n), kThreads, 0, as_stream(stream), p);
  });
}

void trisolve(DType dtype, const TrisolveParams& p, uintptr_t stream) {
  const int64_t total = p.batch * p.N;
  if (total == 0 || p.C == 0) return;
  if (dtype == DType::f32) {
    auto kernel = trisolve_kernel<float>;
    LT_LAUNCH(kernel, grid_for(total, 128), 128, 0, as_stream(stream), p);
  } else if (dtype == DType::f64) {
    auto kernel = trisolve_kernel<double>;
    LT_LAUNCH(kernel, grid_for(total, 128), 128, 0, as_stream(stream), p);
  } else {
    unsupported_dtype("cuda", "trisolve", dtype);
  }
}

}  // namespace lt::kern::cuda
