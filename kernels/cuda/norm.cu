// kernels/cuda/norm.cu: the CUDA kernels of layer_norm and rms_norm with their fused backwards
// (hand-written: a group of threads per row, two passes for the moments, F32 accumulation, F64
// for F64; the weight gradients a thread per column) and batch_norm (cuDNN's
// spatial batch normalization, training and inference; F32, F16 and F64 natively, BF16 through
// F32). Outputs as the CPU kernels (kernels/cpu/norm.cpp) define them: y, and the statistics
// mean and rstd = 1 / sqrt(biased variance + eps) in F32 (F64 for F64 inputs).
// Without cuDNN (no BRISK_WITH_CUDNN) batch_norm gets no CUDA kernel.
// batch_norm_backward (the fused backward of Note [Fused batch norm backward]) is hand-written:
// a block per channel. Not here: inference, checks and the backward formulas
// (engine/ops/norm.cpp); the running-statistics update (engine/ops/norm.cpp).
#include <cmath>
#include <optional>

#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"
#ifdef BRISK_WITH_CUDNN
#include "kernels/cuda/cudnn_handle.h"
#endif

namespace brisk::kernels::cuda {

namespace {

int pow2_at_least(int64_t n, int cap) {
  int p = 1;
  while (p < n && p < cap) p *= 2;
  return p;
}

// ---- layer norm
// x (rows, n), w/b (n) -> y (rows, n), mean/rstd (rows); all dense. blockDim.x threads per row,
// blockDim.y rows per block. Two passes (mean, then the mean of squared deviations) keep the
// variance free of the cancellation of E[x^2] - E[x]^2; the row is re-read from cache. Both
// passes and the output work on x - k, k the row's first value, as the CPU kernel does (Note
// [One-pass moments] in kernels/cpu/norm.cpp): x - k is exact for values near k, so an F32
// output does not carry the mean's rounding error (~1e-3 at a mean of 1e4).
template <class T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean, compute_t<T>* rstd,
                                  int64_t rows, int64_t n, double eps) {
  using A = compute_t<T>;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * n;
    const A k = valid && n > 0 ? A(load_value(xr)) : A(0);
    A s = 0;
    if (valid) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += A(load_value(xr + j)) - k;
    }
    const A total = group_reduce(s, SumF{});
    const A dm = n > 0 ? total / A(n) : A(0);  // mean - k
    A q = 0;
    if (valid) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const A d = (A(load_value(xr + j)) - k) - dm;
        q += d * d;
      }
    }
    q = group_reduce(q, SumF{});
    if (!valid) continue;
    const A var = n > 0 ? q / A(n) : A(0);
    const A rs = A(1.0 / sqrt(double(var) + eps));
    if (threadIdx.x == 0) {
      mean[row] = A(double(k) + double(dm));
      rstd[row] = rs;
    }
    T* yr = y + row * n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      yr[j] = Store<T>::to(((A(load_value(xr + j)) - k) - dm) * rs * A(load_value(w + j)) + A(load_value(b + j)));
    }
  }
}

// in: (x, weight, bias), normalized over the trailing dims that weight covers (LayerNormParams)
void layer_norm_cuda(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const double eps = LayerNormParams::from(attrs).eps;
  const Tensor x = dense(in[0]), w = dense(in[1]), b = dense(in[2]);
  DenseOut y(out[0]), mean(out[1]), rstd(out[2]);
  const int64_t n = w.numel();
  const int64_t rows = n == 0 ? mean.dense.numel() : x.numel() / n;
  if (rows > 0) {
    const int device = x.device().index;
    DeviceGuard guard(device);
    cudaStream_t stream = stream_handle(device);
    dim3 block;
    block.x = std::max(32, pow2_at_least(n, kBlock));
    block.y = kBlock / block.x;
    const unsigned grid = grid_for(rows, int(block.y));
    dispatch_float(x.dtype(), "layer_norm", [&](auto tag) {
      using T = decltype(tag);
      using S = compute_t<T>;
      layer_norm_kernel<T><<<grid, block, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()), static_cast<const T*>(b.data_ptr()),
          static_cast<T*>(y.dense.data_ptr()), static_cast<S*>(mean.dense.data_ptr()),
          static_cast<S*>(rstd.dense.data_ptr()), rows, n, eps);
      BRISK_CUDA_CHECK_LAUNCH();
    });
  }
  y.finish();
  mean.finish();
  rstd.finish();
}

// ---- rms norm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) per row; layout as
// layer_norm_kernel's.
template <class T>
__global__ void rms_norm_kernel(const T* x, const T* w, T* y, compute_t<T>* rstd, int64_t rows, int64_t n, double eps) {
  using A = compute_t<T>;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * n;
    A q = 0;
    if (valid) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const A v = A(load_value(xr + j));
        q += v * v;
      }
    }
    q = group_reduce(q, SumF{});
    if (!valid) continue;
    const A rs = A(1.0 / sqrt(double(n > 0 ? q / A(n) : A(0)) + eps));
    if (threadIdx.x == 0) rstd[row] = rs;
    T* yr = y + row * n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      yr[j] = Store<T>::to(A(load_value(xr + j)) * rs * A(load_value(w + j)));
    }
  }
}

// ---- layer_norm_backward / rms_norm_backward (Note [Fused layer norm backward] in
// engine/ops/norm.cpp), as the CPU kernels: gx per row (a group of threads per row, the row's
// two sums through group_reduce), then gw and gb per column (a thread per column walks the
// rows in order, so the sums do not depend on the launch). mean is nullptr for RMS.
template <bool Rms, class T>
__global__ void norm_backward_gx_kernel(const T* gy, const T* x, const T* w, const compute_t<T>* mean,
                                        const compute_t<T>* rstd, T* gx, int64_t rows, int64_t n) {
  using A = compute_t<T>;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.y; base < rows; base += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = base + threadIdx.y;
    const bool valid = row < rows;
    const int64_t r0 = valid ? row : 0;
    const T* xr = x + r0 * n;
    const T* gr = gy + r0 * n;
    const A m = Rms || !valid ? A(0) : mean[r0], rs = valid ? rstd[r0] : A(0);
    A s1 = 0, s2 = 0;
    if (valid) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const A g = A(load_value(gr + j)) * A(load_value(w + j));
        s1 += g;
        s2 += g * ((A(load_value(xr + j)) - m) * rs);
      }
    }
    s1 = group_reduce(s1, SumF{});
    s2 = group_reduce(s2, SumF{});
    if (!valid) continue;
    const A a1 = Rms || n == 0 ? A(0) : s1 / A(n), a2 = n == 0 ? A(0) : s2 / A(n);
    T* out = gx + row * n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const A g = A(load_value(gr + j)) * A(load_value(w + j));
      const A xhat = (A(load_value(xr + j)) - m) * rs;
      out[j] = Store<T>::to(rs * (g - a1 - xhat * a2));
    }
  }
}

template <bool Rms, class T>
__global__ void norm_backward_params_kernel(const T* gy, const T* x, const compute_t<T>* mean, const compute_t<T>* rstd,
                                            T* gw, T* gb, int64_t rows, int64_t n) {
  using A = compute_t<T>;
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    A sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const A g = A(load_value(gy + r * n + j));
      const A m = Rms ? A(0) : mean[r];
      sw += g * ((A(load_value(x + r * n + j)) - m) * rstd[r]);
      sb += g;
    }
    gw[j] = Store<T>::to(sw);
    if (!Rms) gb[j] = Store<T>::to(sb);
  }
}

// Launch shape of the row kernels: a power-of-two group of threads per row.
dim3 row_block(int64_t n) {
  dim3 block;
  block.x = std::max(32, pow2_at_least(n, kBlock));
  block.y = kBlock / block.x;
  return block;
}

// (gy, x, weight, [mean,] rstd) -> (gx, gw[, gb]); Rms: no mean, no gb.
template <bool Rms>
void norm_backward_cuda(std::span<const Tensor> in, std::span<Tensor> out, const char* op) {
  const Tensor gy = dense(in[0]), x = dense(in[1]), w = dense(in[2]);
  const Tensor mean = Rms ? Tensor() : dense(in[3]), rstd = dense(in[Rms ? 3 : 4]);
  DenseOut gx(out[0]), gw(out[1]);
  std::optional<DenseOut> gb;
  if (!Rms) gb.emplace(out[2]);
  const int64_t n = w.numel();
  const int64_t rows = rstd.numel();
  if (n > 0) {
    const int device = x.device().index;
    DeviceGuard guard(device);
    cudaStream_t stream = stream_handle(device);
    dispatch_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      using S = compute_t<T>;
      const S* mp = Rms ? nullptr : static_cast<const S*>(mean.data_ptr());
      const S* rp = static_cast<const S*>(rstd.data_ptr());
      if (rows > 0) {
        const dim3 block = row_block(n);
        norm_backward_gx_kernel<Rms, T><<<grid_for(rows, int(block.y)), block, 0, stream>>>(
            static_cast<const T*>(gy.data_ptr()), static_cast<const T*>(x.data_ptr()),
            static_cast<const T*>(w.data_ptr()), mp, rp, static_cast<T*>(gx.dense.data_ptr()), rows, n);
        BRISK_CUDA_CHECK_LAUNCH();
      }
      norm_backward_params_kernel<Rms, T><<<grid_for(n, kBlock), kBlock, 0, stream>>>(
          static_cast<const T*>(gy.data_ptr()), static_cast<const T*>(x.data_ptr()), mp, rp,
          static_cast<T*>(gw.dense.data_ptr()), Rms ? nullptr : static_cast<T*>(gb->dense.data_ptr()), rows, n);
      BRISK_CUDA_CHECK_LAUNCH();
    });
  }
  gx.finish();
  gw.finish();
  if (gb) gb->finish();
}

void layer_norm_backward_cuda(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  norm_backward_cuda<false>(in, out, "layer_norm_backward");
}

void rms_norm_backward_cuda(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  norm_backward_cuda<true>(in, out, "rms_norm_backward");
}

// in: (x, weight) -> (y, rstd); LayerNormParams
void rms_norm_cuda(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const double eps = LayerNormParams::from(attrs).eps;
  const Tensor x = dense(in[0]), w = dense(in[1]);
  DenseOut y(out[0]), rstd(out[1]);
  const int64_t n = w.numel();
  const int64_t rows = rstd.dense.numel();
  if (rows > 0) {
    const int device = x.device().index;
    DeviceGuard guard(device);
    cudaStream_t stream = stream_handle(device);
    const dim3 block = row_block(n);
    dispatch_float(x.dtype(), "rms_norm", [&](auto tag) {
      using T = decltype(tag);
      using S = compute_t<T>;
      rms_norm_kernel<T><<<grid_for(rows, int(block.y)), block, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()), static_cast<T*>(y.dense.data_ptr()),
          static_cast<S*>(rstd.dense.data_ptr()), rows, n, eps);
      BRISK_CUDA_CHECK_LAUNCH();
    });
  }
  y.finish();
  rstd.finish();
}

// ---- batch norm backward (Note [Fused batch norm backward] in engine/ops/norm.cpp), as the
// CPU kernel: one block per channel sums gy and gy * xhat over (B, S) (F32, F64 for F64),
// then writes gx = w rstd (gy - sum gy / N - xhat sum(gy xhat) / N) (training) or w rstd gy
// (eval); gw = sum(gy xhat), gb = sum(gy). x, gy (B, C, S) dense.
template <class T>
__global__ void batch_norm_backward_kernel(const T* gy, const T* x, const T* w, const compute_t<T>* mean,
                                           const compute_t<T>* rstd, T* gx, T* gw, T* gb, int64_t batch,
                                           int64_t channels, int64_t spatial, bool training) {
  using A = compute_t<T>;
  const int64_t n = batch * spatial;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    const A m = mean[c], r = rstd[c];
    A s1 = 0, s2 = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const int64_t i = ((k / spatial) * channels + c) * spatial + k % spatial;
      const A g = A(load_value(gy + i));
      s1 += g;
      s2 += g * ((A(load_value(x + i)) - m) * r);
    }
    const A sum_g = group_reduce(s1, SumF{}), sum_gx = group_reduce(s2, SumF{});
    if (threadIdx.x == 0) {
      gw[c] = Store<T>::to(sum_gx);
      gb[c] = Store<T>::to(sum_g);
    }
    const A a = A(load_value(w + c)) * r;
    const A k1 = training && n > 0 ? sum_g / A(n) : A(0), k2 = training && n > 0 ? sum_gx / A(n) : A(0);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const int64_t i = ((k / spatial) * channels + c) * spatial + k % spatial;
      const A xhat = (A(load_value(x + i)) - m) * r;
      gx[i] = Store<T>::to(a * (A(load_value(gy + i)) - k1 - xhat * k2));
    }
  }
}

// in: (gy, x (B, C, *), weight (C), mean (C), rstd (C)); flag = training
void batch_norm_backward_cuda(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor gy = dense(in[0]), x = dense(in[1]), w = dense(in[2]), mean = dense(in[3]), rstd = dense(in[4]);
  DenseOut gx(out[0]), gw(out[1]), gb(out[2]);
  const int64_t batch = x.sizes()[0], channels = x.sizes()[1];
  const int64_t spatial = batch * channels == 0 ? 0 : x.numel() / (batch * channels);
  if (channels > 0) {
    const int device = x.device().index;
    DeviceGuard guard(device);
    cudaStream_t stream = stream_handle(device);
    const unsigned grid = unsigned(std::min<int64_t>(channels, 65535));
    dispatch_float(x.dtype(), "batch_norm_backward", [&](auto tag) {
      using T = decltype(tag);
      using S = compute_t<T>;
      batch_norm_backward_kernel<T><<<grid, dim3(kBlock, 1), 0, stream>>>(
          static_cast<const T*>(gy.data_ptr()), static_cast<const T*>(x.data_ptr()),
          static_cast<const T*>(w.data_ptr()), static_cast<const S*>(mean.data_ptr()),
          static_cast<const S*>(rstd.data_ptr()), static_cast<T*>(gx.dense.data_ptr()),
          static_cast<T*>(gw.dense.data_ptr()), static_cast<T*>(gb.dense.data_ptr()), batch, channels, spatial,
          attrs.flag);
      BRISK_CUDA_CHECK_LAUNCH();
    });
  }
  gx.finish();
  gw.finish();
  gb.finish();
}

#ifdef BRISK_WITH_CUDNN

// ---- batch norm through cuDNN
// Note [Batch norm on cuDNN]
// cudnnBatchNormalizationForwardTraining in CUDNN_BATCHNORM_SPATIAL mode, with x viewed as
// (B, C, S, 1) (S the product of the spatial dims, so (B, C) and (B, C, L) inputs work too),
// normalizes with the biased batch variance and returns, in resultSaveMean and
// resultSaveInvVariance, the batch mean and 1 / sqrt(biased variance + eps): exactly the op's
// outputs mean and rstd (PyTorch's cuDNN path hands the same two buffers to the backward as
// save_mean / save_invstd). Its own running-statistics update is switched off (null running
// buffers, which cuDNN allows when both are null): engine/ops/norm.cpp updates the running
// statistics itself from these outputs on every device (Note [Running statistics]). In eval
// mode cudnnBatchNormalizationForwardInference uses the given running statistics, and mean /
// rstd are filled here from them as the CPU kernel does. cuDNN wants the per-channel tensors
// (weight, bias, running statistics) in F32 for F16 data and F64 for F64 data: they are
// converted (C values). BF16 data, which the legacy batch-norm calls do not promise to take,
// is normalized in F32 and rounded once, as the CPU computes it; autocast runs batch_norm in
// F32 anyway (CastPolicy::Fp32).

// `t` as a dense tensor of `dtype` (t itself when it already is one).
Tensor dense_as(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor d = make_empty(t.sizes(), dtype, t.device());
  copy_into(d, t);
  return d;
}

// rstd[c] = 1 / sqrt(var[c] + eps) in double, as the CPU computes it; var == nullptr: 0.
template <class S>
__global__ void bn_rstd_kernel(const S* var, S* rstd, int64_t channels, double eps) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels; c += int64_t(gridDim.x) * blockDim.x) {
    rstd[c] = S(1.0 / sqrt((var ? double(var[c]) : 0.0) + eps));
  }
}

// Owns the cuDNN descriptors of one call.
struct BnDescriptors {
  cudnnTensorDescriptor_t x = nullptr, param = nullptr;
  BnDescriptors() {
    BRISK_CUDNN_CHECK(cudnn().cudnnCreateTensorDescriptor(&x));
    const cudnnStatus_t st = cudnn().cudnnCreateTensorDescriptor(&param);
    if (st != CUDNN_STATUS_SUCCESS) cudnn().cudnnDestroyTensorDescriptor(x);  // the destructor will not run
    BRISK_CUDNN_CHECK(st);
  }
  ~BnDescriptors() {
    cudnn().cudnnDestroyTensorDescriptor(x);
    cudnn().cudnnDestroyTensorDescriptor(param);
  }
  BnDescriptors(const BnDescriptors&) = delete;
  BnDescriptors& operator=(const BnDescriptors&) = delete;
};

// in: (x (B, C, *), weight, bias, running_mean, running_var); BatchNormParams
void batch_norm_cuda(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const char* op = "batch_norm";
  const Tensor& x_in = in[0];
  const BatchNormParams params = BatchNormParams::from(attrs);
  const bool training = params.training;
  const double eps = params.eps;
  const int64_t batch = x_in.sizes()[0], channels = x_in.sizes()[1];
  const int64_t spatial = batch * channels == 0 ? 0 : x_in.numel() / (batch * channels);
  if (channels == 0) return;          // every output is empty
  const DType stat = out[1].dtype();  // F32, or F64 for F64 inputs
  DenseOut y(out[0]), mean(out[1]), rstd(out[2]);
  const int device = x_in.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);

  Tensor run_mean, run_var;
  if (!training) {
    run_mean = dense_as(in[3], stat);
    run_var = dense_as(in[4], stat);
    copy_into(mean.dense, run_mean);
  } else if (x_in.numel() == 0) {
    zero_(mean.dense);  // statistics of no values: mean 0, variance 0, as on the CPU
  }
  if (!training || x_in.numel() == 0) {
    dispatch_float(stat, op, [&](auto tag) {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
        bn_rstd_kernel<S>
            <<<grid_for(channels), kBlock, 0, stream>>>(training ? nullptr : static_cast<const S*>(run_var.data_ptr()),
                                                        static_cast<S*>(rstd.dense.data_ptr()), channels, eps);
        BRISK_CUDA_CHECK_LAUNCH();
      }
    });
  }

  if (x_in.numel() > 0) {
    BRISK_CHECK(batch <= INT32_MAX && channels <= INT32_MAX && spatial <= INT32_MAX && x_in.numel() <= INT32_MAX, op,
                ": input ", x_in.sizes(), " exceeds cuDNN's 32-bit limit");
    // BF16 runs in F32 (see Note [Batch norm on cuDNN]).
    const DType work = x_in.dtype() == DType::BF16 ? DType::F32 : x_in.dtype();
    const Tensor x = dense_as(x_in, work);
    const Tensor yw = work == y.dense.dtype() ? y.dense : make_empty(y.dense.sizes(), work, y.dense.device());
    const Tensor w = dense_as(in[1], stat), b = dense_as(in[2], stat);
    BnDescriptors d;
    BRISK_CUDNN_CHECK(cudnn().cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, cudnn_type(work, op), int(batch),
                                                         int(channels), int(spatial), 1));
    BRISK_CUDNN_CHECK(cudnn().cudnnDeriveBNTensorDescriptor(d.param, d.x, CUDNN_BATCHNORM_SPATIAL));
    const float one_f = 1, zero_f = 0;
    const double one_d = 1, zero_d = 0;
    const void* alpha = work == DType::F64 ? static_cast<const void*>(&one_d) : &one_f;
    const void* beta = work == DType::F64 ? static_cast<const void*>(&zero_d) : &zero_f;
    cudnnHandle_t h = cudnn_handle(device, op);
    cudnnStatus_t st;
    if (training) {
      st = cudnn().cudnnBatchNormalizationForwardTraining(
          h, CUDNN_BATCHNORM_SPATIAL, alpha, beta, d.x, x.data_ptr(), d.x, yw.data_ptr(), d.param, w.data_ptr(),
          b.data_ptr(), /*exponentialAverageFactor=*/0.0, /*resultRunningMean=*/nullptr,
          /*resultRunningVariance=*/nullptr, eps, mean.dense.data_ptr(), rstd.dense.data_ptr());
    } else {
      st = cudnn().cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, alpha, beta, d.x, x.data_ptr(),
                                                           d.x, yw.data_ptr(), d.param, w.data_ptr(), b.data_ptr(),
                                                           run_mean.data_ptr(), run_var.data_ptr(), eps);
    }
    BRISK_CHECK(st == CUDNN_STATUS_SUCCESS, op, ": cuDNN failed with ", cudnn().cudnnGetErrorString(st), " (", int(st),
                ") for input ", x_in.str(), (training ? " in training" : " in eval"), ", eps ", eps);
    if (yw.impl() != y.dense.impl()) copy_into(y.dense, yw);
  }
  y.finish();
  mean.finish();
  rstd.finish();
}

#endif  // BRISK_WITH_CUDNN

}  // namespace

void register_norm() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_kernel(OpId::LayerNorm, gpu, layer_norm_cuda);
  register_kernel(OpId::LayerNormBackward, gpu, layer_norm_backward_cuda);
  register_kernel(OpId::RmsNorm, gpu, rms_norm_cuda);
  register_kernel(OpId::RmsNormBackward, gpu, rms_norm_backward_cuda);
  register_kernel(OpId::BatchNormBackward, gpu, batch_norm_backward_cuda);
#ifdef BRISK_WITH_CUDNN
  register_kernel(OpId::BatchNorm, gpu, batch_norm_cuda);
#endif
}

}  // namespace brisk::kernels::cuda
