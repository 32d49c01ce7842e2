// kernels/cpu/optim.cpp: the CPU kernels of the fused optimizer steps (fused_sgd, fused_adam,
// fused_adamw, fused_rmsprop, fused_adagrad; Note [Fused steps are ops] in engine/ops/optim.cpp):
// each optimizer's reference arithmetic element by element over raw F32/F64 memory, one
// parallel walk over all elements of the call's tensors in fixed-size chunks (a single OpenMP
// loop however many parameters the call holds). Compiled with -ffp-contract=off (CMakeLists.txt).
// Not here: the checks of the lists (engine/ops/optim.cpp), the references these loops must
// equal bit for bit (optim/*.cpp), the CUDA kernels (kernels/cuda/optim.cu).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/op.h"
#include "engine/op_params.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

namespace {

// Note [Fused steps match the reference]
// Every fused loop performs its reference's arithmetic in the same order, rounding where a
// tensor op would round: scalars become the tensor's dtype as the ops convert them (T(beta1)),
// and this file is compiled with -ffp-contract=off (CMakeLists.txt, for GCC and clang alike) so
// that no a * b + c turns into one fused multiply-add (the reference rounds between the
// multiply and the add: they are two ops). On the CPU the two paths then agree bit for bit;
// the tests allow 1e-7 relative. The CUDA kernels do the same with round-to-nearest intrinsics
// (Note [Fused CUDA steps round like the reference] in kernels/cuda/optim.cu).

// Note [Square roots in fused loops]
// std::sqrt may set errno (GCC's default -fmath-errno), which keeps the compiler from
// vectorizing any loop that calls it, and no pragma turns that off for one function. So the
// loops that need a square root run in blocks of kBlock elements: a vectorized loop computes
// the arguments into a stack buffer, sqrt_in_place takes their roots (scalar sqrtss, as
// correctly rounded as the vector instruction, so results do not change), and a second
// vectorized loop finishes the update.
constexpr int64_t kBlock = 256;

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
constexpr int64_t kChunk = 1 << 15;
// Below this many elements in all, one thread runs (threads cost more than they save).
constexpr int64_t kParallelMin = 1 << 16;

// The call's lists (engine/ops/optim.cpp): role r's tensor of parameter i is in[r * n + i].
struct Lists {
  std::span<const Tensor> in;
  int64_t n;
  Lists(std::span<const Tensor> inputs, int roles) : in(inputs), n(int64_t(inputs.size()) / roles) {}
  template <class T>
  T* at(int role, int64_t i) const {
    return in[size_t(role * n + i)].data<T>();
  }
  DType dtype() const { return in[0].dtype(); }
};

// Calls f(tensor_index, begin, end) for every chunk of every parameter; chunks run in parallel
// when the total is large.
template <class F>
void for_each_chunk(const Lists& l, F&& f) {
  struct Chunk {
    int64_t tensor;
    int64_t begin;
    int64_t end;
  };
  std::vector<Chunk> chunks;
  int64_t total = 0;
  for (int64_t i = 0; i < l.n; ++i) {
    const int64_t numel = l.in[size_t(i)].numel();
    for (int64_t b = 0; b < numel; b += kChunk) chunks.push_back({i, b, std::min(b + kChunk, numel)});
    total += numel;
  }
  const int64_t n = int64_t(chunks.size());
#pragma omp parallel for schedule(static) if (total >= kParallelMin)
  for (int64_t c = 0; c < n; ++c) {
    f(chunks[c].tensor, chunks[c].begin, chunks[c].end);
  }
}

// Calls f(T{}) for the call's dtype (the op's inference admits only these two).
template <class F>
void by_dtype(const Lists& l, const char* op, F&& f) {
  if (l.n == 0) return;
  switch (l.dtype()) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    default: BRISK_FAIL(op, ": no CPU kernel for dtype ", l.dtype());
  }
}

// ---- SGD: one tensor's elements [begin, end). The hyperparameters are read into plain locals
// first and the momentum cases are separate loops: reading them inside the loop kept it
// scalar, 3.4 ns per element (34 ms for 10M floats, 5x the reference step's tensor ops;
// bench_optim).
template <class T>
void sgd_range(const SgdParams& h, T* p, const T* g, T* buf, bool fresh, int64_t begin, int64_t end) {
  const T wd = T(h.weight_decay), momentum = T(h.momentum), one_minus_dampening = T(1 - h.dampening);
  const T neg_lr = T(-h.lr);
  const bool maximize = h.maximize, decay = h.weight_decay != 0, nesterov = h.nesterov;
  auto direction = [&](int64_t i) {
    T d = maximize ? -g[i] : g[i];
    if (decay) d = d + p[i] * wd;
    return d;
  };
  if (h.momentum == 0) {
    for (int64_t i = begin; i < end; ++i) p[i] = p[i] + direction(i) * neg_lr;
  } else if (fresh) {
    for (int64_t i = begin; i < end; ++i) {
      const T d = direction(i);
      buf[i] = d;
      p[i] = p[i] + (nesterov ? d + d * momentum : d) * neg_lr;
    }
  } else {
    for (int64_t i = begin; i < end; ++i) {
      const T d = direction(i);
      const T b = buf[i] * momentum + d * one_minus_dampening;
      buf[i] = b;
      p[i] = p[i] + (nesterov ? d + b * momentum : b) * neg_lr;
    }
  }
}

void fused_sgd(std::span<const Tensor> in, std::span<Tensor>, const Attrs& attrs) {
  const SgdParams h = SgdParams::from(attrs);
  const Lists l(in, 2 + h.num_buffers());
  by_dtype(l, "fused_sgd", [&](auto tag) {
    using T = decltype(tag);
    for_each_chunk(l, [&](int64_t i, int64_t begin, int64_t end) {
      T* buf = h.num_buffers() ? l.at<T>(2, i) : nullptr;
      const bool fresh = h.num_buffers() && attrs.per_param[size_t(i)] != 0;
      sgd_range<T>(h, l.at<T>(0, i), l.at<T>(1, i), buf, fresh, begin, end);
    });
  });
}

// ---- Adam and AdamW: one tensor's elements [begin, end), in blocks of three loops (moments,
// square roots, update). vmax is null without amsgrad; step: the parameter's step count.
template <class T, bool kAmsgrad>
void adam_range(const AdamParams& h, int64_t step, T* p, const T* g, T* m, T* v, T* vmax, int64_t begin, int64_t end) {
  const T wd = T(h.weight_decay);
  const T decay = T(1 - h.lr * h.weight_decay);
  const T beta1 = T(h.beta1);
  const T one_minus_beta1 = T(1 - h.beta1);
  const T beta2 = T(h.beta2);
  const T one_minus_beta2 = T(1 - h.beta2);
  const T bias_correction2_sqrt = T(h.bias_correction2_sqrt(step));
  const T eps = T(h.eps);
  const T neg_step_size = T(-h.step_size(step));
  const bool l2 = h.weight_decay != 0 && !h.decoupled;
  const bool decoupled = h.weight_decay != 0 && h.decoupled;
  T root[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    int64_t n = std::min(kBlock, end - b);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T grad = h.maximize ? -g[i] : g[i];
      if (l2) grad = grad + p[i] * wd;
      T exp_avg = m[i] * beta1 + grad * one_minus_beta1;
      T exp_avg_sq = v[i] * beta2 + grad * grad * one_minus_beta2;
      m[i] = exp_avg;
      v[i] = exp_avg_sq;
      T second_moment = exp_avg_sq;
      if constexpr (kAmsgrad) {
        second_moment = maximum(vmax[i], exp_avg_sq);
        vmax[i] = second_moment;
      }
      root[j] = second_moment;
    }
    sqrt_in_place(root, n);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T param = decoupled ? p[i] * decay : p[i];
      T denom = root[j] / bias_correction2_sqrt + eps;
      p[i] = param + m[i] / denom * neg_step_size;
    }
  }
}

void fused_adam(std::span<const Tensor> in, std::span<Tensor>, const Attrs& attrs) {
  const AdamParams h = AdamParams::from(attrs);
  const Lists l(in, 2 + h.num_buffers());
  by_dtype(l, h.decoupled ? "fused_adamw" : "fused_adam", [&](auto tag) {
    using T = decltype(tag);
    for_each_chunk(l, [&](int64_t i, int64_t begin, int64_t end) {
      T* p = l.at<T>(0, i);
      const T* g = l.at<T>(1, i);
      T* m = l.at<T>(2, i);
      T* v = l.at<T>(3, i);
      const int64_t step = attrs.per_param[size_t(i)];
      if (h.amsgrad) {
        adam_range<T, true>(h, step, p, g, m, v, l.at<T>(4, i), begin, end);
      } else {
        adam_range<T, false>(h, step, p, g, m, v, nullptr, begin, end);
      }
    });
  });
}

// ---- RMSprop: one tensor's elements [begin, end), in blocks of three loops (averages, square
// roots, update). grad_avg is null unless centered, buf null without momentum.
template <class T, bool kCentered, bool kMomentum>
void rmsprop_range(const RmspropParams& o, T* p, const T* g, T* square_avg, T* grad_avg, T* buf, int64_t begin,
                   int64_t end) {
  const T wd = T(o.weight_decay);
  const T alpha = T(o.alpha);
  const T one_minus_alpha = T(1 - o.alpha);
  const T eps = T(o.eps);
  const T momentum = T(o.momentum);
  const T neg_lr = T(-o.lr);
  T root[kBlock];
  T grads[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    int64_t n = std::min(kBlock, end - b);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T grad = o.maximize ? -g[i] : g[i];
      if (o.weight_decay != 0) grad = grad + p[i] * wd;
      grads[j] = grad;
      T sq = square_avg[i] * alpha + grad * grad * one_minus_alpha;
      square_avg[i] = sq;
      if constexpr (kCentered) {
        T ga = grad_avg[i] * alpha + grad * one_minus_alpha;
        grad_avg[i] = ga;
        root[j] = sq - ga * ga;
      } else {
        root[j] = sq;
      }
    }
    sqrt_in_place(root, n);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T avg = root[j] + eps;
      if constexpr (kMomentum) {
        T bb = buf[i] * momentum + grads[j] / avg;
        buf[i] = bb;
        p[i] = p[i] + bb * neg_lr;
      } else {
        p[i] = p[i] + grads[j] / avg * neg_lr;
      }
    }
  }
}

void fused_rmsprop(std::span<const Tensor> in, std::span<Tensor>, const Attrs& attrs) {
  const RmspropParams o = RmspropParams::from(attrs);
  const Lists l(in, 2 + o.num_buffers());
  by_dtype(l, "fused_rmsprop", [&](auto tag) {
    using T = decltype(tag);
    for_each_chunk(l, [&](int64_t i, int64_t begin, int64_t end) {
      // Buffers in RmspropParams' order: square_avg, grad_avg (centered), momentum_buffer.
      T* p = l.at<T>(0, i);
      const T* g = l.at<T>(1, i);
      T* sq = l.at<T>(2, i);
      T* grad_avg = o.centered ? l.at<T>(3, i) : nullptr;
      T* buf = o.momentum > 0 ? l.at<T>(o.centered ? 4 : 3, i) : nullptr;
      if (grad_avg && buf) {
        rmsprop_range<T, true, true>(o, p, g, sq, grad_avg, buf, begin, end);
      } else if (grad_avg) {
        rmsprop_range<T, true, false>(o, p, g, sq, grad_avg, buf, begin, end);
      } else if (buf) {
        rmsprop_range<T, false, true>(o, p, g, sq, grad_avg, buf, begin, end);
      } else {
        rmsprop_range<T, false, false>(o, p, g, sq, grad_avg, buf, begin, end);
      }
    });
  });
}

// ---- Adagrad: one tensor's elements [begin, end), in blocks of three loops (sums, square
// roots, update).
template <class T>
void adagrad_range(const AdagradParams& o, double clr, T* p, const T* g, T* sum, int64_t begin, int64_t end) {
  const T wd = T(o.weight_decay);
  const T eps = T(o.eps);
  const T neg_clr = T(-clr);
  T root[kBlock];
  T grads[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    int64_t n = std::min(kBlock, end - b);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T grad = o.maximize ? -g[i] : g[i];
      if (o.weight_decay != 0) grad = grad + p[i] * wd;
      grads[j] = grad;
      T s = sum[i] + grad * grad;
      sum[i] = s;
      root[j] = s;
    }
    sqrt_in_place(root, n);
    for (int64_t j = 0; j < n; ++j) {
      int64_t i = b + j;
      T denom = root[j] + eps;
      p[i] = p[i] + grads[j] / denom * neg_clr;
    }
  }
}

void fused_adagrad(std::span<const Tensor> in, std::span<Tensor>, const Attrs& attrs) {
  const AdagradParams o = AdagradParams::from(attrs);
  const Lists l(in, 3);
  by_dtype(l, "fused_adagrad", [&](auto tag) {
    using T = decltype(tag);
    for_each_chunk(l, [&](int64_t i, int64_t begin, int64_t end) {
      const double clr = o.decayed_lr(attrs.per_param[size_t(i)]);
      adagrad_range<T>(o, clr, l.at<T>(0, i), l.at<T>(1, i), l.at<T>(2, i), begin, end);
    });
  });
}

}  // namespace

void register_optim() {
  const DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::FusedSgd, cpu, fused_sgd);
  register_kernel(OpId::FusedAdam, cpu, fused_adam);
  register_kernel(OpId::FusedAdamw, cpu, fused_adam);
  register_kernel(OpId::FusedRmsprop, cpu, fused_rmsprop);
  register_kernel(OpId::FusedAdagrad, cpu, fused_adagrad);
}

}  // namespace brisk::kernels::cpu
