// engine/ops/scan.cpp: scans and sorting along one dim, one block per op: cumsum, cumprod,
// logcumsumexp and argsort (inference, backward formula, OpDef row, public function), then the
// composites built on them: sort and topk (argsort's indices, the values gathered so that
// gradients flow through gather), prod (the last element of a cumprod) and flip. Semantics
// follow PyTorch: negative dims, a 0-dim tensor scans as one element, integer cumsum/cumprod
// give I64.
// Not here: the kernels (kernels/cpu/scan.cpp, kernels/cuda/scan.cu) and the scans' arithmetic
// (kernels/scan_ops.h).
#include <algorithm>

#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::define;
using detail::mask;

const Tensor& g0(const BackwardCtx& c) { return c.grads[0]; }

// Scans keep the input's sizes and dtype (integers arrive as I64).
void scan_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  wrap_dim(a.dim, in[0].dim(), "scan");
  out[0] = {in[0].sizes(), in[0].dtype()};
}

// Integer and Bool inputs scan in I64, as torch.cumsum; floats keep their dtype.
Tensor scan_input(const Tensor& x, const char* op) {
  BRISK_CHECK(x.defined(), op, ": undefined input");
  return is_floating(x.dtype()) || x.dtype() == DType::I64 ? x : cast(x, DType::I64);
}

Attrs dim_attrs(const Tensor& x, int64_t dim, const char* op) {
  Attrs a;
  a.dim = wrap_dim(dim, x.dim(), op);  // a 0-dim tensor takes 0 and -1
  return a;
}

// The reverse cumulative sum along dim: out[i] = sum_{j >= i} g[j].
Tensor reverse_cumsum(const Tensor& g, int64_t dim) { return flip(cumsum(flip(g, {dim}), dim), {dim}); }

// ---- cumsum: out[i] = sum_{j <= i} x[j]; its gradient is the reverse cumulative sum
void cumsum_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& g = g0(c);
  gi[0] = g.dim() == 0 ? g : reverse_cumsum(g, c.attrs.dim);
}
const OpDef kCumsum{.infer = scan_infer, .backward = cumsum_bw, .autocast = CastPolicy::Fp32};

// ---- cumprod: out[i] = prod_{j <= i} x[j]. Gradient dx[i] = sum_{j >= i} g[j] y[j] / x[i],
// which needs x without zeros: an input with a zero is an error in backward rather than a
// silent inf/NaN (PyTorch's zero-aware formula is not implemented).
void cumprod_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& x = c.inputs[0];
  const Tensor& y = c.outputs[0];
  BRISK_CHECK(!any(eq(x, zeros_like(x))).item<bool>(),
              "cumprod backward: the input has zeros, whose gradient is not implemented (", x.str(), ")");
  const Tensor& g = g0(c);
  gi[0] = g.dim() == 0 ? g : reverse_cumsum(g * y, c.attrs.dim) / x;
}
const OpDef kCumprod{.infer = scan_infer,
                     .backward = cumprod_bw,
                     .save_inputs = mask(0),
                     .save_outputs = mask(0),
                     .autocast = CastPolicy::Fp32};

// ---- logcumsumexp: out[i] = log(sum_{j <= i} exp(x[j])), floating only (kernels/scan_ops.h).
// dx[i] = sum_{j >= i} g[j] exp(x[i] - y[j]), taken in log space with g split by sign (exp of a
// reverse logcumsumexp of log|g| - y, plus x), so nothing overflows; as PyTorch's formula.
void logcumsumexp_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  BRISK_CHECK(is_floating(in[0].dtype()), "logcumsumexp: needs a floating input, got ", in[0].str());
  wrap_dim(a.dim, in[0].dim(), "logcumsumexp");
  out[0] = {in[0].sizes(), in[0].dtype()};
}
double lowest_finite(DType t) {
  switch (t) {
    case DType::F64: return -1.7976931348623157e308;
    case DType::F16: return -65504.0;
    case DType::BF16: return -3.3895313892515355e38;
    default: return -3.4028234663852886e38;
  }
}
void logcumsumexp_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &x = c.inputs[0], &y = c.outputs[0], &g = g0(c);
  if (g.dim() == 0) {
    gi[0] = g;
    return;
  }
  const int64_t d = c.attrs.dim;
  const Tensor zero = zeros_like(g), log_g = log(abs(g));
  auto part = [&](const Tensor& drop) {
    const Tensor t = masked_fill(log_g, drop, lowest_finite(g.dtype())) - y;
    return exp(flip(logcumsumexp(flip(t, {d}), d), {d}) + x);
  };
  gi[0] = part(le(g, zero)) - part(ge(g, zero));
}
const OpDef kLogcumsumexp{.infer = logcumsumexp_infer,
                          .backward = logcumsumexp_bw,
                          .save_inputs = mask(0),
                          .save_outputs = mask(0),
                          .autocast = CastPolicy::Fp32};

// ---- argsort: the indices that sort x along dim (stable: equal values keep their order);
// not differentiable (sort's values are gathered through it).
void argsort_infer(std::span<const Tensor> in, const Attrs& a, std::span<TensorSpec> out) {
  BRISK_CHECK(in[0].dtype() != DType::Bool, "argsort: no kernel for dtype Bool (", in[0].str(), ")");
  wrap_dim(a.dim, in[0].dim(), "argsort");
  out[0] = {in[0].sizes(), DType::I64};
}
const OpDef kArgsort{.infer = argsort_infer};

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  Tensor in = scan_input(x, "cumsum");
  return call1(OpId::Cumsum, {in}, dim_attrs(in, dim, "cumsum"));
}

Tensor cumprod(const Tensor& x, int64_t dim) {
  Tensor in = scan_input(x, "cumprod");
  return call1(OpId::Cumprod, {in}, dim_attrs(in, dim, "cumprod"));
}

Tensor logcumsumexp(const Tensor& x, int64_t dim) {
  BRISK_CHECK(x.defined(), "logcumsumexp: undefined input");
  return call1(OpId::Logcumsumexp, {x}, dim_attrs(x, dim, "logcumsumexp"));
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  BRISK_CHECK(x.defined(), "argsort: undefined input");
  Attrs a = dim_attrs(x, dim, "argsort");
  a.flag = descending;
  return call1(OpId::Argsort, {x}, a);
}

SortResult sort(const Tensor& x, int64_t dim, bool descending) {
  Tensor idx = argsort(x, dim, descending);
  if (x.dim() == 0) return {clone(x), idx};
  return {gather(x, dim, idx), idx};
}

SortResult topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  BRISK_CHECK(x.defined(), "topk: undefined input");
  const int64_t n = x.dim() == 0 ? 1 : x.sizes()[size_t(wrap_dim(dim, x.dim(), "topk"))];
  BRISK_CHECK(k >= 0 && k <= n, "topk: k = ", k, " is out of range for dim ", dim, " of size ", n, " (", x.str(), ")");
  (void)sorted;  // always sorted: the k first of a full sort
  Tensor idx = argsort(x, dim, largest);
  if (x.dim() == 0) return {clone(x), idx};
  idx = contiguous(narrow(idx, dim, 0, k));
  return {gather(x, dim, idx), idx};
}

Tensor prod(const Tensor& x) {
  Tensor flat = reshape(scan_input(x, "prod"), {-1});
  if (flat.numel() == 0) return ones({}, flat.dtype(), flat.device());
  return select(cumprod(flat, 0), 0, -1);
}

Tensor prod(const Tensor& x, int64_t dim, bool keepdim) {
  Tensor in = scan_input(x, "prod");
  if (in.dim() == 0) return clone(in);
  const int d = wrap_dim(dim, in.dim(), "prod");
  if (in.sizes()[size_t(d)] == 0) {
    Shape s = in.sizes();
    s[size_t(d)] = 1;
    Tensor one = ones(s, in.dtype(), in.device());
    return keepdim ? one : squeeze(one, d);
  }
  Tensor last = narrow(cumprod(in, d), d, -1, 1);
  return keepdim ? last : squeeze(last, d);
}

Tensor flip(const Tensor& x, const Shape& dims) {
  BRISK_CHECK(x.defined(), "flip: undefined input");
  Tensor y = x;
  bool copied = false;
  for (int64_t dim : dims) {
    if (x.dim() == 0) {
      wrap_dim(dim, 0, "flip");
      continue;
    }
    const int d = wrap_dim(dim, x.dim(), "flip");
    const int64_t n = x.sizes()[size_t(d)];
    if (n > 1) {
      y = index_select(y, d, arange(double(n - 1), -1.0, -1.0, DType::I64, x.device()));
      copied = true;
    }
  }
  return copied ? y : clone(x);  // a new tensor, as torch.flip
}

namespace detail {

void define_scan_ops() {
  define(OpId::Cumsum, kCumsum);
  define(OpId::Cumprod, kCumprod);
  define(OpId::Logcumsumexp, kLogcumsumexp);
  define(OpId::Argsort, kArgsort);
}

}  // namespace detail

}  // namespace brisk
