// optim/multi_tensor.h: the machinery shared by the fused optimizer steps: which path each
// parameter takes (reference, CPU fused loop, or a backend's fused kernel: dense tensors of
// one F32/F64 dtype on one device), one parallel walk over all elements of many CPU tensors
// in fixed-size chunks (a single OpenMP loop per group and dtype, however many parameters the
// group holds), and the per-(device, dtype) lists handed to the backends' fused steps.
// Not here: the update formulas (each optimizer's .cpp holds its loop beside its reference;
// the CUDA kernels are in kernels/cuda/optim.cu, behind kernels/optim_step.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "kernels/optim_step.h"
#include "optim/optimizer.h"

namespace brisk::optim::detail {

// Note [Fused steps match the reference]
// Every fused loop performs its reference's arithmetic in the same order, rounding where a
// tensor op would round: scalars become the tensor's dtype as the ops convert them (T(beta1)),
// and the files of the fused loops (optim/{adam,adagrad,rmsprop,sgd}.cpp) are compiled with
// -ffp-contract=off (CMakeLists.txt, for GCC and clang alike) so that no a * b + c turns into
// one fused multiply-add (the reference rounds between the multiply and the add: they are two
// ops). On the CPU the two paths then agree bit for bit; the tests allow 1e-7 relative.
// The CUDA kernels do the same with round-to-nearest intrinsics (Note [Fused CUDA steps round
// like the reference] in kernels/cuda/optim.cu), per-parameter step scalars included.

// Note [Square roots in fused loops]
// std::sqrt may set errno (GCC's default -fmath-errno), which keeps the compiler from
// vectorizing any loop that calls it, and no pragma turns that off for one function. So the
// loops that need a square root run in blocks of kBlock elements: a vectorized loop computes
// the arguments into a stack buffer, sqrt_in_place takes their roots (scalar sqrtss, as
// correctly rounded as the vector instruction, so results do not change), and a second
// vectorized loop finishes the update.
inline constexpr int64_t kBlock = 256;

template <class T>
void sqrt_in_place(T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::sqrt(x[i]);
}

// maximum(a, b) as the elementwise op computes it: NaN propagates.
template <class T>
T maximum(T a, T b) {
  if (a != a || b != b) return a + b;
  return a > b ? a : b;
}

// Elements per chunk: big enough to amortize the loop setup, small enough to balance threads.
inline constexpr int64_t kChunk = 1 << 15;
// Below this many elements in all, one thread runs (threads cost more than they save).
inline constexpr int64_t kParallelMin = 1 << 16;

// A fused loop or kernel reads and writes raw memory: dense, of the given dtype and device.
inline bool fusable(const Tensor& t, DType dtype, Device device) {
  return t.defined() && t.device() == device && t.dtype() == dtype && t.is_contiguous();
}

enum class StepPath { Reference, CpuLoop, DeviceKernel };

// Where one parameter's update runs. Fused paths take F32/F64 parameters whose gradient and
// state buffers (created before this call) are dense, of the parameter's dtype and device;
// on a device, only when its backend registered a fused step (`device_kernel`). Everything
// else, F16/BF16 included (see Note [Fused optimizer steps on devices] in
// kernels/optim_step.h), takes the reference step.
inline StepPath step_path(bool fused, const Optimizer::Slot& s, bool device_kernel) {
  const DType dt = s.param.dtype();
  const Device device = s.param.device();
  if (!fused || (dt != DType::F32 && dt != DType::F64)) return StepPath::Reference;
  if (!device.is_cpu() && !device_kernel) return StepPath::Reference;
  bool ok = fusable(s.param, dt, device) && fusable(s.grad, dt, device);
  for (const auto& [key, buffer] : s.state->buffers) ok = ok && fusable(buffer, dt, device);
  if (!ok) return StepPath::Reference;
  return device.is_cpu() ? StepPath::CpuLoop : StepPath::DeviceKernel;
}

// The parameters of one optimizer group that take a backend's fused step, as one
// kernels::FusedGroup per (device, dtype); run() hands each to its backend.
class DeviceGroups {
 public:
  DeviceGroups(const char* op, int num_buffers) : op_(op), num_buffers_(num_buffers) {}

  // The list for the parameter's device and dtype (made on first use).
  kernels::FusedGroup& of(const Tensor& param) {
    for (kernels::FusedGroup& g : groups_) {
      if (g.device() == param.device() && g.dtype() == param.dtype()) return g;
    }
    return groups_.emplace_back(op_, param.dtype(), param.device(), num_buffers_);
  }

  template <class Hyper>
  void run(const Hyper& h) const {
    for (const kernels::FusedGroup& g : groups_) kernels::fused_step(h, g);
  }

 private:
  const char* op_;
  int num_buffers_;
  std::vector<kernels::FusedGroup> groups_;
};

// Calls f(tensor_index, begin, end) for every chunk of every tensor; chunks run in parallel
// when the total is large. numels[i] is the element count of tensor i.
template <class F>
void for_each_chunk(const std::vector<int64_t>& numels, F&& f) {
  struct Chunk {
    int64_t tensor;
    int64_t begin;
    int64_t end;
  };
  std::vector<Chunk> chunks;
  int64_t total = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    for (int64_t b = 0; b < numels[i]; b += kChunk) {
      chunks.push_back({int64_t(i), b, std::min(b + kChunk, numels[i])});
    }
    total += numels[i];
  }
  int64_t n = int64_t(chunks.size());
#pragma omp parallel for schedule(static) if (total >= kParallelMin)
  for (int64_t c = 0; c < n; ++c) {
    f(chunks[c].tensor, chunks[c].begin, chunks[c].end);
  }
}

}  // namespace brisk::optim::detail
