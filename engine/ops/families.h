// engine/ops/families.h: the functions that fill the OpDef table, one per family file, and
// the small helpers the family files share. Internal to engine/ops.
#pragma once

#include "engine/autograd.h"
#include "engine/dispatch.h"
#include "engine/functions.h"
#include "engine/op.h"

namespace brisk::detail {

void define_elementwise_ops();  // engine/ops/elementwise.cpp
void define_random_ops();       // engine/ops/random.cpp
void define_reduce_ops();       // engine/ops/reduce.cpp
void define_linalg_ops();       // engine/ops/linalg.cpp
void define_shape_ops();        // engine/ops/shape.cpp (views, copies between devices)
void define_index_ops();        // engine/ops/index.cpp (cat, index_select, gather, ...)
void define_nn_ops();           // engine/ops/nn.cpp (conv, pooling)
void define_norm_ops();         // engine/ops/norm.cpp (layer norm, batch norm)

inline void define_all_ops() {
  define_elementwise_ops();
  define_random_ops();
  define_reduce_ops();
  define_linalg_ops();
  define_shape_ops();
  define_index_ops();
  define_nn_ops();
  define_norm_ops();
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

}  // namespace brisk::detail
