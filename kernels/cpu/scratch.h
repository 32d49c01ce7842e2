// kernels/cpu/scratch.h: dense scratch copies for the CPU kernels that index their operands
// directly (conv, pooling, norms): `dense` gives an input as a dense tensor (itself when it
// already is one, else a copy, converted to the dtype asked for), and `DenseOut` gives an
// output to compute densely (itself when it can, else a scratch tensor that finish() copies
// back), as DenseOut in kernels/cuda/runtime.h does on CUDA; and Workspace, a raw buffer kept
// per thread across calls (the GEMMs' packing panels). Internal to kernels/cpu.
// Not here: the elementwise engine these copies run on (kernels/cpu/loops.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "engine/allocator.h"
#include "engine/dtype.h"
#include "engine/tensor.h"
#include "kernels/cpu/loops.h"

namespace brisk::kernels::cpu {

// Bumped by cpu_allocator().empty_cache() (add_empty_cache_hook, kernels/cpu/cpu_backend.cpp):
// every Workspace then frees its block at its next get() and takes only what that call needs.
// A counter rather than freeing at once, since each workspace belongs to its own thread.
inline std::atomic<uint64_t> g_workspace_trim{0};

// A block from cpu_allocator(), kept and grown on demand: hold one per thread (thread_local) so
// that a kernel called over and over allocates (and page-faults) only when it needs more.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() {
    if (ptr_) cpu_allocator().deallocate(ptr_, bytes_);
  }
  void* get(size_t bytes) {
    const uint64_t trim = g_workspace_trim.load(std::memory_order_relaxed);
    if (trim != trim_ && ptr_) {
      cpu_allocator().deallocate(ptr_, bytes_);
      ptr_ = nullptr;
      bytes_ = 0;
    }
    trim_ = trim;
    if (bytes > bytes_) {
      if (ptr_) cpu_allocator().deallocate(ptr_, bytes_);
      ptr_ = nullptr;  // consistent even if allocate() throws
      bytes_ = 0;
      ptr_ = cpu_allocator().allocate(bytes);
      bytes_ = bytes;
    }
    return ptr_;
  }
  // Room for n elements of T.
  template <class T>
  T* get(int64_t n) {
    return static_cast<T*>(get(size_t(n) * sizeof(T)));
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  uint64_t trim_ = 0;
};

// dst = src elementwise (same sizes, any strides), converting between floating dtypes.
inline void copy_converted(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype()) {
    dispatch_all(dst.dtype(), "copy", [&](auto tag) {
      using T = decltype(tag);
      elementwise<T, T>(dst, {&src}, [](auto v) { return v; });
    });
    return;
  }
  dispatch_float(dst.dtype(), "copy", [&](auto out_tag) {
    using O = decltype(out_tag);
    dispatch_float(src.dtype(), "copy", [&](auto in_tag) {
      using I = decltype(in_tag);
      elementwise<O, I>(dst, {&src}, [](auto v) { return v; });
    });
  });
}

// `t` as a dense tensor of `dtype`: t itself when it already is one, else a converted copy.
inline Tensor dense(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor out = make_empty(t.sizes(), dtype, t.device());
  copy_converted(out, t);
  return out;
}

inline Tensor dense(const Tensor& t) { return dense(t, t.dtype()); }

// An output a kernel writes densely in `dtype`: `out` itself when it is dense of that dtype,
// else a scratch tensor that finish() copies (and converts) back into it.
struct DenseOut {
  Tensor target, dense;
  DenseOut(const Tensor& out, DType dtype)
      : target(out),
        dense(out.dtype() == dtype && out.is_contiguous() ? out : make_empty(out.sizes(), dtype, out.device())) {}
  explicit DenseOut(const Tensor& out) : DenseOut(out, out.dtype()) {}
  void finish() const {
    if (dense.impl() != target.impl()) copy_converted(target, dense);
  }
};

}  // namespace brisk::kernels::cpu
