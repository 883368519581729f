// The op table: one KernelTable per backend (cpu_kernels(), cuda_kernels()), one entry per
// op family. The engine validates shapes, builds the params struct and calls
// kernels_for(device).<family>(...) (engine/dispatch.h); each family's file pair
// (kernels/cpu/<family>.cpp, kernels/cuda/<family>.cu) implements the entry, picking the
// (op, dtype) instantiation from a constexpr table inside the file.
// Adding an elementwise op = a functor in kernels/elementwise_ops.h + an enum row here.
// Params structs are plain data; pointers are element 0 of each operand, strides and
// sizes in elements (int64). `stream` is a cudaStream_t as an integer (ignored on the CPU).
// Unsupported dtypes throw std::invalid_argument naming backend, family and dtype.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/iter.h"

namespace lt::kern {

// ---- elementwise (kernels/*/elementwise.*): float dtypes ------------------------------
enum class BinaryOp : uint8_t { add, sub, mul, div, count };
// The first 12 rows match lt::ops::UnaryOp. alpha/beta are the scalar arguments:
// add_scalar x+alpha, mul_scalar x*alpha, rsub_scalar alpha-x, pow_scalar x^alpha,
// clamp min(max(x, alpha), beta).
enum class UnaryOp : uint8_t {
  neg, exp, log, sigmoid, softplus, silu, sqrt, rsqrt, square, abs, relu, tanh,
  add_scalar, mul_scalar, rsub_scalar, pow_scalar, clamp, count
};

// ---- reduce (kernels/*/reduce.*): float dtypes -----------------------------------------
enum class ReduceOp : uint8_t { sum, max, count };
// it: operand 0 = out, 1 = in, iterating over the kept dims; each output element reduces
// `len` input elements spaced by `in_stride` starting at its operand-1 offset.
struct ReduceParams {
  IterParams it;
  int64_t len = 0;
  int64_t in_stride = 0;
};

// ---- scan (kernels/*/scan.*): inclusive cumsum, float dtypes --------------------------
// it: operand 0 = out, 1 = in, iterating over lines (the shape without the scanned dim).
struct ScanParams {
  IterParams it;
  int64_t len = 0;
  int64_t out_stride = 0;
  int64_t in_stride = 0;
  bool reverse = false;
};

// ---- matmul (kernels/*/matmul.*): f32, f64, bf16, f16 ---------------------------------
// Row-major: C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b], C[b] is M x N with row
// stride ldc. op(A)[m, k] = trans_a ? a[k * lda + m] : a[m * lda + k] (same for B with
// K x N). Batch b starts at a + b * stride_a (stride 0 reuses one matrix). beta == 0
// ignores C's old contents (NaN-safe).
struct MatmulParams {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  bool trans_a = false;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  bool trans_b = false;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  double alpha = 1.0, beta = 0.0;
};

// ---- triangular (kernels/*/trisolve.*): float dtypes ---------------------------------
// Mask over contiguous [batch, rows, cols]: lower keeps j - i <= diagonal, upper keeps
// j - i >= diagonal; others become 0. in and out may alias.
struct TriMaskParams {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t batch = 0, rows = 0, cols = 0;
  int64_t diagonal = 0;
  bool upper = false;
};
// Unit-lower solve per batch: L X = B (transpose: L^T X = B), L C x C (only the strict lower
// triangle read), B and X C x N. X is contiguous [batch, C, N]; L and B strided.
// f32, f64.
struct TrisolveParams {
  int64_t batch = 0, C = 0, N = 0;
  const void* L = nullptr;
  int64_t l_batch = 0, l_row = 0, l_col = 0;
  const void* B = nullptr;
  int64_t b_batch = 0, b_row = 0, b_col = 0;
  void* X = nullptr;
  bool transpose = false;
};

// ---- random (kernels/*/random.*, kernels/philox.h): float dtypes ----------------------
enum class RandomKind : uint8_t { uniform, normal };
// it: operand 0 = out. Element with linear index i gets
// uniform: a + (b - a) * U(seed, offset + i);  normal: a + b * N(seed, offset + i).
struct RandomParams {
  IterParams it;
  uint64_t seed = 0, offset = 0;
  double a = 0.0, b = 1.0;
};

using BinaryFn = void (*)(BinaryOp, DType, const IterParams&, uintptr_t stream);
// it: 0 = out, 1 = x.
using UnaryFn = void (*)(UnaryOp, DType, const IterParams&, double alpha, double beta, uintptr_t stream);
// it: 0 = out, 1 = cond, 2 = a, 3 = b; all of `dtype`; out = cond != 0 ? a : b.
using WhereFn = void (*)(DType, const IterParams&, uintptr_t stream);
// it: 0 = out; value converted to dtype with the element conversion rules (kernels/half.h).
using FillFn = void (*)(DType, const IterParams&, double value, uintptr_t stream);
// it: 0 = out (dtype out), 1 = in (dtype in); any dtypes; a strided copy when equal.
using ConvertFn = void (*)(DType out, DType in, const IterParams&, uintptr_t stream);
using ReduceFn = void (*)(ReduceOp, DType, const ReduceParams&, uintptr_t stream);
using ScanFn = void (*)(DType, const ScanParams&, uintptr_t stream);
using MatmulFn = void (*)(DType, const MatmulParams&, uintptr_t stream);
using TriMaskFn = void (*)(DType, const TriMaskParams&, uintptr_t stream);
using TrisolveFn = void (*)(DType, const TrisolveParams&, uintptr_t stream);
using RandomFn = void (*)(RandomKind, DType, const RandomParams&, uintptr_t stream);

struct KernelTable {
  const char* backend;  // "cpu", "cuda"
  BinaryFn binary;
  UnaryFn unary;
  WhereFn where;
  FillFn fill;
  ConvertFn convert;
  ReduceFn reduce;
  ScanFn cumsum;
  MatmulFn matmul;
  TriMaskFn tri_mask;
  TrisolveFn trisolve;
  RandomFn random;
};

// Per-family entry points (defined in the family files), assembled by the tables.
namespace cpu {
void binary(BinaryOp, DType, const IterParams&, uintptr_t);
void unary(UnaryOp, DType, const IterParams&, double, double, uintptr_t);
void where(DType, const IterParams&, uintptr_t);
void fill(DType, const IterParams&, double, uintptr_t);
void convert(DType, DType, const IterParams&, uintptr_t);
void reduce(ReduceOp, DType, const ReduceParams&, uintptr_t);
void cumsum(DType, const ScanParams&, uintptr_t);
void matmul(DType, const MatmulParams&, uintptr_t);
void tri_mask(DType, const TriMaskParams&, uintptr_t);
void trisolve(DType, const TrisolveParams&, uintptr_t);
void random(RandomKind, DType, const RandomParams&, uintptr_t);
}  // namespace cpu
const KernelTable& cpu_kernels();

#if LINTRAIN_WITH_CUDA
namespace cuda {
void binary(BinaryOp, DType, const IterParams&, uintptr_t);
void unary(UnaryOp, DType, const IterParams&, double, double, uintptr_t);
void where(DType, const IterParams&, uintptr_t);
void fill(DType, const IterParams&, double, uintptr_t);
void convert(DType, DType, const IterParams&, uintptr_t);
void reduce(ReduceOp, DType, const ReduceParams&, uintptr_t);
void cumsum(DType, const ScanParams&, uintptr_t);
void matmul(DType, const MatmulParams&, uintptr_t);
void tri_mask(DType, const TriMaskParams&, uintptr_t);
void trisolve(DType, const TrisolveParams&, uintptr_t);
void random(RandomKind, DType, const RandomParams&, uintptr_t);
}  // namespace cuda
const KernelTable& cuda_kernels();
#endif

// Throws std::invalid_argument("<backend> <family>: dtype <d> is not supported").
[[noreturn]] void unsupported_dtype(const char* backend, const char* family, DType dtype);

}  // namespace lt::kern
