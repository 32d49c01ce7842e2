// brisk.h: the umbrella header. Include this to use the engine: tensors, ops, autograd,
// autocast, random. Narrower headers (engine/tensor.h, engine/functions.h, ...) work too.
#pragma once

#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/dispatch.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/gradcheck.h"
#include "engine/nonfinite.h"
#include "engine/random.h"
#include "engine/tensor.h"
