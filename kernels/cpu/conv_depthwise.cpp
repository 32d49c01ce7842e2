// kernels/cpu/conv_depthwise.cpp: the CPU loops of depthwise conv2d (one input channel per
// group, groups == C, as MobileNetV2's) and of its two backward ops, which kernels/cpu/conv.cpp
// calls for such problems instead of im2col + GEMM. F32 and F64 (the conv work dtypes); OpenMP
// over planes or output channels.
// Not here: the GEMM path and the op kernels (kernels/cpu/conv.cpp), what both share
// (kernels/cpu/conv.h).
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/conv.h"

namespace brisk::kernels::cpu::conv {

// Note [Depthwise conv]
// im2col + GEMM does not pay here: each group's product is a (multiplier, kh*kw) @ (kh*kw,
// Ho*Wo) sliver, and the per-group calls and column copies cost several times the 9
// multiply-adds per output. These direct loops walk each plane once per tap. Where
// flat_rows() holds (stride 1, "same" width), a tap's pixels are one flat run over the plane:
// output k meets input k + shift, except the padding columns the run crosses, which are
// saved and restored (forward, input gradient) or subtracted (weight gradient).

namespace {

std::vector<Tap> taps_of(const Conv& p) {
  std::vector<Tap> taps;
  for (int64_t i = 0; i < p.kh; ++i) {
    for (int64_t j = 0; j < p.kw; ++j) taps.emplace_back(p, i, j);
  }
  return taps;
}

// A tap's flat run: outputs [begin, end) of a plane meet inputs [begin + shift, end + shift).
struct FlatRun {
  int64_t begin, end, shift;
  FlatRun(const Tap& t, const Conv& p)
      : begin(t.oh_lo * p.Wo + t.lo), end((t.oh_hi - 1) * p.Wo + t.hi), shift(t.off_h * p.W + t.off_w) {}
};

// Calls f(k) for every output k inside the run that meets padding (a column outside [lo, hi)).
template <class F>
void run_borders(const Tap& t, const FlatRun& r, const Conv& p, F&& f) {
  for (int64_t oh = t.oh_lo; oh < t.oh_hi; ++oh) {
    const int64_t row = oh * p.Wo;
    for (int64_t k = std::max(row, r.begin); k < row + t.lo; ++k) f(k);
    for (int64_t k = row + t.hi; k < std::min(row + p.Wo, r.end); ++k) f(k);
  }
}

// sum of a[k] * b[k], k < n, in 16 lanes so that the compiler vectorizes it.
template <class T>
T dot(const T* a, const T* b, int64_t n) {
  constexpr int kLanes = 16;
  T lanes[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += a[k + l] * b[k + l];
  }
  T sum = 0;
  for (; k < n; ++k) sum += a[k] * b[k];
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

// Runs body(i) for i in [0, n), over the OpenMP threads when `work` multiply-adds justify it.
template <class F>
void parallel_planes(int64_t n, double work, F&& body) {
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(conv_threads(work), n)));
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) body(i);
}

// y (B, O, Ho, Wo) dense: y[b, o] = sum over taps of w[o, tap] * x[b, o / Og] shifted.
template <class T>
void depthwise_forward_loops(const Tensor& x_t, const Tensor& w_t, const T* bias, const Tensor& y_t, const Conv& p) {
  const Input<T> x(x_t);
  const T* w = static_cast<const T*>(w_t.data_ptr());
  T* y = static_cast<T*>(y_t.data_ptr());
  const std::vector<Tap> taps = taps_of(p);
  const int64_t Wo = p.Wo, sw = p.sw, sW = x.sW, P = p.P();
  const bool flat = flat_rows(p) && sW == 1 && x.sH == p.W;
  parallel_planes(p.B * p.O, p.macs(), [&](int64_t plane) {
    const int64_t b = plane / p.O, o = plane % p.O;
    const T* xp = x.data + b * x.sB + (o / p.Og) * x.sC;
    T* yp = y + plane * P;
    T* saved = flat ? t_cols.get<T>(P) : nullptr;
    const T start = bias ? bias[o] : T(0);
    for (int64_t k = 0; k < P; ++k) yp[k] = start;
    for (size_t ti = 0; ti < taps.size(); ++ti) {
      const Tap& t = taps[ti];
      if (t.oh_hi == t.oh_lo || t.hi == t.lo) continue;  // the tap meets no input (its run would leave the plane)
      const T wv = w[o * int64_t(taps.size()) + int64_t(ti)];
      if (flat) {
        const FlatRun r(t, p);
        int64_t m = 0;
        run_borders(t, r, p, [&](int64_t k) { saved[m++] = yp[k]; });
        const T* xs = xp + r.shift;
        for (int64_t k = r.begin; k < r.end; ++k) yp[k] += wv * xs[k];
        m = 0;
        run_borders(t, r, p, [&](int64_t k) { yp[k] = saved[m++]; });
        continue;
      }
      for (int64_t oh = t.oh_lo; oh < t.oh_hi; ++oh) {
        const T* xr = xp + (oh * p.sh + t.off_h) * x.sH;
        T* yr = yp + oh * Wo;
        if (sw == 1 && sW == 1) {
          const T* xs = xr + t.off_w;
          for (int64_t ow = t.lo; ow < t.hi; ++ow) yr[ow] += wv * xs[ow];
        } else {
          for (int64_t ow = t.lo; ow < t.hi; ++ow) yr[ow] += wv * xr[(ow * sw + t.off_w) * sW];
        }
      }
    }
  });
}

// gx (B, C, H, W) dense: gx[b, c] = sum over the group's outputs o and taps of w[o, tap] * g[b, o]
// scattered back.
template <class T>
void depthwise_backward_input_loops(const Tensor& g_t, const Tensor& w_t, const Tensor& gx_t, const Conv& p) {
  const T* g = static_cast<const T*>(g_t.data_ptr());
  const T* w = static_cast<const T*>(w_t.data_ptr());
  T* gx = static_cast<T*>(gx_t.data_ptr());
  const std::vector<Tap> taps = taps_of(p);
  const int64_t Wo = p.Wo, W = p.W, sw = p.sw, HW = p.H * p.W, P = p.P();
  const bool flat = flat_rows(p);
  parallel_planes(p.B * p.C, p.macs(), [&](int64_t plane) {
    const int64_t b = plane / p.C, c = plane % p.C;
    T* xp = gx + plane * HW;
    T* saved = flat ? t_cols.get<T>(P) : nullptr;
    for (int64_t k = 0; k < HW; ++k) xp[k] = T(0);
    for (int64_t o = c * p.Og; o < (c + 1) * p.Og; ++o) {
      const T* gp = g + (b * p.O + o) * P;
      for (size_t ti = 0; ti < taps.size(); ++ti) {
        const Tap& t = taps[ti];
        if (t.oh_hi == t.oh_lo || t.hi == t.lo) continue;  // the tap meets no input (its run would leave the plane)
        const T wv = w[o * int64_t(taps.size()) + int64_t(ti)];
        if (flat) {
          const FlatRun r(t, p);
          T* xs = xp + r.shift;
          int64_t m = 0;
          run_borders(t, r, p, [&](int64_t k) { saved[m++] = xs[k]; });
          for (int64_t k = r.begin; k < r.end; ++k) xs[k] += wv * gp[k];
          m = 0;
          run_borders(t, r, p, [&](int64_t k) { xs[k] = saved[m++]; });
          continue;
        }
        for (int64_t oh = t.oh_lo; oh < t.oh_hi; ++oh) {
          T* xr = xp + (oh * p.sh + t.off_h) * W;
          const T* gr = gp + oh * Wo;
          if (sw == 1) {
            T* xs = xr + t.off_w;
            for (int64_t ow = t.lo; ow < t.hi; ++ow) xs[ow] += wv * gr[ow];
          } else {
            for (int64_t ow = t.lo; ow < t.hi; ++ow) xr[ow * sw + t.off_w] += wv * gr[ow];
          }
        }
      }
    }
  });
}

// gw (O, 1, kh, kw) dense: gw[o, tap] = sum over b and pixels of g[b, o] * x[b, o / Og] shifted.
// One output channel per iteration, so threads never share a weight.
template <class T>
void depthwise_backward_weight_loops(const Tensor& g_t, const Tensor& x_t, const Tensor& gw_t, const Conv& p) {
  const Input<T> x(x_t);
  const T* g = static_cast<const T*>(g_t.data_ptr());
  T* gw = static_cast<T*>(gw_t.data_ptr());
  const std::vector<Tap> taps = taps_of(p);
  const int64_t Wo = p.Wo, sw = p.sw, sW = x.sW, P = p.P();
  const bool flat = flat_rows(p) && sW == 1 && x.sH == p.W;
  parallel_planes(p.O, p.macs(), [&](int64_t o) {
    for (size_t ti = 0; ti < taps.size(); ++ti) {
      const Tap& t = taps[ti];
      T acc = 0;
      for (int64_t b = 0; b < p.B && t.oh_hi > t.oh_lo && t.hi > t.lo; ++b) {
        const T* xp = x.data + b * x.sB + (o / p.Og) * x.sC;
        const T* gp = g + (b * p.O + o) * P;
        if (flat) {
          const FlatRun r(t, p);
          const T* xs = xp + r.shift;
          acc += dot(gp + r.begin, xs + r.begin, r.end - r.begin);
          run_borders(t, r, p, [&](int64_t k) { acc -= gp[k] * xs[k]; });
          continue;
        }
        for (int64_t oh = t.oh_lo; oh < t.oh_hi; ++oh) {
          const T* xr = xp + (oh * p.sh + t.off_h) * x.sH;
          const T* gr = gp + oh * Wo;
          if (sw == 1 && sW == 1) {
            acc += dot(gr + t.lo, xr + t.off_w + t.lo, t.hi - t.lo);
          } else {
            for (int64_t ow = t.lo; ow < t.hi; ++ow) acc += gr[ow] * xr[(ow * sw + t.off_w) * sW];
          }
        }
      }
      gw[o * int64_t(taps.size()) + int64_t(ti)] = acc;
    }
  });
}

// ---- channels-last loops for narrow planes (Note [Channels-last depthwise])
// Note [Channels-last depthwise]
// The plane-by-plane loops above pay per plane and per tap: on MobileNetV2's late stages
// (planes of 7x7 down to 1x1, 96-960 channels) a tap's run is a few pixels and the loop
// bookkeeping is most of the time. For rows narrower than kNarrowRow and one output channel
// per input channel, the three ops transpose their operands to channels-last (B, H, W, C) in
// the per-thread workspaces, run each tap as a multiply-add over all C channels of a pixel
// (one vector loop, C >= 16), and transpose the result back.
constexpr int64_t kNarrowRow = 16;

thread_local Workspace t_last_a, t_last_b;

bool channels_last(const Conv& p) { return p.Og == 1 && p.W < kNarrowRow && p.C >= 16; }

// out (B, H, W, C) dense = in (B, C, H, W) with strides (sB, sC, sH, sW).
template <class T>
void to_channels_last(const T* in, int64_t sB, int64_t sC, int64_t sH, int64_t sW, int64_t B, int64_t C, int64_t H,
                      int64_t W, T* out, double work) {
  parallel_planes(B, work, [&](int64_t b) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t w = 0; w < W; ++w) out[((b * H + h) * W + w) * C + c] = in[b * sB + c * sC + h * sH + w * sW];
      }
    }
  });
}

// out (B, C, H, W) dense = in (B, H, W, C) dense.
template <class T>
void from_channels_last(const T* in, int64_t B, int64_t C, int64_t H, int64_t W, T* out, double work) {
  parallel_planes(B, work, [&](int64_t b) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t k = 0; k < H * W; ++k) out[(b * C + c) * H * W + k] = in[(b * H * W + k) * C + c];
    }
  });
}

// Calls f(tap index, input pixel) for each tap of output pixel (oh, ow) that meets the input.
template <class F>
void for_taps(const Conv& p, int64_t oh, int64_t ow, F&& f) {
  for (int64_t i = 0; i < p.kh; ++i) {
    const int64_t ih = oh * p.sh - p.ph + i * p.dh;
    if (ih < 0 || ih >= p.H) continue;
    for (int64_t j = 0; j < p.kw; ++j) {
      const int64_t iw = ow * p.sw - p.pw + j * p.dw;
      if (iw < 0 || iw >= p.W) continue;
      f(i * p.kw + j, ih * p.W + iw);
    }
  }
}

// wt (kh * kw, C) = w (C, kh * kw) transposed.
template <class T>
std::vector<T> taps_by_channel(const T* w, const Conv& p) {
  const int64_t KK = p.kh * p.kw;
  std::vector<T> wt(size_t(KK * p.C));
  for (int64_t c = 0; c < p.C; ++c) {
    for (int64_t t = 0; t < KK; ++t) wt[size_t(t * p.C + c)] = w[c * KK + t];
  }
  return wt;
}

template <class T>
void depthwise_forward_last(const Tensor& x_t, const Tensor& w_t, const T* bias, const Tensor& y_t, const Conv& p) {
  const Input<T> x(x_t);
  const int64_t C = p.C, HW = p.H * p.W, P = p.P();
  const std::vector<T> wt = taps_by_channel(static_cast<const T*>(w_t.data_ptr()), p);
  T* xt = t_last_a.get<T>(p.B * HW * C);
  T* yt = t_last_b.get<T>(p.B * P * C);
  to_channels_last(x.data, x.sB, x.sC, x.sH, x.sW, p.B, C, p.H, p.W, xt, p.macs());
  parallel_planes(p.B * p.Ho, p.macs(), [&](int64_t row) {
    const int64_t b = row / p.Ho, oh = row % p.Ho;
    for (int64_t ow = 0; ow < p.Wo; ++ow) {
      T* acc = yt + ((b * p.Ho + oh) * p.Wo + ow) * C;
      for (int64_t c = 0; c < C; ++c) acc[c] = bias ? bias[c] : T(0);
      for_taps(p, oh, ow, [&](int64_t t, int64_t pix) {
        const T* wv = wt.data() + t * C;
        const T* xv = xt + (b * HW + pix) * C;
        for (int64_t c = 0; c < C; ++c) acc[c] += wv[c] * xv[c];
      });
    }
  });
  from_channels_last(yt, p.B, C, p.Ho, p.Wo, static_cast<T*>(y_t.data_ptr()), p.macs());
}

template <class T>
void depthwise_backward_input_last(const Tensor& g_t, const Tensor& w_t, const Tensor& gx_t, const Conv& p) {
  const int64_t C = p.C, HW = p.H * p.W, P = p.P();
  const std::vector<T> wt = taps_by_channel(static_cast<const T*>(w_t.data_ptr()), p);
  T* gt = t_last_a.get<T>(p.B * P * C);
  T* gxt = t_last_b.get<T>(p.B * HW * C);
  to_channels_last(static_cast<const T*>(g_t.data_ptr()), C * P, P, p.Wo, int64_t(1), p.B, C, p.Ho, p.Wo, gt, p.macs());
  parallel_planes(p.B, p.macs(), [&](int64_t b) {
    std::fill(gxt + b * HW * C, gxt + (b + 1) * HW * C, T(0));
    for (int64_t oh = 0; oh < p.Ho; ++oh) {
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        const T* gv = gt + ((b * p.Ho + oh) * p.Wo + ow) * C;
        for_taps(p, oh, ow, [&](int64_t t, int64_t pix) {
          const T* wv = wt.data() + t * C;
          T* out = gxt + (b * HW + pix) * C;
          for (int64_t c = 0; c < C; ++c) out[c] += wv[c] * gv[c];
        });
      }
    }
  });
  from_channels_last(gxt, p.B, C, p.H, p.W, static_cast<T*>(gx_t.data_ptr()), p.macs());
}

template <class T>
void depthwise_backward_weight_last(const Tensor& g_t, const Tensor& x_t, const Tensor& gw_t, const Conv& p) {
  const Input<T> x(x_t);
  const int64_t C = p.C, HW = p.H * p.W, P = p.P(), KK = p.kh * p.kw;
  T* gt = t_last_a.get<T>(p.B * P * C);
  T* xt = t_last_b.get<T>(p.B * HW * C);
  to_channels_last(static_cast<const T*>(g_t.data_ptr()), C * P, P, p.Wo, int64_t(1), p.B, C, p.Ho, p.Wo, gt, p.macs());
  to_channels_last(x.data, x.sB, x.sC, x.sH, x.sW, p.B, C, p.H, p.W, xt, p.macs());
  // Each thread sums its samples into its own (KK, C) partial; the partials are added in order.
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(conv_threads(p.macs()), p.B)));
  std::vector<std::vector<T>> partial(size_t(nt), std::vector<T>(size_t(KK * C), T(0)));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int id = omp_get_thread_num(), team = omp_get_num_threads();
    T* acc = partial[size_t(id)].data();
    for (int64_t b = p.B * id / team; b < p.B * (id + 1) / team; ++b) {
      for (int64_t oh = 0; oh < p.Ho; ++oh) {
        for (int64_t ow = 0; ow < p.Wo; ++ow) {
          const T* gv = gt + ((b * p.Ho + oh) * p.Wo + ow) * C;
          for_taps(p, oh, ow, [&](int64_t t, int64_t pix) {
            const T* xv = xt + (b * HW + pix) * C;
            T* a = acc + t * C;
            for (int64_t c = 0; c < C; ++c) a[c] += gv[c] * xv[c];
          });
        }
      }
    }
  }
  T* gw = static_cast<T*>(gw_t.data_ptr());
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t t = 0; t < KK; ++t) {
      T sum = 0;
      for (const std::vector<T>& part : partial) sum += part[size_t(t * C + c)];
      gw[c * KK + t] = sum;
    }
  }
}

}  // namespace

void depthwise_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv& p) {
  dispatch_work(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* b = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    if (channels_last(p)) {
      depthwise_forward_last<T>(x, w, b, y, p);
    } else {
      depthwise_forward_loops<T>(x, w, b, y, p);
    }
  });
}

void depthwise_backward_input(const Tensor& g, const Tensor& w, const Tensor& gx, const Conv& p) {
  dispatch_work(gx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (channels_last(p)) {
      depthwise_backward_input_last<T>(g, w, gx, p);
    } else {
      depthwise_backward_input_loops<T>(g, w, gx, p);
    }
  });
}

void depthwise_backward_weight(const Tensor& g, const Tensor& x, const Tensor& gw, const Conv& p) {
  dispatch_work(gw.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (channels_last(p)) {
      depthwise_backward_weight_last<T>(g, x, gw, p);
    } else {
      depthwise_backward_weight_loops<T>(g, x, gw, p);
    }
  });
}

}  // namespace brisk::kernels::cpu::conv
