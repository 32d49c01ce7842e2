// kernels/cuda/pool.cu: CUDA kernels of the pooling ops and their backward ops: max_pool2d
// (values and flat argmax per plane), max_pool2d_backward, avg_pool2d (ceil_mode,
// count_include_pad) and its backward, adaptive_avg_pool2d and its backward, adaptive_max_pool2d
// (values and flat argmax; its gradient is a scatter_add), resample2d and its backward (pad /
// interpolate's separable 2-tap map). All hand-written
// (Note [CUDA pooling]): one thread per output element forward, one thread per input element
// backward (a gather, so no atomics and the same summation order on every run). 16-bit floats
// compute in float and round once; F64 in double. The windows are kernels/pool_window.h's, as
// on the CPU (kernels/cpu/pool.cpp, the reference), and so are the tie/NaN rules.
// Not here: shapes, checks and backward formulas (engine/ops/pool.cpp); convolution (conv.cu).
#include <limits>
#include <type_traits>

#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"
#include "kernels/pool_window.h"

namespace brisk::kernels::cuda {

// Note [CUDA pooling]
// cuDNN's pooling has no argmax output (max_pool2d must return indices, and PyTorch writes its
// own kernel for the same reason), no ceil_mode (it would need padding tricks that change the
// divisor of count_include_pad), and no adaptive windows; the kernels are memory-bound loops
// that a direct kernel runs at bandwidth anyway. So every pooling op is hand-written here.
// Backward ops are gathers: each input element finds the outputs whose windows can contain it
// (for max pooling the outputs whose index points at it, as PyTorch's max_pool_backward_nchw)
// and sums their gradients in output order. No atomics: results are deterministic, and the
// sum order is the CPU's (which scatters in output order), so F32/F64 results agree exactly.
// An index outside its own window (possible only for indices not made by max_pool2d) is
// ignored by the gather, as in PyTorch; one outside its plane is reported through the device
// error slot (Note [Device errors]), as the CPU reports it.

namespace {

// ---- max pooling
// x (planes, H, W) -> y, idx (planes, Ho, Wo): the max of each window (padding never wins);
// NaN wins, and the first of equal maxima (in window order), as on the CPU.
template <class T>
__global__ void max_pool_kernel(const T* x, T* y, int64_t* idx, PoolProblem p) {
  using A = compute_t<T>;
  const int64_t n = p.planes * p.Ho * p.Wo;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % p.Wo;
    const int64_t oh = (o / p.Wo) % p.Ho;
    const T* xp = x + (o / (p.Ho * p.Wo)) * p.H * p.W;
    const int64_t hs = oh * p.sh - p.ph, ws = ow * p.sw - p.pw;
    A best = -std::numeric_limits<A>::infinity();
    int64_t arg = -1;
    for (int64_t i = 0; i < p.kh; ++i) {
      const int64_t ih = hs + i * p.dh;
      if (ih < 0) continue;
      if (ih >= p.H) break;
      for (int64_t j = 0; j < p.kw; ++j) {
        const int64_t iw = ws + j * p.dw;
        if (iw < 0) continue;
        if (iw >= p.W) break;
        const A v = A(load_value(xp + ih * p.W + iw));
        if (arg < 0 || v > best || v != v) {
          best = v;
          arg = ih * p.W + iw;
        }
      }
    }
    y[o] = Store<T>::to(best);
    idx[o] = arg < 0 ? 0 : arg;
  }
}

// First output (along one axis) whose window of `extent` input positions, starting at
// o * stride - pad, can reach input position i; outputs up to (i + pad) / stride start at or
// before i.
__device__ __forceinline__ int64_t first_window(int64_t i, int64_t pad, int64_t extent, int64_t stride) {
  return i + pad < extent ? 0 : (i + pad - extent) / stride + 1;
}
__device__ __forceinline__ int64_t end_window(int64_t i, int64_t pad, int64_t stride, int64_t n_out) {
  const int64_t e = (i + pad) / stride + 1;
  return e < n_out ? e : n_out;
}

// g, idx (planes, Ho, Wo) -> gx (planes, H, W): each input element sums the gradients of the
// outputs whose index names it (see Note [CUDA pooling]). A window that holds no input element
// (possible with dilation) names element 0 without covering it; when the geometry has such
// windows (`empty_windows`), element 0 of each plane scans every output of its plane instead,
// in output order as the CPU sums.
template <class T>
__global__ void max_pool_backward_kernel(const T* g, const int64_t* idx, T* gx, PoolProblem p, bool empty_windows) {
  using A = compute_t<T>;
  const int64_t n = p.planes * p.H * p.W;
  const int64_t ext_h = (p.kh - 1) * p.dh + 1, ext_w = (p.kw - 1) * p.dw + 1;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t iw = e % p.W;
    const int64_t ih = (e / p.W) % p.H;
    const int64_t base = (e / (p.H * p.W)) * p.Ho * p.Wo;
    const int64_t here = ih * p.W + iw;
    A acc = 0;
    if (empty_windows && here == 0) {
      for (int64_t o = base; o < base + p.Ho * p.Wo; ++o) {
        if (idx[o] == 0) acc += A(load_value(g + o));
      }
      gx[e] = Store<T>::to(acc);
      continue;
    }
    const int64_t oh1 = end_window(ih, p.ph, p.sh, p.Ho), ow1 = end_window(iw, p.pw, p.sw, p.Wo);
    const int64_t ow0 = first_window(iw, p.pw, ext_w, p.sw);
    for (int64_t oh = first_window(ih, p.ph, ext_h, p.sh); oh < oh1; ++oh) {
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const int64_t o = base + oh * p.Wo + ow;
        if (idx[o] == here) acc += A(load_value(g + o));
      }
    }
    gx[e] = Store<T>::to(acc);
  }
}

// Reports the first index outside its plane of `hw` elements (Note [Device errors]).
__global__ void check_indices_kernel(const int64_t* idx, int64_t n, int64_t hw, DeviceErrorSlot* slot, int op) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = idx[o];
    if (static_cast<uint64_t>(k) >= static_cast<uint64_t>(hw)) report_index_error(slot, op, k, hw);
  }
}

// ---- average pooling (windows: avg_window, kernels/pool_window.h)
// x (planes, H, W) -> y (planes, Ho, Wo)
template <class T>
__global__ void avg_pool_kernel(const T* x, T* y, PoolProblem p) {
  using A = compute_t<T>;
  const int64_t n = p.planes * p.Ho * p.Wo;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % p.Wo;
    const int64_t oh = (o / p.Wo) % p.Ho;
    const T* xp = x + (o / (p.Ho * p.Wo)) * p.H * p.W;
    const PoolWindow win = avg_window(p, oh, ow);
    A sum = 0;
    for (int64_t ih = win.hs; ih < win.he; ++ih) {
      for (int64_t iw = win.ws; iw < win.we; ++iw) sum += A(load_value(xp + ih * p.W + iw));
    }
    y[o] = Store<T>::to(win.empty() ? A(0) : sum / A(win.divisor));
  }
}

// g (planes, Ho, Wo) -> gx (planes, H, W): each input element sums g / divisor over the
// windows that contain it.
template <class T>
__global__ void avg_pool_backward_kernel(const T* g, T* gx, PoolProblem p) {
  using A = compute_t<T>;
  const int64_t n = p.planes * p.H * p.W;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t iw = e % p.W;
    const int64_t ih = (e / p.W) % p.H;
    const T* gp = g + (e / (p.H * p.W)) * p.Ho * p.Wo;
    const int64_t oh1 = end_window(ih, p.ph, p.sh, p.Ho), ow1 = end_window(iw, p.pw, p.sw, p.Wo);
    const int64_t ow0 = first_window(iw, p.pw, p.kw, p.sw);
    A acc = 0;
    for (int64_t oh = first_window(ih, p.ph, p.kh, p.sh); oh < oh1; ++oh) {
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const PoolWindow win = avg_window(p, oh, ow);
        if (!win.contains(ih, iw)) continue;
        acc += A(load_value(gp + oh * p.Wo + ow)) / A(win.divisor);
      }
    }
    gx[e] = Store<T>::to(acc);
  }
}

// ---- adaptive average pooling (windows: adaptive_window, kernels/pool_window.h)

// x (planes, H, W) -> y (planes, Ho, Wo)
template <class T>
__global__ void adaptive_avg_pool_kernel(const T* x, T* y, PoolProblem p) {
  using A = compute_t<T>;
  const int64_t n = p.planes * p.Ho * p.Wo;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % p.Wo;
    const int64_t oh = (o / p.Wo) % p.Ho;
    const T* xp = x + (o / (p.Ho * p.Wo)) * p.H * p.W;
    const PoolWindow win = adaptive_window(p, oh, ow);
    A sum = 0;
    for (int64_t ih = win.hs; ih < win.he; ++ih) {
      for (int64_t iw = win.ws; iw < win.we; ++iw) sum += A(load_value(xp + ih * p.W + iw));
    }
    y[o] = Store<T>::to(sum / A(win.divisor));
  }
}

// g (planes, Ho, Wo) -> gx (planes, H, W). Input row ih lies in the windows of outputs
// [floor(ih * Ho / H), ceil((ih + 1) * Ho / H)) (the same formula with in and out swapped);
// membership is checked again against each window.
template <class T>
__global__ void adaptive_avg_pool_backward_kernel(const T* g, T* gx, PoolProblem p) {
  using A = compute_t<T>;
  const int64_t n = p.planes * p.H * p.W;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t iw = e % p.W;
    const int64_t ih = (e / p.W) % p.H;
    const T* gp = g + (e / (p.H * p.W)) * p.Ho * p.Wo;
    const int64_t oh1 = min(adaptive_end(ih, p.Ho, p.H), p.Ho), ow1 = min(adaptive_end(iw, p.Wo, p.W), p.Wo);
    A acc = 0;
    for (int64_t oh = adaptive_start(ih, p.Ho, p.H); oh < oh1; ++oh) {
      const int64_t hs = adaptive_start(oh, p.H, p.Ho), he = adaptive_end(oh, p.H, p.Ho);
      if (ih < hs || ih >= he) continue;
      for (int64_t ow = adaptive_start(iw, p.Wo, p.W); ow < ow1; ++ow) {
        const int64_t ws = adaptive_start(ow, p.W, p.Wo), we = adaptive_end(ow, p.W, p.Wo);
        if (iw < ws || iw >= we) continue;
        acc += A(load_value(gp + oh * p.Wo + ow)) / A((he - hs) * (we - ws));
      }
    }
    gx[e] = Store<T>::to(acc);
  }
}

// ---- adaptive max pooling: x (planes, H, W) -> y, idx (planes, Ho, Wo), the CPU's rules
// (NaN wins, later NaNs too; the first of equal maxima in row-major window order). Its gradient
// is a scatter_add (engine/ops/pool.cpp), so there is no backward kernel here.
template <class T>
__global__ void adaptive_max_pool_kernel(const T* x, T* y, int64_t* idx, PoolProblem p) {
  using A = compute_t<T>;
  const int64_t n = p.planes * p.Ho * p.Wo;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % p.Wo;
    const int64_t oh = (o / p.Wo) % p.Ho;
    const T* xp = x + (o / (p.Ho * p.Wo)) * p.H * p.W;
    const PoolWindow win = adaptive_window(p, oh, ow);
    int64_t arg = win.hs * p.W + win.ws;
    A best = A(load_value(xp + arg));
    for (int64_t ih = win.hs; ih < win.he; ++ih) {
      for (int64_t iw = win.ws; iw < win.we; ++iw) {
        const A v = A(load_value(xp + ih * p.W + iw));
        if (v > best || v != v) {
          best = v;
          arg = ih * p.W + iw;
        }
      }
    }
    y[o] = Store<T>::to(best);
    idx[o] = arg;
  }
}

// ---- resample2d (engine/ops/pool.cpp): y[p, i, j] = sum over a, b of wh[i, a] ww[j, b]
// x[p, ih[i, a], iw[j, b]]. Forward: one thread per output, PyTorch's (and the CPU's) order of
// the four products. Backward, the adjoint, in two gathers-by-ownership without atomics: rows
// (one thread per (plane, output row) scatters along its own row of t (planes, Ho, W), the
// gradient pulled back through the column table), then columns (one thread per (plane, input
// column) scatters t's column into its own column of gx through the row table). Taps whose
// index is outside the plane are skipped (the CPU kernel reports them; the tables come from
// engine/ops/resize.cpp, which keeps them in range).
template <class T>
__global__ void resample_kernel(const T* x, T* y, const int64_t* ih, const compute_t<T>* wh, const int64_t* iw,
                                const compute_t<T>* ww, int64_t planes, int64_t H, int64_t W, int64_t Ho, int64_t Wo) {
  using A = compute_t<T>;
  const int64_t n = planes * Ho * Wo;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = o % Wo;
    const int64_t i = (o / Wo) % Ho;
    const T* xp = x + (o / (Ho * Wo)) * H * W;
    A rows[2];
    for (int a = 0; a < 2; ++a) {
      const int64_t r = ih[2 * i + a];
      A acc = 0;
      for (int b = 0; b < 2; ++b) {
        const int64_t c = iw[2 * j + b];
        if (r >= 0 && r < H && c >= 0 && c < W) acc += ww[2 * j + b] * A(load_value(xp + r * W + c));
      }
      rows[a] = acc;
    }
    y[o] = Store<T>::to(wh[2 * i] * rows[0] + wh[2 * i + 1] * rows[1]);
  }
}

// t[p, i, :] (W) = the gradient row g[p, i, :] (Wo) scattered through the column table.
template <class T>
__global__ void resample_backward_rows(const T* g, compute_t<T>* t, const int64_t* iw, const compute_t<T>* ww,
                                       int64_t planes, int64_t W, int64_t Ho, int64_t Wo) {
  using A = compute_t<T>;
  const int64_t n = planes * Ho;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < n; r += int64_t(gridDim.x) * blockDim.x) {
    A* tr = t + r * W;
    const T* gr = g + r * Wo;
    for (int64_t c = 0; c < W; ++c) tr[c] = 0;
    for (int64_t j = 0; j < Wo; ++j) {
      const A v = A(load_value(gr + j));
      for (int b = 0; b < 2; ++b) {
        const int64_t c = iw[2 * j + b];
        if (c >= 0 && c < W) tr[c] += ww[2 * j + b] * v;
      }
    }
  }
}

// gx[p, :, c] (H) = t[p, :, c] (Ho) scattered through the row table, in Out (T, or the compute
// type for 16-bit T, rounded afterwards).
template <class A, class Out>
__global__ void resample_backward_columns(const A* t, Out* gx, const int64_t* ih, const A* wh, int64_t planes,
                                          int64_t H, int64_t W, int64_t Ho) {
  const int64_t n = planes * W;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % W, p = e / W;
    Out* col = gx + p * H * W + c;
    const A* tc = t + p * Ho * W + c;
    for (int64_t r = 0; r < H; ++r) col[r * W] = Out(0);
    for (int64_t i = 0; i < Ho; ++i) {
      const A v = tc[i * W];
      for (int a = 0; a < 2; ++a) {
        const int64_t r = ih[2 * i + a];
        if (r >= 0 && r < H) col[r * W] = Out(A(col[r * W]) + wh[2 * i + a] * v);
      }
    }
  }
}

template <class T>
__global__ void round_kernel(const compute_t<T>* src, T* dst, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x)
    dst[k] = Store<T>::to(src[k]);
}

// ---- host side
template <class T>
const T* cdata(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <class T>
T* mdata(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// Launches `launch(T{}, stream)` for x's floating dtype on `device` when there is work.
template <class F>
void run_pool(const Tensor& any, int64_t work, const char* op, F&& launch) {
  if (work == 0) return;
  const int device = any.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_handle(device);
  dispatch_float(any.dtype(), op, [&](auto tag) {
    launch(tag, stream);
    BRISK_CUDA_CHECK_LAUNCH();
  });
}

// x -> (y, indices)
void max_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = dense(in[0]);
  DenseOut y(out[0]), idx(out[1]);
  const PoolProblem p = pool_problem(x.sizes(), y.dense.sizes(), PoolParams::from(attrs, "max_pool2d"));
  const int64_t n = p.planes * p.Ho * p.Wo;
  run_pool(x, n, "max_pool2d", [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    max_pool_kernel<T>
        <<<grid_for(n), kBlock, 0, stream>>>(cdata<T>(x), mdata<T>(y.dense), mdata<int64_t>(idx.dense), p);
  });
  y.finish();
  idx.finish();
}

// Whether some output's window along one axis (n_out windows of k taps, stride s, padding pad,
// dilation d over n inputs) holds no input position.
bool has_empty_window(int64_t n, int64_t n_out, int64_t k, int64_t s, int64_t pad, int64_t d) {
  for (int64_t o = 0; o < n_out; ++o) {
    bool any = false;
    for (int64_t j = 0; j < k && !any; ++j) {
      const int64_t i = o * s - pad + j * d;
      any = i >= 0 && i < n;
    }
    if (!any) return true;
  }
  return false;
}

// (grad, indices) -> gx
void max_pool2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor g = dense(in[0]), idx = dense(in[1]);
  DenseOut gx(out[0]);
  const PoolProblem p = pool_problem(gx.dense.sizes(), g.sizes(), PoolParams::from(attrs, "max_pool2d_backward"));
  const int64_t n = p.planes * p.H * p.W, n_out = g.numel();
  if (n_out > 0) {  // also when the planes are empty: every index is then out of its plane
    const int device = g.device().index;
    DeviceGuard guard(device);
    check_indices_kernel<<<grid_for(n_out), kBlock, 0, stream_handle(device)>>>(
        cdata<int64_t>(idx), n_out, p.H * p.W, device_error_slot(device), int(OpId::MaxPool2dBackward));
    BRISK_CUDA_CHECK_LAUNCH();
  }
  const bool empty_windows =
      has_empty_window(p.H, p.Ho, p.kh, p.sh, p.ph, p.dh) || has_empty_window(p.W, p.Wo, p.kw, p.sw, p.pw, p.dw);
  run_pool(g, n, "max_pool2d_backward", [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    max_pool_backward_kernel<T>
        <<<grid_for(n), kBlock, 0, stream>>>(cdata<T>(g), cdata<int64_t>(idx), mdata<T>(gx.dense), p, empty_windows);
  });
  gx.finish();
}

void avg_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = dense(in[0]);
  DenseOut y(out[0]);
  const PoolProblem p = pool_problem(x.sizes(), y.dense.sizes(), PoolParams::from(attrs, "avg_pool2d"));
  const int64_t n = p.planes * p.Ho * p.Wo;
  run_pool(x, n, "avg_pool2d", [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    avg_pool_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(cdata<T>(x), mdata<T>(y.dense), p);
  });
  y.finish();
}

void avg_pool2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor g = dense(in[0]);
  DenseOut gx(out[0]);
  const PoolProblem p = pool_problem(gx.dense.sizes(), g.sizes(), PoolParams::from(attrs, "avg_pool2d_backward"));
  const int64_t n = p.planes * p.H * p.W;
  run_pool(g, n, "avg_pool2d_backward", [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    avg_pool_backward_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(cdata<T>(g), mdata<T>(gx.dense), p);
  });
  gx.finish();
}

void adaptive_avg_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor x = dense(in[0]);
  DenseOut y(out[0]);
  const PoolProblem p = adaptive_problem(x.sizes(), y.dense.sizes());
  const int64_t n = p.planes * p.Ho * p.Wo;
  run_pool(x, n, "adaptive_avg_pool2d", [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    adaptive_avg_pool_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(cdata<T>(x), mdata<T>(y.dense), p);
  });
  y.finish();
}

void adaptive_avg_pool2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor g = dense(in[0]);
  DenseOut gx(out[0]);
  const PoolProblem p = adaptive_problem(gx.dense.sizes(), g.sizes());
  const int64_t n = p.planes * p.H * p.W;
  run_pool(g, n, "adaptive_avg_pool2d_backward", [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    adaptive_avg_pool_backward_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(cdata<T>(g), mdata<T>(gx.dense), p);
  });
  gx.finish();
}

// x -> (y, indices)
void adaptive_max_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor x = dense(in[0]);
  DenseOut y(out[0]), idx(out[1]);
  const PoolProblem p = adaptive_problem(x.sizes(), y.dense.sizes());
  const int64_t n = p.planes * p.Ho * p.Wo;
  run_pool(x, n, "adaptive_max_pool2d", [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    adaptive_max_pool_kernel<T>
        <<<grid_for(n), kBlock, 0, stream>>>(cdata<T>(x), mdata<T>(y.dense), mdata<int64_t>(idx.dense), p);
  });
  y.finish();
  idx.finish();
}

// (x, ih, wh, iw, ww) -> y; backward: (grad, ih, wh, iw, ww) -> gx
void resample_launch(std::span<const Tensor> in, std::span<Tensor> out, bool backward, const char* op) {
  const Tensor src = dense(in[0]);
  DenseOut dst(out[0]);
  const Shape& xs = backward ? dst.dense.sizes() : src.sizes();
  const int64_t H = xs[xs.size() - 2], W = xs[xs.size() - 1];
  const int64_t planes = H * W == 0 ? 0 : xs.numel() / (H * W);
  const Tensor ih = dense(in[1]), wh = dense(in[2]), iw = dense(in[3]), ww = dense(in[4]);
  const int64_t Ho = ih.size(0), Wo = iw.size(0);
  const int64_t n = backward ? planes * H * W : planes * Ho * Wo;
  run_pool(src, n, op, [&](auto tag, cudaStream_t stream) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const int64_t* pih = cdata<int64_t>(ih);
    const int64_t* piw = cdata<int64_t>(iw);
    if (!backward) {
      resample_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(cdata<T>(src), mdata<T>(dst.dense), pih, cdata<A>(wh), piw,
                                                             cdata<A>(ww), planes, H, W, Ho, Wo);
      return;
    }
    const DType adt = std::is_same_v<A, double> ? DType::F64 : DType::F32;
    const Tensor t = make_empty({planes, Ho, W}, adt, src.device());
    if (planes * Ho > 0) {  // else the column pass only zeroes gx
      resample_backward_rows<T><<<grid_for(planes * Ho), kBlock, 0, stream>>>(cdata<T>(src), mdata<A>(t), piw,
                                                                              cdata<A>(ww), planes, W, Ho, Wo);
      BRISK_CUDA_CHECK_LAUNCH();
    }
    if constexpr (std::is_same_v<T, A>) {
      resample_backward_columns<A, T><<<grid_for(planes * W), kBlock, 0, stream>>>(cdata<A>(t), mdata<T>(dst.dense),
                                                                                   pih, cdata<A>(wh), planes, H, W, Ho);
    } else {
      const Tensor acc = make_empty({planes, H, W}, adt, src.device());
      resample_backward_columns<A, A><<<grid_for(planes * W), kBlock, 0, stream>>>(cdata<A>(t), mdata<A>(acc), pih,
                                                                                   cdata<A>(wh), planes, H, W, Ho);
      BRISK_CUDA_CHECK_LAUNCH();
      round_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(cdata<A>(acc), mdata<T>(dst.dense), n);
    }
  });
  dst.finish();
}

void resample2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  resample_launch(in, out, false, "resample2d");
}

void resample2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  resample_launch(in, out, true, "resample2d_backward");
}

}  // namespace

void register_pool() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_kernel(OpId::MaxPool2d, gpu, max_pool2d_kernel);
  register_kernel(OpId::MaxPool2dBackward, gpu, max_pool2d_backward_kernel);
  register_kernel(OpId::AvgPool2d, gpu, avg_pool2d_kernel);
  register_kernel(OpId::AvgPool2dBackward, gpu, avg_pool2d_backward_kernel);
  register_kernel(OpId::AdaptiveAvgPool2d, gpu, adaptive_avg_pool2d_kernel);
  register_kernel(OpId::AdaptiveAvgPool2dBackward, gpu, adaptive_avg_pool2d_backward_kernel);
  register_kernel(OpId::AdaptiveMaxPool2d, gpu, adaptive_max_pool2d_kernel);
  register_kernel(OpId::Resample2d, gpu, resample2d_kernel);
  register_kernel(OpId::Resample2dBackward, gpu, resample2d_backward_kernel);
}

}  // namespace brisk::kernels::cuda
