// engine/ops/linalg.cpp: matmul, with torch.matmul's shape rules: 1-D @ 1-D is a dot product
// (0-dim result); a 1-D operand gets a dim prepended (left) or appended (right) that the
// result drops; batch dims broadcast. The Matmul op itself sees operands of 2+ dims; its
// backward is two matmuls with transposed views, summed back over broadcast batch dims.
// Then brisk::linalg: solve, cholesky, slogdet, qr and eigh as primitives; inv, det and lstsq
// as composites (Note [Linear algebra ops]).
// One block per op: inference, backward formula, OpDef row, public function.
// linear (x @ w^T + bias) is its own op (Note [Linear is an op]).
// Not here: the kernels (kernels/cpu/gemm.cpp and kernels/cpu/linalg_decomp.cpp, cuBLASLt on
// CUDA).
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <utility>

#include "engine/ops/families.h"

namespace brisk {

namespace {

using detail::define;
using detail::mask;

// The last two dims swapped (a view: the kernels read it in place).
Tensor mT(const Tensor& x) { return transpose(x, -2, -1); }

// ---- matmul: the op takes operands of 2+ dims; matmul() adds and drops the 1-D ones' dims
// a: (..., M, K), b: (..., K, N) -> (broadcast batch..., M, N).
void matmul_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  const Tensor &a = in[0], &b = in[1];
  BRISK_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: the op needs operands of 2+ dims, got ", a.sizes(), " @ ",
              b.sizes(), " (brisk::matmul handles 1-D ones)");
  BRISK_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ (", a.str(), " @ ", b.str(), ")");
  BRISK_CHECK(a.size(-1) == b.size(-2), "matmul: shape mismatch ", a.sizes(), " @ ", b.sizes());
  // Batch dims broadcast from the right.
  const int nd = std::max(a.dim(), b.dim());
  Shape sizes = Shape::filled(nd, 1);
  for (int d = 0; d < nd - 2; ++d) {
    const int da = d - (nd - a.dim()), db = d - (nd - b.dim());
    const int64_t sa = da >= 0 ? a.sizes()[da] : 1, sb = db >= 0 ? b.sizes()[db] : 1;
    BRISK_CHECK(sa == sb || sa == 1 || sb == 1, "matmul: batch dims do not broadcast ", a.sizes(), " @ ", b.sizes());
    sizes[d] = sa == 1 ? sb : sa;
  }
  sizes[nd - 2] = a.size(-2);
  sizes[nd - 1] = b.size(-1);
  out[0] = {sizes, a.dtype()};
}

// Gradients: ga = g @ b^T, gb = a^T @ g, each summed over the batch dims its input was
// broadcast along. g: (batch..., M, N).
void matmul_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &g = c.grads[0];
  const Shape &a_shape = c.in_specs[0].sizes, &b_shape = c.in_specs[1].sizes;
  if (c.needs_grad(0)) gi[0] = sum_to(matmul(g, mT(b)), a_shape);
  if (c.needs_grad(1)) {
    // A column-major 2-D b is a transposed weight (linear's x @ W^T): its gradient is made as
    // (g2^T @ a2)^T, a transposed view of a product in W's own layout, so the transpose's
    // backward hands W a dense gradient instead of a weight-sized copy (VGG-11's classifier
    // copied 4096 x 25088 floats per step; GPT-2's tied head 50257 x 768).
    const bool b_col_major =
        b_shape.size() == 2 && b.defined() && b.stride(0) == 1 && b_shape[1] > 1 && b.stride(1) == b_shape[0];
    if (b_shape.size() == 2 && (a_shape.size() > 2 || b_col_major)) {
      // (B..., M, K) @ (K, N): fold the batch into rows, gb = a2^T @ g2, one (K, N) product
      // instead of a (B, K, N) stack to sum.
      const int64_t k = a_shape.back(), n = b_shape.back();
      int64_t rows = 1;
      for (int d = 0; d + 1 < a_shape.size(); ++d) rows *= a_shape[d];
      const Tensor a2 = reshape(a, {rows, k}), g2 = reshape(g, {rows, n});
      gi[1] = b_col_major ? mT(matmul(mT(g2), a2)) : matmul(mT(a2), g2);
    } else {
      gi[1] = sum_to(matmul(mT(a), g), b_shape);
    }
  }
}

const OpDef kMatmul{.infer = matmul_infer,
                    .backward = matmul_bw,
                    .save_inputs = mask(0, 1),  // a, b
                    .autocast = CastPolicy::Lower};

// ---- linear: (x (*, K), w (N, K)[, bias (N)]) -> y (*, N) = x @ w^T + bias
// One op rather than matmul of a transposed view plus an add (Note [Linear is an op]).
// The output's spec, checked under the name `op` (linear's, shared with linear_gelu).
TensorSpec linear_spec(std::span<const Tensor> in, bool in_out, bool f32_result, const char* op) {
  BRISK_CHECK(in.size() == 2 || in.size() == 3, op, ": expects (input, weight) or (input, weight, bias), got ",
              in.size(), " inputs");
  const Tensor &x = in[0], &w = in[1];
  detail::check_floating(x, op);
  BRISK_CHECK(w.dim() == 2, op, ": weight must be 2-D (", in_out ? "in, out" : "out, in", "), got ", w.sizes());
  const int64_t k = w.size(in_out ? 0 : 1), n = w.size(in_out ? 1 : 0);
  BRISK_CHECK(x.dim() >= 1 && x.size(-1) == k, op, ": input ", x.sizes(), " does not have the ", k,
              " features that weight ", w.sizes(), " expects");
  // Note [Mixed linear]: an F32 weight and bias with a 16-bit input.
  const bool mixed = w.dtype() == DType::F32 && (x.dtype() == DType::BF16 || x.dtype() == DType::F16);
  BRISK_CHECK(x.dtype() == w.dtype() || mixed, op, ": dtypes differ (input ", x.str(), ", weight ", w.str(),
              "); a 16-bit input takes a weight of its dtype or F32");
  if (in.size() == 3) {
    const Tensor& b = in[2];
    BRISK_CHECK(b.dim() == 1 && b.size(0) == n, op, ": bias ", b.sizes(), " does not match the ", n,
                " output features of weight ", w.sizes());
    BRISK_CHECK(b.dtype() == w.dtype(), op, ": dtypes differ (weight ", w.str(), ", bias ", b.str(), ")");
  }
  BRISK_CHECK(!f32_result || x.dtype() != DType::F64, op, ": an F32 result of F64 operands would drop precision");
  Shape sizes = x.sizes();
  sizes[sizes.size() - 1] = n;
  return {sizes, f32_result ? DType::F32 : x.dtype()};
}

void linear_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  // flag: w stored (in, out) (linear_in_out); flag2: an F32 result (a weight gradient for an
  // F32 parameter).
  out[0] = linear_spec(in, attrs.flag, attrs.flag2, "linear");
}

// The gradients of linear's inputs from g, the gradient of its output (linear's own, or
// linear_gelu's pre-activation's): gx = g @ w, gw = g2^T @ x2 (the batch folded into rows: one
// (N, K) product in w's own layout), gbias = the column sums of g2; for a weight stored
// (in, out), gx = g @ w^T and gw = x2^T @ g2. Each product is a linear op itself (the weight
// read in place, either layout), so a mixed op's backward stays mixed: gx in x's dtype from
// the F32 weight, gw written in F32 straight from the BF16 product's F32 sums (Note [Mixed
// linear]). Written with ops, so double backward works. Reads c.inputs (x, w[, bias]) and
// c.attrs.flag (the layout), which linear and linear_gelu share.
void linear_backward(const BackwardCtx& c, const Tensor& grad, std::span<Tensor> gi) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  const bool in_out = c.attrs.flag;
  const int64_t k = w.size(in_out ? 0 : 1), n = w.size(in_out ? 1 : 0);
  // The gradient in x's dtype (an F32-result op's gradient is F32; only double backward sees it).
  const Tensor g = grad.dtype() == x.dtype() ? grad : cast(grad, x.dtype());
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  if (c.needs_grad(0)) gi[0] = in_out ? linear(g, w) : linear_in_out(g, w);
  const Tensor g2 = reshape(g, {rows, n});
  if (c.needs_grad(1)) {
    Attrs a;
    a.flag = true;                                                 // the second operand as (in, out)
    a.flag2 = w.dtype() == DType::F32 && x.dtype() != DType::F32;  // gw in w's dtype
    const Tensor x2 = reshape(x, {rows, k});
    gi[1] = in_out ? call1(OpId::Linear, {mT(x2), g2}, a) : call1(OpId::Linear, {mT(g2), x2}, a);
  }
  if (gi.size() == 3 && c.needs_grad(2)) gi[2] = sum(g2.dtype() == w.dtype() ? g2 : cast(g2, w.dtype()), {0});
}

void linear_bw(const BackwardCtx& c, std::span<Tensor> gi) { linear_backward(c, c.grads[0], gi); }

const OpDef kLinear{.infer = linear_infer,
                    .backward = linear_bw,
                    .save_inputs = mask(0, 1),  // x, w
                    .autocast = CastPolicy::LowerMixed};

// ---- linear_gelu: linear's inputs -> (y = gelu(h), h = x @ w^T + bias), both of linear's
// output spec (Note [Linear with GELU]). flag: linear's (in, out) layout; flag2: the tanh form.
void linear_gelu_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  out[0] = out[1] = linear_spec(in, attrs.flag, false, "linear_gelu");
}

// gh = gelu_backward(gy, h) (plus a gradient reaching h itself), then linear's backward.
void linear_gelu_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& h = c.outputs[1];
  Tensor gh;
  if (c.grads[0].defined()) gh = call1(OpId::GeluBackward, {c.grads[0], h}, {.flag = c.attrs.flag2});
  if (c.grads[1].defined()) gh = gh.defined() ? add(gh, c.grads[1]) : c.grads[1];
  if (gh.defined()) linear_backward(c, gh, gi);
}

const OpDef kLinearGelu{.infer = linear_gelu_infer,
                        .backward = linear_gelu_bw,
                        .save_inputs = mask(0, 1),  // x, w
                        .save_outputs = mask(1),    // h
                        .autocast = CastPolicy::LowerMixed};

}  // namespace

// Note [Linear is an op]
// linear was matmul(x, transpose(w)) plus a broadcast add of the bias: a second pass over the
// output and a temporary per call, and autocast had to be applied by hand before the
// transpose so that its cast cache saw the parameter rather than a fresh view. As one op, the
// weight and bias reach dispatch as themselves (cast and cached like any parameter), the
// kernels start each output row at the bias and accumulate the product onto it (as conv2d
// does), and the profiler, the conformance table and ONNX export see "linear". attrs.flag
// marks a weight stored (in, out) (linear_in_out: Hugging Face's Conv1D, torch.addmm's layout),
// read in place as well.
//
// Note [Mixed linear]
// Under autocast, PyTorch casts an F32 weight to BF16 for every linear in every forward (a pass
// over the weight that writes a copy of half its size), and its weight gradient comes out of
// the BF16 product rounded to BF16 and is cast back to F32 by the cast's backward (two more
// passes): in GPT-2 124M's BF16 step these casts were 139 ms of ~930 (one thread, Xeon with
// AMX). linear's policy is therefore LowerMixed: the input goes to the autocast dtype while an
// F32 weight and bias stay F32, and the op accepts that mix: the CPU kernel rounds the weight
// to BF16 while packing it for the GEMM (the bits of the cast, kernels/cpu/gemm_bf16.h) and
// rounds the bias the same way, so the forward is PyTorch's to the bit. Backward asks for the
// weight gradient with flag2 (result in F32), written from the product's F32 sums without the
// BF16 rounding PyTorch's goes through (more accurate than PyTorch's by that rounding), and the
// bias gradient is summed in F32. CUDA converts the weight into a temporary of x's dtype (its
// cuBLASLt GEMMs take one dtype), which is PyTorch's cost. F64 inputs are never mixed.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  BRISK_CHECK(x.defined() && weight.defined(), "linear: undefined input or weight");
  if (!bias.defined()) return call1(OpId::Linear, {x, weight});
  return call1(OpId::Linear, {x, weight, bias});
}

Tensor linear_in_out(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  BRISK_CHECK(x.defined() && weight.defined(), "linear_in_out: undefined input or weight");
  Attrs a;
  a.flag = true;
  if (!bias.defined()) return call1(OpId::Linear, {x, weight}, a);
  return call1(OpId::Linear, {x, weight, bias}, a);
}

// Note [Linear with GELU]
// gelu(linear(x, w, b)) is GPT-2's MLP (tanh form) and TransformerEncoderLayer's with
// activation "gelu" (erf form). As two ops under BF16 it is three passes over the (rows, 4 * d)
// output after the product: linear rounds its F32 sums to BF16, gelu reads that and writes its
// own. linear_gelu is one op with two outputs: y = gelu(h) and the pre-activation h, which
// backward needs (gelu_backward(gy, h), then linear's own backward, the same function:
// linear_backward), as cross_entropy keeps its logsumexp. The CPU kernel (kernels/cpu/gemm.cpp)
// writes h and y in linear's BF16 rounding pass (one read of each block of F32 sums, y computed
// with the Gelu op's vmath::gelu on h widened), and in F32 runs the Gelu op's kernel on h right
// after the product. The results are those of linear then gelu to the bit (the tests check it).
// Measured and not taken (Xeon with AMX, bench_linear_ce gelu, GPT-2's c_fc at N = 2048, one
// thread): an epilogue inside the GEMMs, called on each F32 register tile (16 x 48) or each BF16
// block (256 x 512) as soon as its sums were final, was 1-8% slower than the two ops: the GEMMs
// are compute-bound and blocked for their own cache footprint, and the GELU's reads and writes
// evicted the packed panels; the separate BF16 pass is 5-6% faster than linear + gelu's forward,
// the F32 one within the noise (it saves a dispatch and nothing else). A row-blocked product
// (a block of rows, then its GELU while in cache) would pack the whole weight again per block.
// The op takes linear's autocast policy (LowerMixed: Note [Mixed linear]). CUDA composes its
// linear and gelu kernels (kernels/cuda/matmul.cu). ONNX export writes the nodes linear and gelu
// export. GPT-2 and the transformer layers fuse only where their c_fc / linear1 module has no
// hooks (they would not fire): nn/models/gpt2.cpp, nn/transformer.cpp.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, bool tanh_approximation,
                   bool weight_in_out) {
  BRISK_CHECK(x.defined() && weight.defined(), "linear_gelu: undefined input or weight");
  const Attrs a{.flag = weight_in_out, .flag2 = tanh_approximation};
  Tensor out[2];
  if (bias.defined()) {
    const Tensor in[3] = {x, weight, bias};
    call(OpId::LinearGelu, in, a, out);
  } else {
    const Tensor in[2] = {x, weight};
    call(OpId::LinearGelu, in, a, out);
  }
  return out[0];
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  BRISK_CHECK(a.defined() && b.defined(), "matmul: undefined input");
  BRISK_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got ", a.sizes(), " @ ",
              b.sizes());
  const int64_t k_a = a.size(-1), k_b = b.dim() == 1 ? b.size(0) : b.size(-2);
  BRISK_CHECK(k_a == k_b, "matmul: shape mismatch ", a.sizes(), " @ ", b.sizes());
  // A 1-D a is a row (1, K), a 1-D b a column (K, 1); the added dims leave the result.
  const bool a_vector = a.dim() == 1, b_vector = b.dim() == 1;
  Tensor out = call1(OpId::Matmul, {a_vector ? unsqueeze(a, 0) : a, b_vector ? unsqueeze(b, 1) : b});
  if (b_vector) out = squeeze(out, -1);
  if (a_vector) out = squeeze(out, b_vector ? -1 : -2);
  return out;
}

// Note [Linear algebra ops]
// The decompositions run on the CPU with Eigen (kernels/cpu/linalg_decomp.cpp), in F32 and
// F64, one matrix of the batch at a time; none has a CUDA kernel (the dispatcher's "no kernel
// for device cuda"). Five are primitives: linalg_solve (PartialPivLU), linalg_cholesky (LLT),
// linalg_slogdet (PartialPivLU), linalg_qr (HouseholderQR) and linalg_eigh
// (SelfAdjointEigenSolver). Their backward formulas are PyTorch's, written with ordinary ops
// (solve, matmul, triangle masks), so double backward comes free. The rest are composites with
// no backward of their own: inv(A) = solve(A, I), det(A) = sign * exp(logabsdet), and
// lstsq(A, B) = solve(R, Q^T B) with (Q, R) = qr(A).
// cholesky and eigh read only the lower triangle (as LAPACK with UPLO = 'L'); their gradients
// are symmetric, as PyTorch's, so a gradcheck perturbs symmetrically (eigh(X + X^T)).
// Limits, each a clear error: slogdet's (and det's) gradient goes through inv(A), so it fails
// at a singular matrix (PyTorch returns the adjugate there); qr's gradient needs m >= n;
// lstsq solves only tall or square full-rank systems and returns the solution alone.

namespace {

void check_matrices(const Tensor& a, const char* op, bool square) {
  BRISK_CHECK(a.dtype() == DType::F32 || a.dtype() == DType::F64, op, ": expects F32 or F64 matrices, got ", a.str());
  BRISK_CHECK(a.dim() >= 2, op, ": expects a matrix or a batch of matrices (..., m, n), got ", a.sizes());
  if (square) BRISK_CHECK(a.size(-2) == a.size(-1), op, ": expects square matrices (..., n, n), got ", a.sizes());
}

// The sizes without the last `drop` dims.
Shape leading(const Shape& s, int drop) {
  Shape out;
  for (int d = 0; d + drop < s.size(); ++d) out.push_back(s[d]);
  return out;
}

Shape with_last(Shape s, std::initializer_list<int64_t> last) {
  for (int64_t v : last) s.push_back(v);
  return s;
}

// The identity (n, n), and 1 where row - col >= k (k = 0: the lower triangle; 1: strictly).
Tensor eye(int64_t n, DType dtype, Device device) {
  Tensor r = arange(0.0, double(n), 1.0, dtype, device);
  return cast(eq(unsqueeze(r, 1), unsqueeze(r, 0)), dtype);
}

Tensor lower_mask(int64_t n, int64_t k, DType dtype, Device device) {
  Tensor r = arange(0.0, double(n), 1.0, dtype, device);
  return cast(ge(unsqueeze(r, 1) - unsqueeze(r, 0), scalar_tensor(double(k), dtype, device)), dtype);
}

// a (..., m, n) and b (..., p, q) expanded to their broadcast batch dims.
std::pair<Tensor, Tensor> broadcast_batch(const Tensor& a, const Tensor& b, const char* op) {
  const Shape ba = leading(a.sizes(), 2), bb = leading(b.sizes(), 2);
  const int nd = std::max(ba.size(), bb.size());
  Shape batch = Shape::filled(nd, 1);
  for (int d = 0; d < nd; ++d) {
    const int da = d - (nd - ba.size()), db = d - (nd - bb.size());
    const int64_t sa = da >= 0 ? ba[da] : 1, sb = db >= 0 ? bb[db] : 1;
    BRISK_CHECK(sa == sb || sa == 1 || sb == 1, op, ": batch dims do not broadcast A ", a.sizes(), ", B ", b.sizes());
    batch[d] = sa == 1 ? sb : sa;
  }
  const Shape sa = with_last(batch, {a.size(-2), a.size(-1)}), sb = with_last(batch, {b.size(-2), b.size(-1)});
  return {sa == a.sizes() ? a : expand(a, sa), sb == b.sizes() ? b : expand(b, sb)};
}

// ---- linalg_solve: A (..., n, n), B (..., n, k) -> X = A^-1 B (..., n, k)
const char* solve_name(const Attrs& attrs) { return attrs.flag ? "linalg_inv" : "linalg_solve"; }

void solve_infer(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out) {
  const char* op = solve_name(attrs);
  const Tensor &a = in[0], &b = in[1];
  check_matrices(a, op, true);
  BRISK_CHECK(b.dtype() == a.dtype(), op, ": dtypes differ (A ", a.str(), ", B ", b.str(), ")");
  BRISK_CHECK(b.dim() == a.dim() && b.size(-2) == a.size(-1) && leading(b.sizes(), 2) == leading(a.sizes(), 2), op,
              ": shape mismatch A ", a.sizes(), ", B ", b.sizes(), " (B must be (..., n, k) with A's batch dims)");
  out[0] = {b.sizes(), b.dtype()};
}

// X = A^-1 B: gB = A^-T gX, gA = -gB X^T.
void solve_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &a = c.inputs[0], &x = c.outputs[0];
  const Tensor gb = linalg::solve(mT(a), c.grads[0]);
  if (c.needs_grad(1)) gi[1] = gb;
  if (c.needs_grad(0)) gi[0] = -matmul(gb, mT(x));
}

const OpDef kLinalgSolve{.infer = solve_infer,
                         .backward = solve_bw,
                         .save_inputs = mask(0),   // A
                         .save_outputs = mask(0),  // X
                         .autocast = CastPolicy::Fp32};

// ---- linalg_cholesky: A (..., n, n) symmetric positive-definite -> L (or U = L^T)
void cholesky_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  check_matrices(in[0], "linalg_cholesky", true);
  out[0] = {in[0].sizes(), in[0].dtype()};
}

// A = L L^T: gA = L^-T phi(L^T gL) L^-1, symmetrized, where phi keeps the lower triangle and
// halves the diagonal (Murray 2016, as PyTorch).
void cholesky_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const bool upper = c.attrs.flag;
  const Tensor l = upper ? mT(c.outputs[0]) : c.outputs[0];
  const Tensor gl = upper ? mT(c.grads[0]) : c.grads[0];
  const int64_t n = l.size(-1);
  const Tensor phi = lower_mask(n, 1, l.dtype(), c.device) + eye(n, l.dtype(), c.device) * 0.5;
  const Tensor l_inv = linalg::inv(l);
  const Tensor s = matmul(matmul(mT(l_inv), matmul(mT(l), gl) * phi), l_inv);
  gi[0] = (s + mT(s)) * 0.5;
}

const OpDef kLinalgCholesky{.infer = cholesky_infer,
                            .backward = cholesky_bw,
                            .save_outputs = mask(0),  // L
                            .autocast = CastPolicy::Fp32};

// ---- linalg_slogdet: A (..., n, n) -> sign (...), logabsdet (...)
void slogdet_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  check_matrices(in[0], "linalg_slogdet", true);
  out[0] = {leading(in[0].sizes(), 2), in[0].dtype()};
  out[1] = out[0];
}

// d logabsdet = tr(A^-1 dA), so gA = g A^-T; the sign is piecewise constant.
void slogdet_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor& g = c.grads[1];
  if (!g.defined()) return;
  gi[0] = unsqueeze(unsqueeze(g, -1), -1) * mT(linalg::inv(c.inputs[0]));
}

const OpDef kLinalgSlogdet{.infer = slogdet_infer,
                           .backward = slogdet_bw,
                           .save_inputs = mask(0),  // A
                           .autocast = CastPolicy::Fp32};

// ---- linalg_qr: A (..., m, n) -> Q (..., m, k) with orthonormal columns, R (..., k, n) upper
// triangular; k = min(m, n)
void qr_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  const Tensor& a = in[0];
  check_matrices(a, "linalg_qr", false);
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  const Shape batch = leading(a.sizes(), 2);
  out[0] = {with_last(batch, {m, k}), a.dtype()};
  out[1] = {with_last(batch, {k, n}), a.dtype()};
}

// For m >= n (as TensorFlow's QrGrad and PyTorch): M = R gR^T - gQ^T Q,
// gA = (gQ + Q copyltu(M)) R^-T, copyltu(M) the symmetric matrix with M's lower triangle.
void qr_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &q = c.outputs[0], &r = c.outputs[1], &gq = c.grads[0], &gr = c.grads[1];
  const int64_t m = q.size(-2), n = r.size(-1);
  BRISK_CHECK(m >= n, "linalg_qr: the gradient needs m >= n, got A ", c.in_specs[0].sizes);
  Tensor mm;
  if (gr.defined()) mm = matmul(r, mT(gr));
  if (gq.defined()) mm = mm.defined() ? mm - matmul(mT(gq), q) : -matmul(mT(gq), q);
  if (!mm.defined()) return;
  const Tensor sym = mm * lower_mask(n, 0, q.dtype(), c.device) + mT(mm * lower_mask(n, 1, q.dtype(), c.device));
  Tensor ga = matmul(q, sym);
  if (gq.defined()) ga = ga + gq;
  gi[0] = mT(linalg::solve(r, mT(ga)));  // ga R^-T
}

const OpDef kLinalgQr{.infer = qr_infer,
                      .backward = qr_bw,
                      .save_outputs = mask(0, 1),  // Q, R
                      .autocast = CastPolicy::Fp32};

// ---- linalg_eigh: A (..., n, n) symmetric -> w (..., n) ascending, V (..., n, n) (columns)
void eigh_infer(std::span<const Tensor> in, const Attrs&, std::span<TensorSpec> out) {
  const Tensor& a = in[0];
  check_matrices(a, "linalg_eigh", true);
  out[0] = {leading(a.sizes(), 1), a.dtype()};
  out[1] = {a.sizes(), a.dtype()};
}

// gA = V (diag(gw) + skew(V^T gV) / E) V^T with E_ij = w_j - w_i (the symmetric gradient, as
// PyTorch's; repeated eigenvalues make it infinite there too).
void eigh_bw(const BackwardCtx& c, std::span<Tensor> gi) {
  const Tensor &w = c.outputs[0], &v = c.outputs[1], &gw = c.grads[0], &gv = c.grads[1];
  const Tensor id = eye(v.size(-1), v.dtype(), c.device);
  Tensor inner;
  if (gv.defined()) {
    const Tensor vtgv = matmul(mT(v), gv);
    const Tensor e = unsqueeze(w, -2) - unsqueeze(w, -1) + id;  // 1 on the diagonal, where skew is 0
    inner = (vtgv - mT(vtgv)) * 0.5 / e;
  }
  if (gw.defined()) inner = inner.defined() ? inner + unsqueeze(gw, -2) * id : unsqueeze(gw, -2) * id;
  if (!inner.defined()) return;
  gi[0] = matmul(matmul(v, inner), mT(v));
}

const OpDef kLinalgEigh{.infer = eigh_infer,
                        .backward = eigh_bw,
                        .save_outputs = mask(0, 1),  // w, V
                        .autocast = CastPolicy::Fp32};

}  // namespace

namespace linalg {

Tensor solve(const Tensor& A, const Tensor& B) {
  BRISK_CHECK(A.defined() && B.defined(), "linalg_solve: undefined input");
  check_matrices(A, "linalg_solve", true);
  BRISK_CHECK(B.dim() >= 1, "linalg_solve: B must have 1+ dims, got ", B.sizes());
  // As torch.linalg.solve: B is a (batch of) vector(s) when 1-D or of A's sizes less the last.
  const bool vector = B.dim() == 1 || (B.dim() == A.dim() - 1 && B.sizes() == leading(A.sizes(), 1));
  auto [a, b] = broadcast_batch(A, vector ? unsqueeze(B, -1) : B, "linalg_solve");
  Tensor x = call1(OpId::LinalgSolve, {a, b});
  return vector ? squeeze(x, -1) : x;
}

Tensor inv(const Tensor& A) {
  BRISK_CHECK(A.defined(), "linalg_inv: undefined input");
  check_matrices(A, "linalg_inv", true);
  Attrs attrs;
  attrs.flag = true;  // errors name linalg_inv
  const Tensor id = eye(A.size(-1), A.dtype(), A.device());
  return call1(OpId::LinalgSolve, {A, A.dim() == 2 ? id : expand(id, A.sizes())}, attrs);
}

Tensor cholesky(const Tensor& A, bool upper) {
  BRISK_CHECK(A.defined(), "linalg_cholesky: undefined input");
  Attrs attrs;
  attrs.flag = upper;
  return call1(OpId::LinalgCholesky, {A}, attrs);
}

SlogdetResult slogdet(const Tensor& A) {
  BRISK_CHECK(A.defined(), "linalg_slogdet: undefined input");
  Tensor in[1] = {A};
  Tensor out[2];
  call(OpId::LinalgSlogdet, in, {}, out);
  return {out[0], out[1]};
}

Tensor det(const Tensor& A) {
  BRISK_CHECK(A.defined(), "linalg_det: undefined input");
  check_matrices(A, "linalg_det", true);
  auto [sign, logabsdet] = slogdet(A);
  return sign * exp(logabsdet);
}

QrResult qr(const Tensor& A) {
  BRISK_CHECK(A.defined(), "linalg_qr: undefined input");
  Tensor in[1] = {A};
  Tensor out[2];
  call(OpId::LinalgQr, in, {}, out);
  return {out[0], out[1]};
}

EighResult eigh(const Tensor& A) {
  BRISK_CHECK(A.defined(), "linalg_eigh: undefined input");
  Tensor in[1] = {A};
  Tensor out[2];
  call(OpId::LinalgEigh, in, {}, out);
  return {out[0], out[1]};
}

Tensor lstsq(const Tensor& A, const Tensor& B) {
  BRISK_CHECK(A.defined() && B.defined(), "linalg_lstsq: undefined input");
  check_matrices(A, "linalg_lstsq", false);
  BRISK_CHECK(A.size(-2) >= A.size(-1), "linalg_lstsq: A must be tall or square (..., m, n) with m >= n, got ",
              A.sizes(), " (wide systems are not supported)");
  BRISK_CHECK(B.dim() >= 2 && B.size(-2) == A.size(-2), "linalg_lstsq: shape mismatch A ", A.sizes(), ", B ", B.sizes(),
              " (B must be (..., m, k))");
  auto [q, r] = qr(A);
  return solve(r, matmul(mT(q), B));
}

}  // namespace linalg

// ---- composites: bmm, addmm, baddbmm, outer, einsum
Tensor bmm(const Tensor& a, const Tensor& b) {
  BRISK_CHECK(
      a.defined() && b.defined() && a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1),
      "bmm: expects (B, n, k) and (B, k, m), got ", a.defined() ? a.str() : "undefined", " and ",
      b.defined() ? b.str() : "undefined");
  return matmul(a, b);
}

Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, double beta, double alpha) {
  BRISK_CHECK(a.defined() && b.defined() && a.dim() == 2 && b.dim() == 2, "addmm: expects matrices, got ",
              a.defined() ? a.str() : "undefined", " and ", b.defined() ? b.str() : "undefined");
  Tensor p = matmul(a, b);
  if (alpha != 1) p = p * alpha;
  return beta == 0 ? p : (beta == 1 ? input + p : input * beta + p);
}

Tensor baddbmm(const Tensor& input, const Tensor& a, const Tensor& b, double beta, double alpha) {
  Tensor p = bmm(a, b);
  if (alpha != 1) p = p * alpha;
  return beta == 0 ? p : (beta == 1 ? input + p : input * beta + p);
}

Tensor outer(const Tensor& a, const Tensor& b) {
  BRISK_CHECK(a.defined() && b.defined() && a.dim() == 1 && b.dim() == 1, "outer: expects two vectors, got ",
              a.defined() ? a.str() : "undefined", " and ", b.defined() ? b.str() : "undefined");
  return a.unsqueeze(1) * b.unsqueeze(0);
}

// Note [einsum]: each operand is permuted so that its letters follow one global order (the
// output's letters, then the contracted ones), given size-1 dims where it lacks a letter,
// multiplied with broadcasting and summed over the contracted letters. Simple and exact, with
// gradients from permute/mul/sum; it materializes the full product, so a large contraction
// ("ij,jk->ik" at n = 4096) should call matmul directly.
namespace {

std::vector<std::string> einsum_parse(const std::string& eq, size_t n_ops, std::string& out) {
  std::string s;
  for (char c : eq)
    if (c != ' ') s += c;
  const size_t arrow = s.find("->");
  std::string lhs = arrow == std::string::npos ? s : s.substr(0, arrow);
  std::vector<std::string> terms;
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  BRISK_CHECK(terms.size() == n_ops, "einsum: \"", eq, "\" has ", terms.size(), " operand term(s) but ", n_ops,
              " operand(s) were given");
  int count[128] = {};
  for (const std::string& t : terms) {
    for (char c : t) {
      BRISK_CHECK(std::isalpha(static_cast<unsigned char>(c)), "einsum: \"", eq, "\": '", c,
                  "' is not a letter (ellipsis is not supported)");
      BRISK_CHECK(std::count(t.begin(), t.end(), c) == 1, "einsum: \"", eq, "\": letter '", c,
                  "' repeats within one operand (diagonals are not supported)");
      ++count[int(c)];
    }
  }
  if (arrow == std::string::npos) {
    out.clear();
    for (int c = 0; c < 128; ++c)
      if (count[c] == 1) out += char(c);
  } else {
    out = s.substr(arrow + 2);
    for (char c : out) {
      BRISK_CHECK(count[int(c)] > 0, "einsum: \"", eq, "\": output letter '", c, "' is in no operand");
      BRISK_CHECK(std::count(out.begin(), out.end(), c) == 1, "einsum: \"", eq, "\": output letter '", c, "' repeats");
    }
  }
  return terms;
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  BRISK_CHECK(!operands.empty() && operands.size() <= 3, "einsum: takes 1 to 3 operands, got ", operands.size());
  std::string out;
  std::vector<std::string> terms = einsum_parse(equation, operands.size(), out);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Tensor& t = operands[i];
    BRISK_CHECK(t.defined(), "einsum: operand ", i, " is undefined");
    BRISK_CHECK(int64_t(terms[i].size()) == t.dim(), "einsum: \"", equation, "\": operand ", i, " has ", t.dim(),
                " dims but its term \"", terms[i], "\" has ", terms[i].size(), " letters (", t.str(), ")");
    for (int d = 0; d < t.dim(); ++d) {
      const char c = terms[i][size_t(d)];
      auto [it, fresh] = size.emplace(c, t.sizes()[size_t(d)]);
      BRISK_CHECK(fresh || it->second == t.sizes()[size_t(d)] || it->second == 1 || t.sizes()[size_t(d)] == 1,
                  "einsum: \"", equation, "\": letter '", c, "' has size ", it->second, " and ", t.sizes()[size_t(d)]);
      it->second = std::max(it->second, t.sizes()[size_t(d)]);
    }
  }
  std::string order = out;  // the global order: output letters, then contracted ones
  for (const std::string& t : terms)
    for (char c : t)
      if (order.find(c) == std::string::npos) order += c;
  const size_t n_out = out.size();
  // Aligns operand i to `order`: permute its letters into that order, unsqueeze the missing.
  auto aligned = [&](size_t i) {
    const std::string& t = terms[i];
    Shape perm;
    std::string present;
    for (char c : order)
      if (t.find(c) != std::string::npos) {
        perm.push_back(int64_t(t.find(c)));
        present += c;
      }
    Tensor x = permute(operands[i], perm);
    Shape own;
    for (char c : order) own.push_back(present.find(c) != std::string::npos ? x.sizes()[present.find(c)] : 1);
    return reshape(x, own);
  };
  Tensor prod = aligned(0);
  for (size_t i = 1; i < operands.size(); ++i) prod = prod * aligned(i);
  Shape contracted;
  for (size_t d = n_out; d < order.size(); ++d) contracted.push_back(int64_t(d));
  Tensor r = contracted.empty() ? prod : sum(prod, contracted);
  // Broadcast letters of size 1 in every operand stay 1; expand to the letter sizes.
  Shape final_shape;
  for (size_t d = 0; d < n_out; ++d) final_shape.push_back(size.at(order[d]));
  if (r.sizes() != final_shape) r = contiguous(expand(r, final_shape));
  return r;
}

namespace detail {

void define_linalg_ops() {
  define(OpId::Matmul, kMatmul);
  define(OpId::Linear, kLinear);
  define(OpId::LinearGelu, kLinearGelu);
  define(OpId::LinalgSolve, kLinalgSolve);
  define(OpId::LinalgCholesky, kLinalgCholesky);
  define(OpId::LinalgSlogdet, kLinalgSlogdet);
  define(OpId::LinalgQr, kLinalgQr);
  define(OpId::LinalgEigh, kLinalgEigh);
}

}  // namespace detail

}  // namespace brisk
