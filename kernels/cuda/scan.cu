// kernels/cuda/scan.cu: CUDA kernels of the scan family (engine/ops/scan.cpp). The list of scans
// of kernels/scan_ops.h (cumsum, cumprod, logcumsumexp): one thread per line (all indices but
// dim fixed), walking the line in order with the same op structs and accumulators (double for
// floats, int64 for integers) as the CPU kernels (kernels/cpu/scan.cpp), so both backends give
// the same bits for the same order of steps.
// argsort has no device sort yet: it copies the input to the host, runs the CPU kernel (stable,
// NaN as the largest) and copies the indices back (Note [argsort on CUDA]).
// Not here: the ops' inference and gradients (engine/ops/scan.cpp).
#include <type_traits>

#include "engine/backend.h"
#include "engine/dispatch.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/op.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/register.h"
#include "kernels/scan_ops.h"

namespace brisk::kernels::cuda {

namespace {

// lines: offsets of each line's first element in x and y (OffsetCalc over the other dims).
template <class T, class Op>
__global__ void scan_lines_kernel(int64_t count, OffsetCalc<2> lines, int64_t n, int64_t in_step, int64_t out_step,
                                  const T* x, T* y, Op op) {
  using A = kernels::scan_acc_t<T>;
  for (int64_t line = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; line < count;
       line += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    lines.get(line, off);
    A acc = op.identity();
    for (int64_t k = 0; k < n; ++k) {
      acc = op.step(acc, A(load_value(x + off[0] + k * in_step)));
      y[off[1] + k * out_step] = Store<T>::to(acc);
    }
  }
}

// The kernel of one entry of the scan list (kernels/scan_ops.h).
template <class E>
void scan_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  const int dim = x.dim() == 0 ? -1 : int(attrs.dim);
  Shape sizes, in_strides, out_strides;
  int64_t n = 1, in_step = 0, out_step = 0;
  for (int d = 0; d < x.dim(); ++d) {
    if (d == dim) {
      n = x.sizes()[d];
      in_step = x.strides()[d];
      out_step = y.strides()[d];
    } else {
      sizes.push_back(x.sizes()[d]);
      in_strides.push_back(x.strides()[d]);
      out_strides.push_back(y.strides()[d]);
    }
  }
  const Shape* strides[2] = {&in_strides, &out_strides};
  const OffsetCalc<2> lines = make_offset_calc<2>(sizes, strides);
  const int64_t count = sizes.numel();
  const cudaStream_t stream = stream_handle(x.device().index);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    using Op = typename E::template Op<kernels::scan_acc_t<T>>;
    scan_lines_kernel<T, Op><<<grid_for(count), kBlock, 0, stream>>>(
        count, lines, n, in_step, out_step, static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), Op{});
    BRISK_CUDA_CHECK_LAUNCH();
  };
  if constexpr (E::dtypes == kernels::ScanDtypes::Float) {
    dispatch_float(x.dtype(), op_name(E::id), run);
  } else {
    dispatch_numeric(x.dtype(), op_name(E::id), run);
  }
}

template <class... E>
void register_scans(kernels::ScanList<E...>) {
  (register_kernel(E::id, DeviceType::CUDA, scan_kernel<E>), ...);
}

// Note [argsort on CUDA]
// A stable device sort with brisk's NaN order (NaN as the largest, first when descending) per
// line of any strides is a segmented radix sort with a custom key transform; until one is
// written, argsort (and sort, topk, which are built on it) round-trips through the host: a
// synchronizing copy, the CPU kernel, a copy back. Correct and identical to the CPU's result;
// slow for large inputs, which is why the CUDA runner compares it like any other kernel.
void argsort_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  if (out[0].numel() == 0) return;
  NoGradGuard no_grad;
  Tensor host = in[0].to(Device::cpu());
  Attrs a = attrs;
  a.device = Device::cpu();
  Tensor idx = call1(OpId::Argsort, {host}, a);  // contiguous I64, as out[0]
  const Device dev = out[0].device();
  backend(dev).copy(out[0].data_ptr(), dev, idx.data_ptr(), Device::cpu(), size_t(idx.numel()) * sizeof(int64_t),
                    /*non_blocking=*/false);
}

}  // namespace

void register_scan() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  register_scans(kernels::Scans{});
  register_kernel(OpId::Argsort, gpu, argsort_kernel);
}

}  // namespace brisk::kernels::cuda
