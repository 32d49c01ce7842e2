// engine/ops/random.cpp: OpDefs and public functions of arange and the random ops (rand,
// randn, dropout, bernoulli, multinomial), and the factories written on them (uniform, normal,
// randint), one block per op: inference, backward formula, OpDef row, public functions.
// Each random call takes its own Philox stream from a Generator, so its values depend only on
// (seed, offset, element index): not on threads, not on the device. Not here: the generator
// itself (engine/random.h) and the kernels (kernels/<device>/random.cpp).
#include <algorithm>
#include <cmath>

#include "engine/grad_mode.h"
#include "engine/ops/families.h"

namespace brisk {

// Note [Random streams]
// A call of rand, randn or dropout reads attrs.seed = gen.seed() and attrs.offset =
// gen.reserve(draws), where draws counts uniform lanes: n for rand and dropout, 2n for randn
// (philox_normal spends two lanes per value). Element i (row-major) then uses
// philox_uniform / philox_normal(seed, offset, i) of engine/random.h. Every device's kernel
// computes exactly this, with one explicit fma so that no compiler contraction changes a bit:
//   rand    u = philox_uniform(seed, offset, i); F64: fma(double(u), b - a, a);
//           F32/F16/BF16: fmaf(u, float(b - a), float(a)) rounded to the dtype.
//   randn   z = philox_normal(seed, offset, i); F64: fma(double(z), b, a);
//           F32/F16/BF16: fmaf(z, float(b), float(a)) rounded to the dtype.
//   dropout keep_i = double(u_i) >= p (so P(keep) = 1 - p); y_i = keep_i ? x_i * scale : 0 with
//           scale = 1 / (1 - p) in the compute type (float for F32/F16/BF16, double for F64).
//   arange  out_i = fma(double(i), step, start) in double, converted to the dtype (integers
//           truncate; F16/BF16 go through float).
//   bernoulli  out_i = double(u_i) < p_i ? 1 : 0 (n lanes), so P(1) = p_i up to 2^-24.
//   multinomial  draw d of row r (d < S = num_samples with replacement, d < C without) reads
//           counter offset + r * S + d (4 lanes reserved per counter) as the 53-bit double
//           u = philox_uniform_double(seed, offset + r * S + d) of kernels/cpu/random.cpp.
//           With replacement: sample d = the first j whose running sum of weights exceeds
//           u * (row sum). Without: category j gets the key -log1p(-u_j) / w_j (an exponential
//           of rate w_j), and the samples are the S smallest keys in ascending order (ties to
//           the lower index), which has the law of drawing one at a time without replacement.

namespace {

using detail::define;
using detail::mask;

void check_shape(const Shape& shape, const char* op) { checked_numel(shape, sizeof(double), op); }

// rand and randn: a new floating tensor of attrs.shape, dtype, device.
template <OpId Id>
void random_infer(std::span<const Tensor>, const Attrs& attrs, std::span<TensorSpec> out) {
  check_shape(attrs.shape, op_name(Id));
  BRISK_CHECK(is_floating(attrs.dtype), op_name(Id), ": dtype must be floating, got ", attrs.dtype,
              " (randint draws integers)");
  out[0] = {attrs.shape, attrs.dtype};
}

// Runs a random factory op with a fresh stream of `draws` lanes from `gen` (or the default).
// `into`: undefined (a new tensor) or a tensor of exactly (shape, dtype, device) written in place.
Tensor random_call(OpId id, const Shape& shape, double a, double b, DType dtype, Device device, Generator* gen,
                   uint64_t lanes_per_value, const Tensor& into = {}) {
  check_shape(shape, op_name(id));
  Generator& g = gen ? *gen : default_generator();
  Attrs attrs;
  attrs.shape = shape;
  attrs.dtype = dtype;
  attrs.device = device;
  attrs.a = a;
  attrs.b = b;
  attrs.seed = g.seed();
  attrs.offset = g.reserve(uint64_t(shape.numel()) * lanes_per_value);
  Tensor out[1] = {into};
  call(id, {}, attrs, out);
  return out[0];
}

// ---- arange: attrs.shape = (n) values start + i * step (attrs.a, attrs.b) of attrs.dtype
void arange_infer(std::span<const Tensor>, const Attrs& attrs, std::span<TensorSpec> out) {
  check_shape(attrs.shape, "arange");
  BRISK_CHECK(attrs.dtype != DType::Bool, "arange: dtype Bool is not supported");
  out[0] = {attrs.shape, attrs.dtype};
}

const OpDef kArange{.infer = arange_infer};

}  // namespace

// Length ceil((end - start) / step), as in PyTorch.
Tensor arange(double start, double end, double step, DType dtype, Device device) {
  BRISK_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start ", start, ", end ", end,
              " and step ", step, " must be finite");
  BRISK_CHECK(step != 0, "arange: step must be nonzero");
  BRISK_CHECK(step > 0 ? end >= start : end <= start, "arange: the range from ", start, " to ", end,
              " is inconsistent with the sign of step ", step);
  const double n = std::ceil((end - start) / step);
  BRISK_CHECK(n < 9.0e18, "arange: ", n, " elements are too many");
  Attrs attrs;
  attrs.a = start;
  attrs.b = step;
  attrs.shape = {int64_t(n)};
  attrs.dtype = dtype;
  attrs.device = device;
  Tensor out[1];
  call(OpId::Arange, {}, attrs, out);
  return out[0];
}

Tensor arange(int64_t end, DType dtype, Device device) { return arange(0.0, double(end), 1.0, dtype, device); }

namespace {

// ---- rand: uniform in [attrs.a, attrs.b)
const OpDef kRand{.infer = random_infer<OpId::Rand>};

}  // namespace

Tensor uniform(const Shape& shape, double low, double high, DType dtype, Device device, Generator* gen) {
  BRISK_CHECK(low <= high, "uniform: low ", low, " must not exceed high ", high);
  return random_call(OpId::Rand, shape, low, high, dtype, device, gen, 1);
}

Tensor rand(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return uniform(shape, 0.0, 1.0, dtype, device, gen);
}

// floor of uniform [0, high - low) in F64, shifted by low. The uniforms carry 24 random bits,
// so ranges beyond 2^24 values are not all reachable.
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device, Generator* gen) {
  BRISK_CHECK(low < high, "randint: low ", low, " must be less than high ", high);
  Tensor u = uniform(shape, 0.0, double(high - low), DType::F64, device, gen);
  Tensor values = cast(u, DType::I64);  // truncation is floor here: u >= 0
  if (low != 0) values = values + double(low);
  return cast(values, dtype);
}

namespace {

// ---- randn: normal with mean attrs.a and std attrs.b
const OpDef kRandn{.infer = random_infer<OpId::Randn>};

}  // namespace

Tensor normal(const Shape& shape, double mean, double std, DType dtype, Device device, Generator* gen) {
  BRISK_CHECK(std >= 0, "normal: std must be non-negative, got ", std);
  return random_call(OpId::Randn, shape, mean, std, dtype, device, gen, 2);
}

Tensor randn(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return normal(shape, 0.0, 1.0, dtype, device, gen);
}

void fill_uniform_(Tensor& t, double low, double high, Generator* gen) {
  BRISK_CHECK(low <= high, "uniform: low ", low, " must not exceed high ", high);
  BRISK_CHECK(t.defined() && is_floating(t.dtype()), "fill_uniform_: needs a floating tensor, got ",
              t.defined() ? t.str() : std::string("an undefined one"));
  NoGradGuard no_grad;  // parameter init: not a recorded op
  if (t.is_contiguous()) {
    random_call(OpId::Rand, t.sizes(), low, high, t.dtype(), t.device(), gen, 1, t);
  } else {  // the random kernels write dense outputs
    t.copy_(random_call(OpId::Rand, t.sizes(), low, high, t.dtype(), t.device(), gen, 1));
  }
}

void fill_normal_(Tensor& t, double mean, double std, Generator* gen) {
  BRISK_CHECK(std >= 0, "normal: std must be non-negative, got ", std);
  BRISK_CHECK(t.defined() && is_floating(t.dtype()), "fill_normal_: needs a floating tensor, got ",
              t.defined() ? t.str() : std::string("an undefined one"));
  NoGradGuard no_grad;
  if (t.is_contiguous()) {
    random_call(OpId::Randn, t.sizes(), mean, std, t.dtype(), t.device(), gen, 2, t);
  } else {
    t.copy_(random_call(OpId::Randn, t.sizes(), mean, std, t.dtype(), t.device(), gen, 2));
  }
}

namespace {

// ---- dropout: x -> (y, keep mask Bool), p = attrs.a
void dropout_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  BRISK_CHECK(is_floating(in[0].dtype()), "dropout: input must be floating, got ", in[0].str());
  BRISK_CHECK(attrs.a >= 0 && attrs.a < 1, "dropout: p must be in [0, 1), got ", attrs.a);
  out[0] = {in[0].sizes(), in[0].dtype()};
  out[1] = {in[0].sizes(), DType::Bool};
}

// Backward: the same mask and scale as the forward.
void dropout_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& g = c.grads[0];
  const Tensor& keep = c.outputs[1];
  gi[0] = g * cast(keep, g.dtype()) * (1.0 / (1.0 - c.attrs.a));
}

const OpDef kDropout{.infer = dropout_infer, .backward = dropout_bw, .save_outputs = mask(1)};  // keep

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  BRISK_CHECK(x.defined(), "dropout: undefined input");
  BRISK_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;  // as PyTorch: zeros, and a zero gradient
  Generator& g = gen ? *gen : default_generator();
  Attrs attrs;
  attrs.a = p;
  attrs.seed = g.seed();
  attrs.offset = g.reserve(uint64_t(x.numel()));
  Tensor in[1] = {x};
  Tensor out[2];
  call(OpId::Dropout, in, attrs, out);
  return out[0];
}

namespace {

// ---- bernoulli: p (any shape, floating, values in [0, 1]; checked by the kernel) -> 0 / 1
void bernoulli_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  BRISK_CHECK(is_floating(in[0].dtype()), "bernoulli: p must be floating, got ", in[0].str());
  out[0] = {in[0].sizes(), in[0].dtype()};
}

const OpDef kBernoulli{.infer = bernoulli_infer};  // not differentiable

// ---- multinomial: weights (C) or (R, C) -> I64 (S) or (R, S); S = attrs.start
void multinomial_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const Tensor& w = in[0];
  const int64_t samples = attrs.start;
  BRISK_CHECK(is_floating(w.dtype()), "multinomial: weights must be floating, got ", w.str());
  BRISK_CHECK(w.dim() == 1 || w.dim() == 2, "multinomial: weights must be 1-D (C) or 2-D (R, C), got ", w.sizes());
  const int64_t categories = w.size(-1);
  BRISK_CHECK(categories > 0, "multinomial: weights ", w.sizes(), " have no categories");
  BRISK_CHECK(categories <= (int64_t(1) << 24), "multinomial: ", categories, " categories exceed 2^24");
  BRISK_CHECK(samples > 0, "multinomial: num_samples must be positive, got ", samples);
  BRISK_CHECK(attrs.flag || samples <= categories, "multinomial: cannot draw ", samples,
              " samples without replacement from ", categories, " categories (weights ", w.sizes(), ")");
  out[0] = {w.dim() == 1 ? Shape{samples} : Shape{w.size(0), samples}, DType::I64};
}

const OpDef kMultinomial{.infer = multinomial_infer};  // not differentiable

}  // namespace

Tensor bernoulli(const Tensor& p, Generator* gen) {
  BRISK_CHECK(p.defined(), "bernoulli: undefined input");
  Generator& g = gen ? *gen : default_generator();
  Attrs attrs;
  attrs.seed = g.seed();
  attrs.offset = g.reserve(uint64_t(p.numel()));
  return call1(OpId::Bernoulli, {contiguous(p.detach())}, attrs);
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  BRISK_CHECK(probs.defined(), "multinomial: undefined input");
  Generator& g = gen ? *gen : default_generator();
  Attrs attrs;
  attrs.start = num_samples;
  attrs.flag = replacement;
  attrs.seed = g.seed();
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  const int64_t draws = replacement ? num_samples : (probs.dim() >= 1 ? probs.size(-1) : 0);
  attrs.offset = g.reserve(4 * uint64_t(std::max<int64_t>(rows * draws, 0)));
  return call1(OpId::Multinomial, {contiguous(probs.detach())}, attrs);
}

// ---- composite factories
Tensor rand_like(const Tensor& t, Generator* gen) { return rand(t.sizes(), t.dtype(), t.device(), gen); }
Tensor randn_like(const Tensor& t, Generator* gen) { return randn(t.sizes(), t.dtype(), t.device(), gen); }

Tensor eye(int64_t n, int64_t m, DType dtype, Device device) {
  if (m < 0) m = n;
  BRISK_CHECK(n >= 0, "eye: n must be non-negative, got ", n);
  Tensor rows = arange(n, DType::I64, device).unsqueeze(1);
  Tensor cols = arange(m, DType::I64, device).unsqueeze(0);
  return cast(eq(rows, cols), dtype);
}

Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device) {
  BRISK_CHECK(steps >= 0, "linspace: steps must be non-negative, got ", steps);
  if (steps == 1) return full({1}, start, dtype, device);
  const double step = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
  // In F64, then rounded once, so the last value is `end` exactly (as torch.linspace).
  Tensor i = arange(steps, DType::F64, device);
  Tensor v = i * step + start;
  if (steps > 1) v = where(eq(i, full_like(i, double(steps - 1))), full_like(v, end), v);
  return cast(v, dtype);
}

namespace detail {

void define_random_ops() {
  define(OpId::Arange, kArange);
  define(OpId::Rand, kRand);
  define(OpId::Randn, kRandn);
  define(OpId::Dropout, kDropout);
  define(OpId::Bernoulli, kBernoulli);
  define(OpId::Multinomial, kMultinomial);
}

}  // namespace detail

}  // namespace brisk
