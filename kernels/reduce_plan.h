// kernels/reduce_plan.h: how a reduction walks its input, shared by the CPU and CUDA reduction
// kernels: the input's dims split into a kept group (indexing the output) and a reduced group,
// each with size-1 dims dropped and memory-contiguous neighbours merged (see Note [Reduction
// plan] in kernels/cpu/reduce.cpp). Host-side planning only; the loops are per backend.
// Plain data (no Eigen), so .cu files can pass a plan to device code by value.
#pragma once

#include <cstdint>

#include "engine/op.h"
#include "engine/tensor.h"
#include "kernels/reduce_ops.h"

namespace brisk::kernels {

// Bit d set: dim d of an ndim-dim tensor is reduced; empty dims mean all (checked by inference).
inline uint32_t reduce_mask(const Shape& dims, int ndim, const char* op) {
  const uint32_t all = ndim == 0 ? 0u : (1u << ndim) - 1u;
  if (dims.empty()) return all;
  uint32_t mask = 0;
  for (int64_t d : dims) mask |= 1u << wrap_dim(d, ndim, op);
  return mask & all;
}

// The reduced dims of argmax/argmin: attrs.dim, or every dim with attrs.flag (a flat index).
inline uint32_t arg_mask(int ndim, const Attrs& attrs, const char* op) {
  const uint32_t all = ndim == 0 ? 0u : (1u << ndim) - 1u;
  return attrs.flag ? all : (1u << wrap_dim(attrs.dim, ndim, op)) & all;
}

// The reduced dims of an entry of the reduction list (kernels/reduce_ops.h).
inline uint32_t entry_mask(ReduceDims dims, int ndim, const Attrs& attrs, const char* op) {
  return dims == ReduceDims::List ? reduce_mask(attrs.dims, ndim, op) : arg_mask(ndim, attrs, op);
}

struct Group {
  int n = 0;
  int64_t size[kMaxDims];
  int64_t in[kMaxDims];   // input strides
  int64_t out[kMaxDims];  // output strides (kept group only)

  // Appends a dim (outer to inner), merging it into the previous one when they chain.
  void add(int64_t s, int64_t in_stride, int64_t out_stride) {
    if (s == 1) return;
    if (n > 0 && in[n - 1] == in_stride * s && out[n - 1] == out_stride * s) {
      size[n - 1] *= s;
      in[n - 1] = in_stride;
      out[n - 1] = out_stride;
      return;
    }
    size[n] = s;
    in[n] = in_stride;
    out[n] = out_stride;
    ++n;
  }
  // A group without dims holds one dim of size 1, so every loop has an innermost dim.
  void finish() {
    if (n > 0) return;
    size[0] = 1;
    in[0] = 0;
    out[0] = 0;
    n = 1;
  }
};

struct ReducePlan {
  Group kept;
  Group red;
  int64_t n_out = 1;  // number of outputs
  int64_t n_red = 1;  // elements reduced into each output
};

// x's dims split by `mask`. y is the output: with x's rank (keepdim, softmax) or the kept dims.
// An input without elements reads nothing: its strides are taken as 0, so that no offset is
// applied to its null data pointer (undefined behaviour; UBSan found it).
inline ReducePlan make_plan(const Tensor& x, const Tensor& y, uint32_t mask) {
  ReducePlan p;
  const bool same_rank = y.dim() == x.dim();
  const bool empty = x.numel() == 0;
  int yd = 0;
  for (int d = 0; d < x.dim(); ++d) {
    const int64_t s = x.sizes()[d];
    const bool reduced = (mask >> d) & 1u;
    if (reduced) {
      p.red.add(s, empty ? 0 : x.strides()[d], 0);
      p.n_red *= s;
      if (same_rank) ++yd;
    } else {
      p.kept.add(s, empty ? 0 : x.strides()[d], y.strides()[yd]);
      p.n_out *= s;
      ++yd;
    }
  }
  p.kept.finish();
  p.red.finish();
  return p;
}

// The same plan writing output o at offset o (a dense scratch buffer of n_out values, such as
// var's means, in flat row-major output order).
inline ReducePlan with_flat_output(ReducePlan p) {
  int64_t stride = 1;
  for (int d = p.kept.n - 1; d >= 0; --d) {
    p.kept.out[d] = stride;
    stride *= p.kept.size[d];
  }
  return p;
}

}  // namespace brisk::kernels
