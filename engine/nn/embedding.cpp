// Token embedding (engine/nn/embedding.h): shape / dtype / device checks, then the
// embedding kernel family (kernels/embedding.h) on the current stream.
#include "engine/nn/embedding.h"

#include <stdexcept>
#include <string>

#include "engine/detail.h"
#include "kernels/embedding.h"

namespace lt::nn {
namespace {

void check_index_tensor(const Tensor& idx, const char* op) {
  detail::check_defined(idx, op);
  if (idx.dtype() != DType::i32 && idx.dtype() != DType::i64)
    throw std::invalid_argument(std::string(op) + ": idx " + shape_str(idx.shape()) + " has dtype " +
                                dtype_name(idx.dtype()) + ", expected i32 or i64");
}

void check_weight(const Tensor& w, const char* op, const char* name) {
  detail::check_defined(w, op);
  if (w.dim() != 2)
    throw std::invalid_argument(std::string(op) + ": " + name + " must be [V, d], got " + shape_str(w.shape()));
  if (w.dtype() != DType::f32 && w.dtype() != DType::f64)
    throw std::invalid_argument(std::string(op) + ": " + name + " " + shape_str(w.shape()) + " has dtype " +
                                dtype_name(w.dtype()) + ", expected f32 or f64");
}

}  // namespace

Tensor embedding_forward(const Tensor& idx, const Tensor& W, DType out_dtype) {
  const char* op = "embedding_forward";
  check_index_tensor(idx, op);
  check_weight(W, op, "W");
  detail::check_same_device(idx, W, op);
  if (!is_floating(out_dtype))
    throw std::invalid_argument(std::string(op) + ": out_dtype " + dtype_name(out_dtype) + " is not a float dtype");
  Shape out_shape = idx.shape();
  out_shape.push_back(W.size(1));
  Tensor out = Tensor::empty(out_shape, out_dtype, W.device());
  if (out.numel() == 0) return out;
  const Tensor idx_c = idx.contiguous(), w_c = W.contiguous();
  kern::EmbeddingParams p;
  p.n = idx.numel();
  p.V = W.size(0);
  p.d = W.size(1);
  p.idx = idx_c.data_ptr();
  p.idx_dtype = idx.dtype();
  p.W = w_c.data_ptr();
  p.out = out.data_ptr();
  p.w_dtype = W.dtype();
  p.act_dtype = out_dtype;
  detail::Exec ex(W.device());
  ex.k.embedding(kern::EmbeddingPass::forward, p, ex.stream);
  return out;
}

void embedding_backward(const Tensor& dy, const Tensor& idx, Tensor& dW) {
  const char* op = "embedding_backward";
  check_index_tensor(idx, op);
  check_weight(dW, op, "dW");
  detail::check_defined(dy, op);
  detail::check_float(dy, op);
  detail::check_same_device(dy, idx, op);
  detail::check_same_device(dy, dW, op);
  Shape want = idx.shape();
  want.push_back(dW.size(1));
  if (dy.shape() != want)
    throw std::invalid_argument(std::string(op) + ": dy " + shape_str(dy.shape()) + " does not match idx " +
                                shape_str(idx.shape()) + " and dW " + shape_str(dW.shape()) + " (expected " +
                                shape_str(want) + ")");
  if (!dW.is_contiguous())
    throw std::invalid_argument(std::string(op) + ": dW " + shape_str(dW.shape()) + " must be contiguous");
  if (idx.numel() == 0 || dW.numel() == 0) return;
  const Tensor idx_c = idx.contiguous(), dy_c = dy.contiguous();
  kern::EmbeddingParams p;
  p.n = idx.numel();
  p.V = dW.size(0);
  p.d = dW.size(1);
  p.idx = idx_c.data_ptr();
  p.idx_dtype = idx.dtype();
  p.dy = dy_c.data_ptr();
  p.dW = dW.data_ptr();
  p.w_dtype = dW.dtype();
  p.act_dtype = dy.dtype();
  Tensor scratch;  // CUDA: each occurring row's first token and count (kernels/embedding.h)
  if (dW.device().is_cuda()) {
    scratch = Tensor::empty({kern::embedding_scratch_ints(p.V)}, DType::i32, dW.device());
    p.scratch = scratch.data_ptr();
  }
  detail::Exec ex(dW.device());
  ex.k.embedding(kern::EmbeddingPass::backward, p, ex.stream);
}

}  // namespace lt::nn
