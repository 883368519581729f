// Batched matrix multiply, CPU backend (twin: kernels/cuda/matmul.cu, cuBLAS).
//   C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b]      (row-major, see MatmulParams)
//   A: M x K after op, B: K x N after op, C: M x N.
// Every dtype accumulates in f64 and rounds once on store, so the CPU result is a tight
// reference for the CUDA one. Loop order: one row of op(A) is widened into a buffer; with
// B not transposed the row of C accumulates as acc[n] += a[k] * B[k, n] (unit stride in n),
// with B transposed each acc[n] is a dot product along B's contiguous rows.
#include <vector>

#include "kernels/elementwise_ops.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class T>
void matmul_loop(const MatmulParams& p) {
  const T* A = static_cast<const T*>(p.a);
  const T* B = static_cast<const T*>(p.b);
  T* Cm = static_cast<T*>(p.c);
  std::vector<double> a_row(static_cast<size_t>(p.K));
  std::vector<double> acc(static_cast<size_t>(p.N));
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const T* a = A + bi * p.stride_a;
    const T* b = B + bi * p.stride_b;
    T* c = Cm + bi * p.stride_c;
    for (int64_t m = 0; m < p.M; ++m) {
      for (int64_t k = 0; k < p.K; ++k)
        a_row[k] = element_to_double(p.trans_a ? a[k * p.lda + m] : a[m * p.lda + k]);
      if (!p.trans_b) {
        for (int64_t n = 0; n < p.N; ++n) acc[n] = 0.0;
        for (int64_t k = 0; k < p.K; ++k) {
          const double av = a_row[k];
          const T* brow = b + k * p.ldb;
          for (int64_t n = 0; n < p.N; ++n) acc[n] += av * element_to_double(brow[n]);
        }
      } else {
        for (int64_t n = 0; n < p.N; ++n) {
          const T* bcol = b + n * p.ldb;
          double s = 0.0;
          for (int64_t k = 0; k < p.K; ++k) s += a_row[k] * element_to_double(bcol[k]);
          acc[n] = s;
        }
      }
      T* crow = c + m * p.ldc;
      for (int64_t n = 0; n < p.N; ++n) {
        double v = p.alpha * acc[n];
        if (p.beta != 0.0) v += p.beta * element_to_double(crow[n]);
        crow[n] = element_from_double<T>(v);
      }
    }
  }
}

}  // namespace

void matmul(DType dtype, const MatmulParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "matmul", [&](auto t) { matmul_loop<decltype(t)>(p); });
}

}  // namespace lt::kern::cpu
