// kernels/cpu/shape.cpp: CPU kernel of slice_backward (the gradient of a slice: zeros with
// the incoming gradient written into the sliced positions).
#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/register.h"

namespace brisk::kernels::cpu {

namespace {
void slice_backward_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  dispatch_all(out[0].dtype(), "slice_backward", [&](auto tag) {
    using T = decltype(tag);
    elementwise<T>(out[0], {}, []() { return compute_t<T>(0); });
    Shape sizes = out[0].sizes(), strides = out[0].strides();
    int d = int(a.dim);
    sizes[d] = in[0].sizes()[d];
    strides[d] *= a.step;
    Tensor window =
        make_view(out[0].storage(), sizes, strides, out[0].offset() + a.start * out[0].strides()[d], out[0].dtype());
    elementwise<T, T>(window, {&in[0]}, [](compute_t<T> v) { return v; });
  });
}
}  // namespace

void register_shape() { register_kernel(OpId::SliceBackward, DeviceType::CPU, slice_backward_kernel); }

}  // namespace brisk::kernels::cpu
