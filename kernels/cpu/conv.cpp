// kernels/cpu/conv.cpp: CPU kernels of conv2d, its two backward ops, and the pooling ops and
// their backward ops. Conv lowers to GEMM (Note [CPU conv]): im2col of one sample into a
// cached per-thread workspace, then the GEMM of kernels/cpu/gemm.h; depthwise convs and
// pooling run direct loops, with a tight path for the common 2x2 / stride 2 max pool. Conv
// runs F32/F64 natively and F16/BF16 through F32 (rounded once); pooling computes 16-bit
// floats in float.
// Not here: shapes, checks and backward formulas (engine/ops/nn.cpp); reference loops for the
// tests (tests/specs_nn.cpp); the CUDA kernels (cuDNN, kernels/cuda).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/allocator.h"
#include "engine/op.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

// Note [CPU conv]
// conv2d for one sample and group is a matrix product: y (Og, Ho*Wo) = w (Og, K) @ col
// (K, Ho*Wo), where K = Cg*kh*kw and col (im2col) holds, for each weight tap, the input
// pixels that tap meets (zeros in the padding). The backward ops are the two other products:
// gcol = w^T @ g, scattered back by col2im (the adjoint of im2col), and gw += g @ col^T.
// Threads: a batch that covers the OpenMP threads is shared out in whole samples (each
// sample's GEMMs run on its thread; the weight gradient is summed per thread and reduced at
// the end); a smaller batch runs sample by sample with each GEMM split across the threads.
// The columns live in a per-thread workspace from cpu_allocator(), kept between calls, so a
// training step allocates nothing per sample. A 1x1 / stride 1 / unpadded conv skips im2col:
// the input plane already is its col matrix. Depthwise convs (one input channel per group)
// skip GEMM altogether: direct loops over each plane and tap beat a GEMM per channel.

namespace {

// ---- helpers shared by conv and pooling

// A block from cpu_allocator(), kept per thread and grown on demand.
class Workspace {
 public:
  ~Workspace() {
    if (ptr_) cpu_allocator().deallocate(ptr_, bytes_);
  }
  template <class T>
  T* get(int64_t n) {
    const size_t bytes = size_t(n) * sizeof(T);
    if (bytes > bytes_) {
      if (ptr_) cpu_allocator().deallocate(ptr_, bytes_);
      ptr_ = nullptr;
      ptr_ = cpu_allocator().allocate(bytes);
      bytes_ = bytes;
    }
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

thread_local Workspace t_cols;     // im2col / col2im columns of one sample and group
thread_local Workspace t_partial;  // this thread's share of a weight gradient

// Multiply-adds below which a conv runs on one thread (as in gemm.cpp).
constexpr double kParallelMacs = 2.0 * 64 * 64 * 64;

// Ceiling of n / d for d > 0 and any sign of n.
int64_t ceil_div(int64_t n, int64_t d) { return n >= 0 ? (n + d - 1) / d : -((-n) / d); }

// dst = src elementwise (same sizes, any strides), converting between floating dtypes.
void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype()) {
    dispatch_all(dst.dtype(), "conv", [&](auto tag) {
      using T = decltype(tag);
      elementwise<T, T>(dst, {&src}, [](auto v) { return v; });
    });
    return;
  }
  dispatch_float(dst.dtype(), "conv", [&](auto out_tag) {
    using O = decltype(out_tag);
    dispatch_float(src.dtype(), "conv", [&](auto in_tag) {
      using I = decltype(in_tag);
      elementwise<O, I>(dst, {&src}, [](auto v) { return v; });
    });
  });
}

// `t` as a dense tensor of `dtype`: t itself when it already is one, else a converted copy.
Tensor dense(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor out = make_empty(t.sizes(), dtype, t.device());
  copy_into(out, t);
  return out;
}

// Where to compute `out`: out itself when it is dense of `dtype`, else a scratch tensor that
// finish() copies back.
Tensor target(const Tensor& out, DType dtype) {
  if (out.dtype() == dtype && out.is_contiguous()) return out;
  return make_empty(out.sizes(), dtype, out.device());
}

void finish(const Tensor& out, const Tensor& computed) {
  if (computed.impl() != out.impl()) copy_into(out, computed);
}

// Conv computes F64 in F64 and everything else in F32.
DType work_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

// ---- convolution

// One conv2d problem, read from the sizes of x (B, C, H, W), w (O, Cg, kh, kw), y (B, O, Ho, Wo).
struct Conv {
  int64_t B, C, H, W;
  int64_t O, kh, kw;
  int64_t Ho, Wo;
  int64_t groups, Cg, Og;
  int64_t sh, sw, ph, pw, dh, dw;

  Conv(const Shape& x, const Shape& w, const Shape& y, const Attrs& a)
      : B(x[0]), C(x[1]), H(x[2]), W(x[3]), O(w[0]), kh(w[2]), kw(w[3]), Ho(y[2]), Wo(y[3]), groups(a.dim),
        Cg(w[1]), Og(w[0] / a.dim), sh(a.geometry[0]), sw(a.geometry[1]), ph(a.geometry[2]), pw(a.geometry[3]),
        dh(a.geometry[4]), dw(a.geometry[5]) {}

  int64_t K() const { return Cg * kh * kw; }  // GEMM depth
  int64_t P() const { return Ho * Wo; }        // output pixels per plane
  double macs() const { return double(B) * double(O) * double(K()) * double(P()); }
  // The input plane is the col matrix itself.
  bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

// Where kernel tap (i, j) reads: output (oh, ow) meets input (oh * sh + off_h, ow * sw + off_w);
// output rows [oh_lo, oh_hi) and columns [lo, hi) meet the input, the rest meets padding.
struct Tap {
  int64_t off_h, off_w, oh_lo, oh_hi, lo, hi;
  Tap(const Conv& p, int64_t i, int64_t j)
      : off_h(i * p.dh - p.ph),
        off_w(j * p.dw - p.pw),
        oh_lo(std::clamp<int64_t>(ceil_div(-off_h, p.sh), 0, p.Ho)),
        oh_hi(std::clamp<int64_t>(ceil_div(p.H - off_h, p.sh), oh_lo, p.Ho)),
        lo(std::clamp<int64_t>(ceil_div(-off_w, p.sw), 0, p.Wo)),
        hi(std::clamp<int64_t>(ceil_div(p.W - off_w, p.sw), lo, p.Wo)) {}
};

// Whether a run of output pixels across rows meets one run of input pixels (stride 1 and
// "same" width: 3x3 / padding 1 and the like), so a tap's rows copy as one flat run.
bool flat_rows(const Conv& p) { return p.sh == 1 && p.sw == 1 && p.Wo == p.W; }

// Note: rows are short (14 pixels in the Fashion-MNIST CNN), so these loops avoid a library
// call per row (memcpy per row cost a third of the conv) and copy a tap's rows as one run
// where flat_rows() allows, zeroing the padding columns afterwards.

// col (K, Ho*Wo) of one sample and group. x: the group's first channel, strides (sC, sH, sW).
template <class T>
void im2col(const T* x, int64_t sC, int64_t sH, int64_t sW, const Conv& p, T* col) {
  const int64_t P = p.P(), Wo = p.Wo;
  const bool flat = flat_rows(p) && sW == 1 && sH == p.W;
  for (int64_t c = 0; c < p.Cg; ++c) {
    for (int64_t i = 0; i < p.kh; ++i) {
      for (int64_t j = 0; j < p.kw; ++j) {
        const Tap t(p, i, j);
        T* row = col + ((c * p.kh + i) * p.kw + j) * P;
        for (int64_t k = 0; k < t.oh_lo * Wo; ++k) row[k] = T(0);
        for (int64_t k = t.oh_hi * Wo; k < P; ++k) row[k] = T(0);
        const int64_t n = t.oh_hi - t.oh_lo;
        if (n == 0) continue;
        T* r = row + t.oh_lo * Wo;
        const T* src = x + c * sC + (t.oh_lo * p.sh + t.off_h) * sH;  // the input row of output row oh_lo
        if (flat) {
          const T* s = src + t.off_w;
          for (int64_t k = t.lo; k < (n - 1) * Wo + t.hi; ++k) r[k] = s[k];
          for (int64_t q = 0; q < n; ++q) {
            for (int64_t ow = 0; ow < t.lo; ++ow) r[q * Wo + ow] = T(0);
            for (int64_t ow = t.hi; ow < Wo; ++ow) r[q * Wo + ow] = T(0);
          }
          continue;
        }
        for (int64_t q = 0; q < n; ++q, r += Wo, src += p.sh * sH) {
          for (int64_t ow = 0; ow < t.lo; ++ow) r[ow] = T(0);
          if (p.sw == 1 && sW == 1) {
            const T* s = src + t.off_w;
            for (int64_t ow = t.lo; ow < t.hi; ++ow) r[ow] = s[ow];
          } else {
            for (int64_t ow = t.lo; ow < t.hi; ++ow) r[ow] = src[(ow * p.sw + t.off_w) * sW];
          }
          for (int64_t ow = t.hi; ow < Wo; ++ow) r[ow] = T(0);
        }
      }
    }
  }
}

// The adjoint of im2col: x (Cg, H, W) dense += col (K, Ho*Wo) scattered back. The padding
// entries of col are overwritten (zeroed) on the flat path.
template <class T>
void col2im(T* col, const Conv& p, T* x) {
  const int64_t P = p.P(), Wo = p.Wo;
  const bool flat = flat_rows(p);
  for (int64_t c = 0; c < p.Cg; ++c) {
    for (int64_t i = 0; i < p.kh; ++i) {
      for (int64_t j = 0; j < p.kw; ++j) {
        const Tap t(p, i, j);
        const int64_t n = t.oh_hi - t.oh_lo;
        if (n == 0) continue;
        T* r = col + ((c * p.kh + i) * p.kw + j) * P + t.oh_lo * Wo;
        T* dst = x + (c * p.H + t.oh_lo * p.sh + t.off_h) * p.W;  // the input row of output row oh_lo
        if (flat) {
          for (int64_t q = 0; q < n; ++q) {
            for (int64_t ow = 0; ow < t.lo; ++ow) r[q * Wo + ow] = T(0);
            for (int64_t ow = t.hi; ow < Wo; ++ow) r[q * Wo + ow] = T(0);
          }
          T* d = dst + t.off_w;
          for (int64_t k = t.lo; k < (n - 1) * Wo + t.hi; ++k) d[k] += r[k];
          continue;
        }
        for (int64_t q = 0; q < n; ++q, r += Wo, dst += p.sh * p.W) {
          if (p.sw == 1) {
            T* d = dst + t.off_w;
            for (int64_t ow = t.lo; ow < t.hi; ++ow) d[ow] += r[ow];
          } else {
            for (int64_t ow = t.lo; ow < t.hi; ++ow) dst[ow * p.sw + t.off_w] += r[ow];
          }
        }
      }
    }
  }
}

// Threads for a conv over the batch: >1 only outside a parallel region and for enough work.
int conv_threads(double macs) {
  if (omp_in_parallel() || macs < kParallelMacs) return 1;
  return omp_get_max_threads();
}

// Whether the batch is shared out in whole samples (else samples run one after the other,
// each GEMM split across the threads).
bool per_sample(int64_t B, int nt) { return nt > 1 && (B % nt == 0 || B >= 4 * nt); }

// Runs body(b, gemm_threads) for every sample b (see Note [CPU conv]).
template <class F>
void for_each_sample(int64_t B, double macs, F&& body) {
  const int nt = conv_threads(macs);
  if (per_sample(B, nt)) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < B; ++b) body(b, 1);
    return;
  }
  for (int64_t b = 0; b < B; ++b) body(b, nt > 1 ? 0 : 1);  // 0: the GEMM picks its threads
}

// The input of a conv as the kernels read it: any strides (a strided x is read in place).
template <class T>
struct Input {
  const T* data;
  int64_t sB, sC, sH, sW;
  explicit Input(const Tensor& x)
      : data(static_cast<const T*>(x.data_ptr())), sB(x.stride(0)), sC(x.stride(1)), sH(x.stride(2)),
        sW(x.stride(3)) {}
  // Whether the (pointwise) col matrix of a sample is the input itself: each plane dense.
  bool planes_dense(const Conv& p) const { return sW == 1 && (sH == p.W || p.H == 1); }
};

// The col matrix (K, Ho*Wo) of sample b, group g: the input itself for a pointwise conv,
// else im2col into `cols`.
template <class T>
MatrixRef<const T> columns(const Input<T>& x, const Conv& p, bool direct, int64_t b, int64_t g, T* cols) {
  const T* xg = x.data + b * x.sB + g * p.Cg * x.sC;
  if (direct) return {xg, p.K(), p.P(), x.sC, 1};
  im2col(xg, x.sC, x.sH, x.sW, p, cols);
  return {cols, p.K(), p.P(), p.P(), 1};
}

// y (B, O, Ho, Wo) dense = conv(x (B, C, H, W) any strides, w (O, Cg, kh, kw) dense).
template <class T>
void conv_forward(const Tensor& x_t, const Tensor& w_t, const T* bias, const Tensor& y_t, const Conv& p) {
  const Input<T> x(x_t);
  const T* w = static_cast<const T*>(w_t.data_ptr());
  T* y = static_cast<T*>(y_t.data_ptr());
  const int64_t K = p.K(), P = p.P();
  const bool direct = p.pointwise() && x.planes_dense(p);
  for_each_sample(p.B, p.macs(), [&](int64_t b, int threads) {
    T* cols = direct ? nullptr : t_cols.get<T>(K * P);
    if (bias) {  // the GEMM below accumulates onto the bias
      for (int64_t o = 0; o < p.O; ++o) std::fill_n(y + (b * p.O + o) * P, P, bias[o]);
    }
    for (int64_t g = 0; g < p.groups; ++g) {
      // y[b, group g] (Og, P) (+)= w[group g] (Og, K) @ col (K, P)
      gemm<T>({w + g * p.Og * K, p.Og, K, K, 1}, columns(x, p, direct, b, g, cols),
              {y + (b * p.O + g * p.Og) * P, p.Og, P, P, 1}, bias != nullptr, threads);
    }
  });
}

// gx (B, C, H, W) dense = conv^T(g (B, O, Ho, Wo) dense, w (O, Cg, kh, kw) dense).
template <class T>
void conv_backward_input(const Tensor& g_t, const Tensor& w_t, const Tensor& gx_t, const Conv& p) {
  const T* g = static_cast<const T*>(g_t.data_ptr());
  const T* w = static_cast<const T*>(w_t.data_ptr());
  T* gx = static_cast<T*>(gx_t.data_ptr());
  const int64_t K = p.K(), P = p.P(), HW = p.H * p.W;
  const bool direct = p.pointwise();  // then P == HW and gcol is the gradient plane itself
  for_each_sample(p.B, p.macs(), [&](int64_t b, int threads) {
    T* gxb = gx + b * p.C * HW;
    T* cols = direct ? nullptr : t_cols.get<T>(K * P);
    if (!direct) std::fill(gxb, gxb + p.C * HW, T(0));
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      T* gx_g = gxb + grp * p.Cg * HW;
      // gcol (K, P) = w[group]^T (K, Og) @ g[b, group] (Og, P)
      gemm<T>({w + grp * p.Og * K, K, p.Og, 1, K}, {g + (b * p.O + grp * p.Og) * P, p.Og, P, P, 1},
              {direct ? gx_g : cols, K, P, P, 1}, false, threads);
      if (!direct) col2im(cols, p, gx_g);
    }
  });
}

// gw (O, Cg, kh, kw) dense = sum over b of g[b] (Og, P) @ col[b]^T (P, K), per group.
// g (B, O, Ho, Wo) dense; x (B, C, H, W) any strides.
template <class T>
void conv_backward_weight(const Tensor& g_t, const Tensor& x_t, const Tensor& gw_t, const Conv& p) {
  const Input<T> x(x_t);
  const T* g = static_cast<const T*>(g_t.data_ptr());
  T* gw = static_cast<T*>(gw_t.data_ptr());
  const int64_t K = p.K(), P = p.P(), n_w = p.O * K;
  const bool direct = p.pointwise() && x.planes_dense(p);
  // acc (O, K) += the products of sample b.
  auto add_sample = [&](int64_t b, T* acc, int threads) {
    T* cols = direct ? nullptr : t_cols.get<T>(K * P);
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      const MatrixRef<const T> col = columns(x, p, direct, b, grp, cols);
      const MatrixRef<const T> col_t{col.data, P, K, 1, col.row_stride};
      gemm<T>({g + (b * p.O + grp * p.Og) * P, p.Og, P, P, 1}, col_t, {acc + grp * p.Og * K, p.Og, K, K, 1}, true,
              threads);
    }
  };
  const int nt = conv_threads(p.macs());
  if (!per_sample(p.B, nt)) {
    std::fill(gw, gw + n_w, T(0));
    for (int64_t b = 0; b < p.B; ++b) add_sample(b, gw, nt > 1 ? 0 : 1);
    return;
  }
  // Each thread sums its samples into its own partial (thread 0 into gw), then each thread
  // adds up one slice of the partials.
  std::vector<T*> partial(size_t(nt), nullptr);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    const int team = omp_get_num_threads();
    T* acc = t == 0 ? gw : t_partial.get<T>(n_w);
    partial[size_t(t)] = acc;
    std::fill(acc, acc + n_w, T(0));
    for (int64_t b = p.B * t / team; b < p.B * (t + 1) / team; ++b) add_sample(b, acc, 1);
#pragma omp barrier
    const int64_t lo = n_w * t / team, hi = n_w * (t + 1) / team;
    for (int s = 1; s < team; ++s) {
      const T* src = partial[size_t(s)];
      for (int64_t i = lo; i < hi; ++i) gw[i] += src[i];
    }
  }
}

// ---- depthwise convolution (one input channel per group: groups == C, as MobileNetV2's)
// im2col + GEMM does not pay here: each group's product is a (multiplier, kh*kw) @ (kh*kw,
// Ho*Wo) sliver, and the per-group calls and column copies cost several times the 9
// multiply-adds per output. These direct loops walk each plane once per tap. Where
// flat_rows() holds (stride 1, "same" width), a tap's pixels are one flat run over the plane:
// output k meets input k + shift, except the padding columns the run crosses, which are
// saved and restored (forward, input gradient) or subtracted (weight gradient).

bool depthwise(const Conv& p) { return p.Cg == 1 && p.groups > 1; }

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
void depthwise_forward(const Tensor& x_t, const Tensor& w_t, const T* bias, const Tensor& y_t, const Conv& p) {
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
      if (t.oh_hi == t.oh_lo) continue;
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
void depthwise_backward_input(const Tensor& g_t, const Tensor& w_t, const Tensor& gx_t, const Conv& p) {
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
        if (t.oh_hi == t.oh_lo) continue;
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
void depthwise_backward_weight(const Tensor& g_t, const Tensor& x_t, const Tensor& gw_t, const Conv& p) {
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
      for (int64_t b = 0; b < p.B && t.oh_hi > t.oh_lo; ++b) {
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

template <class T>
void dispatch_conv(DType t, T&& run) {
  if (t == DType::F64) {
    run(double{});
  } else {
    run(float{});
  }
}

// (x, w) -> y
void conv2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const DType wt = work_dtype(out[0].dtype());
  const Tensor x = in[0].dtype() == wt ? in[0] : dense(in[0], wt);  // strided x is read in place
  const Tensor w = dense(in[1], wt);
  const Tensor b = in.size() == 3 ? dense(in[2], wt) : Tensor();  // optional bias (O)
  const Tensor y = target(out[0], wt);
  const Conv p(x.sizes(), w.sizes(), y.sizes(), attrs);
  dispatch_conv(wt, [&](auto tag) {
    using T = decltype(tag);
    const T* bias = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
    depthwise(p) ? depthwise_forward<T>(x, w, bias, y, p) : conv_forward<T>(x, w, bias, y, p);
  });
  finish(out[0], y);
}

// (grad, w) -> gx
void conv2d_backward_input_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const DType wt = work_dtype(out[0].dtype());
  const Tensor g = dense(in[0], wt), w = dense(in[1], wt);
  const Tensor gx = target(out[0], wt);
  const Conv p(gx.sizes(), w.sizes(), g.sizes(), attrs);
  dispatch_conv(wt, [&](auto tag) {
    using T = decltype(tag);
    depthwise(p) ? depthwise_backward_input<T>(g, w, gx, p) : conv_backward_input<T>(g, w, gx, p);
  });
  finish(out[0], gx);
}

// (grad, x) -> gw
void conv2d_backward_weight_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const DType wt = work_dtype(out[0].dtype());
  const Tensor g = dense(in[0], wt);
  const Tensor x = in[1].dtype() == wt ? in[1] : dense(in[1], wt);
  const Tensor gw = target(out[0], wt);
  const Conv p(x.sizes(), gw.sizes(), g.sizes(), attrs);
  dispatch_conv(wt, [&](auto tag) {
    using T = decltype(tag);
    depthwise(p) ? depthwise_backward_weight<T>(g, x, gw, p) : conv_backward_weight<T>(g, x, gw, p);
  });
  finish(out[0], gw);
}

// ---- pooling

// One pooling problem over dense planes: x (planes, H, W), y (planes, Ho, Wo).
struct Pool {
  int64_t planes, H, W, Ho, Wo;
  int64_t sh, sw, ph, pw, dh, dw, kh, kw;

  Pool(const Shape& x, const Shape& y, const Attrs& a)
      : planes(x[0] * x[1]), H(x[2]), W(x[3]), Ho(y[2]), Wo(y[3]), sh(a.geometry[0]), sw(a.geometry[1]),
        ph(a.geometry[2]), pw(a.geometry[3]), dh(a.geometry[4]), dw(a.geometry[5]), kh(a.geometry[6]),
        kw(a.geometry[7]) {}

  int64_t work() const { return planes * Ho * Wo * kh * kw; }
};

// Runs body(plane) for every plane, over the OpenMP threads when the work is large.
template <class F>
void for_each_plane(int64_t planes, int64_t work, F&& body) {
  const int nt = threads_for(work);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t i = 0; i < planes; ++i) body(i);
}

// y, indices (planes, Ho, Wo) = max over each window of x (planes, H, W); NaN wins, and the
// first of equal maxima, as in PyTorch.
template <class T>
void max_pool_forward(const T* x, T* y, int64_t* idx, const Pool& p) {
  using A = compute_t<T>;
  const bool two_by_two = p.kh == 2 && p.kw == 2 && p.sh == 2 && p.sw == 2 && p.ph == 0 && p.pw == 0 &&
                          p.dh == 1 && p.dw == 1 && 2 * p.Ho <= p.H && 2 * p.Wo <= p.W;
  for_each_plane(p.planes, p.work(), [&](int64_t plane) {
    const T* xp = x + plane * p.H * p.W;
    T* yp = y + plane * p.Ho * p.Wo;
    int64_t* ip = idx + plane * p.Ho * p.Wo;
    if (two_by_two) {
      // Branch-free selects (v != v is isnan) and sizes in locals, so that the compiler
      // vectorizes the row.
      const int64_t W = p.W, Wo = p.Wo;
      for (int64_t oh = 0; oh < p.Ho; ++oh) {
        const T* r0 = xp + 2 * oh * W;
        const T* r1 = r0 + W;
        T* yr = yp + oh * Wo;
        int64_t* ir = ip + oh * Wo;
        const int64_t at = 2 * oh * W;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const A v0 = A(r0[2 * ow]), v1 = A(r0[2 * ow + 1]), v2 = A(r1[2 * ow]), v3 = A(r1[2 * ow + 1]);
          A best = v0;
          int64_t off = 0;
          bool take = v1 > best || v1 != v1;
          best = take ? v1 : best;
          off = take ? 1 : off;
          take = v2 > best || v2 != v2;
          best = take ? v2 : best;
          off = take ? W : off;
          take = v3 > best || v3 != v3;
          best = take ? v3 : best;
          off = take ? W + 1 : off;
          yr[ow] = T(best);
          ir[ow] = at + 2 * ow + off;
        }
      }
      return;
    }
    for (int64_t oh = 0; oh < p.Ho; ++oh) {
      const int64_t hs = oh * p.sh - p.ph;
      const int64_t i0 = hs < 0 ? ceil_div(-hs, p.dh) : 0;  // first tap inside the input
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        const int64_t ws = ow * p.sw - p.pw;
        const int64_t j0 = ws < 0 ? ceil_div(-ws, p.dw) : 0;
        A best = -std::numeric_limits<A>::infinity();
        int64_t bi = -1;
        for (int64_t i = i0; i < p.kh; ++i) {
          const int64_t ih = hs + i * p.dh;
          if (ih >= p.H) break;
          for (int64_t j = j0; j < p.kw; ++j) {
            const int64_t iw = ws + j * p.dw;
            if (iw >= p.W) break;
            const A v = A(xp[ih * p.W + iw]);
            if (bi < 0 || v > best || std::isnan(v)) best = v, bi = ih * p.W + iw;
          }
        }
        yp[oh * p.Wo + ow] = T(best);
        ip[oh * p.Wo + ow] = std::max<int64_t>(bi, 0);
      }
    }
  });
}

// gx (planes, H, W) = 0, then gx[indices] += g. Returns false when an index is out of range.
template <class T>
bool max_pool_backward(const T* g, const int64_t* idx, T* gx, const Pool& p) {
  using A = compute_t<T>;
  const int64_t HW = p.H * p.W, P = p.Ho * p.Wo;
  bool bad = false;
  const int nt = threads_for(p.planes * (HW + P));
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1) reduction(|| : bad)
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    T* gp = gx + plane * HW;
    std::fill(gp, gp + HW, T(0));
    const T* gy = g + plane * P;
    const int64_t* ip = idx + plane * P;
    for (int64_t o = 0; o < P; ++o) {
      const int64_t k = ip[o];
      if (static_cast<uint64_t>(k) >= static_cast<uint64_t>(HW)) {
        bad = true;
        continue;
      }
      gp[k] = T(A(gp[k]) + A(gy[o]));
    }
  }
  return !bad;
}

// The window of output (oh, ow) of an average pool, clipped to the input, and its divisor.
struct AvgWindow {
  int64_t hs, he, ws, we;
  int64_t divisor;
};

AvgWindow avg_window(const Pool& p, int64_t oh, int64_t ow, bool count_include_pad) {
  int64_t hs = oh * p.sh - p.ph, ws = ow * p.sw - p.pw;
  int64_t he = std::min(hs + p.kh, p.H + p.ph), we = std::min(ws + p.kw, p.W + p.pw);
  const int64_t padded = (he - hs) * (we - ws);
  hs = std::max<int64_t>(hs, 0);
  ws = std::max<int64_t>(ws, 0);
  he = std::min(he, p.H);
  we = std::min(we, p.W);
  return {hs, he, ws, we, count_include_pad ? padded : (he - hs) * (we - ws)};
}

// y (planes, Ho, Wo) = mean of each window of x (planes, H, W).
template <class T>
void avg_pool_forward(const T* x, T* y, const Pool& p, bool count_include_pad) {
  using A = compute_t<T>;
  for_each_plane(p.planes, p.work(), [&](int64_t plane) {
    const T* xp = x + plane * p.H * p.W;
    T* yp = y + plane * p.Ho * p.Wo;
    for (int64_t oh = 0; oh < p.Ho; ++oh) {
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        const AvgWindow win = avg_window(p, oh, ow, count_include_pad);
        A sum = 0;
        for (int64_t ih = win.hs; ih < win.he; ++ih) {
          for (int64_t iw = win.ws; iw < win.we; ++iw) sum += A(xp[ih * p.W + iw]);
        }
        yp[oh * p.Wo + ow] = win.he > win.hs && win.we > win.ws ? T(sum / A(win.divisor)) : T(0);
      }
    }
  });
}

// gx (planes, H, W) = each g spread evenly over its window (the adjoint of avg_pool_forward).
template <class T>
void avg_pool_backward(const T* g, T* gx, const Pool& p, bool count_include_pad) {
  using A = compute_t<T>;
  for_each_plane(p.planes, p.work(), [&](int64_t plane) {
    T* gp = gx + plane * p.H * p.W;
    const T* gy = g + plane * p.Ho * p.Wo;
    std::fill(gp, gp + p.H * p.W, T(0));
    for (int64_t oh = 0; oh < p.Ho; ++oh) {
      for (int64_t ow = 0; ow < p.Wo; ++ow) {
        const AvgWindow win = avg_window(p, oh, ow, count_include_pad);
        if (win.he <= win.hs || win.we <= win.ws) continue;
        const A share = A(gy[oh * p.Wo + ow]) / A(win.divisor);
        for (int64_t ih = win.hs; ih < win.he; ++ih) {
          for (int64_t iw = win.ws; iw < win.we; ++iw) gp[ih * p.W + iw] = T(A(gp[ih * p.W + iw]) + share);
        }
      }
    }
  });
}

// PyTorch's adaptive windows: [floor(i * in / out), ceil((i + 1) * in / out)).
int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return i * in / out; }
int64_t adaptive_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

// y (planes, Ho, Wo) = mean of each adaptive window of x (planes, H, W); or, backward, gx
// (planes, H, W) = each g spread over its window.
template <class T>
void adaptive_avg_pool(const T* x, T* y, int64_t planes, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                       bool backward) {
  using A = compute_t<T>;
  const int64_t work = planes * std::max(H * W, Ho * Wo);
  for_each_plane(planes, work, [&](int64_t plane) {
    const T* xp = x + plane * (backward ? Ho * Wo : H * W);
    T* yp = y + plane * (backward ? H * W : Ho * Wo);
    if (backward) std::fill(yp, yp + H * W, T(0));
    for (int64_t oh = 0; oh < Ho; ++oh) {
      const int64_t hs = adaptive_start(oh, H, Ho), he = adaptive_end(oh, H, Ho);
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const int64_t ws = adaptive_start(ow, W, Wo), we = adaptive_end(ow, W, Wo);
        const A count = A((he - hs) * (we - ws));
        if (backward) {
          const A share = A(xp[oh * Wo + ow]) / count;
          for (int64_t ih = hs; ih < he; ++ih) {
            for (int64_t iw = ws; iw < we; ++iw) yp[ih * W + iw] = T(A(yp[ih * W + iw]) + share);
          }
        } else {
          A sum = 0;
          for (int64_t ih = hs; ih < he; ++ih) {
            for (int64_t iw = ws; iw < we; ++iw) sum += A(xp[ih * W + iw]);
          }
          yp[oh * Wo + ow] = T(sum / count);
        }
      }
    }
  });
}

template <class T>
const T* cdata(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <class T>
T* mdata(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// x -> (y, indices)
void max_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = dense(in[0], in[0].dtype());
  const Tensor y = target(out[0], out[0].dtype()), idx = target(out[1], DType::I64);
  const Pool p(x.sizes(), y.sizes(), attrs);
  dispatch_float(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    max_pool_forward<T>(cdata<T>(x), mdata<T>(y), mdata<int64_t>(idx), p);
  });
  finish(out[0], y);
  finish(out[1], idx);
}

// (grad, indices) -> gx
void max_pool2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor g = dense(in[0], in[0].dtype()), idx = dense(in[1], DType::I64);
  const Tensor gx = target(out[0], out[0].dtype());
  const Pool p(gx.sizes(), g.sizes(), attrs);
  const bool ok = dispatch_float(g.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    return max_pool_backward<T>(cdata<T>(g), cdata<int64_t>(idx), mdata<T>(gx), p);
  });
  BRISK_CHECK(ok, "max_pool2d_backward: an index is outside its plane of ", p.H, " x ", p.W, " (indices ",
              idx.str(), ")");
  finish(out[0], gx);
}

void avg_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor x = dense(in[0], in[0].dtype());
  const Tensor y = target(out[0], out[0].dtype());
  const Pool p(x.sizes(), y.sizes(), attrs);
  dispatch_float(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    avg_pool_forward<T>(cdata<T>(x), mdata<T>(y), p, attrs.flag2);
  });
  finish(out[0], y);
}

void avg_pool2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor g = dense(in[0], in[0].dtype());
  const Tensor gx = target(out[0], out[0].dtype());
  const Pool p(gx.sizes(), g.sizes(), attrs);
  dispatch_float(g.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    avg_pool_backward<T>(cdata<T>(g), mdata<T>(gx), p, attrs.flag2);
  });
  finish(out[0], gx);
}

void adaptive_avg_pool2d_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor x = dense(in[0], in[0].dtype());
  const Tensor y = target(out[0], out[0].dtype());
  const Shape &xs = x.sizes(), &ys = y.sizes();
  dispatch_float(x.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    adaptive_avg_pool<T>(cdata<T>(x), mdata<T>(y), xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3], false);
  });
  finish(out[0], y);
}

void adaptive_avg_pool2d_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor g = dense(in[0], in[0].dtype());
  const Tensor gx = target(out[0], out[0].dtype());
  const Shape &xs = gx.sizes(), &gs = g.sizes();
  dispatch_float(g.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    adaptive_avg_pool<T>(cdata<T>(g), mdata<T>(gx), xs[0] * xs[1], xs[2], xs[3], gs[2], gs[3], true);
  });
  finish(out[0], gx);
}

}  // namespace

void register_conv() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::Conv2d, cpu, conv2d_kernel);
  register_kernel(OpId::Conv2dBackwardInput, cpu, conv2d_backward_input_kernel);
  register_kernel(OpId::Conv2dBackwardWeight, cpu, conv2d_backward_weight_kernel);
  register_kernel(OpId::MaxPool2d, cpu, max_pool2d_kernel);
  register_kernel(OpId::MaxPool2dBackward, cpu, max_pool2d_backward_kernel);
  register_kernel(OpId::AvgPool2d, cpu, avg_pool2d_kernel);
  register_kernel(OpId::AvgPool2dBackward, cpu, avg_pool2d_backward_kernel);
  register_kernel(OpId::AdaptiveAvgPool2d, cpu, adaptive_avg_pool2d_kernel);
  register_kernel(OpId::AdaptiveAvgPool2dBackward, cpu, adaptive_avg_pool2d_backward_kernel);
}

}  // namespace brisk::kernels::cpu
