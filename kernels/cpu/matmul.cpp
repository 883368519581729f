// Batched matrix multiply, CPU backend (twin: kernels/cuda/matmul.cu, cuBLAS).
//   C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b]      (row-major, see MatmulParams)
//   A: M x K after op, B: K x N after op, C: M x N.
// Every dtype accumulates in f64 and rounds once on store, so the CPU result is a tight
// reference for the CUDA one. C is in the operands' dtype, or f32 for bf16 / f16 operands
// (the mixed-precision form: the same f64 accumulation, rounded to f32). With tf32 (f32
// operands) every operand element is first rounded to TF32 (1 sign, 8 exponent, 10 mantissa
// bits; round to nearest, ties away from zero, as PTX cvt.rna.tf32.f32), emulating the
// tensor cores' input precision; products and sums stay in f64. The tensor cores' own
// conversion may differ in the last TF32 bit, so the CUDA TF32 result agrees with this one
// to TF32's precision, not bit for bit.
// Loop order: one row of op(A) is widened into a buffer; with B not transposed the row of C
// accumulates as acc[n] += a[k] * B[k, n] (unit stride in n), with B transposed each acc[n]
// is a dot product along B's contiguous rows.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/elementwise_ops.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

// f32 rounded to TF32: keep 10 of the 23 mantissa bits, adding half of the dropped
// range first (2^12) so the carry rounds to nearest with ties away from zero. Inf and NaN
// pass through; a finite value that rounds past the largest TF32 becomes inf.
float round_to_tf32(float f) {
  if (!std::isfinite(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&f, &u, 4);
  return f;
}

template <class T, bool kTf32>
double load(T v) {
  if constexpr (kTf32) return static_cast<double>(round_to_tf32(v));
  else return element_to_double(v);
}

// T: operand element type; U: output element type.
template <class T, class U, bool kTf32>
void matmul_loop(const MatmulParams& p) {
  const T* A = static_cast<const T*>(p.a);
  const T* B = static_cast<const T*>(p.b);
  U* Cm = static_cast<U*>(p.c);
  std::vector<double> a_row(static_cast<size_t>(p.K));
  std::vector<double> acc(static_cast<size_t>(p.N));
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const T* a = A + bi * p.stride_a;
    const T* b = B + bi * p.stride_b;
    U* c = Cm + bi * p.stride_c;
    for (int64_t m = 0; m < p.M; ++m) {
      for (int64_t k = 0; k < p.K; ++k) a_row[k] = load<T, kTf32>(p.trans_a ? a[k * p.lda + m] : a[m * p.lda + k]);
      if (!p.trans_b) {
        for (int64_t n = 0; n < p.N; ++n) acc[n] = 0.0;
        for (int64_t k = 0; k < p.K; ++k) {
          const double av = a_row[k];
          const T* brow = b + k * p.ldb;
          for (int64_t n = 0; n < p.N; ++n) acc[n] += av * load<T, kTf32>(brow[n]);
        }
      } else {
        for (int64_t n = 0; n < p.N; ++n) {
          const T* bcol = b + n * p.ldb;
          double s = 0.0;
          for (int64_t k = 0; k < p.K; ++k) s += a_row[k] * load<T, kTf32>(bcol[k]);
          acc[n] = s;
        }
      }
      U* crow = c + m * p.ldc;
      for (int64_t n = 0; n < p.N; ++n) {
        double v = p.alpha * acc[n];
        if (p.beta != 0.0) v += p.beta * element_to_double(crow[n]);
        crow[n] = element_from_double<U>(v);
      }
    }
  }
}

}  // namespace

void matmul(DType dtype, const MatmulParams& p, uintptr_t) {
  if (p.out_dtype == dtype) {
    if (p.tf32 && dtype == DType::f32) matmul_loop<float, float, true>(p);
    else visit_float_dtype(dtype, "cpu", "matmul", [&](auto t) { matmul_loop<decltype(t), decltype(t), false>(p); });
    return;
  }
  if (p.out_dtype != DType::f32 || (dtype != DType::bf16 && dtype != DType::f16))
    throw std::invalid_argument(std::string("cpu matmul: ") + dtype_name(dtype) + " operands with a " +
                                dtype_name(p.out_dtype) + " output are not supported (only bf16 / f16 -> f32)");
  if (dtype == DType::bf16) matmul_loop<bfloat16, float, false>(p);
  else matmul_loop<float16, float, false>(p);
}

}  // namespace lt::kern::cpu
