// The op table: one KernelTable per backend (cpu_kernels(), cuda_kernels()), one entry per
// op family. The engine validates shapes, builds the params struct and calls
// kernels_for(device).<family>(...) (engine/detail.h); each family's file pair
// (kernels/cpu/<family>.cpp, kernels/cuda/<family>.cu) implements the entry, picking the
// (op, dtype) instantiation from a constexpr table inside the file.
// Adding an op family = a row in LT_KERNEL_FAMILIES below (its kernel signature beside it)
// + the two family files; the table struct, both backends' declarations and both tables
// are generated from that one list. Adding an elementwise op = a row in LT_UNARY_OPS /
// LT_BINARY_OPS (kernels/op_lists.h) naming its functor (kernels/elementwise_ops.h): the enums here, the
// functor dispatch, the engine's names and its public ops (engine/ops.h) come from it.
// Params structs are plain data; pointers are element 0 of each operand, strides and
// sizes in elements (int64). `stream` is a cudaStream_t as an integer (ignored on the CPU).
// Unsupported dtypes throw std::invalid_argument naming backend, family and dtype.
#pragma once
#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/dtype.h"
#include "kernels/iter.h"
#include "kernels/op_lists.h"

namespace lt::kern {

// ---- elementwise (kernels/*/elementwise.*): float dtypes ------------------------------
// The rows come from the op lists in kernels/op_lists.h. Unary ops with scalar
// arguments (alpha, beta): add_scalar x+alpha, mul_scalar x*alpha, rsub_scalar alpha-x,
// pow_scalar x^alpha, clamp min(max(x, alpha), beta).
#define LT_OP_ENUM_ROW(name, Functor) name,
enum class BinaryOp : uint8_t { LT_BINARY_OPS(LT_OP_ENUM_ROW) count };
enum class UnaryOp : uint8_t { LT_UNARY_OPS(LT_OP_ENUM_ROW) LT_SCALAR_UNARY_OPS(LT_OP_ENUM_ROW) count };
#undef LT_OP_ENUM_ROW

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
// ignores C's old contents (NaN-safe). The kernel's DType is the operands' (A and B);
// out_dtype is C's: the operands' dtype, or f32 for bf16 / f16 operands (mixed precision:
// fp32 accumulation, C read and written in f32). tf32 (f32 operands only): operands rounded
// to TF32 (10-bit mantissa) before the fp32-accumulated products.
struct MatmulParams {
  DType out_dtype = DType::f32;
  bool tf32 = false;
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

// Kernel signatures, one per family (function types: `BinaryKernel binary;` declares the
// function `void binary(BinaryOp, DType, const IterParams&, uintptr_t)`).
using BinaryKernel = void(BinaryOp, DType, const IterParams&, uintptr_t stream);
// it: 0 = out, 1 = x.
using UnaryKernel = void(UnaryOp, DType, const IterParams&, double alpha, double beta, uintptr_t stream);
// it: 0 = out, 1 = cond, 2 = a, 3 = b; all of `dtype`; out = cond != 0 ? a : b.
using WhereKernel = void(DType, const IterParams&, uintptr_t stream);
// it: 0 = out; value converted to dtype with the element conversion rules (kernels/half.h).
using FillKernel = void(DType, const IterParams&, double value, uintptr_t stream);
// it: 0 = out (dtype out), 1 = in (dtype in); any dtypes; a strided copy when equal.
using ConvertKernel = void(DType out, DType in, const IterParams&, uintptr_t stream);
using ReduceKernel = void(ReduceOp, DType, const ReduceParams&, uintptr_t stream);
using ScanKernel = void(DType, const ScanParams&, uintptr_t stream);
using MatmulKernel = void(DType, const MatmulParams&, uintptr_t stream);
// DType: the arenas' (params, grads, moments; f32 or f64). kernels/adamw.h.
using AdamWKernel = void(AdamWOp, DType, const AdamWParams&, uintptr_t stream);
using TriMaskKernel = void(DType, const TriMaskParams&, uintptr_t stream);
using TrisolveKernel = void(DType, const TrisolveParams&, uintptr_t stream);
using RandomKernel = void(RandomKind, DType, const RandomParams&, uintptr_t stream);
// Layer families: params in their own headers (kernels/embedding.h, kernels/activation.h,
// kernels/cross_entropy.h), declared here so the table needs no more than their names.
enum class EmbeddingPass : uint8_t;
struct EmbeddingParams;
using EmbeddingKernel = void(EmbeddingPass, const EmbeddingParams&, uintptr_t stream);
enum class ActivationOp : uint8_t;
struct ActivationParams;
using ActivationKernel = void(ActivationOp, DType, const ActivationParams&, uintptr_t stream);
struct CrossEntropyParams;
// dtype: the logits' dtype.
using CrossEntropyKernel = void(DType, const CrossEntropyParams&, uintptr_t stream);
// Row norms (kernels/norm.h): dtype is x's; weights and statistics in its compute type.
enum class NormPass : uint8_t;
struct NormParams;
using NormKernel = void(NormPass, DType, const NormParams&, uintptr_t stream);
// Causal depthwise short conv (kernels/conv.h): dtype is x's; w in its compute type.
enum class ConvPass : uint8_t;
struct ConvParams;
using ConvKernel = void(ConvPass, DType, const ConvParams&, uintptr_t stream);
// RWKV6's token-shift interpolations (kernels/lerp.h): dtype is the tensors'.
enum class LerpOp : uint8_t;
struct LerpParams;
using LerpKernel = void(LerpOp, DType, const LerpParams&, uintptr_t stream);
// Row gather with a fill (kernels/gather.h): dtype is x's and out's.
struct GatherRowsParams;
using GatherRowsKernel = void(DType, const GatherRowsParams&, uintptr_t stream);
// Column sums added into gradients (kernels/column_sums.h): dtype is x's.
struct ColumnSumParams;
using ColumnSumKernel = void(DType, const ColumnSumParams&, uintptr_t stream);

// The op families: (entry name, kernel signature). One row per family; everything below
// is generated from this list.
#define LT_KERNEL_FAMILIES(X)          \
  X(binary, BinaryKernel)              \
  X(unary, UnaryKernel)                \
  X(where, WhereKernel)                \
  X(fill, FillKernel)                  \
  X(convert, ConvertKernel)            \
  X(reduce, ReduceKernel)              \
  X(cumsum, ScanKernel)                \
  X(matmul, MatmulKernel)              \
  X(adamw, AdamWKernel)                \
  X(tri_mask, TriMaskKernel)           \
  X(trisolve, TrisolveKernel)          \
  X(random, RandomKernel)              \
  X(embedding, EmbeddingKernel)        \
  X(activation, ActivationKernel)      \
  X(cross_entropy, CrossEntropyKernel) \
  X(norm, NormKernel)                  \
  X(conv, ConvKernel)                  \
  X(lerp, LerpKernel)                  \
  X(gather_rows, GatherRowsKernel)     \
  X(column_sums, ColumnSumKernel)

#define LT_KERNEL_TABLE_FIELD(name, Kernel) Kernel* name;
#define LT_KERNEL_DECLARE(name, Kernel) Kernel name;
struct KernelTable {
  const char* backend;  // "cpu", "cuda"
  LT_KERNEL_FAMILIES(LT_KERNEL_TABLE_FIELD)
};

// Per-family entry points (defined in the family files), assembled by the tables.
namespace cpu {
LT_KERNEL_FAMILIES(LT_KERNEL_DECLARE)
}  // namespace cpu
const KernelTable& cpu_kernels();

#if LINTRAIN_WITH_CUDA
namespace cuda {
LT_KERNEL_FAMILIES(LT_KERNEL_DECLARE)
}  // namespace cuda
const KernelTable& cuda_kernels();
#endif
#undef LT_KERNEL_TABLE_FIELD
#undef LT_KERNEL_DECLARE

// Throws std::invalid_argument("<backend> <family>: dtype <d> is not supported").
[[noreturn]] void unsupported_dtype(const char* backend, const char* family, DType dtype);

}  // namespace lt::kern
