// brisk.h: the umbrella header: the whole public API in one include: tensors, ops, autograd,
// autocast, random, threads; nn (modules, layers, functional, init, models, saving); optim
// (optimizers, schedulers, clipping, early stopping, the gradient scaler); data (datasets,
// readers, transforms, samplers, the loader); text (tokenizers, token files); train
// (checkpoints); interop (ONNX export and import, torch.save files); and, in programs linked to
// brisk::dist, dist (process groups, DDP, ZeRO-1). The narrower headers work on their own too.
#pragma once

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/readers.h"
#include "data/sampler.h"
#include "data/transforms.h"
#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/custom_function.h"
#include "engine/dispatch.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/gradcheck.h"
#include "engine/indexing.h"
#include "engine/kernel_override.h"
#include "engine/nonfinite.h"
#include "engine/random.h"
#include "engine/serialize.h"
#include "engine/tensor.h"
#include "engine/threads.h"
#ifdef BRISK_WITH_INTEROP  // built where libzip, protobuf and ONNX are (CMake's BRISK_INTEROP)
#include "interop/onnx_export.h"
#include "interop/onnx_import.h"
#include "interop/torch_file.h"
#endif
#include "compress/distill.h"
#include "compress/prune.h"
#include "compress/prune_channels.h"
#include "compress/quantize.h"
#include "nn/ctc.h"
#include "nn/features.h"
#include "nn/functional.h"
#include "nn/generate.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/layers_extra.h"
#include "nn/layers_resize.h"
#include "nn/losses.h"
#include "nn/models/gpt2.h"
#include "nn/models/simple.h"
#include "nn/models/vision.h"
#include "nn/module.h"
#include "nn/multitask.h"
#include "nn/recurrent.h"
#include "nn/serialize_module.h"
#include "nn/transformer.h"
#include "optim/optim.h"
#include "text/bpe.h"
#include "text/token_file.h"
#include "text/tokenize_files.h"
#include "train/checkpoint.h"

#ifdef BRISK_WITH_DIST
#include "dist/ddp.h"
#include "dist/process_group.h"
#include "dist/zero.h"
#endif
