// Triangular family, CPU backend (twin: kernels/cuda/trisolve.cu).
// tri_mask over contiguous [batch, rows, cols]:
//   lower: out[i, j] = j - i <= diagonal ? in[i, j] : 0
//   upper: out[i, j] = j - i >= diagonal ? in[i, j] : 0
// trisolve, L unit lower triangular C x C (diagonal taken as 1, upper triangle unread):
//   L X = B:    X[i, :] = B[i, :] - sum_{j<i} L[i, j] X[j, :]     (i = 0 .. C-1)
//   L^T X = B:  X[i, :] = B[i, :] - sum_{j>i} L[j, i] X[j, :]     (i = C-1 .. 0)
// Per element of X the sum runs in j order in the compute type (f32 for f32, f64 for f64),
// the same order as the CUDA kernel. X is contiguous [batch, C, N].
#include "kernels/elementwise_ops.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class T>
void tri_mask_loop(const TriMaskParams& p) {
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  const T zero = element_from_double<T>(0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.rows; ++i)
      for (int64_t j = 0; j < p.cols; ++j) {
        const int64_t idx = (b * p.rows + i) * p.cols + j;
        const bool keep = p.upper ? (j - i >= p.diagonal) : (j - i <= p.diagonal);
        out[idx] = keep ? in[idx] : zero;
      }
}

template <class T>
void trisolve_loop(const TrisolveParams& p) {
  const T* Lb = static_cast<const T*>(p.L);
  const T* Bb = static_cast<const T*>(p.B);
  T* Xb = static_cast<T*>(p.X);
  for (int64_t b = 0; b < p.batch; ++b) {
    const T* L = Lb + b * p.l_batch;
    const T* B = Bb + b * p.b_batch;
    T* X = Xb + b * p.C * p.N;
    for (int64_t n = 0; n < p.N; ++n) {
      for (int64_t s = 0; s < p.C; ++s) {
        const int64_t i = p.transpose ? p.C - 1 - s : s;
        T acc = B[i * p.b_row + n * p.b_col];
        // L's row i (forward) or column i (transposed), walked with its own stride
        const int64_t first = p.transpose ? i + 1 : 0;
        const int64_t count = p.transpose ? p.C - 1 - i : i;
        const T* l = p.transpose ? L + first * p.l_row + i * p.l_col : L + i * p.l_row;
        const int64_t l_step = p.transpose ? p.l_row : p.l_col;
        const T* x = X + first * p.N + n;
        for (int64_t t = 0; t < count; ++t) acc -= l[t * l_step] * x[t * p.N];
        X[i * p.N + n] = acc;
      }
    }
  }
}

}  // namespace

void tri_mask(DType dtype, const TriMaskParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "tri_mask", [&](auto t) { tri_mask_loop<decltype(t)>(p); });
}

void trisolve(DType dtype, const TrisolveParams& p, uintptr_t) {
  if (dtype == DType::f32) return trisolve_loop<float>(p);
  if (dtype == DType::f64) return trisolve_loop<double>(p);
  unsupported_dtype("cpu", "trisolve", dtype);
}

}  // namespace lt::kern::cpu
