// engine/functions.h: the public op API, PyTorch-named free functions. Each is a few lines in
// engine/ops/<family>.cpp beside its OpDef: most call one op; composites (mean, mse_loss,
// stack, ...) are written with other ops and need no backward of their own.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/op.h"
#include "engine/random.h"
#include "engine/tensor.h"

namespace brisk {

// ---- factories
Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::F32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);  // uniform [0, 1), t's dtype and device
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);
Tensor eye(int64_t n, int64_t m = -1, DType dtype = DType::F32, Device device = Device::cpu());
// `steps` values from start to end inclusive, evenly spaced (F32 by default).
Tensor linspace(double start, double end, int64_t steps, DType dtype = DType::F32, Device device = Device::cpu());
Tensor empty_like(const Tensor& t);
Tensor scalar_tensor(double value, DType dtype = DType::F32, Device device = Device::cpu());
// A number as the other operand of `t` in a binary op (Note [Scalar operands] in
// engine/ops/elementwise.cpp): 0-dim in t's dtype, or F32 when the number is fractional or not
// finite and t is an integer or Bool tensor (so int_tensor * 0.5 is floating, as in PyTorch).
Tensor scalar_operand(double value, const Tensor& t);
Tensor arange(double start, double end, double step = 1, DType dtype = DType::I64, Device device = Device::cpu());
Tensor arange(int64_t end, DType dtype = DType::I64, Device device = Device::cpu());
Tensor rand(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu(), Generator* gen = nullptr);
Tensor randn(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu(), Generator* gen = nullptr);
Tensor uniform(const Shape& shape, double low, double high, DType dtype = DType::F32, Device device = Device::cpu(),
               Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double std, DType dtype = DType::F32, Device device = Device::cpu(),
              Generator* gen = nullptr);
// t (floating) filled in place with the values uniform() / normal() of t's sizes, dtype and
// device would give (the same Philox stream), without a temporary of t's size: parameter init
// (a 4096 x 25088 layer's temporary was 411 MB of peak memory; a non-contiguous t still takes
// one). Not recorded by autograd.
void fill_uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
void fill_normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::I64, Device device = Device::cpu(),
               Generator* gen = nullptr);
// A tensor holding a copy of `values` (converted to dtype).
Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::F32,
                   Device device = Device::cpu());
template <Element T>
Tensor from_data(const T* data, const Shape& shape, Device device = Device::cpu());
// Wraps external memory without copying; `deleter` (optional) runs when the last view goes.
Tensor from_blob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> deleter = {},
                 Device device = Device::cpu());

// ---- elementwise
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor square(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);  // log1p(e^(beta x)) / beta
Tensor logsigmoid(const Tensor& x);                                            // log(sigmoid(x))
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor log1p(const Tensor& x);  // log(1 + x), accurate near 0
Tensor log2(const Tensor& x);   // base-2 logarithm
Tensor expm1(const Tensor& x);  // e^x - 1, accurate near 0
Tensor erf(const Tensor& x);
Tensor reciprocal(const Tensor& x);
// Rounding (gradient 0, as PyTorch; integer tensors are copied unchanged). round: half to even.
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor trunc(const Tensor& x);
Tensor round(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor hardsigmoid(const Tensor& x);  // clamp(x / 6 + 1/2, 0, 1)
Tensor hardswish(const Tensor& x);    // x * hardsigmoid(x)
Tensor mish(const Tensor& x);         // x * tanh(softplus(x)) (composite)
// start + weight * (end - start); addcmul: x + value * a * b; addcdiv: x + value * a / b (composites)
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor lerp(const Tensor& start, const Tensor& end, double weight);
Tensor addcmul(const Tensor& x, const Tensor& a, const Tensor& b, double value = 1.0);
Tensor addcdiv(const Tensor& x, const Tensor& a, const Tensor& b, double value = 1.0);
Tensor clamp(const Tensor& x, double min, double max);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor cast(const Tensor& x, DType dtype);
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);
// Sampling (not differentiable), reproducible from the generator whatever the thread count.
Tensor bernoulli(const Tensor& p, Generator* gen = nullptr);  // 1 with probability p, else 0 (p's dtype)
// Category indices I64 (num_samples) or (R, num_samples) drawn from weights (C) or (R, C)
// (non-negative, finite, each row with a positive sum), as torch.multinomial.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false, Generator* gen = nullptr);

// ---- reductions (dims empty: all dims)
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor nansum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);  // NaN counts as 0
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // of all elements
Tensor min(const Tensor& x);
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// std_dev: the same reduction as std, under a name that `using namespace brisk` cannot
// confuse with namespace std.
inline Tensor std_dev(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false) {
  return brisk::std(x, dims, correction, keepdim);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // flat index over all elements
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums `x` down to `shape` (the reverse of broadcasting `shape` up to x's sizes).
Tensor sum_to(const Tensor& x, const Shape& shape);
Tensor softmax(const Tensor& x, int64_t dim);

// Scaled dot-product attention, as torch.nn.functional.scaled_dot_product_attention: q (*, T,
// D), k (*, S, D), v (*, S, Dv) with the same leading dims; mask broadcastable to (*, T, S),
// Bool (true = attend) or floating (added to the scores); is_causal: query i attends to keys
// j <= i (PyTorch's top-left diagonal, also when T != S); scale defaults to 1 / sqrt(D); dropout on the attention
// weights. One fused op on the CPU and CUDA that never stores the (T, S) scores (engine/ops/attention.cpp, Note
// [Fused attention] in kernels/cpu/attention.cpp); the math form below elsewhere (Note [When the fused
// attention runs]). A row with every key masked gives NaN, as the math form does.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {},
                                    double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, Generator* gen = nullptr);
// The same from matmul, masked_fill, softmax and dropout (PyTorch's "math" backend): the
// reference the fused op is checked against.
Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {},
                                         double dropout_p = 0.0, bool is_causal = false,
                                         std::optional<double> scale = std::nullopt, Generator* gen = nullptr);
Tensor log_softmax(const Tensor& x, int64_t dim);
// RMS normalization over the trailing dims `normalized_shape`, as torch.nn.functional.rms_norm:
// x * rsqrt(mean(x^2) + eps) * weight; weight of that shape or undefined, eps defaults to the
// dtype's machine epsilon (torch.finfo(x.dtype).eps). One op with a fused backward
// (engine/ops/norm.cpp).
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);
double machine_epsilon(DType t);
// log(sum(exp(x))) over dims, computed stably (as torch.logsumexp: all -inf gives -inf).
Tensor logsumexp(const Tensor& x, const Shape& dims = {}, bool keepdim = false);

// Values with their indices along a dim (max/min over a dim, sort, topk).
struct SortResult {
  Tensor values{};
  Tensor indices{};  // I64
};
SortResult max(const Tensor& x, int64_t dim, bool keepdim = false);  // the first maximum's index
SortResult min(const Tensor& x, int64_t dim, bool keepdim = false);
// ---- scans and sorting (engine/ops/scan.cpp)
Tensor cumsum(const Tensor& x, int64_t dim);   // integers and Bool give I64
Tensor cumprod(const Tensor& x, int64_t dim);  // gradient needs an input without zeros
Tensor prod(const Tensor& x);                  // of all elements
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false);
// log(cumsum(exp(x))) along dim without overflow, as torch.logcumsumexp (floating inputs)
Tensor logcumsumexp(const Tensor& x, int64_t dim);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);   // stable; NaN largest
SortResult sort(const Tensor& x, int64_t dim = -1, bool descending = false);  // values differentiable
// The k largest (or smallest) along dim, sorted; values differentiable.
SortResult topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// ---- more reductions and tests (composites)
Tensor any(const Tensor& x);  // Bool 0-dim: some element is nonzero
Tensor any(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
// p = 1, 2, inf (std::numeric_limits<double>::infinity()) or any p > 0; "fro" is p = 2 over all
// the dims given (vector norm over dims; empty dims: all).
Tensor norm(const Tensor& x, double p = 2.0, const Shape& dims = {}, bool keepdim = false);
// I64 (..., num_classes) with a 1 at each index; num_classes -1: max index + 1.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ---- losses
// Class indices as torch's: logits (N, C) with target I64 (N); (N, C, d1, ...) with target
// (N, d1, ...) (classes in dim 1); one sample (C) with a 0-dim target. Reduction::None gives a
// loss of the target's shape; target entries equal to ignore_index contribute nothing.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     double label_smoothing = 0.0, int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// cross_entropy(linear(x, weight, bias), target) without the logits: x (N, K) or (*, K),
// weight (V, K), target I64 (N) or (*), bias (V) or undefined; the vocabulary is walked in
// chunks and the backward recomputes each chunk's logits (Note [Linear cross-entropy
// recomputes the logits] in engine/ops/linear_cross_entropy.cpp). Under autocast the products
// run in the lower dtype and the softmax in F32; the loss is F32 (F64 for F64 inputs).
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target, const Tensor& bias = {},
                            Reduction reduction = Reduction::Mean, double label_smoothing = 0.0,
                            int64_t ignore_index = -100);

// ---- linear algebra
Tensor matmul(const Tensor& a, const Tensor& b);
// x (*, in) @ weight (out, in)^T + bias (out) (bias undefined: none): one op (Note [Linear is
// an op] in engine/ops/linalg.cpp).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// x (*, in) @ weight (in, out) + bias (out): the same op with the weight stored (in, out), as
// Hugging Face's Conv1D (GPT-2) and torch.addmm hold it.
Tensor linear_in_out(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// gelu(linear(x, weight, bias), tanh_approximation) as one op (under BF16, linear's rounding
// pass writes the GELU too); the bits of the two ops (Note [Linear with GELU] in
// engine/ops/linalg.cpp). weight_in_out: the weight stored (in, out), as linear_in_out.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, bool tanh_approximation = false,
                   bool weight_in_out = false);
Tensor bmm(const Tensor& a, const Tensor& b);  // (B, n, k) @ (B, k, m), checked
// beta * input + alpha * (a @ b): addmm for matrices, baddbmm for batches
Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0);
Tensor baddbmm(const Tensor& input, const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0);
Tensor outer(const Tensor& a, const Tensor& b);  // (n) x (m) -> (n, m)
// Einstein summation over 1-3 operands ("ij,jk->ik", "bij,bjk->bik", "i,i->"); repeated
// letters within one operand (diagonals) and ellipses are errors. Implicit output (no "->"):
// the letters seen once, sorted. Computed as a broadcast product summed over the contracted
// letters (Note [einsum] in engine/ops/linalg.cpp): use matmul for large contractions.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

// Decompositions of (..., m, n) batches, F32 and F64, on the CPU (torch.linalg's names).
namespace linalg {
struct SlogdetResult {
  Tensor sign{}, logabsdet{};  // each of the batch shape (...); sign 0 and -inf for a singular A
};
struct QrResult {
  Tensor q{}, r{};  // (..., m, k) orthonormal columns, (..., k, n) upper triangular; k = min(m, n)
};
struct EighResult {
  Tensor eigenvalues{}, eigenvectors{};  // (..., n) ascending, (..., n, n) one vector per column
};
Tensor solve(const Tensor& A, const Tensor& B);        // X with A X = B; B (..., n, k) or a vector (..., n)
Tensor inv(const Tensor& A);                           // A^-1 (a composite: solve(A, I))
Tensor det(const Tensor& A);                           // sign * exp(logabsdet) of slogdet
SlogdetResult slogdet(const Tensor& A);                // gradient through logabsdet only
Tensor cholesky(const Tensor& A, bool upper = false);  // L with A = L L^T (U = L^T if upper)
QrResult qr(const Tensor& A);                          // reduced QR (Householder); gradient for m >= n
EighResult eigh(const Tensor& A);                      // symmetric A, its lower triangle read
Tensor lstsq(const Tensor& A, const Tensor& B);        // argmin |A X - B| for full-rank A with m >= n
}  // namespace linalg

// ---- shape (views share storage; reshape copies only when it must)
Tensor view(const Tensor& x, const Shape& shape);  // one size may be -1
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor expand(const Tensor& x, const Shape& shape);  // -1 keeps a size
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to_device(const Tensor& x, Device device, bool non_blocking = false);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// Pieces along a dim, as views: split by a size (the last piece may be shorter) or by sizes
// that add up to the dim's size; chunk into at most n pieces; unbind removes the dim.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
Tensor flip(const Tensor& x, const Shape& dims);
Tensor roll(const Tensor& x, int64_t shifts, int64_t dim);
Tensor repeat(const Tensor& x, const Shape& repeats);  // torch.Tensor.repeat (tiles whole copies)
Tensor tile(const Tensor& x, const Shape& reps);       // repeat with leading 1s for short reps
Tensor tril(const Tensor& x, int64_t diagonal = 0);    // (..., m, n): zero above the diagonal
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// Indices of the nonzero elements, I64 (count, x.dim()) (reads the values: a device sync).
Tensor nonzero(const Tensor& x);
std::vector<Tensor> where(const Tensor& cond);  // unbind(nonzero(cond), 1), as torch.where(cond)
// The elements where mask (broadcast with x) is true, 1-D; differentiable in x.
Tensor masked_select(const Tensor& x, const Tensor& mask);
// weight (V, D), indices I64 of any shape -> (*indices.shape, D).
Tensor embedding(const Tensor& weight, const Tensor& indices);

// ---- comparisons of whole tensors (host-side, for tests and users)
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);

// ---- fused optimizer steps and the gradient unscale (engine/ops/optim.cpp, Note [Fused steps
// are ops]): one pass over every tensor of the lists, in place. Lists hold one tensor per
// parameter, dense, of the parameter's sizes and dtype (F32/F64; the unscale takes any floating
// dtype), on one device; a state list these options do not use is empty.
struct SgdParams;
struct AdamParams;
struct RmspropParams;
struct AdagradParams;
// steps: each parameter's step count, this step included; fresh (SGD with momentum): 1 where
// the momentum buffer is new (written, not read), else 0.
void fused_sgd_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> momentum_buffers,
                std::span<const int64_t> fresh, const SgdParams& p);
// fused_adamw when p.decoupled.
void fused_adam_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avgs,
                 std::span<const Tensor> exp_avg_sqs, std::span<const Tensor> max_exp_avg_sqs,
                 std::span<const int64_t> steps, const AdamParams& p);
void fused_rmsprop_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> square_avgs,
                    std::span<const Tensor> grad_avgs, std::span<const Tensor> momentum_buffers,
                    const RmspropParams& p);
void fused_adagrad_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> sums,
                    std::span<const int64_t> steps, const AdagradParams& p);
// grads *= inv_scale in place (v itself where inv_scale is 1); returns (n) Bool on the grads'
// device: found[i] when grads[i] held an inf or NaN before scaling. `device`: the flags' device
// when grads is empty.
Tensor amp_unscale_(std::span<const Tensor> grads, double inv_scale, Device device = Device::cpu());

// ---- int8 inference (engine/ops/quantized.cpp, Note [Int8 ops]; CPU): the quantized modules'
// ops (compress/quantize.h). int8_pack_weight packs w (N, K...) for the GEMM -> (packed, col_sum);
// int8_linear / int8_conv2d take the int8 weight, its per-output-channel scales (symmetric,
// zero point 0), the packed pair and an optional F32 bias.
struct Int8Params;
std::pair<Tensor, Tensor> int8_pack_weight(const Tensor& w);
Tensor int8_linear(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor& packed, const Tensor& col_sum,
                   const Tensor& bias, const Int8Params& p);
Tensor int8_conv2d(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor& packed, const Tensor& col_sum,
                   const Tensor& bias, const Int8Params& p);
// Affine quantization of F32 x to `dtype` (I8 or U8; its whole range), per tensor (axis -1,
// scale and zero_point of one element) or per channel along axis; and back to F32.
Tensor quantize_affine(const Tensor& x, const Tensor& scale, const Tensor& zero_point, int64_t axis, DType dtype);
Tensor dequantize_affine(const Tensor& q, const Tensor& scale, const Tensor& zero_point, int64_t axis);

// ==== the layers' functional forms (torch.nn.functional's names and defaults; nn/functional.h
// re-exports them under brisk::nn::functional). Layout NCHW; weights in PyTorch's shapes.
using Pair = std::array<int64_t, 2>;

// ---- convolution and pooling (engine/ops/conv.cpp, engine/ops/pool.cpp)
// x (B, C, H, W), weight (O, C / groups, kh, kw), bias (O) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Pair stride = {1, 1},
              Pair padding = {0, 0}, Pair dilation = {1, 1}, int64_t groups = 1);
// x (B, C, L), weight (O, C / groups, k): conv2d with H = 1.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1, int64_t groups = 1);
// stride defaults to the kernel size (as PyTorch) when empty.
Tensor max_pool2d(const Tensor& x, Pair kernel, std::optional<Pair> stride = std::nullopt, Pair padding = {0, 0},
                  Pair dilation = {1, 1}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, Pair kernel, std::optional<Pair> stride = std::nullopt, Pair padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size);

// Conv3d / conv_transpose3d / 3-d pooling do not exist in brisk: a 5-D
// input to conv2d or conv_transpose2d is an error that says so.

// ---- transposed convolution and more pooling (engine/ops/conv.cpp, engine/ops/pool.cpp)
// x (B, C_in, H, W) or unbatched (C_in, H, W); weight in PyTorch's layout (C_in, C_out /
// groups, kh, kw); bias (C_out) or undefined. Output size per axis: (H - 1) * stride - 2 *
// padding + dilation * (kh - 1) + output_padding + 1, where output_padding must be smaller than
// stride or dilation (as PyTorch). The gradient of conv2d with respect to its input.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, Pair stride = {1, 1},
                        Pair padding = {0, 0}, Pair output_padding = {0, 0}, int64_t groups = 1,
                        Pair dilation = {1, 1});
// x (B, C_in, L) or (C_in, L), weight (C_in, C_out / groups, k): conv_transpose2d with H = 1.
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);
// x (B, C, L) or (C, L): max_pool2d / avg_pool2d over (B, C, 1, L); stride defaults to kernel.
// The indices of *_with_indices are positions along L, as PyTorch's return_indices.
Tensor max_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                  int64_t dilation = 1, bool ceil_mode = false);
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel,
                                                  std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                                                  int64_t dilation = 1, bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
// max_pool2d's values and its indices into each H * W plane (PyTorch's return_indices).
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Pair kernel,
                                                  std::optional<Pair> stride = std::nullopt, Pair padding = {0, 0},
                                                  Pair dilation = {1, 1}, bool ceil_mode = false);
// x (B, C, H, W) or (C, H, W); PyTorch's adaptive windows; indices into each H * W plane.
Tensor adaptive_max_pool2d(const Tensor& x, Pair output_size);
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, Pair output_size);
// x (B, C, L) or (C, L).
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);
Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size);

// ---- padding and resizing (engine/ops/resize.cpp)
// PyTorch's F.pad: `pad` holds (before, after) pairs, the LAST dim first ({left, right, top,
// bottom, ...}), at most x.dim() pairs. mode "constant" (fills `value`), "reflect" (mirror
// without the edge; each pad < the dim's size), "replicate" (repeat the edge), "circular"
// (wrap; each pad <= the dim's size). Negative pads crop, in every mode (circular wraps
// around what the crops leave, as PyTorch). Any number of the trailing dims may be padded
// (PyTorch's non-constant modes take at most 3).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, const std::string& mode = "constant", double value = 0.0);

// Options of interpolate: exactly one of size and scale_factor, each one value for every
// spatial dim or one per spatial dim.
struct InterpolateOptions {
  std::vector<int64_t> size = {};          // output spatial sizes
  std::vector<double> scale_factor = {};   // output size = floor(input size * scale_factor)
  std::string mode = "nearest";            // nearest, nearest-exact, linear (3-D), bilinear (4-D), trilinear (5-D)
  std::optional<bool> align_corners = {};  // linear modes only; unset = false, as PyTorch
  // false: the given scale_factor places the samples (PyTorch's default); true: input / output size.
  bool recompute_scale_factor = false;
};
// x (B, C, L), (B, C, H, W) or (B, C, D, H, W). Sample positions, rounding and clamping as
// PyTorch's CPU kernels (coordinates in float, in double for F64 inputs; nearest in float).
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);
// (*, C * r^2, H, W) -> (*, C, H * r, W * r), and its inverse.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);

// ---- normalization (engine/ops/norm.cpp)
// Normalizes over the trailing dims `normalized_shape`; weight/bias of that shape or undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// x (B, C, *). training: batch statistics, and running stats (if defined) updated with momentum;
// eval: the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight = {},
                  const Tensor& bias = {}, bool training = false, double momentum = 0.1, double eps = 1e-5);
// x (B, C, *) in `groups` groups of channels; weight/bias (C).
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

// ==== recurrent sequences
// What RNN and GRU return: output (T, B, D * H) (or (B, T, D * H), or (T, D * H) unbatched)
// and the final hidden state h_n (num_layers * D, B, H), D = 2 if bidirectional else 1.
struct RNNResult {
  Tensor output{};
  Tensor h_n{};
};

// LSTM's: as RNNResult plus the final cell state c_n (num_layers * D, B, hidden_size); with
// proj_size > 0, output and h_n have proj_size features.
struct LSTMResult {
  Tensor output{};
  Tensor h_n{};
  Tensor c_n{};
};

// The fused sequence ops (Note [Fused recurrent layers] in kernels/cpu/recurrent.cpp): one
// layer and direction over a whole sequence, F32 / F64, on devices with their kernels (the
// CPU); nn's LSTM and GRU call them. reverse runs t = T-1 .. 0 (a bidirectional layer's second direction).
// gx (T, B, 4H) = x W_ih^T + b_ih + b_hh, w_hh (4H, H), h0 and c0 (B, H) -> output (T, B, H),
// h_n, c_n (B, H); gates in PyTorch's order i, f, g, o.
LSTMResult lstm_sequence(const Tensor& gx, const Tensor& w_hh, const Tensor& h0, const Tensor& c0,
                         bool reverse = false);

// gx (T, B, 3H) = x W_ih^T + b_ih, w_hh (3H, H), b_hh (3H), h0 (B, H) -> output (T, B, H),
// h_n (B, H); gates r, z, n with n = tanh(gx_n + r * (h W_hn^T + b_hn)).
RNNResult gru_sequence(const Tensor& gx, const Tensor& w_hh, const Tensor& b_hh, const Tensor& h0,
                       bool reverse = false);

}  // namespace brisk
