// kernels/cpu/scan.cpp: CPU kernels of the scan family (engine/ops/scan.cpp): the list of scans
// of kernels/scan_ops.h (cumsum, cumprod, logcumsumexp; accumulated in double for floats, as
// PyTorch's CPU kernels, in int64 for I64) and a stable argsort, each along attrs.dim of a
// tensor with any strides. One line (all indices but dim fixed) is one task; lines run in
// parallel when there are enough of them.
// Not here: the scans' arithmetic (kernels/scan_ops.h), the ops' inference and gradients
// (engine/ops/scan.cpp).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/dispatch.h"
#include "engine/op.h"
#include "kernels/cpu/register.h"
#include "kernels/scan_ops.h"

namespace brisk::kernels::cpu {

namespace {

// The lines of `t` along dim: calls f(line, in_offset, out_offset) for each, where the offsets
// (in elements) locate the line's first element in the input (its strides) and in the
// contiguous output; n is the line length and the input stride along dim is in_step.
struct Lines {
  int64_t count = 1, n = 1, in_step = 0, out_step = 1;
  std::vector<int64_t> sizes, in_strides, out_strides;  // of the other dims

  Lines(const Tensor& in, const Tensor& out, int dim) {
    if (in.dim() == 0) return;
    for (int d = 0; d < in.dim(); ++d) {
      if (d == dim) {
        n = in.sizes()[d];
        in_step = in.strides()[d];
        out_step = out.strides()[d];
      } else {
        sizes.push_back(in.sizes()[d]);
        in_strides.push_back(in.strides()[d]);
        out_strides.push_back(out.strides()[d]);
        count *= in.sizes()[d];
      }
    }
  }
  void offsets(int64_t line, int64_t& in_off, int64_t& out_off) const {
    in_off = out_off = 0;
    for (size_t k = sizes.size(); k-- > 0;) {
      const int64_t i = line % sizes[k];
      line /= sizes[k];
      in_off += i * in_strides[k];
      out_off += i * out_strides[k];
    }
  }
};

template <class F>
void for_each_line(const Lines& lines, F&& f) {
  const bool parallel = lines.count >= 64 && lines.count * lines.n >= 32768;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t line = 0; line < lines.count; ++line) {
    int64_t in_off = 0, out_off = 0;
    lines.offsets(line, in_off, out_off);
    f(in_off, out_off);
  }
}

template <class T, class A>
T store(A v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// The kernel of one entry of the scan list: its op over every line, in order.
template <class E>
void scan_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  const Lines lines(x, y, int(attrs.dim));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    using A = kernels::scan_acc_t<T>;
    const typename E::template Op<A> op;
    const T* src = static_cast<const T*>(x.data_ptr());
    T* dst = static_cast<T*>(y.data_ptr());
    for_each_line(lines, [&](int64_t i0, int64_t o0) {
      A acc = op.identity();
      for (int64_t k = 0; k < lines.n; ++k) {
        acc = op.step(acc, A(static_cast<double>(src[i0 + k * lines.in_step])));
        dst[o0 + k * lines.out_step] = store<T>(acc);
      }
    });
  };
  if constexpr (E::dtypes == kernels::ScanDtypes::Float) {
    dispatch_float(x.dtype(), op_name(E::id), run);
  } else {
    dispatch_numeric(x.dtype(), op_name(E::id), run);
  }
}

template <class... E>
void register_scans(kernels::ScanList<E...>) {
  (register_kernel(E::id, DeviceType::CPU, scan_kernel<E>), ...);
}

// NaN sorts as the largest value (first when descending), as torch.sort.
template <class T>
bool less_nan_last(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return a < b;
  } else {
    const double x = double(a), y = double(b);
    if (std::isnan(y)) return !std::isnan(x);
    return x < y;
  }
}

void argsort_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  const Lines lines(x, y, int(attrs.dim));
  const bool descending = attrs.flag;
  dispatch_numeric(x.dtype(), "argsort", [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(x.data_ptr());
    int64_t* dst = static_cast<int64_t*>(y.data_ptr());
    for_each_line(lines, [&](int64_t i0, int64_t o0) {
      std::vector<int64_t> order(static_cast<size_t>(lines.n));
      std::iota(order.begin(), order.end(), int64_t{0});
      auto at = [&](int64_t k) { return src[i0 + k * lines.in_step]; };
      if (descending) {
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return less_nan_last(at(b), at(a)); });
      } else {
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return less_nan_last(at(a), at(b)); });
      }
      for (int64_t k = 0; k < lines.n; ++k) dst[o0 + k * lines.out_step] = order[size_t(k)];
    });
  });
}

}  // namespace

void register_scan() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_scans(kernels::Scans{});
  register_kernel(OpId::Argsort, cpu, argsort_kernel);
}

}  // namespace brisk::kernels::cpu
