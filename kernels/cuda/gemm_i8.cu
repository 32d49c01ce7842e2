// kernels/cuda/gemm_i8.cu: the int8 GEMM of kernels/cuda/gemm_i8.h on cuBLASLt: CUDA_R_8I
// operands, CUBLAS_COMPUTE_32I with int32 alpha/beta, CUDA_R_32I results, called through the
// lazily opened library (kernels/cuda/dynload.h, Note [Lazy CUDA libraries]).
// Row-major c = a @ b^T is, read column-major, c^T = b @ a^T: cuBLASLt's "TN" form (the one
// its int8 kernels require): its A is our b read as (K, N) column-major and transposed, its B
// our a read as (K, M), its C our c read as (N, M).
// Not here: quantization (compress/quantize.cpp), the CPU kernel (kernels/cpu/gemm_i8.cpp).
#include "engine/backend.h"
#include "engine/error.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/dynload.h"
#include "kernels/cuda/gemm_i8.h"
#include "kernels/cuda/runtime.h"

namespace brisk::kernels::cuda {

namespace {

constexpr int kMaxDevices = 64;
thread_local cublasLtHandle_t t_lt[kMaxDevices] = {};

cublasLtHandle_t lt_handle(int device) {
  BRISK_CHECK(device >= 0 && device < kMaxDevices, "gemm_s8s8_i32: device index ", device, " out of range");
  if (!t_lt[device]) {
    DeviceGuard guard(device);
    BRISK_CUBLAS_CHECK(cublas_lt().cublasLtCreate(&t_lt[device]));
  }
  return t_lt[device];
}

}  // namespace

void gemm_s8s8_i32(const int8_t* a, const int8_t* b, int32_t* c, int64_t m, int64_t n, int64_t k, int device,
                   cudaStream_t stream) {
  BRISK_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm_s8s8_i32: bad sizes (", m, ", ", n, ", ", k, ")");
  if (m == 0 || n == 0) return;
  BRISK_CHECK(k % 4 == 0, "gemm_s8s8_i32: K = ", k, " must be a multiple of 4 for cuBLASLt int8 (pad it)");
  const CublasLtApi& lt = cublas_lt();
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  BRISK_CUBLAS_CHECK(lt.cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, CUDA_R_32I));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  BRISK_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  BRISK_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  BRISK_CUBLAS_CHECK(lt.cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, uint64_t(k), uint64_t(n), k));   // b: (K, N)
  BRISK_CUBLAS_CHECK(lt.cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, uint64_t(k), uint64_t(m), k));   // a: (K, M)
  BRISK_CUBLAS_CHECK(lt.cublasLtMatrixLayoutCreate(&lc, CUDA_R_32I, uint64_t(n), uint64_t(m), n));  // c: (N, M)
  cublasLtMatmulPreference_t pref = nullptr;
  BRISK_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceCreate(&pref));
  const size_t max_ws = size_t(32) << 20;
  lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs =
      lt.cublasLtMatmulAlgoGetHeuristic(lt_handle(device), desc, la, lb, lc, lc, pref, 1, &result, &found);
  lt.cublasLtMatmulPreferenceDestroy(pref);
  auto destroy = [&] {
    lt.cublasLtMatrixLayoutDestroy(la);
    lt.cublasLtMatrixLayoutDestroy(lb);
    lt.cublasLtMatrixLayoutDestroy(lc);
    lt.cublasLtMatmulDescDestroy(desc);
  };
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    destroy();
    BRISK_FAIL("gemm_s8s8_i32: cuBLASLt has no int8 algorithm for ", m, " x ", n, " x ", k, " on device ", device);
  }
  const int32_t alpha = 1, beta = 0;
  Allocator& alloc = brisk::backend(Device::cuda(device)).allocator(device);
  const uint64_t key = reinterpret_cast<uint64_t>(stream);
  void* ws = result.workspaceSize ? alloc.allocate(result.workspaceSize, key) : nullptr;
  const cublasStatus_t st = lt.cublasLtMatmul(lt_handle(device), desc, &alpha, b, la, a, lb, &beta, c, lc, c, lc,
                                              &result.algo, ws, result.workspaceSize, stream);
  if (ws) alloc.deallocate(ws, result.workspaceSize, key);
  destroy();
  BRISK_CHECK(st == CUBLAS_STATUS_SUCCESS, "gemm_s8s8_i32: cublasLtMatmul failed: ", lt.cublasLtGetStatusName(st), " (",
              int(st), ") for ", m, " x ", n, " x ", k);
}

}  // namespace brisk::kernels::cuda
