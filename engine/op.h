// engine/op.h: OpDef, the ONE record per op (shape/dtype inference, backward formula, what
// backward saves, autocast policy, kernels per device), and the attribute bag ops read.
// The table of OpDefs is indexed by OpId, generated from engine/ops.def.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/shape.h"
#include "engine/tensor.h"

namespace brisk {

enum class OpId : uint16_t {
#define X(id, name, nin, nout) id,
#include "engine/ops.def"
#undef X
  kCount
};
inline constexpr int kNumOps = static_cast<int>(OpId::kCount);

enum class Reduction : uint8_t { None, Mean, Sum };

// Note [Attrs]
// One plain struct carries every op's non-tensor arguments, so that a Node can copy them and
// kernels on every device read them the same way. Each OpDef (and ops.def) says which fields
// it reads; the rest keep their defaults. Families with several related parameters (conv,
// pooling, norms) read and write them only through their struct in engine/op_params.h
// (Note [Op parameters]), which keeps them in the fields below.
struct Attrs {
  Shape shape{};      // target sizes: view, expand, factories, *_backward input sizes
  Shape dims{};       // dim list: reduction dims, permutation
  int64_t dim = 0;    // the single dim of slice, cat, softmax, gather, argmax, ...
  int64_t start = 0;  // slice start; ignore_index of cross_entropy
  int64_t end = 0;    // slice end (exclusive)
  int64_t step = 1;   // slice step
  double a = 0;       // first scalar: alpha, clamp min, exponent, p, fill value, ...
  double b = 0;       // second scalar: clamp max, randn std, ...
  bool keepdim = false;
  bool flag = false;   // op-specific switch, see ops.def
  bool flag2 = false;  // a second op-specific switch
  Shape geometry{};    // conv/pool only, through ConvParams / PoolParams (engine/op_params.h)
  Reduction reduction = Reduction::Mean;
  DType dtype = DType::F32;  // cast target, factory dtype
  Device device{};           // factory device, to_device target
  uint64_t seed = 0;         // random stream (see engine/random.h)
  uint64_t offset = 0;
  // One integer per parameter of a fused optimizer step (engine/op_params.h): its step count
  // (Adam, Adagrad), or 1 where its momentum buffer is fresh (SGD). Empty for every other op.
  std::vector<int64_t> per_param{};
};

struct TensorSpec {
  Shape sizes;
  DType dtype = DType::F32;
};

// Context handed to a backward formula.
struct BackwardCtx {
  const Attrs& attrs;
  std::span<const Tensor> inputs;        // saved inputs (undefined where not saved)
  std::span<const Tensor> outputs;       // saved outputs (undefined where not saved)
  std::span<const TensorSpec> in_specs;  // sizes and dtype of every input
  std::span<const Tensor> grads;         // one per output; undefined where none flowed
  Device device;
  uint32_t needs_grad_mask = 0;
  bool needs_grad(int i) const { return (needs_grad_mask >> i) & 1u; }
  // Input i's gradient as already summed from its other consumers, handed over when nothing
  // else holds it (dense, of input i's sizes, dtype and device, no create_graph): a formula that
  // can add its own part into it in place does so and returns it as grad_inputs[i] (Note
  // [Adding into a pending gradient] in engine/autograd.cpp). Undefined otherwise; then the
  // formula computes its part as usual.
  Tensor (*take_pending_fn)(const void* node, int input) = nullptr;
  const void* node = nullptr;
  Tensor take_pending_grad(int i) const { return take_pending_fn ? take_pending_fn(node, i) : Tensor(); }
};

// Where autocast sends an op's floating inputs (see engine/autocast.h).
enum class CastPolicy : uint8_t {
  None,        // leave inputs alone (shape ops)
  Lower,       // to the autocast dtype (matmul, linear, conv)
  Fp32,        // to F32 (softmax, norms, exp/log, reductions, losses)
  Promote,     // to the widest floating dtype among the inputs (add, mul, cat, where)
  LowerMixed,  // input 0 to the autocast dtype, F32 others kept (linear: Note [Mixed linear])
};

using InferFn = void (*)(std::span<const Tensor> in, const Attrs& attrs, std::span<TensorSpec> out);
// A kernel computes one op on one device into outputs the dispatcher allocated (or the caller
// passed). What it must accept and produce (any input strides, offsets and stride 0; every
// output element written; dtypes; NaN; threads) is docs/KERNELS.md. Users replace kernels with
// replace_kernel (engine/kernel_override.h), not register_kernel.
using KernelFn = void (*)(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs);
using BackwardFn = void (*)(const BackwardCtx& ctx, std::span<Tensor> grad_inputs);
using ViewFn = Tensor (*)(const Tensor& in, const Attrs& attrs);

struct OpDef {
  const char* name = nullptr;
  int n_in = 0;  // -1: any number
  int n_out = 1;
  InferFn infer = nullptr;        // required unless `view`
  ViewFn view = nullptr;          // view ops: output shares the input's storage, no kernel runs
  BackwardFn backward = nullptr;  // nullptr: not differentiable
  uint32_t save_inputs = 0;       // bit i: backward reads input i
  uint32_t save_outputs = 0;      // bit i: backward reads output i
  uint32_t diff_inputs = ~0u;     // bit i: input i can receive a gradient (not indices, masks)
  CastPolicy autocast = CastPolicy::None;
  bool to_attrs_device = false;  // outputs live on attrs.device (cross-device copy)
  KernelFn kernels[kNumDeviceTypes] = {};
};

// The table. Read-only after init(), which every entry point runs once.
OpDef& op_def(OpId id);
inline const char* op_name(OpId id) { return op_def(id).name; }

// Registration, used by the family files in engine/ops/ and by kernels' register_all().
void register_kernel(OpId id, DeviceType device, KernelFn fn);

}  // namespace brisk
