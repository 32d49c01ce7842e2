// engine/kernel_override.h: replacing an op's kernel at run time, for kernel research and
// teaching (Note [Kernel overrides] in engine/dispatch.cpp). The contract a kernel must keep
// (layouts, dtypes, attributes, threading) is docs/KERNELS.md; opcheck/check.h checks a
// replacement against the op's reference and against the built-in kernel.
//
//   brisk::KernelOverride guard(brisk::op_id("relu"), brisk::DeviceType::CPU, my_relu, {brisk::DType::F32});
//   ... every relu on F32 CPU tensors runs my_relu; F64 still runs the built-in ...
//   // the guard's destructor puts back what was there
#pragma once

#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/op.h"

namespace brisk {

// A kernel as a callable: it may hold state (a counter, a tuning table) or call the kernel it
// replaced. Same contract as KernelFn (engine/op.h).
using Kernel = std::function<void(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs)>;

// The OpId of an op by its name in engine/ops.def ("relu", "matmul"); brisk::Error for an
// unknown name.
OpId op_id(std::string_view name);

// Installs `fn` as the kernel of (op, device) for calls whose dtype is in `dtypes` (the dtype
// of input 0, or of output 0 for ops without inputs; empty: every dtype). Calls with other
// dtypes run the kernel that was there before. Returns that previous kernel as a callable
// (empty when the op had no kernel on the device). Works before or after the first op runs;
// overrides stack: replacing twice runs the second, which may fall back to the first.
Kernel replace_kernel(OpId op, DeviceType device, Kernel fn, std::vector<DType> dtypes = {});

// The kernel that init() registered for (op, device) (empty when none).
Kernel builtin_kernel(OpId op, DeviceType device);

// The kernel that a call of (op, device) with inputs of `dtype` runs now.
Kernel current_kernel(OpId op, DeviceType device, DType dtype);

// Drops every override of (op, device).
void restore_builtin_kernel(OpId op, DeviceType device);

// Whether (op, device) runs a replaced kernel now.
bool is_kernel_replaced(OpId op, DeviceType device);

// replace_kernel for a scope: the destructor reinstates exactly what was installed before
// (the built-in kernel or an earlier override). Guards must end in reverse order of creation.
class KernelOverride {
 public:
  KernelOverride(OpId op, DeviceType device, Kernel fn, std::vector<DType> dtypes = {});
  ~KernelOverride();
  KernelOverride(const KernelOverride&) = delete;
  KernelOverride& operator=(const KernelOverride&) = delete;
  // The kernel this guard replaced (to call as a fallback or to time against).
  const Kernel& previous() const { return previous_; }

 private:
  OpId op_;
  DeviceType device_;
  Kernel previous_;
  std::shared_ptr<const void> saved_;  // the override state before this guard
};

}  // namespace brisk
