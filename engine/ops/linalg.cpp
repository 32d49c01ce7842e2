// engine/ops/linalg.cpp: matmul, with torch.matmul's shape rules: 1-D @ 1-D is a dot product
// (0-dim result); a 1-D operand gets a dim prepended (left) or appended (right) that the
// result drops; batch dims broadcast. The Matmul op itself sees operands of 2+ dims; its
// backward is two matmuls with transposed views, summed back over broadcast batch dims.
// One block: inference, backward formula, OpDef row, public function.
// Not here: the kernels (kernels/cpu/gemm.cpp, and cuBLASLt on CUDA), linear/bmm/einsum.
#include <algorithm>

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
    if (b_shape.size() == 2 && a_shape.size() > 2) {
      // (B..., M, K) @ (K, N): fold the batch into rows, gb = a2^T @ g2, one (K, N) product
      // instead of a (B, K, N) stack to sum.
      const int64_t k = a_shape.back(), n = b_shape.back();
      int64_t rows = 1;
      for (int d = 0; d + 1 < a_shape.size(); ++d) rows *= a_shape[d];
      gi[1] = matmul(mT(reshape(a, {rows, k})), reshape(g, {rows, n}));
    } else {
      gi[1] = sum_to(matmul(mT(a), g), b_shape);
    }
  }
}

const OpDef kMatmul{.infer = matmul_infer,
                    .backward = matmul_bw,
                    .save_inputs = mask(0, 1),  // a, b
                    .autocast = CastPolicy::Lower};

}  // namespace

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

namespace detail {

void define_linalg_ops() { define(OpId::Matmul, kMatmul); }

}  // namespace detail

}  // namespace brisk
