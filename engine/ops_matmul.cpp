// matmul / matmul_out (engine/ops.h). Operand normalisation: a matrix operand is used in
// place when its last two dims are row-major (unit column stride) or column-major (unit
// row stride; then it is the transpose of a row-major matrix and the trans flag flips),
// and its batch dims collapse into one uniform stride (stride 0 for a shared 2-D operand
// or an expanded batch). Anything else is copied to a contiguous tensor first.
#include <atomic>
#include <stdexcept>

#include "engine/detail.h"
#include "engine/ops.h"

namespace lt::ops {
namespace {

std::atomic<bool> g_matmul_tf32{false};

struct MatrixOperand {
  Tensor t;        // keeps a copy alive when one was made
  int64_t ld = 1;  // row stride of the row-major matrix as stored
  int64_t batch_stride = 0;
  bool flipped = false;  // stored as the transpose (column-major)
};

// Batch stride when the leading dims collapse into one, else -1.
int64_t collapsed_batch_stride(const Tensor& t) {
  int64_t stride = 0;
  bool have = false;
  int64_t inner_stride = 0, inner_size = 1;
  for (int64_t i = t.dim() - 3; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (!have) {
      stride = t.stride(i);
      have = true;
    } else if (t.stride(i) != inner_stride * inner_size) {
      return -1;
    }
    inner_stride = t.stride(i);
    inner_size = t.size(i);
  }
  return stride;
}

bool try_layout(const Tensor& t, MatrixOperand& m) {
  const int64_t R = t.size(-2), Cc = t.size(-1);
  const int64_t sr = t.stride(-2), sc = t.stride(-1);
  const int64_t bs = collapsed_batch_stride(t);
  if (bs < 0) return false;
  m.batch_stride = bs;
  if ((sc == 1 || Cc == 1) && (R == 1 || sr >= Cc)) {
    m.ld = R == 1 ? std::max<int64_t>(Cc, 1) : sr;
    m.flipped = false;
    return m.ld >= 1;
  }
  if ((sr == 1 || R == 1) && (Cc == 1 || sc >= R)) {
    m.ld = Cc == 1 ? std::max<int64_t>(R, 1) : sc;
    m.flipped = true;
    return m.ld >= 1;
  }
  return false;
}

MatrixOperand normalise(const Tensor& t) {
  MatrixOperand m;
  m.t = t;
  if (!try_layout(t, m)) {
    m.t = t.contiguous();
    if (!try_layout(m.t, m)) throw std::logic_error("matmul: contiguous operand not usable");
  }
  return m;
}

struct Plan {
  Shape out_shape;
  int64_t batch = 1, M = 0, N = 0, K = 0;
};

Plan plan_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, const char* name) {
  detail::check_same_device(a, b, name);
  detail::check_float(a, name);
  detail::check_same_dtype(a, b, name);
  auto shapes = [&] {
    return shape_str(a.shape()) + (ta ? "^T" : "") + " x " + shape_str(b.shape()) + (tb ? "^T" : "");
  };
  if (a.dim() < 2 || b.dim() < 2)
    throw std::invalid_argument(std::string(name) + ": operands need >= 2 dims, got " + shapes());
  Plan p;
  p.M = ta ? a.size(-1) : a.size(-2);
  const int64_t Ka = ta ? a.size(-2) : a.size(-1);
  const int64_t Kb = tb ? b.size(-1) : b.size(-2);
  p.N = tb ? b.size(-2) : b.size(-1);
  if (Ka != Kb)
    throw std::invalid_argument(std::string(name) + ": inner dims differ (" + std::to_string(Ka) + " vs " +
                                std::to_string(Kb) + ") in " + shapes());
  p.K = Ka;
  const Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch;
  if (ba == bb || bb.empty()) batch = ba;
  else if (ba.empty()) batch = bb;
  else throw std::invalid_argument(std::string(name) + ": batch dims must match (or one operand be 2-D): " + shapes());
  p.batch = shape_numel(batch);
  p.out_shape = batch;
  p.out_shape.push_back(p.M);
  p.out_shape.push_back(p.N);
  return p;
}

void run_matmul(const Plan& pl, Tensor& out, const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha,
                double beta) {
  if (out.numel() == 0) return;
  if (pl.K == 0) {  // empty sum: out = beta * out
    if (beta == 0.0) out.fill_(0.0);
    else out.copy_(mul_scalar(out, beta));
    return;
  }
  const MatrixOperand ma = normalise(a), mb = normalise(b);
  kern::MatmulParams p;
  p.batch = pl.batch;
  p.M = pl.M;
  p.N = pl.N;
  p.K = pl.K;
  p.a = ma.t.data_ptr();
  p.lda = ma.ld;
  p.stride_a = a.dim() == 2 ? 0 : ma.batch_stride;
  p.trans_a = ta != ma.flipped;
  p.b = mb.t.data_ptr();
  p.ldb = mb.ld;
  p.stride_b = b.dim() == 2 ? 0 : mb.batch_stride;
  p.trans_b = tb != mb.flipped;
  p.c = out.data_ptr();
  p.ldc = out.stride(-2);
  p.stride_c = out.dim() == 2 ? 0 : collapsed_batch_stride(out);
  p.alpha = alpha;
  p.beta = beta;
  p.out_dtype = out.dtype();
  p.tf32 = a.dtype() == DType::f32 && matmul_tf32();
  detail::Exec ex(out.device());
  ex.k.matmul(a.dtype(), p, ex.stream);
}

// out's dtype: the operands', or f32 for bf16 / f16 operands.
void check_out_dtype(DType out, DType operands, const char* name) {
  const bool half = operands == DType::bf16 || operands == DType::f16;
  if (out != operands && !(half && out == DType::f32))
    throw std::invalid_argument(std::string(name) + ": output dtype " + dtype_name(out) + " for " +
                                dtype_name(operands) + " operands (must be " + dtype_name(operands) +
                                (half ? " or f32)" : ")"));
}

}  // namespace

void set_matmul_tf32(bool enabled) { g_matmul_tf32.store(enabled, std::memory_order_relaxed); }
bool matmul_tf32() { return g_matmul_tf32.load(std::memory_order_relaxed); }

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const Plan pl = plan_matmul(a, b, trans_a, trans_b, "matmul");
  Tensor out = Tensor::empty(pl.out_shape, a.dtype(), a.device());
  run_matmul(pl, out, a, b, trans_a, trans_b, 1.0, 0.0);
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out_dtype) {
  const Plan pl = plan_matmul(a, b, trans_a, trans_b, "matmul");
  check_out_dtype(out_dtype, a.dtype(), "matmul");
  Tensor out = Tensor::empty(pl.out_shape, out_dtype, a.device());
  run_matmul(pl, out, a, b, trans_a, trans_b, 1.0, 0.0);
  return out;
}

void matmul_out(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha, double beta) {
  const Plan pl = plan_matmul(a, b, trans_a, trans_b, "matmul_out");
  detail::check_same_device(out, a, "matmul_out");
  check_out_dtype(out.dtype(), a.dtype(), "matmul_out");
  // out: rows with unit column stride, a row stride >= N, batch dims of one uniform stride
  // (e.g. column blocks of a wider matrix), not overlapping.
  const bool rows_ok = out.dim() >= 2 && (out.stride(-1) == 1 || out.size(-1) == 1) &&
                       (out.size(-2) == 1 || out.stride(-2) >= out.size(-1));
  const int64_t bs = out.dim() >= 2 ? collapsed_batch_stride(out) : -1;
  const bool batch_ok = bs >= 0 && (pl.batch == 1 || bs >= (out.size(-2) - 1) * out.stride(-2) + out.size(-1) ||
                                    (bs >= out.size(-1) && (pl.batch - 1) * bs + out.size(-1) <= out.stride(-2)));
  if (out.shape() != pl.out_shape || !rows_ok || !batch_ok)
    throw std::invalid_argument("matmul_out: out must be " + shape_str(pl.out_shape) +
                                " with unit-stride rows and one batch stride, got " + shape_str(out.shape()) +
                                (out.is_contiguous() ? "" : " (strided)"));
  run_matmul(pl, out, a, b, trans_a, trans_b, alpha, beta);
}

}  // namespace lt::ops
