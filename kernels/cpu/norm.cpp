// kernels/cpu/norm.cpp: fused CPU kernels of layer_norm, rms_norm and batch_norm, forward and
// backward. One pass per row (layer and RMS norm) or per channel (batch norm) accumulates the
// moments in double, then one pass normalizes and applies the affine; the backwards take one
// pass per row (channel) for their sums and one for gx; OpenMP over rows / channels. F16/BF16 are read as float
// and rounded once on store; the statistics are F32 (F64 for F64 inputs).
// Not here: inference, checks and backward (engine/ops/norm.cpp); the plain-loop references
// the specs compare against (opcheck/specs_norm.cpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/scratch.h"

namespace brisk::kernels::cpu {

namespace {

// Statistic type: what mean/rstd are stored as.
template <class T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

void check_out(const Tensor& t, const char* op) {
  BRISK_CHECK(t.is_contiguous(), op, ": outputs must be contiguous, got strides ", t.strides());
}

// Note [One-pass moments]
// Mean and biased variance from one pass: sums of d = x - k and d^2 in double, with k the
// group's first value. The shift keeps E[d^2] - E[d]^2 free of the cancellation the plain
// formula suffers when the mean is large against the spread, and unlike Welford the loop has
// no division, so it vectorizes. The normalize pass keeps the shift too: it computes
// ((x - k) - (mean - k)) * rstd, where x - k is exact for values near k, so an F32 output does
// not lose the mean's rounding error (~1e-3 at a mean of 1e4) against a small spread.
struct Moments {
  double s1 = 0, s2 = 0;
  void add(double d) {
    s1 += d;
    s2 += d * d;
  }
  // (mean - k, biased var) of the n values.
  std::pair<double, double> finish(int64_t n) const {
    if (n == 0) return {0.0, 0.0};
    const double m = s1 / double(n);
    const double v = s2 / double(n) - m * m;
    return {m, v < 0 ? 0.0 : v};  // rounding below 0 clamps; NaN stays NaN (std::max(0, NaN) is 0)
  }
};

template <class T>
BRISK_INLINE double as_double(T v) {
  return double(static_cast<compute_t<T>>(v));
}

// Adds x[0, n) shifted by k to m, over kLanes independent accumulators: the compiler may not
// reorder one floating-point sum, but it vectorizes independent ones. The order is fixed, so
// results do not depend on the number of threads.
template <class T>
void accumulate(const T* x, int64_t n, double k, Moments& m) {
  constexpr int kLanes = 8;
  double s1[kLanes] = {}, s2[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double d = as_double(x[i + l]) - k;
      s1[l] += d;
      s2[l] += d * d;
    }
  }
  for (; i < n; ++i) m.add(as_double(x[i]) - k);
  for (int l = 0; l < kLanes; ++l) {
    m.s1 += s1[l];
    m.s2 += s2[l];
  }
}

// ---- layer norm
// x (R, N) rows, w/b (N) -> y (R, N), mean/rstd (R)
template <class T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* y, stat_t<T>* mean, stat_t<T>* rstd, int64_t rows,
                     int64_t n, double eps) {
  using C = compute_t<T>;
  const int nt = threads_for(rows * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    const C k = n ? C(xr[0]) : C(0);
    Moments acc;
    accumulate(xr, n, double(k), acc);
    auto [dm, v] = acc.finish(n);
    const double rs = 1.0 / std::sqrt(v + eps);
    mean[r] = stat_t<T>(double(k) + dm);
    rstd[r] = stat_t<T>(rs);
    const C dmc = C(dm), rc = C(rs);
    for (int64_t j = 0; j < n; ++j) {
      yr[j] = T(((C(xr[j]) - k) - dmc) * rc * C(w[j]) + C(b[j]));
    }
  }
}

// in: (x, weight, bias), normalized over the trailing dims that weight covers (LayerNormParams)
void layer_norm_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  for (const Tensor& t : out) check_out(t, "layer_norm");
  const double eps = LayerNormParams::from(attrs).eps;
  const Tensor x = dense(in[0]), w = dense(in[1]), b = dense(in[2]);
  const int64_t n = w.numel();
  const int64_t rows = n == 0 ? out[1].numel() : x.numel() / n;
  dispatch_float(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    using S = stat_t<T>;
    layer_norm_rows<T>(static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()),
                       static_cast<const T*>(b.data_ptr()), static_cast<T*>(out[0].data_ptr()),
                       static_cast<S*>(out[1].data_ptr()), static_cast<S*>(out[2].data_ptr()), rows, n, eps);
  });
}

// ---- layer_norm_backward and rms_norm_backward (Note [Fused layer norm backward] in
// engine/ops/norm.cpp). Rows in fixed blocks of kRowBlock: a block's rows write gx and add
// gy * xhat (and gy) into the block's own partial row; the partials are then summed in block
// order per column, so gw and gb do not depend on the number of threads. Per row, with
// xhat = (x - mean) * rstd (x * rstd for RMS) and gxhat = gy * w:
//   gx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))   (RMS: no mean(gxhat))
constexpr int64_t kRowBlock = 32;

template <bool Rms, class T>
void norm_backward_rows(const T* gy, const T* x, const T* w, const stat_t<T>* mean, const stat_t<T>* rstd, T* gx, T* gw,
                        T* gb, int64_t rows, int64_t n) {
  using C = compute_t<T>;
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  std::vector<C> pw(size_t(blocks * n), C(0)), pb(Rms ? 0 : size_t(blocks * n), C(0));
  const int nt = std::min<int>(threads_for(rows * n * 4), int(std::max<int64_t>(blocks, 1)));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    std::vector<C> xh_v(static_cast<size_t>(n)), g_v(static_cast<size_t>(n));
    C* __restrict xh = xh_v.data();
    C* __restrict g = g_v.data();
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      C* __restrict bw = pw.data() + blk * n;
      C* __restrict bb = Rms ? nullptr : pb.data() + blk * n;
      for (int64_t r = blk * kRowBlock; r < std::min(rows, (blk + 1) * kRowBlock); ++r) {
        const T* xr = x + r * n;
        const T* gr = gy + r * n;
        const C m = Rms ? C(0) : C(mean[r]), rs = C(rstd[r]);
        constexpr int kLanes = 8;
        C s1[kLanes] = {}, s2[kLanes] = {};
        int64_t j = 0;
        for (; j + kLanes <= n; j += kLanes) {
          for (int l = 0; l < kLanes; ++l) {
            const C gyj = C(gr[j + l]);
            const C xhj = (C(xr[j + l]) - m) * rs;
            const C gj = gyj * C(w[j + l]);
            xh[j + l] = xhj;
            g[j + l] = gj;
            s1[l] += gj;
            s2[l] += gj * xhj;
            bw[j + l] += gyj * xhj;
            if constexpr (!Rms) bb[j + l] += gyj;
          }
        }
        for (; j < n; ++j) {
          const C gyj = C(gr[j]);
          const C xhj = (C(xr[j]) - m) * rs;
          const C gj = gyj * C(w[j]);
          xh[j] = xhj;
          g[j] = gj;
          s1[0] += gj;
          s2[0] += gj * xhj;
          bw[j] += gyj * xhj;
          if constexpr (!Rms) bb[j] += gyj;
        }
        C sum1 = 0, sum2 = 0;
        for (int l = 0; l < kLanes; ++l) {
          sum1 += s1[l];
          sum2 += s2[l];
        }
        const C a1 = Rms ? C(0) : sum1 / C(n), a2 = sum2 / C(n);
        T* out = gx + r * n;
        for (int64_t k = 0; k < n; ++k) out[k] = T(rs * (g[k] - a1 - xh[k] * a2));
      }
    }
    // gw, gb: each column's block partials in block order.
#pragma omp for schedule(static)
    for (int64_t k = 0; k < n; ++k) {
      C sw = 0, sb = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        sw += pw[size_t(blk * n + k)];
        if constexpr (!Rms) sb += pb[size_t(blk * n + k)];
      }
      gw[k] = T(sw);
      if constexpr (!Rms) gb[k] = T(sb);
    }
  }
}

// in: (gy, x, weight, mean, rstd) -> (gx, gw, gb), or for RMS (gy, x, weight, rstd) -> (gx, gw).
template <bool Rms>
void norm_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const char* op = Rms ? "rms_norm_backward" : "layer_norm_backward";
  for (const Tensor& t : out) check_out(t, op);
  const Tensor gy = dense(in[0]), x = dense(in[1]), w = dense(in[2]), r = dense(in[Rms ? 3 : 4]);
  const Tensor m = Rms ? Tensor() : dense(in[3]);
  const int64_t n = w.numel();
  const int64_t rows = r.numel();
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using S = stat_t<T>;
    norm_backward_rows<Rms, T>(static_cast<const T*>(gy.data_ptr()), static_cast<const T*>(x.data_ptr()),
                               static_cast<const T*>(w.data_ptr()), Rms ? nullptr : static_cast<const S*>(m.data_ptr()),
                               static_cast<const S*>(r.data_ptr()), static_cast<T*>(out[0].data_ptr()),
                               static_cast<T*>(out[1].data_ptr()), Rms ? nullptr : static_cast<T*>(out[2].data_ptr()),
                               rows, n);
  });
}

// ---- rms norm: x (R, N), w (N) -> y = x * rstd * w, rstd (R) = 1 / sqrt(mean(x^2) + eps)
// (mean of squares in double, as the layer norm's moments).
template <class T>
void rms_norm_rows(const T* x, const T* w, T* y, stat_t<T>* rstd, int64_t rows, int64_t n, double eps) {
  using C = compute_t<T>;
  const int nt = threads_for(rows * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    Moments acc;
    accumulate(xr, n, 0.0, acc);
    const double ms = n ? acc.s2 / double(n) : 0.0;
    const double rs = 1.0 / std::sqrt(ms + eps);
    rstd[r] = stat_t<T>(rs);
    const C rc = C(rs);
    for (int64_t j = 0; j < n; ++j) yr[j] = T(C(xr[j]) * rc * C(w[j]));
  }
}

// in: (x, weight) -> (y, rstd); LayerNormParams
void rms_norm_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  for (const Tensor& t : out) check_out(t, "rms_norm");
  const double eps = LayerNormParams::from(attrs).eps;
  const Tensor x = dense(in[0]), w = dense(in[1]);
  const int64_t n = w.numel();
  const int64_t rows = out[1].numel();
  dispatch_float(x.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    using S = stat_t<T>;
    rms_norm_rows<T>(static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()),
                     static_cast<T*>(out[0].data_ptr()), static_cast<S*>(out[1].data_ptr()), rows, n, eps);
  });
}

// ---- batch norm, x viewed as (B, C, S) with S the product of the spatial dims
// Per channel, over (B, S) in training mode: shift k (the channel's first value), mean - k and
// the biased variance (see Note [One-pass moments]).
template <class T>
void channel_moments(const T* x, int64_t batch, int64_t channels, int64_t spatial, double* shift, double* dmean,
                     double* var) {
  const int64_t total = batch * channels * spatial;
  if (spatial == 1) {
    // x (B, C): columns. Each thread owns a block of channels and walks every row, so the
    // inner loop runs over contiguous channels.
    const int nt = std::min<int>(threads_for(total), int(std::max<int64_t>(1, channels / 16)));
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      const int t = omp_get_thread_num(), tn = omp_get_num_threads();
      const int64_t per = (channels + tn - 1) / tn;
      const int64_t c0 = std::min(channels, t * per), c1 = std::min(channels, c0 + per);
      const size_t width = size_t(c1 - c0);
      std::vector<double> kv(width), s1v(width), s2v(width);
      double* __restrict k = kv.data();
      double* __restrict s1 = s1v.data();
      double* __restrict s2 = s2v.data();
      for (size_t c = 0; c < width; ++c) k[c] = batch ? as_double(x[c0 + int64_t(c)]) : 0.0;
      for (int64_t bi = 0; bi < batch; ++bi) {
        const T* row = x + bi * channels + c0;
        for (size_t c = 0; c < width; ++c) {
          const double d = as_double(row[c]) - k[c];
          s1[c] += d;
          s2[c] += d * d;
        }
      }
      for (size_t c = 0; c < width; ++c) {
        Moments acc{s1[c], s2[c]};
        shift[c0 + int64_t(c)] = k[c];
        std::tie(dmean[c0 + int64_t(c)], var[c0 + int64_t(c)]) = acc.finish(batch);
      }
    }
    return;
  }
  const int nt = std::min<int>(threads_for(total), int(std::max<int64_t>(1, channels)));
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c = 0; c < channels; ++c) {
    const double k = batch ? as_double(x[c * spatial]) : 0.0;
    Moments acc;
    for (int64_t bi = 0; bi < batch; ++bi) {
      const T* seg = x + (bi * channels + c) * spatial;
      accumulate(seg, spatial, k, acc);
    }
    shift[c] = k;
    std::tie(dmean[c], var[c]) = acc.finish(batch * spatial);
  }
}

// Per-channel constants of the normalize pass, in the compute type.
template <class C>
struct ChannelAffine {
  std::vector<C> shift, dmean, scale, bias;  // y = ((x - shift) - dmean) * scale + bias
  explicit ChannelAffine(size_t n) : shift(n), dmean(n), scale(n), bias(n) {}
};

template <class T>
void channel_affine(const T* x, T* y, const ChannelAffine<compute_t<T>>& p, int64_t batch, int64_t channels,
                    int64_t spatial) {
  using C = compute_t<T>;
  const C* k = p.shift.data();
  const C* dm = p.dmean.data();
  const C* sc = p.scale.data();
  const C* bi = p.bias.data();
  const int64_t segments = batch * channels;
  const int nt = threads_for(segments * spatial);
  if (spatial == 1) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t r = 0; r < batch; ++r) {
      const T* xr = x + r * channels;
      T* yr = y + r * channels;
      for (int64_t c = 0; c < channels; ++c) yr[c] = T(((C(xr[c]) - k[c]) - dm[c]) * sc[c] + bi[c]);
    }
    return;
  }
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t seg = 0; seg < segments; ++seg) {
    const int64_t c = seg % channels;
    const T* xs = x + seg * spatial;
    T* ys = y + seg * spatial;
    const C kc = k[c], dmc = dm[c], a = sc[c], bc = bi[c];
    for (int64_t s = 0; s < spatial; ++s) ys[s] = T(((C(xs[s]) - kc) - dmc) * a + bc);
  }
}

// in: (x (B, C, *), weight, bias, running_mean, running_var); BatchNormParams
void batch_norm_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  for (const Tensor& t : out) check_out(t, "batch_norm");
  const Tensor x = dense(in[0]), w = dense(in[1]), b = dense(in[2]);
  const int64_t batch = x.sizes()[0], channels = x.sizes()[1];
  const int64_t spatial = batch * channels == 0 ? 0 : x.numel() / (batch * channels);
  const BatchNormParams params = BatchNormParams::from(attrs);
  const double eps = params.eps;
  dispatch_float(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    using S = stat_t<T>;
    const size_t nc = size_t(channels);
    std::vector<double> shift(nc), dmean(nc), var(nc);
    if (params.training) {
      channel_moments<T>(static_cast<const T*>(x.data_ptr()), batch, channels, spatial, shift.data(), dmean.data(),
                         var.data());
    } else {
      const Tensor rm = dense(in[3]), rv = dense(in[4]);
      const T* pm = static_cast<const T*>(rm.data_ptr());
      const T* pv = static_cast<const T*>(rv.data_ptr());
      for (size_t c = 0; c < nc; ++c) {
        shift[c] = as_double(pm[c]);
        var[c] = as_double(pv[c]);
      }
    }
    const T* pw = static_cast<const T*>(w.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    S* out_mean = static_cast<S*>(out[1].data_ptr());
    S* out_rstd = static_cast<S*>(out[2].data_ptr());
    ChannelAffine<C> p(nc);
    for (size_t c = 0; c < nc; ++c) {
      const double rs = 1.0 / std::sqrt(var[c] + eps);
      out_mean[c] = S(shift[c] + dmean[c]);
      out_rstd[c] = S(rs);
      p.shift[c] = C(shift[c]);  // exact: a value of x (or the running mean) in its own type
      p.dmean[c] = C(dmean[c]);
      p.scale[c] = C(rs * as_double(pw[c]));
      p.bias[c] = C(as_double(pb[c]));
    }
    channel_affine<T>(static_cast<const T*>(x.data_ptr()), static_cast<T*>(out[0].data_ptr()), p, batch, channels,
                      spatial);
  });
}

// in: (gy, x (B, C, *), weight (C), mean (C), rstd (C)); flag = training. Note [Fused batch
// norm backward] (engine/ops/norm.cpp): per channel, one pass sums gy and gy * xhat (in
// double), a second writes gx = w rstd (gy - sum gy / N - xhat sum(gy xhat) / N) (training) or
// w rstd gy (eval); gw = sum(gy xhat), gb = sum(gy). OpenMP over channels.
void batch_norm_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  for (const Tensor& t : out) check_out(t, "batch_norm_backward");
  const Tensor gy = dense(in[0]), x = dense(in[1]), w = dense(in[2]), mean = dense(in[3]), rstd = dense(in[4]);
  const int64_t batch = x.sizes()[0], channels = x.sizes()[1];
  const int64_t spatial = batch * channels == 0 ? 0 : x.numel() / (batch * channels);
  const bool training = attrs.flag;
  dispatch_float(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    using S = stat_t<T>;
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* pg = static_cast<const T*>(gy.data_ptr());
    const T* pw = static_cast<const T*>(w.data_ptr());
    const S* pm = static_cast<const S*>(mean.data_ptr());
    const S* pr = static_cast<const S*>(rstd.data_ptr());
    T* gx = static_cast<T*>(out[0].data_ptr());
    T* gw = static_cast<T*>(out[1].data_ptr());
    T* gb = static_cast<T*>(out[2].data_ptr());
    const double n = double(batch * spatial);
    const int nt = std::min<int>(threads_for(batch * channels * spatial), int(std::max<int64_t>(1, channels)));
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t c = 0; c < channels; ++c) {
      const C m = C(pm[c]), r = C(pr[c]);
      double sum_g = 0, sum_gx = 0;  // sum gy, sum gy * xhat
      for (int64_t bi = 0; bi < batch; ++bi) {
        const int64_t off = bi * channels * spatial + c * spatial;
        C s1 = 0, s2 = 0;  // this segment's sums, then added in double
        for (int64_t s = 0; s < spatial; ++s) {
          const int64_t i = off + s;
          const C g = C(pg[i]);
          s1 += g;
          s2 += g * ((C(px[i]) - m) * r);
        }
        sum_g += double(s1);
        sum_gx += double(s2);
      }
      gw[c] = T(sum_gx);
      gb[c] = T(sum_g);
      const C a = C(as_double(pw[c])) * r;
      const C k1 = training ? C(sum_g / n) : C(0), k2 = training ? C(sum_gx / n) : C(0);
      for (int64_t bi = 0; bi < batch; ++bi) {
        const int64_t off = bi * channels * spatial + c * spatial;
        for (int64_t s = 0; s < spatial; ++s) {
          const int64_t i = off + s;
          const C xhat = (C(px[i]) - m) * r;
          gx[i] = T(a * (C(pg[i]) - k1 - xhat * k2));
        }
      }
    }
  });
}

}  // namespace

void register_norm() {
  register_kernel(OpId::BatchNormBackward, DeviceType::CPU, batch_norm_backward_kernel);
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::LayerNorm, cpu, layer_norm_kernel);
  register_kernel(OpId::LayerNormBackward, cpu, norm_backward_kernel<false>);
  register_kernel(OpId::RmsNorm, cpu, rms_norm_kernel);
  register_kernel(OpId::RmsNormBackward, cpu, norm_backward_kernel<true>);
  register_kernel(OpId::BatchNorm, cpu, batch_norm_kernel);
}

}  // namespace brisk::kernels::cpu
