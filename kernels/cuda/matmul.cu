// kernels/cuda/matmul.cu: the CUDA matmul kernel. Float dtypes go to cuBLASLt (F32 exact by
// default or TF32 with set_allow_tf32; F16/BF16 with F32 accumulation; F64), batched with one
// stride per operand, broadcast batch dims coalesced like the CPU's (kernels/cpu/gemm.cpp);
// cublasGemmStridedBatchedEx is the fallback (no algorithm from cuBLASLt's heuristic, or a
// broadcast operand with batch stride 0).
// Integer dtypes run a plain wrapping kernel (exact, slow, rarely used), as on the CPU.
// cuBLASLt and cuBLAS are called through the tables of kernels/cuda/dynload.h, which opens them
// at the first float matmul (Note [Lazy CUDA libraries]).
// Not here: matmul's shape rules, 1-D operands and backward (engine/ops/linalg.cpp).
#include <array>
#include <map>

#include "engine/backend.h"
#include "engine/op.h"
#include "kernels/cuda/dynload.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"

namespace brisk::kernels::cuda {

namespace {

constexpr int kMaxHandleDevices = 64;
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper

// cuBLAS handles per thread and device (a cublasHandle_t must not be shared between threads).
// Leaked at thread exit on purpose: destroying them after the driver shut down would crash.
struct Handles {
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
};
thread_local Handles t_handles[kMaxHandleDevices];

Handles& handles(int device) {
  BRISK_CHECK(device < kMaxHandleDevices, "matmul: device index ", device, " is too large");
  Handles& h = t_handles[device];
  if (!h.lt) {
    DeviceGuard guard(device);
    BRISK_CUBLAS_CHECK(cublas_lt().cublasLtCreate(&h.lt));
    BRISK_CUBLAS_CHECK(cublas().cublasCreate(&h.blas));
  }
  return h;
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: BRISK_FAIL("matmul: no cuBLAS type for ", t);
  }
}

cublasComputeType_t compute_type(DType t) {
  if (t == DType::F64) return CUBLAS_COMPUTE_64F;
  if (t == DType::F32 && allow_tf32()) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;  // F32, and F16/BF16 with F32 accumulation
}

// One cuBLAS call, in cuBLAS's column-major terms: C (m, n) = op(A) (m, k) @ op(B) (k, n),
// `batch` times with the given element strides between consecutive matrices.
struct Gemm {
  DType dtype;
  cublasOperation_t op_a, op_b;
  int64_t m, n, k;
  const void* a;
  int64_t lda, stride_a;
  const void* b;
  int64_t ldb, stride_b;
  void* c;
  int64_t ldc, stride_c;
  int64_t batch;
  bool accumulate = false;  // C += op(A) op(B) (beta 1) instead of C = (beta 0)
};

// Largest power of two (<= 256) dividing the address and, when batched, the batch stride.
uint32_t alignment(const void* p, int64_t stride_bytes, int64_t batch) {
  uint64_t v = reinterpret_cast<uint64_t>(p) | (batch > 1 ? uint64_t(stride_bytes) : 0) | 256;
  return uint32_t(v & (~v + 1));
}

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool ok = false;  // the heuristic found an algorithm
};

using PlanKey = std::array<int64_t, 20>;

// Descriptors and the heuristic's choice per problem, cached per thread (the heuristic costs
// tens of microseconds; a training step repeats the same shapes).
std::map<PlanKey, LtPlan>& plan_cache() {
  thread_local std::map<PlanKey, LtPlan> cache;
  return cache;
}

void set_layout_batch(cublasLtMatrixLayout_t layout, int64_t batch, int64_t stride) {
  if (batch <= 1) return;
  BRISK_CHECK(batch <= int64_t(INT32_MAX), "matmul: a batch of ", batch, " matrices exceeds cuBLASLt's 32-bit count");
  const int32_t count = int32_t(batch);
  const CublasLtApi& lt = cublas_lt();
  BRISK_CUBLAS_CHECK(
      lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  BRISK_CUBLAS_CHECK(lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                         sizeof(stride)));
}

LtPlan& lt_plan(const Gemm& g, int device) {
  const int64_t esize = int64_t(dtype_size(g.dtype));
  const uint32_t al_a = alignment(g.a, g.stride_a * esize, g.batch);
  const uint32_t al_b = alignment(g.b, g.stride_b * esize, g.batch);
  const uint32_t al_c = alignment(g.c, g.stride_c * esize, g.batch);
  const PlanKey key{device,
                    int64_t(g.dtype),
                    int64_t(compute_type(g.dtype)),
                    g.op_a,
                    g.op_b,
                    g.m,
                    g.n,
                    g.k,
                    g.lda,
                    g.ldb,
                    g.ldc,
                    g.batch,
                    g.stride_a,
                    g.stride_b,
                    g.stride_c,
                    al_a,
                    al_b,
                    al_c,
                    0,
                    0};
  auto& cache = plan_cache();
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const CublasLtApi& lt = cublas_lt();
  if (cache.size() > 4096) {  // a pathological stream of shapes: start over
    for (auto& [k, p] : cache) {
      lt.cublasLtMatmulDescDestroy(p.desc);
      lt.cublasLtMatrixLayoutDestroy(p.a);
      lt.cublasLtMatrixLayoutDestroy(p.b);
      lt.cublasLtMatrixLayoutDestroy(p.c);
    }
    cache.clear();
  }
  LtPlan p;
  const cudaDataType_t type = data_type(g.dtype);
  const cudaDataType_t scale = g.dtype == DType::F64 ? CUDA_R_64F : CUDA_R_32F;
  BRISK_CUBLAS_CHECK(lt.cublasLtMatmulDescCreate(&p.desc, compute_type(g.dtype), scale));
  BRISK_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &g.op_a, sizeof(g.op_a)));
  BRISK_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &g.op_b, sizeof(g.op_b)));
  // Layouts describe the stored matrices (before op).
  const bool ta = g.op_a != CUBLAS_OP_N, tb = g.op_b != CUBLAS_OP_N;
  BRISK_CUBLAS_CHECK(lt.cublasLtMatrixLayoutCreate(&p.a, type, ta ? g.k : g.m, ta ? g.m : g.k, g.lda));
  BRISK_CUBLAS_CHECK(lt.cublasLtMatrixLayoutCreate(&p.b, type, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb));
  BRISK_CUBLAS_CHECK(lt.cublasLtMatrixLayoutCreate(&p.c, type, g.m, g.n, g.ldc));
  set_layout_batch(p.a, g.batch, g.stride_a);
  set_layout_batch(p.b, g.batch, g.stride_b);
  set_layout_batch(p.c, g.batch, g.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  BRISK_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
  lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
  lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c));
  lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      lt.cublasLtMatmulAlgoGetHeuristic(handles(device).lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  lt.cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    p.algo = result.algo;
    p.workspace = result.workspaceSize;
    p.ok = true;
  }
  return cache.emplace(key, p).first->second;
}

void run_gemm(const Gemm& g, int device, cudaStream_t stream) {
  const float alpha_f = 1, beta_f = g.accumulate ? 1 : 0;
  const double alpha_d = 1, beta_d = g.accumulate ? 1 : 0;
  const void* alpha = g.dtype == DType::F64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = g.dtype == DType::F64 ? static_cast<const void*>(&beta_d) : &beta_f;
  // A batch stride of 0 (a broadcast operand) goes to the classic API, which reads matrix i at
  // A + i * stride_a whatever the stride; cuBLASLt does not document stride 0.
  const bool broadcast = g.batch > 1 && (g.stride_a == 0 || g.stride_b == 0);
  LtPlan* plan = broadcast ? nullptr : &lt_plan(g, device);
  if (plan && plan->ok) {
    LtPlan& p = *plan;
    Allocator& alloc = brisk::backend(Device::cuda(device)).allocator(device);
    const uint64_t key = reinterpret_cast<uint64_t>(stream);
    void* ws = p.workspace ? alloc.allocate(p.workspace, key) : nullptr;
    // Freed right after queueing: the next user of the block runs later on the same stream.
    const cublasStatus_t st = cublas_lt().cublasLtMatmul(handles(device).lt, p.desc, alpha, g.a, p.a, g.b, p.b, beta,
                                                         g.c, p.c, g.c, p.c, &p.algo, ws, p.workspace, stream);
    if (ws) alloc.deallocate(ws, p.workspace, key);
    if (st == CUBLAS_STATUS_SUCCESS) return;
    // The heuristic's algorithm refused this problem at run time: the classic API below takes
    // it from now on (the plan is cached per geometry). Any other failure is an error.
    BRISK_CHECK(st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_ARCH_MISMATCH,
                "matmul: cublasLtMatmul failed: ", cublas_lt().cublasLtGetStatusName(st), " (", int(st), ") for ", g.m,
                " x ", g.n, " x ", g.k, " ", g.dtype, ", batch ", g.batch);
    p.ok = false;
  }
  // Fallback: the classic API (its own heuristics, int32 sizes).
  constexpr int64_t kInt = int64_t(1) << 31;
  BRISK_CHECK(g.m < kInt && g.n < kInt && g.k < kInt && g.lda < kInt && g.ldb < kInt && g.ldc < kInt && g.batch < kInt,
              "matmul: problem too large for cuBLAS (", g.m, " x ", g.n, " x ", g.k, ")");
  cublasHandle_t h = handles(device).blas;
  BRISK_CUBLAS_CHECK(cublas().cublasSetStream(h, stream));
  const cudaDataType_t type = data_type(g.dtype);
  BRISK_CUBLAS_CHECK(cublas().cublasGemmStridedBatchedEx(
      h, g.op_a, g.op_b, int(g.m), int(g.n), int(g.k), alpha, g.a, type, int(g.lda), g.stride_a, g.b, type, int(g.ldb),
      g.stride_b, beta, g.c, type, int(g.ldc), g.stride_c, int(g.batch), compute_type(g.dtype), CUBLAS_GEMM_DEFAULT));
}

// How cuBLAS reads X^T in column-major order, for a matrix X (rows, cols) with strides (rs, cs):
// row-major X is X^T in column-major (op N, ld rs); column-major X needs op T (ld cs). False
// when X has neither layout (it must be copied first).
bool transposed_view(int64_t rows, int64_t cols, int64_t rs, int64_t cs, cublasOperation_t& op, int64_t& ld) {
  if (rows == 1 && cols == 1) {
    op = CUBLAS_OP_N;
    ld = 1;
    return true;
  }
  if (cs == 1 && (rows == 1 || rs >= cols)) {
    op = CUBLAS_OP_N;
    ld = rows == 1 ? cols : rs;
    return true;
  }
  if (rs == 1 && (cols == 1 || cs >= rows)) {
    op = CUBLAS_OP_T;
    ld = cols == 1 ? rows : cs;
    return true;
  }
  return false;
}

bool readable(const Tensor& t) {
  cublasOperation_t op;
  int64_t ld;
  return transposed_view(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1), op, ld);
}

// Strides of t's batch dims broadcast to nb output batch dims (0 where broadcast).
Shape batch_strides(const Tensor& t, const Shape& batch) {
  const int nb = batch.size();
  const int tb = t.dim() - 2;
  Shape st = Shape::filled(nb, 0);
  for (int d = 0; d < nb; ++d) {
    const int td = d - (nb - tb);
    st[d] = (td < 0 || t.sizes()[td] == 1) ? 0 : t.strides()[td];
  }
  return st;
}

// c (batch..., M, N) dense = a (..., M, K) @ b (..., K, N), float dtypes; c += a @ b when
// `accumulate`.
void matmul_float(const Tensor& a_in, const Tensor& b_in, const Tensor& c, bool accumulate = false) {
  const Tensor a = readable(a_in) ? a_in : dense(a_in);
  const Tensor b = readable(b_in) ? b_in : dense(b_in);
  const int64_t m = c.size(-2), n = c.size(-1), k = a.size(-1);
  Gemm g{};
  g.dtype = c.dtype();
  // Row-major c = a @ b is column-major c^T = b^T @ a^T: cuBLAS's A is b^T, its B is a^T.
  g.m = n;
  g.n = m;
  g.k = k;
  BRISK_CHECK(transposed_view(k, n, b.stride(-2), b.stride(-1), g.op_a, g.lda), "matmul: unreadable operand");
  BRISK_CHECK(transposed_view(m, k, a.stride(-2), a.stride(-1), g.op_b, g.ldb), "matmul: unreadable operand");
  g.ldc = n;
  g.batch = 1;
  g.accumulate = accumulate;

  Shape batch;
  for (int d = 0; d + 2 < c.dim(); ++d) batch.push_back(c.sizes()[d]);
  const Shape cs = Shape(std::span<const int64_t>(c.strides().data(), size_t(batch.size())));
  const Shape as = batch_strides(a, batch), bs = batch_strides(b, batch);
  const Shape* strides[3] = {&cs, &as, &bs};
  const OffsetCalc<3> calc = make_offset_calc<3>(batch, strides);
  const int last = calc.ndim - 1;
  const int64_t count = calc.sizes[last];
  g.stride_c = calc.strides[0][last];
  g.stride_b = calc.strides[1][last];
  g.stride_a = calc.strides[2][last];
  g.batch = count;
  if (calc.ndim == 1 && count > 1 && g.stride_a == 0 && g.op_b == CUBLAS_OP_N && g.stride_b == m * g.ldb &&
      g.stride_c == m * n) {
    // (B, M, K) @ (K, N) with a's rows evenly spaced: one tall product (B M, K) @ (K, N).
    g.n = count * m;
    g.batch = 1;
  }
  const int64_t esize = int64_t(c.element_size());
  const char* pa = static_cast<const char*>(a.data_ptr());
  const char* pb = static_cast<const char*>(b.data_ptr());
  char* pc = static_cast<char*>(c.data_ptr());
  const int device = c.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  int64_t outer = 1;
  for (int d = 0; d < last; ++d) outer *= calc.sizes[d];
  for (int64_t o = 0; o < outer; ++o) {
    // Offsets of the outer batch index o (all dims but the last).
    int64_t off[3] = {0, 0, 0}, rem = o;
    for (int d = last - 1; d >= 0; --d) {
      const int64_t idx = rem % calc.sizes[d];
      rem /= calc.sizes[d];
      for (int q = 0; q < 3; ++q) off[q] += idx * calc.strides[q][d];
    }
    Gemm call = g;
    call.c = pc + off[0] * esize;
    call.b = pa + off[1] * esize;  // cuBLAS's B is a^T
    call.a = pb + off[2] * esize;  // cuBLAS's A is b^T
    run_gemm(call, device, stream);
  }
}

// ---- integers: c[i, j] = sum_p a[i, p] b[p, j] in uint64 (wrapping), narrowed once.
// c: (batch, m, n) dense; batch offsets from `calc` ([c, a, b]).
__global__ void matmul_int_kernel(int64_t total, OffsetCalc<3> calc, int64_t m, int64_t n, int64_t k, const void* a,
                                  DType at, int64_t ars, int64_t acs, const void* b, DType bt, int64_t brs, int64_t bcs,
                                  void* c, DType ct) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = idx % n;
    const int64_t i = (idx / n) % m;
    int64_t off[3];
    calc.get(idx / (m * n), off);
    uint64_t acc = 0;
    for (int64_t p = 0; p < k; ++p) {
      acc +=
          uint64_t(load_int(a, off[1] + i * ars + p * acs, at)) * uint64_t(load_int(b, off[2] + p * brs + j * bcs, bt));
    }
    store_int(c, off[0] + i * n + j, ct, int64_t(acc));
  }
}

void matmul_int(const Tensor& a, const Tensor& b, const Tensor& c) {
  BRISK_CHECK(c.dtype() != DType::Bool, "matmul: no CUDA kernel for dtype Bool");
  const int64_t m = c.size(-2), n = c.size(-1), k = a.size(-1);
  Shape batch;
  for (int d = 0; d + 2 < c.dim(); ++d) batch.push_back(c.sizes()[d]);
  const Shape cs = Shape(std::span<const int64_t>(c.strides().data(), size_t(batch.size())));
  const Shape as = batch_strides(a, batch), bs = batch_strides(b, batch);
  const Shape* strides[3] = {&cs, &as, &bs};
  const OffsetCalc<3> calc = make_offset_calc<3>(batch, strides);
  const int64_t total = c.numel();
  const int device = c.device().index;
  DeviceGuard guard(device);
  matmul_int_kernel<<<grid_for(total), kBlock, 0, stream_handle(device)>>>(
      total, calc, m, n, k, a.data_ptr(), a.dtype(), a.stride(-2), a.stride(-1), b.data_ptr(), b.dtype(), b.stride(-2),
      b.stride(-1), c.data_ptr(), c.dtype());
  BRISK_CUDA_CHECK_LAUNCH();
}

// a: (..., M, K), b: (..., K, N) -> out: (broadcast batch..., M, N)
void matmul_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  // Products are written densely; a strided output (a caller's) gets a copy.
  const bool is_dense = out[0].is_contiguous();
  const Tensor c = is_dense ? out[0] : make_empty(out[0].sizes(), out[0].dtype(), out[0].device());
  if (c.numel() > 0) {
    if (a.size(-1) == 0) {
      zero_(c);
    } else if (is_floating(c.dtype())) {
      matmul_float(a, b, c);
    } else {
      matmul_int(a, b, c);
    }
  }
  if (!is_dense) copy_into(out[0], c);
}

// y (*, n) = x (*, k) @ w (n, k)^T + bias (Note [Linear is an op] in engine/ops/linalg.cpp): x
// as (rows, k), w read as its transpose in place (cuBLAS's op T), the output's rows started
// at the bias and the product accumulated onto them (beta 1).
// Mixed inputs (Note [Mixed linear] in engine/ops/linalg.cpp: a 16-bit x with an F32 weight and
// bias) convert the weight and bias into temporaries of x's dtype, and an F32 result of 16-bit
// operands (flag2) is computed in x's dtype and widened: the GEMMs here take one dtype.
void linear_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const bool in_out = attrs.flag;  // w (k, n) rather than (n, k)
  const Tensor x = in[0].is_contiguous() ? in[0] : dense(in[0]);
  auto as_x = [&](const Tensor& t) {
    if (t.dtype() == x.dtype()) return t;
    Tensor tmp = make_empty(t.sizes(), x.dtype(), t.device());
    copy_into(tmp, t);
    return tmp;
  };
  const Tensor w = as_x(in[1]);
  const bool is_dense = out[0].is_contiguous() && out[0].dtype() == x.dtype();
  const Tensor c = is_dense ? out[0] : make_empty(out[0].sizes(), x.dtype(), out[0].device());
  const int64_t k = w.size(in_out ? 0 : 1), n = w.size(in_out ? 1 : 0), rows = n == 0 ? 0 : c.numel() / n;
  if (c.numel() > 0) {
    const Tensor x2 = make_view(x.storage(), {rows, k}, {k, 1}, x.offset(), x.dtype());
    const Tensor wt = in_out ? w : make_view(w.storage(), {k, n}, {w.stride(1), w.stride(0)}, w.offset(), w.dtype());
    const Tensor c2 = make_view(c.storage(), {rows, n}, {n, 1}, c.offset(), c.dtype());
    const bool has_bias = in.size() == 3;
    if (has_bias) {
      const Tensor b = as_x(in[2]);
      copy_into(c2, make_view(b.storage(), {rows, n}, {0, b.stride(0)}, b.offset(), b.dtype()));
    }
    if (k == 0) {
      if (!has_bias) zero_(c);
    } else {
      matmul_float(x2, readable(wt) ? wt : dense(wt), c2, has_bias);
    }
  }
  if (!is_dense) copy_into(out[0], c);
}

// (y = gelu(h), h) = linear_gelu(x, w[, bias]) (Note [Linear with GELU] in
// engine/ops/linalg.cpp): linear's kernel into h, then the Gelu op's CUDA kernel from h into y,
// so the bits are those of the two ops (no fusion on this device yet: cuBLASLt's GELU_AUX_BIAS
// epilogue would compute its own GELU, not the Gelu op's bits). Compiled, never run: there was
// no GPU where it was written.
void linear_gelu_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  linear_kernel(in, out.subspan(1, 1), Attrs{.flag = attrs.flag});
  const Tensor gin[1] = {out[1]};
  op_def(OpId::Gelu)
      .kernels[int(DeviceType::CUDA)](std::span<const Tensor>(gin), out.subspan(0, 1), Attrs{.flag = attrs.flag2});
}

}  // namespace

void register_linalg() {
  register_kernel(OpId::Matmul, DeviceType::CUDA, matmul_kernel);
  register_kernel(OpId::Linear, DeviceType::CUDA, linear_kernel);
  register_kernel(OpId::LinearGelu, DeviceType::CUDA, linear_gelu_kernel);
}

}  // namespace brisk::kernels::cuda
