// engine/dispatch.h: the one call path every op takes (see Note [Dispatch] in dispatch.cpp):
// autocast, checks and inference, allocation, kernel, recording on the tape.
#pragma once

#include <initializer_list>
#include <span>

#include "engine/op.h"

namespace brisk {

// Runs op `id`. Outputs that are already defined are written in place (out= and in-place
// ops; their sizes and dtype must match inference); undefined ones are allocated.
void call(OpId id, std::span<const Tensor> in, const Attrs& attrs, std::span<Tensor> out);

// Single-output convenience.
Tensor call1(OpId id, std::initializer_list<Tensor> in, const Attrs& attrs = {});

// The dtype op `id` will see a floating input like x in when called now: autocast's choice for
// the op while autocast is on (engine/autocast.h), else x's own. For public functions that
// must give parameters the dtype their input will have inside the op.
DType dispatch_dtype(OpId id, const Tensor& x);

// Runs init() once (registers the OpDefs and the kernels). Every entry point calls it.
void ensure_init();

}  // namespace brisk
