// Batched matrix multiply, CUDA backend (twin: kernels/cpu/matmul.cpp): cuBLAS.
//   f32:       cublasSgemmStridedBatched (pure fp32: the handle keeps CUBLAS_DEFAULT_MATH,
//              so no TF32 unless NVIDIA_TF32_OVERRIDE forces it); with p.tf32,
//              cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F_FAST_TF32 (TF32 tensor-core
//              products, fp32 accumulation)
//   f64:       cublasDgemmStridedBatched
//   bf16, f16: cublasGemmStridedBatchedEx, fp32 compute (CUBLAS_COMPUTE_32F); C in the input
//              dtype (rounded), or in f32 (p.out_dtype == f32: Ctype CUDA_R_32F, alpha/beta
//              and C's old contents in fp32) for the mixed-precision GEMMs
// Deterministic: cuBLAS GEMMs give bit-identical results run to run for the same shapes on
// the same GPU and toolkit (cuBLAS's reproducibility guarantee; the atomics mode stays off).
// Row-major to cuBLAS's column-major: a row-major M x N matrix C with row stride ldc is
// the column-major N x M matrix C^T, and C^T = op(B)^T op(A)^T, so we ask cuBLAS for
// m = N, n = M, k = K with (B, ldb) as its first operand and (A, lda) as its second; a
// row-major operand that is not transposed is exactly cuBLAS's OP_N.
// One cuBLAS handle per (thread, device), created on first use and kept for the process
// (destroying it at exit could race the CUDA runtime's own teardown). Each call counts one
// launch in the atlas.
#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error ") + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) +
                             ") in " + what);
}

cublasHandle_t handle_for_current_device() {
  constexpr int kMaxDevices = 64;
  thread_local cublasHandle_t handles[kMaxDevices] = {};
  int device = 0;
  LT_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) throw std::runtime_error("cuda matmul: device index out of range");
  if (!handles[device]) cublas_check(cublasCreate(&handles[device]), "cublasCreate");
  return handles[device];
}

int to_int(int64_t v, const char* name) {
  if (v < 0 || v > INT32_MAX)
    throw std::invalid_argument(std::string("cuda matmul: ") + name + " = " + std::to_string(v) +
                                " does not fit cuBLAS's int");
  return static_cast<int>(v);
}

}  // namespace

void matmul(DType dtype, const MatmulParams& p, uintptr_t stream) {
  if (p.batch == 0 || p.M == 0 || p.N == 0) return;
  cublasHandle_t h = handle_for_current_device();
  cublas_check(cublasSetStream(h, as_stream(stream)), "cublasSetStream");
  const cublasOperation_t op_first = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   // B's role
  const cublasOperation_t op_second = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // A's role
  const int m = to_int(p.N, "N"), n = to_int(p.M, "M"), k = to_int(p.K, "K");
  const int ld_first = to_int(p.ldb < 1 ? 1 : p.ldb, "ldb");
  const int ld_second = to_int(p.lda < 1 ? 1 : p.lda, "lda");
  const int ldc = to_int(p.ldc < 1 ? 1 : p.ldc, "ldc");
  const int batch = to_int(p.batch, "batch");
  const bool mixed = p.out_dtype != dtype;
  if (mixed && (p.out_dtype != DType::f32 || (dtype != DType::bf16 && dtype != DType::f16)))
    throw std::invalid_argument(std::string("cuda matmul: ") + dtype_name(dtype) + " operands with a " +
                                dtype_name(p.out_dtype) + " output are not supported (only bf16 / f16 -> f32)");
  switch (dtype) {
    case DType::f32: {
      const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
      if (p.tf32) {
        cublas_check(
            cublasGemmStridedBatchedEx(h, op_first, op_second, m, n, k, &alpha, p.b, CUDA_R_32F, ld_first, p.stride_b,
                                       p.a, CUDA_R_32F, ld_second, p.stride_a, &beta, p.c, CUDA_R_32F, ldc, p.stride_c,
                                       batch, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx (tf32)");
        break;
      }
      cublas_check(cublasSgemmStridedBatched(h, op_first, op_second, m, n, k, &alpha, static_cast<const float*>(p.b),
                                             ld_first, p.stride_b, static_cast<const float*>(p.a), ld_second,
                                             p.stride_a, &beta, static_cast<float*>(p.c), ldc, p.stride_c, batch),
                   "cublasSgemmStridedBatched");
      break;
    }
    case DType::f64: {
      const double alpha = p.alpha, beta = p.beta;
      cublas_check(cublasDgemmStridedBatched(h, op_first, op_second, m, n, k, &alpha, static_cast<const double*>(p.b),
                                             ld_first, p.stride_b, static_cast<const double*>(p.a), ld_second,
                                             p.stride_a, &beta, static_cast<double*>(p.c), ldc, p.stride_c, batch),
                   "cublasDgemmStridedBatched");
      break;
    }
    case DType::bf16:
    case DType::f16: {
      const cudaDataType_t t = dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
      const cudaDataType_t tc = mixed ? CUDA_R_32F : t;
      const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
      cublas_check(cublasGemmStridedBatchedEx(h, op_first, op_second, m, n, k, &alpha, p.b, t, ld_first, p.stride_b,
                                              p.a, t, ld_second, p.stride_a, &beta, p.c, tc, ldc, p.stride_c, batch,
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmStridedBatchedEx");
      break;
    }
    default: unsupported_dtype("cuda", "matmul", dtype);
  }
  count_launch();
}

}  // namespace lt::kern::cuda
