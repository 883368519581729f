// Runtime ops: the simple tensor operations the ops paths, layers and tests compose.
//
// Common rules (every op below unless it says otherwise)
// * Backends: CPU and CUDA. Inputs must be on the same device (error names the devices);
//   the op runs on that device's current stream (engine/device.h).
// * Dtypes: "float" = f32, f64, bf16, f16. bf16/f16 compute in f32 and round the result
//   (round-to-nearest-even); f64 computes and accumulates in f64; f32 accumulates in f32
//   except where noted. Mixed dtypes are an error (convert first with Tensor::to(dtype)).
// * Broadcasting (numpy rules): shapes are aligned from the right; two sizes are
//   compatible when equal or one of them is 1; missing leading dims count as 1. The
//   output has the broadcast shape. E.g. [B,T,H,D] + [H,D] -> [B,T,H,D];
//   [B,T,H,1] * [B,T,H,D] -> [B,T,H,D]; [2,3] + [4] -> error "add: cannot broadcast [2, 3]
//   with [4]".
// * Strides: inputs may be any strided view (transposed, narrowed, expanded); up to 8 dims.
// * Outputs are fresh contiguous tensors, except the `*_out` forms and copy_, which write
//   into a given tensor (any strided view of the right shape and dtype, no overlap with
//   inputs unless it is exactly the same view, i.e. in place).
// * Dims may be negative (-1 = last). Bad shapes/dims throw std::invalid_argument naming
//   the op and the shapes.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/tensor.h"
#include "kernels/table.h"

namespace lt::ops {

// ---- elementwise binary (float dtypes; broadcasting) ----------------------------------
// One function pair per row of LT_BINARY_OPS (kernels/op_lists.h): add, sub, mul, div.
//   Tensor add(a, b);                   a + b, fresh
//   void add_out(out, a, b);            out = a + b; out must have the broadcast shape and
//                                       a's dtype; out may be `a` itself (in place, e.g.
//                                       add_out(g, g, dg) accumulates a gradient)
#define LT_DECLARE_BINARY(name, Functor)         \
  Tensor name(const Tensor& a, const Tensor& b); \
  void name##_out(Tensor& out, const Tensor& a, const Tensor& b);
LT_BINARY_OPS(LT_DECLARE_BINARY)
#undef LT_DECLARE_BINARY
// a += b in place (b broadcasts to a's shape). Returns a.
Tensor& add_(Tensor& a, const Tensor& b);

// ---- scalar forms (float dtypes) -------------------------------------------------------
Tensor add_scalar(const Tensor& x, double s);   // x + s
Tensor mul_scalar(const Tensor& x, double s);   // x * s
Tensor rsub_scalar(const Tensor& x, double s);  // s - x
Tensor pow_scalar(const Tensor& x, double p);   // x^p (std::pow semantics)
Tensor clamp(const Tensor& x, double lo, double hi);

// ---- unary (float dtypes) --------------------------------------------------------------
// One function per row of LT_UNARY_OPS (kernels/op_lists.h; functors in
// kernels/elementwise_ops.h):
//   neg, exp, log, sqrt, square, abs, tanh   as named
//   sigmoid    1 / (1 + exp(-x)), computed without overflow
//   softplus   log(1 + exp(x)); x > 20 returns x (fla's threshold)
//   silu       x * sigmoid(x)
//   rsqrt      1 / sqrt(x)
//   relu       max(x, 0)
#define LT_DECLARE_UNARY(name, Functor) Tensor name(const Tensor& x);
LT_UNARY_OPS(LT_DECLARE_UNARY)
#undef LT_DECLARE_UNARY
// The same functions writing into an existing tensor of x's shape and dtype (in place
// allowed): unary_out(UnaryOp::exp, y, y). UnaryOp also has the scalar ops' rows, which
// unary_out runs with alpha = beta = 0; call them by their functions above instead.
using UnaryOp = kern::UnaryOp;
void unary_out(UnaryOp op, Tensor& out, const Tensor& x);

// where(cond, a, b): cond != 0 ? a : b, elementwise with broadcasting over all three.
// cond is any dtype, converted to a's dtype first (nonzero = true; a float cond too small
// for a bf16/f16 a counts as 0); a and b share a float dtype.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- reductions (float dtypes) ---------------------------------------------------------
// Along dim d; keepdim keeps it with size 1. Accumulation: f64 for f64 inputs, f32
// otherwise (bf16/f16 inputs give bf16/f16 outputs, accumulated in f32).
Tensor sum(const Tensor& x, int64_t d, bool keepdim = false);
Tensor max(const Tensor& x, int64_t d, bool keepdim = false);  // NaN propagates
Tensor mean(const Tensor& x, int64_t d, bool keepdim = false);
Tensor sum_all(const Tensor& x);  // shape {} (rank 0), x's dtype
// Reduces a broadcast result back to `shape` (summing over the broadcast dims): the
// backward of broadcasting. `shape` must broadcast to x.shape().
Tensor sum_to(const Tensor& x, const Shape& shape);
// Column sums added into gradients: for each set s, acc[s] += sum over rows of x[s] * y[s]
// (y empty: of x[s] alone). x[s] (and y[s]) [..., C] of one float dtype, one shape for all
// sets; acc[s] [C] contiguous, f64 for f64 x, f32 otherwise. The product is formed and summed
// in acc's dtype (bf16 inputs are never rounded in between); x and y are read once. At most
// kern::kColumnSumMaxSets sets. Bias gradients, RWKV6's mu and x_bias gradients.
void column_sums_into(const std::vector<Tensor*>& acc, const std::vector<Tensor>& x, const std::vector<Tensor>& y = {});

// ---- scan (float dtypes) --------------------------------------------------------------
// Inclusive cumulative sum along dim d: y_i = sum_{j<=i} x_j; reverse: y_i = sum_{j>=i} x_j.
// Sequential per line; accumulates in f64 for f64, f32 otherwise. A chunk-local cumsum over
// T in chunks of C is cumsum(x.view({B, NT, C, ...}), 2).
Tensor cumsum(const Tensor& x, int64_t d, bool reverse = false);

// ---- matmul ----------------------------------------------------------------------------
// C[..., M, N] = op(A) op(B), op(A) = A or A^T of the last two dims.
//   a: [..., M, K] ([..., K, M] with trans_a);  b: [..., K, N] ([..., N, K] with trans_b)
// Leading (batch) dims: equal in a and b, or one operand is 2-D and is reused for every
// batch (e.g. x[B,T,D] @ W[D,E]). No other broadcasting.
// Dtypes: f32 (CUDA: cublasSgemmStridedBatched, fp32 accumulation, no TF32 unless
// set_matmul_tf32(true)), f64 (CUDA: cublasDgemmStridedBatched), bf16 and f16 (CUDA:
// cublasGemmStridedBatchedEx, fp32 compute; output in the input dtype, or in f32 where an
// f32 output is asked for: the mixed-precision GEMM, no rounding of the fp32 sum to bf16).
// The CPU loops accumulate in f64 for every dtype, then round once to the output dtype.
// Strides: operands whose last two dims are row-major or column-major with a uniform
// batch stride are used in place; others are copied to contiguous first (transparent).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// The same with the output dtype chosen: a's dtype, or f32 for bf16 / f16 operands (fp32
// logits straight from bf16 activations: matmul(x, W, false, true, DType::f32)).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out_dtype);
// out = alpha * op(A) op(B) + beta * out. out: [..., M, N] with unit-stride rows, any row
// stride >= N and one uniform batch stride, its matrices not overlapping (contiguous, or
// e.g. the column blocks [d, k, R] -> [k, d, R] of a [d, kR] matrix), in a's dtype or, for
// bf16 / f16 operands, f32 (mixed precision: out read and written in f32, fp32
// accumulation). beta = 1 accumulates (dW += x^T dy, an f32 dW from bf16 x and dy).
// With beta == 0 out's old contents are ignored.
void matmul_out(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
                double alpha = 1.0, double beta = 0.0);
// TF32 for f32 GEMMs, process-wide (default off; read at each matmul call). On: f32
// operands are rounded to TF32 (10-bit mantissa) and multiplied with fp32 accumulation
// (CUDA: CUBLAS_COMPUTE_32F_FAST_TF32 tensor cores; CPU: emulated by rounding each operand
// element to nearest TF32, ties away from zero, then the usual f64 accumulation). CPU and
// CUDA then agree to TF32's precision (~1e-3 relative), not to fp32's. Other dtypes ignore it.
void set_matmul_tf32(bool enabled);
bool matmul_tf32();

// ---- triangular (float dtypes) ---------------------------------------------------------
// Over the last two dims [..., R, C]: tril keeps x[..., i, j] iff j - i <= diagonal,
// triu keeps it iff j - i >= diagonal; other elements become 0.
// (M_<= = tril(., 0), strict M_< = tril(., -1).)
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// Identity matrix [n, n].
Tensor eye(int64_t n, DType dtype = DType::f32, Device device = Device::cpu());

// X = L^{-1} B (transpose = false) or X = L^{-T} B (transpose = true), L unit lower
// triangular: only the strict lower triangle of L is read (the diagonal is taken as 1,
// the upper triangle ignored). L: [..., C, C], B: [..., C, N] with the same leading dims.
// Forward (or backward for transpose) substitution per column, accumulating in f64 for f64
// and f32 otherwise. f32 and f64 (bf16: convert first). Output contiguous [..., C, N].
// The UT transform T = (I + A)^{-1} for strictly lower A is solve_unit_lower(A, eye(C)).
Tensor solve_unit_lower(const Tensor& L, const Tensor& B, bool transpose = false);

// ---- normalisation (float dtypes) ------------------------------------------------------
// L2 norm over the last dim: rstd = 1 / sqrt(sum_d x_d^2 + eps), y = x * rstd.
// Returns {y [..., D] in x's dtype, rstd [...] (x's shape without the last dim; f32 for
// bf16/f16 inputs, else x's dtype)}. Composed from square/sum/rsqrt/mul (4 launches);
// bf16/f16 inputs are widened to f32 first. fla's KDA uses eps = 1e-6.
std::pair<Tensor, Tensor> l2norm(const Tensor& x, double eps);
// dx = rstd * (dy - (dy . y) y), with y and rstd from l2norm; dy and y share a dtype
// (bf16/f16 computed in f32); returns dy's dtype. Composed (4 launches).
Tensor l2norm_backward(const Tensor& dy, const Tensor& y, const Tensor& rstd);

// ---- shape ops (any dtype) -------------------------------------------------------------
// Pads dim d with `before` and `after` elements of `value` (both >= 0). The mixers pad T
// up to a multiple of the chunk: pad(x, 1, 0, NT*C - T). Undo with Tensor::narrow.
Tensor pad(const Tensor& x, int64_t d, int64_t before, int64_t after, double value = 0.0);
// Concatenates along dim d; all other dims equal; same dtype and device.
Tensor cat(const std::vector<Tensor>& xs, int64_t d);
// Rows of x [N, ...] picked by index [M] i32: out [M, ...], out[m] = x[index[m]], or `fill`
// where index[m] is -1 (or outside [0, N)). Float dtypes; one launch (kernels/gather.h).
// Packed documents use it to move a batch into the mixers' layout and back
// (engine/mixers/segments.h).
Tensor gather_rows(const Tensor& x, const Tensor& index, double fill = 0.0);
// Fresh contiguous copy in `dtype` (same as x.to(dtype) but always copies). f32 -> bf16/f16
// round to nearest even (NaN stays NaN, overflow -> inf); f64 -> bf16/f16 rounds via f32
// (as PyTorch does); float -> int truncates toward zero; int -> float rounds to nearest.
Tensor convert(const Tensor& x, DType dtype);

// ---- random (float dtypes) -------------------------------------------------------------
// Counter-based Philox4x32-10: element i (row-major logical index) of the result is a
// pure function of (seed, offset, i); CPU and CUDA give bit-identical values. Advance
// `offset` by at least numel between calls to get fresh numbers (any distinct offsets
// with non-overlapping [offset, offset + numel) ranges give independent streams).
// uniform: [lo, hi) before rounding to the dtype (rounding may give hi). normal: Box-Muller.
void uniform_(Tensor& x, uint64_t seed, uint64_t offset, double lo = 0.0, double hi = 1.0);
void normal_(Tensor& x, uint64_t seed, uint64_t offset, double mean = 0.0, double std = 1.0);
Tensor rand(const Shape& shape, uint64_t seed, uint64_t offset = 0, DType dtype = DType::f32,
            Device device = Device::cpu());
Tensor randn(const Shape& shape, uint64_t seed, uint64_t offset = 0, DType dtype = DType::f32,
             Device device = Device::cpu());

// ---- comparisons for tests -------------------------------------------------------------
// max |a - b| and max |a - b| / max(max |b|, tiny) over all elements (host, f64).
double max_abs_diff(const Tensor& a, const Tensor& b);
double max_rel_diff(const Tensor& a, const Tensor& b);

}  // namespace lt::ops
