// engine/ops/families.h: the functions that fill the OpDef table, one per family file, and
// the small helpers the family files share. Internal to engine/ops.
#pragma once

#include "engine/autograd.h"
#include "engine/dispatch.h"
#include "engine/functions.h"
#include "engine/op.h"
#include "engine/op_params.h"

namespace brisk::detail {

void define_elementwise_ops();  // engine/ops/elementwise.cpp
void define_random_ops();       // engine/ops/random.cpp
void define_reduce_ops();       // engine/ops/reduce.cpp
void define_scan_ops();         // engine/ops/scan.cpp (cumsum, cumprod, argsort; sort, topk)
void define_linalg_ops();       // engine/ops/linalg.cpp
void define_shape_ops();        // engine/ops/shape.cpp (views, copies between devices)
void define_index_ops();        // engine/ops/index.cpp (cat, index_select, gather, ...)
void define_conv_ops();         // engine/ops/conv.cpp (conv2d and its backward ops)
void define_pool_ops();         // engine/ops/pool.cpp (max, average, adaptive pooling)
void define_resize_ops();       // engine/ops/resize.cpp (resample2d: pad, interpolate)
void define_norm_ops();         // engine/ops/norm.cpp (layer norm, batch norm)
void define_recurrent_ops();    // engine/ops/recurrent.cpp (lstm_sequence, gru_sequence)
void define_attention_ops();    // engine/ops/attention.cpp (fused scaled dot-product attention)
void define_optim_ops();        // engine/ops/optim.cpp (fused optimizer steps, the gradient unscale)
void define_quantized_ops();    // engine/ops/quantized.cpp (int8 inference: pack, linear, conv)

// engine/ops/linear_cross_entropy.cpp (a classifier head fused into its loss)
void define_linear_cross_entropy_ops();

inline void define_all_ops() {
  define_elementwise_ops();
  define_random_ops();
  define_reduce_ops();
  define_linear_cross_entropy_ops();
  define_scan_ops();
  define_linalg_ops();
  define_shape_ops();
  define_index_ops();
  define_conv_ops();
  define_pool_ops();
  define_resize_ops();
  define_norm_ops();
  define_recurrent_ops();
  define_attention_ops();
  define_optim_ops();
  define_quantized_ops();
}

// Installs `def` for `id`, keeping the name and arity that ops.def gives and any kernels
// already registered.
inline void define(OpId id, OpDef def) {
  OpDef& slot = op_def(id);
  def.name = slot.name;
  def.n_in = slot.n_in;
  def.n_out = slot.n_out;
  for (int d = 0; d < kNumDeviceTypes; ++d) def.kernels[d] = slot.kernels[d];
  slot = def;
}

// Masks of an OpDef row by position: mask(0, 1) is inputs (or outputs) 0 and 1.
template <class... I>
constexpr uint32_t mask(I... i) {
  return ((1u << i) | ... | 0u);
}

// ---- checks shared by the conv and pooling families

inline void check_4d(const Shape& s, const char* op, const char* what) {
  BRISK_CHECK(s.size() == 4, op, ": ", what, " must be 4-D (B, C, H, W), got ", s);
}

inline void check_floating(const Tensor& t, const char* op) {
  BRISK_CHECK(is_floating(t.dtype()), op, ": expects a floating tensor, got ", t.str());
}

// x * mul + add for a geometry value and a size, or an error naming the op: a user's padding
// or dilation near 2^63 must not wrap (see Note [Checked sizes] in engine/shape.h).
inline int64_t checked_term(int64_t x, int64_t mul, int64_t add, const char* op, const char* what) {
  int64_t r = 0;
  const bool ok = !__builtin_mul_overflow(x, mul, &r) && !__builtin_add_overflow(r, add, &r);
  BRISK_CHECK(ok, op, ": ", what, " (", x, " x ", mul, " + ", add, ") overflows 64 bits");
  return r;
}

// The forward op's attrs with attrs.shape = `shape` (a backward op's input sizes).
inline Attrs with_shape(const Attrs& attrs, const Shape& shape) {
  Attrs a = attrs;
  a.shape = shape;
  return a;
}

// The public forms' (h, w) pairs as the ops' parameters.
inline Hw hw(Pair p) { return {p[0], p[1]}; }

// (C, L) -> (1, C, L): the unbatched 1-d forms of conv and pooling; `batched` says whether to
// squeeze back (unbatch).
inline Tensor batch_1d(const Tensor& x, const char* op, bool& batched) {
  BRISK_CHECK(x.defined(), op, ": undefined input");
  BRISK_CHECK(x.dim() == 2 || x.dim() == 3, op, ": input must be 3-D (B, C, L) or 2-D (C, L), got ", x.sizes());
  batched = x.dim() == 3;
  return batched ? x : unsqueeze(x, 0);
}

inline Tensor unbatch(const Tensor& y, bool batched) { return batched ? y : squeeze(y, 0); }

}  // namespace brisk::detail
