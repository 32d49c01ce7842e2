// engine/factories.cpp: tensors from host data (from_vector, from_data, from_blob) and the
// host-side comparisons allclose and equal.
#include <cmath>
#include <cstring>

#include "engine/backend.h"
#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk {

Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  const int64_t numel = checked_numel(shape, sizeof(double), "from_vector");
  BRISK_CHECK(int64_t(values.size()) == numel, "from_vector: ", values.size(), " values for shape ", shape, " (", numel,
              " elements)");
  Tensor host = make_empty(shape, DType::F64, Device::cpu());
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(double));
  NoGradGuard ng;
  return cast(host, dtype).to(device);
}

template <Element T>
Tensor from_data(const T* data, const Shape& shape, Device device) {
  Tensor host = make_empty(shape, dtype_of<T>, Device::cpu());
  size_t n = size_t(shape.numel());
  if (n) std::memcpy(host.data_ptr(), data, n * sizeof(T));
  return host.to(device);
}
template Tensor from_data<float>(const float*, const Shape&, Device);
template Tensor from_data<double>(const double*, const Shape&, Device);
template Tensor from_data<Half>(const Half*, const Shape&, Device);
template Tensor from_data<BFloat16>(const BFloat16*, const Shape&, Device);
template Tensor from_data<int8_t>(const int8_t*, const Shape&, Device);
template Tensor from_data<uint8_t>(const uint8_t*, const Shape&, Device);
template Tensor from_data<int32_t>(const int32_t*, const Shape&, Device);
template Tensor from_data<int64_t>(const int64_t*, const Shape&, Device);
template Tensor from_data<bool>(const bool*, const Shape&, Device);

Tensor from_blob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> deleter, Device device) {
  const int64_t numel = checked_numel(shape, dtype_size(dtype), "from_blob");
  BRISK_CHECK(data || numel == 0, "from_blob: null data for shape ", shape);
  auto s = std::make_shared<StorageImpl>();
  s->data = data;
  s->bytes = size_t(numel) * dtype_size(dtype);
  s->device = device;
  s->deleter = std::move(deleter);
  return make_view(s, shape, contiguous_strides(shape), 0, dtype);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  BRISK_CHECK(a.defined() && b.defined(), "allclose: undefined input");
  if (!(a.sizes() == b.sizes())) return false;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      if (std::isnan(x[i]) != std::isnan(y[i])) return false;
      continue;
    }
    if (x[i] == y[i]) continue;  // equal infinities
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() && a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace brisk
