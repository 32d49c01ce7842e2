// engine/functions.h: the public op API, PyTorch-named free functions. Each is a few lines in
// engine/ops/<family>.cpp beside its OpDef: most call one op; composites (mean, mse_loss,
// stack, ...) are written with other ops and need no backward of their own.
#pragma once

#include <cstdint>
#include <initializer_list>
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
Tensor empty_like(const Tensor& t);
Tensor scalar_tensor(double value, DType dtype = DType::F32, Device device = Device::cpu());
Tensor arange(double start, double end, double step = 1, DType dtype = DType::I64, Device device = Device::cpu());
Tensor arange(int64_t end, DType dtype = DType::I64, Device device = Device::cpu());
Tensor rand(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu(), Generator* gen = nullptr);
Tensor randn(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu(), Generator* gen = nullptr);
Tensor uniform(const Shape& shape, double low, double high, DType dtype = DType::F32, Device device = Device::cpu(),
               Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double std, DType dtype = DType::F32, Device device = Device::cpu(),
              Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::I64, Device device = Device::cpu(),
               Generator* gen = nullptr);
// A tensor holding a copy of `values` (converted to dtype).
Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::F32,
                   Device device = Device::cpu());
template <class T>
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
Tensor log_softmax(const Tensor& x, int64_t dim);
// log(sum(exp(x))) over dims, computed stably (as torch.logsumexp: all -inf gives -inf).
Tensor logsumexp(const Tensor& x, const Shape& dims = {}, bool keepdim = false);

// ---- losses
// Class indices as torch's: logits (N, C) with target I64 (N); (N, C, d1, ...) with target
// (N, d1, ...) (classes in dim 1); one sample (C) with a 0-dim target. Reduction::None gives a
// loss of the target's shape; target entries equal to ignore_index contribute nothing.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     double label_smoothing = 0.0, int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// ---- linear algebra
Tensor matmul(const Tensor& a, const Tensor& b);

// Decompositions of (..., m, n) batches, F32 and F64, on the CPU (torch.linalg's names).
namespace linalg {
struct SlogdetResult {
  Tensor sign, logabsdet;  // each of the batch shape (...); sign 0 and -inf for a singular A
};
struct QrResult {
  Tensor q, r;  // (..., m, k) orthonormal columns, (..., k, n) upper triangular; k = min(m, n)
};
struct EighResult {
  Tensor eigenvalues, eigenvectors;  // (..., n) ascending, (..., n, n) one vector per column
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
// weight (V, D), indices I64 of any shape -> (*indices.shape, D).
Tensor embedding(const Tensor& weight, const Tensor& indices);

// ---- comparisons of whole tensors (host-side, for tests and users)
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);

}  // namespace brisk
