// kernels/cpu/linear_cross_entropy.cpp: the CPU kernels of linear_cross_entropy and its backward
// op: cross_entropy(x @ w^T + bias, target) walked over chunks of the vocabulary, each chunk's
// logits made by the GEMM (kernels/cpu/gemm.h; BF16 operands: kernels/cpu/gemm_bf16.h) into one
// scratch buffer and reduced with the vectorized exp of kernels/cpu/vmath.h. F32, F64, BF16
// (summed in F32); F16 runs in F32 (converted once).
// Not here: why the backward recomputes (Note [Linear cross-entropy recomputes the logits] in
// engine/ops/linear_cross_entropy.cpp), the shape checks (there), cross_entropy (kernels/cpu/reduce.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/functions.h"
#include "engine/half.h"
#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/vmath.h"

namespace brisk::kernels::cpu {

namespace {

// Note [Linear cross-entropy chunks]
// The scratch buffer holds the logits of all N rows for Vc classes: Vc is chosen so that it
// stays near 2M elements (8 MB in F32), at least 64 classes and a multiple of 64. Chunking the
// vocabulary rather than the rows lets the backward write each chunk's rows of dw once (a row
// block would add into all of dw, 154 MB for GPT-2, once per block) and accumulate only dx
// (N, K), which is small; the forward keeps a running logsumexp per row instead.
constexpr int64_t kScratchElements = int64_t(1) << 21;

int64_t chunk_classes(int64_t n, int64_t v) {
  int64_t c = kScratchElements / std::max<int64_t>(n, 1);
  c = std::max<int64_t>(64, c / 64 * 64);
  return std::max<int64_t>(1, std::min(c, v));
}

// The operands, read in place: x (N, K) dense, w (V, K) with a unit stride in one dim, the
// bias (V) dense in the compute dtype A (or null), target (N) I64 at stride ts.
template <class T, class A>
struct Operands {
  const T* x = nullptr;
  int64_t n = 0, k = 0;
  const T* w = nullptr;
  int64_t v = 0, ws0 = 0, ws1 = 0;
  const A* bias = nullptr;
  const int64_t* target = nullptr;
  int64_t ts = 0;
  CrossEntropyParams params{};

  int64_t t(int64_t i) const { return target[i * ts]; }
  bool ignored(int64_t i) const { return t(i) == params.ignore_index; }
  // w's rows [v0, v0 + vc) as the product's b (K, vc): w^T read in place.
  MatrixRef<const T> w_chunk_t(int64_t v0, int64_t vc) const { return {w + v0 * ws0, k, vc, ws1, ws0}; }
  MatrixRef<const T> w_chunk(int64_t v0, int64_t vc) const { return {w + v0 * ws0, vc, k, ws0, ws1}; }
  MatrixRef<const T> x_ref() const { return {x, n, k, k, 1}; }
};

// c [+]= a @ b: gemm() for F32 / F64, gemm_bf16 (F32 out) for BF16 operands. K = 0 adds nothing.
template <class T, class A>
void product(MatrixRef<const T> a, MatrixRef<const T> b, MatrixRef<A> c, bool accumulate) {
  if (c.rows == 0 || c.cols == 0) return;
  if (a.cols == 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < c.rows; ++i)
        std::fill(c.data + i * c.row_stride, c.data + i * c.row_stride + c.cols, A(0));
    }
    return;
  }
  if constexpr (std::is_same_v<T, BFloat16>) {
    gemm_bf16(a, b, c, accumulate);
  } else {
    gemm<T>(a, b, c, accumulate);
  }
}

// s (N, vc) dense = the logits of classes [v0, v0 + vc): each row starts at the bias and the
// product is accumulated onto it.
template <class T, class A>
void chunk_logits(const Operands<T, A>& o, int64_t v0, int64_t vc, A* s) {
  if (o.bias) {
    const int nt = threads_for(o.n * vc);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < o.n; ++i) std::copy(o.bias + v0, o.bias + v0 + vc, s + i * vc);
  }
  product<T, A>(o.x_ref(), o.w_chunk_t(v0, vc), MatrixRef<A>{s, o.n, vc, vc, 1}, o.bias != nullptr);
}

// Walks the vocabulary in chunks of `chunk` classes: each chunk's logits into s (N, vc), then
// body(v0, vc). Nothing runs without rows.
template <class T, class A, class F>
void for_each_chunk(const Operands<T, A>& o, int64_t chunk, A* s, F&& body) {
  for (int64_t v0 = 0; o.n > 0 && v0 < o.v; v0 += chunk) {
    const int64_t vc = std::min(chunk, o.v - v0);
    chunk_logits(o, v0, vc, s);
    body(v0, vc);
  }
}

template <class A>
A row_max(const A* row, int64_t n) {
  if constexpr (std::is_same_v<A, float>) {
    return vmath::max(row, n);
  } else {
    A m = -std::numeric_limits<A>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, row[j]);
    return m;
  }
}

// sum of exp(row - shift)
template <class A>
A row_exp_sum(const A* row, A shift, int64_t n) {
  if constexpr (std::is_same_v<A, float>) {
    return vmath::exp_sum(row, shift, nullptr, n);
  } else {
    A s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(row[j] - shift);
    return s;
  }
}

// row = exp(row - shift) * scale, in place
template <class A>
void row_exp_affine(A* row, A shift, A scale, int64_t n) {
  if constexpr (std::is_same_v<A, float>) {
    vmath::exp_affine(row, shift, scale, row, n);
  } else {
    for (int64_t j = 0; j < n; ++j) row[j] = std::exp(row[j] - shift) * scale;
  }
}

// Target indices are checked before the parallel loops (which cannot throw).
template <class T, class A>
int64_t check_targets(const Operands<T, A>& o, const char* op) {
  const int64_t ignore = o.params.ignore_index;
  int64_t valid = 0;
  for (int64_t i = 0; i < o.n; ++i) {
    const int64_t t = o.t(i);
    BRISK_CHECK(t == ignore || (t >= 0 && t < o.v), op, ": target index ", t, " (row ", i, ") is out of range for ",
                o.v, " classes (V = ", o.v, ", ignore_index = ", ignore, ")");
    valid += t == ignore ? 0 : 1;
  }
  return valid;
}

// A running logsumexp per row (max m, sum s of exp(logit - m)), the target's logit, and the
// sum of the logits (label smoothing's term).
template <class A>
struct RowState {
  A m = -std::numeric_limits<A>::infinity();
  A s = 0;
  A target_logit = 0;
  A logit_sum = 0;
};

// Folds one chunk's row into the running state.
template <class A>
void fold_row(RowState<A>& r, const A* row, int64_t vc) {
  const A cm = row_max(row, vc);
  if (cm > r.m) {
    r.s = r.m == -std::numeric_limits<A>::infinity() ? A(0) : r.s * std::exp(r.m - cm);
    r.m = cm;
  }
  if (r.m > -std::numeric_limits<A>::infinity()) {
    r.s += row_exp_sum(row, r.m, vc);
  } else {
    for (int64_t j = 0; j < vc; ++j) {
      if (std::isnan(row[j])) r.s = row[j];  // a NaN logit makes the row's loss NaN
    }
  }
}

// ---- forward: (x, w, target[, bias]) -> (loss, lse)
template <class T, class A>
void lce_forward(const Operands<T, A>& o, int64_t valid, const Tensor& loss_out, const Tensor& lse_out) {
  const int64_t n = o.n, v = o.v;
  const double eps = o.params.label_smoothing;
  std::vector<RowState<A>> rows(static_cast<size_t>(n));
  const int64_t chunk = chunk_classes(n, v);
  const Tensor scratch = make_empty({n > 0 ? n * std::min(chunk, v) : 0}, DTypeOf<A>::value, Device::cpu());
  A* s = static_cast<A*>(scratch.data_ptr());
  for_each_chunk(o, chunk, s, [&](int64_t v0, int64_t vc) {
    const int nt = threads_for(n * vc);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const A* row = s + i * vc;
      RowState<A>& r = rows[size_t(i)];
      fold_row(r, row, vc);
      const int64_t t = o.t(i);
      if (t >= v0 && t < v0 + vc) r.target_logit = row[t - v0];
      if (eps > 0) {
        A sum = 0;
        for (int64_t j = 0; j < vc; ++j) sum += row[j];
        r.logit_sum += sum;
      }
    }
  });
  A* lse = static_cast<A*>(lse_out.data_ptr());
  const int64_t ls = lse_out.strides()[0];
  std::vector<A> loss(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const RowState<A>& r = rows[size_t(i)];
    const A l = r.m + std::log(r.s);
    lse[i * ls] = l;
    if (o.ignored(i)) continue;
    loss[size_t(i)] = l - A(1 - eps) * r.target_logit - (eps > 0 ? A(eps / double(v)) * r.logit_sum : A(0));
  }
  A* y = static_cast<A*>(loss_out.data_ptr());
  if (o.params.reduction == Reduction::None) {
    const int64_t ys = loss_out.strides()[0];
    for (int64_t i = 0; i < n; ++i) y[i * ys] = loss[size_t(i)];
    return;
  }
  double total = 0;  // summed in double, serially (deterministic)
  for (int64_t i = 0; i < n; ++i) total += double(loss[size_t(i)]);
  if (o.params.reduction == Reduction::Mean) total /= double(valid);  // 0/0 = NaN, as cross_entropy
  y[0] = A(total);
}

// ---- backward: (grad, ...) -> dx, dw, dbias. Per chunk: the logits again, d = s_i (softmax -
// q) in place (q the smoothed one-hot; zero on ignored rows), dw's rows = d^T @ x, dx += d @ w's
// rows, dbias's entries = d's column sums. dx, dw, dbias: dense, of T; dbias (V) or empty.
template <class T, class A>
void lce_backward(const Operands<T, A>& o, int64_t valid, const Tensor& grad, const Tensor& lse_in, const Tensor& dx,
                  const Tensor& dw, const Tensor& dbias) {
  const int64_t n = o.n, v = o.v, k = o.k;
  constexpr bool kNative = std::is_same_v<T, A>;
  const double eps = o.params.label_smoothing;
  // Each row's scale: grad_i (None), grad (Sum), grad / valid rows (Mean); 0 when ignored.
  std::vector<A> scale(static_cast<size_t>(n)), lse(static_cast<size_t>(n));
  {
    const A* g = static_cast<const A*>(grad.data_ptr());
    const int64_t gs = grad.dim() == 1 ? grad.strides()[0] : 0;
    const A* l = static_cast<const A*>(lse_in.data_ptr());
    const int64_t ls = lse_in.strides()[0];
    const A div = o.params.reduction == Reduction::Mean ? A(valid) : A(1);
    for (int64_t i = 0; i < n; ++i) {
      scale[size_t(i)] = o.ignored(i) ? A(0) : g[i * gs] / div;
      lse[size_t(i)] = l[i * ls];
    }
  }
  const int64_t chunk = chunk_classes(n, v);
  const int64_t cmax = std::min(chunk, v);
  const Tensor scratch = make_empty({n * cmax}, DTypeOf<A>::value, Device::cpu());
  // BF16: d rounded for the products, dw's rows summed in F32 before rounding, dx summed in F32.
  const Tensor d16 = kNative ? Tensor() : make_empty({n * cmax}, DTypeOf<T>::value, Device::cpu());
  const Tensor dw32 = kNative ? Tensor() : make_empty({cmax * k}, DTypeOf<A>::value, Device::cpu());
  const Tensor dx_acc = kNative ? dx : make_empty({n, k}, DTypeOf<A>::value, Device::cpu());
  std::vector<A> db(size_t(dbias.numel()));
  A* s = static_cast<A*>(scratch.data_ptr());
  A* dxa = static_cast<A*>(dx_acc.data_ptr());
  std::fill(dxa, dxa + n * k, A(0));
  T* dwp = static_cast<T*>(dw.data_ptr());
  for_each_chunk(o, chunk, s, [&](int64_t v0, int64_t vc) {
    const int nt = threads_for(n * vc);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      A* row = s + i * vc;
      const A sc = scale[size_t(i)];
      if (o.ignored(i)) {
        std::fill(row, row + vc, A(0));
        continue;
      }
      row_exp_affine(row, lse[size_t(i)], sc, vc);
      if (eps > 0) {
        const A smooth = sc * A(eps / double(v));
        for (int64_t j = 0; j < vc; ++j) row[j] -= smooth;
      }
      const int64_t t = o.t(i);
      if (t >= v0 && t < v0 + vc) row[t - v0] -= sc * A(1 - eps);
    }
    if (!db.empty()) {  // column sums, 64 columns per task
      A* out = db.data() + v0;
      const int ntb = threads_for(n * vc);
#pragma omp parallel for num_threads(ntb) if (ntb > 1) schedule(static)
      for (int64_t j0 = 0; j0 < vc; j0 += 64) {
        const int64_t j1 = std::min(vc, j0 + 64);
        for (int64_t i = 0; i < n; ++i) {
          const A* row = s + i * vc;
          for (int64_t j = j0; j < j1; ++j) out[j] += row[j];
        }
      }
    }
    const T* d = nullptr;
    if constexpr (kNative) {
      d = s;
    } else {
      T* d_low = static_cast<T*>(d16.data_ptr());
      const int nt2 = threads_for(n * vc);
#pragma omp parallel for num_threads(nt2) if (nt2 > 1) schedule(static)
      for (int64_t e = 0; e < n * vc; ++e) d_low[e] = T(s[e]);
      d = d_low;
    }
    // dw[v0 : v0 + vc] = d^T (vc, N) @ x (N, K): d read transposed in place.
    const MatrixRef<const T> d_t{d, vc, n, 1, vc};
    if constexpr (kNative) {
      product<T, A>(d_t, o.x_ref(), MatrixRef<A>{dwp + v0 * k, vc, k, k, 1}, false);
    } else {
      A* w32 = static_cast<A*>(dw32.data_ptr());
      product<T, A>(d_t, o.x_ref(), MatrixRef<A>{w32, vc, k, k, 1}, false);
      const int nt3 = threads_for(vc * k);
#pragma omp parallel for num_threads(nt3) if (nt3 > 1) schedule(static)
      for (int64_t e = 0; e < vc * k; ++e) dwp[v0 * k + e] = T(w32[e]);
    }
    // dx += d (N, vc) @ w[v0 : v0 + vc] (vc, K)
    product<T, A>(MatrixRef<const T>{d, n, vc, vc, 1}, o.w_chunk(v0, vc), MatrixRef<A>{dxa, n, k, k, 1}, true);
  });
  if (n == 0) std::fill(dwp, dwp + v * k, T(0));  // no rows: no chunk wrote dw
  if constexpr (!kNative) {
    T* dxp = static_cast<T*>(dx.data_ptr());
    for (int64_t e = 0; e < n * k; ++e) dxp[e] = T(dxa[e]);
  }
  T* dbp = db.empty() ? nullptr : static_cast<T*>(dbias.data_ptr());
  for (size_t j = 0; j < db.size(); ++j) dbp[j] = T(db[j]);
}

// The operands of either op: x (index xi), w, target, the optional bias (index bi), in the
// dtype the kernel runs in (`run`: F32 for F16 inputs); keeps converted copies alive.
struct Prepared {
  Tensor x{}, w{}, target{}, bias{};
};

Prepared prepare(std::span<const Tensor> in, size_t xi, size_t bi, DType run) {
  Prepared p;
  p.x = in[xi].dtype() == run ? in[xi].contiguous() : cast(in[xi], run).contiguous();
  p.w = in[xi + 1].dtype() == run ? in[xi + 1] : cast(in[xi + 1], run);
  if (!(p.w.stride(1) == 1 || p.w.stride(0) == 1) || (p.w.stride(0) == 0 && p.w.size(0) > 1) ||
      (p.w.stride(1) == 0 && p.w.size(1) > 1)) {
    p.w = p.w.contiguous();  // GEMM operands need a unit stride in one dim
  }
  p.target = in[xi + 2];
  if (in.size() > bi) {
    const DType acc = run == DType::F64 ? DType::F64 : DType::F32;
    p.bias = in[bi].dtype() == acc ? in[bi].contiguous() : cast(in[bi], acc).contiguous();
  }
  return p;
}

template <class T, class A>
Operands<T, A> operands(const Prepared& p, const Attrs& attrs) {
  Operands<T, A> o;
  o.x = static_cast<const T*>(p.x.data_ptr());
  o.n = p.x.size(0);
  o.k = p.x.size(1);
  o.w = static_cast<const T*>(p.w.data_ptr());
  o.v = p.w.size(0);
  o.ws0 = p.w.stride(0);
  o.ws1 = p.w.stride(1);
  o.bias = p.bias.defined() ? static_cast<const A*>(p.bias.data_ptr()) : nullptr;
  o.target = p.target.data<int64_t>();
  o.ts = p.target.dim() == 1 ? p.target.stride(0) : 0;
  o.params = CrossEntropyParams::from(attrs);
  return o;
}

DType run_dtype(DType t) { return t == DType::F16 ? DType::F32 : t; }

// Calls f with tags (T, A) for the dtype the kernel runs in: F32, F64, or BF16 with F32 sums.
template <class F>
void dispatch_lce(DType run, const char* op, F&& f) {
  switch (run) {
    case DType::F32: f(float{}, float{}); break;
    case DType::F64: f(double{}, double{}); break;
    case DType::BF16: f(BFloat16{}, float{}); break;
    default: BRISK_FAIL(op, ": no CPU kernel for dtype ", dtype_name(run));
  }
}

void linear_cross_entropy_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const DType run = run_dtype(in[0].dtype());
  const Prepared p = prepare(in, 0, 3, run);
  dispatch_lce(run, "linear_cross_entropy", [&](auto t_tag, auto a_tag) {
    using T = decltype(t_tag);
    using A = decltype(a_tag);
    const Operands<T, A> o = operands<T, A>(p, attrs);
    const int64_t valid = check_targets(o, "linear_cross_entropy");
    lce_forward(o, valid, out[0], out[1]);
  });
}

// (grad, x, w, target, lse[, bias]) -> (dx, dw, dbias); outputs written densely (a caller's
// strided output gets a copy).
void linear_cross_entropy_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const DType run = run_dtype(in[1].dtype());
  const Prepared p = prepare(in, 1, 5, run);
  auto dense = [&](const Tensor& t) {
    return t.is_contiguous() && t.dtype() == run ? t : make_empty(t.sizes(), run, Device::cpu());
  };
  const Tensor dx = dense(out[0]), dw = dense(out[1]), db = dense(out[2]);
  dispatch_lce(run, "linear_cross_entropy_backward", [&](auto t_tag, auto a_tag) {
    using T = decltype(t_tag);
    using A = decltype(a_tag);
    const Operands<T, A> o = operands<T, A>(p, attrs);
    const int64_t valid = check_targets(o, "linear_cross_entropy_backward");
    lce_backward(o, valid, in[0], in[4], dx, dw, db);
  });
  const Tensor made[3] = {dx, dw, db};
  for (int i = 0; i < 3; ++i) {
    if (made[i].impl() != out[size_t(i)].impl()) out[size_t(i)].copy_(made[i]);
  }
}

}  // namespace

void register_linear_cross_entropy() {
  register_kernel(OpId::LinearCrossEntropy, DeviceType::CPU, linear_cross_entropy_kernel);
  register_kernel(OpId::LinearCrossEntropyBackward, DeviceType::CPU, linear_cross_entropy_backward_kernel);
}

}  // namespace brisk::kernels::cpu
