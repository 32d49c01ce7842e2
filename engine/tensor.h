// engine/tensor.h: Tensor, a cheap handle (one shared_ptr) to a view of a Storage: sizes,
// strides in elements, offset, dtype, and autograd data only when the tensor takes part in
// autograd. Methods here are thin conveniences over the free functions of engine/functions.h;
// the ops themselves live in engine/ops/ (one OpDef each).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/shape.h"
#include "engine/storage.h"

namespace brisk::indexing {
class TensorIndex;
}  // namespace brisk::indexing

namespace brisk {

class Node;
class Tensor;
struct AutogradMeta;

struct TensorImpl {
  Storage storage;
  Shape sizes;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::F32;
  bool is_view = false;                    // made by a view op (shares its storage with the viewed tensor)
  std::unique_ptr<AutogradMeta> autograd;  // null until the tensor takes part in autograd

  TensorImpl();
  ~TensorImpl();
};

// A gradient hook: sees the gradient flowing into a tensor; returns a replacement or an
// undefined tensor to keep it.
using GradHook = std::function<Tensor(const Tensor& grad)>;

// What register_hook and register_post_accumulate_grad_hook return (PyTorch's
// RemovableHandle): remove() takes the hook out (later calls do nothing); dropping the handle
// keeps the hook.
class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(std::function<void()> remover) : remover_(std::move(remover)) {}
  void remove() {
    if (remover_) std::exchange(remover_, nullptr)();
  }
  bool active() const { return bool(remover_); }

 private:
  std::function<void()> remover_{};
};
// Runs after a leaf's .grad has been updated (data-parallel training starts its allreduce here).
using PostAccumulateHook = std::function<void(Tensor& leaf)>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // ---- metadata
  const Shape& sizes() const { return impl_->sizes; }
  const Shape& shape() const { return impl_->sizes; }
  const Shape& strides() const { return impl_->strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return impl_->offset; }
  int dim() const { return impl_->sizes.size(); }
  int64_t numel() const { return impl_->sizes.numel(); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device; }
  size_t element_size() const { return dtype_size(impl_->dtype); }
  bool is_contiguous() const;
  bool is_pinned() const { return impl_->storage->pinned; }
  const Storage& storage() const { return impl_->storage; }
  uint32_t version() const { return impl_->storage->version; }
  void bump_version() const { ++impl_->storage->version; }
  std::string str() const;  // "Tensor(F32, cpu, (2, 3))"

  // ---- data access (checked)
  void* data_ptr() const;  // address of element [0, ..., 0]
  template <Element T>
  T* data() const {
    BRISK_CHECK(dtype_of<T> == dtype(), "Tensor::data<", dtype_name(dtype_of<T>), ">: tensor has dtype ", dtype());
    return static_cast<T*>(data_ptr());
  }
  template <ValueType T>
  T item() const;  // the single value of a one-element tensor, converted to T
  template <ValueType T>
  std::vector<T> to_vector() const;  // all values in row-major order, converted to T

  // ---- autograd
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;
  const std::shared_ptr<Node>& grad_fn() const;
  int output_nr() const;
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  void zero_grad(bool set_to_none = true) const;
  void retain_grad() const;
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;
  Tensor detach() const;
  Tensor& detach_();
  // Makes this tensor view src's data (storage, sizes, strides, dtype) while keeping its
  // identity and autograd state: how a module moves its parameters to another device or
  // dtype without invalidating references held by optimizers.
  void set_data(const Tensor& src) const;
  // Hooks on the gradient (a leaf's also run under functional grad(), as in PyTorch).
  HookHandle register_hook(GradHook hook) const;
  HookHandle register_post_accumulate_grad_hook(PostAccumulateHook hook) const;

  // ---- conveniences over engine/functions.h
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype, bool non_blocking = false) const;
  Tensor pin_memory() const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor sum(const Shape& dims = {}, bool keepdim = false) const;
  Tensor mean(const Shape& dims = {}, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor pow(double exponent) const;
  Tensor relu() const;
  Tensor abs() const;
  Tensor sqrt() const;
  Tensor neg() const;

  // ---- in-place (bump the version; error on a leaf that requires grad while grad is on)
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& div_(const Tensor& other);
  Tensor& add_(double value);
  Tensor& mul_(double value);
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src, bool non_blocking = false);
  // Indexing as PyTorch's C++ API: x.index({Slice(0, 2), 3, None, Ellipsis, mask}) (engine/indexing.h).
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& values,
                     bool accumulate = false);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, double value);

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Arithmetic operators; scalars become 0-dim tensors of the tensor's dtype.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
// A temporary operand (an rvalue) of +, - and * may lend its buffer to the result instead of a
// new allocation when nothing else can observe it (Note [Donated operands] in
// engine/ops/elementwise.cpp); the values are those of the overloads above. The operand given
// up is left empty, as a moved-from std::string is.
Tensor operator+(Tensor&& a, const Tensor& b);
Tensor operator+(const Tensor& a, Tensor&& b);
Tensor operator+(Tensor&& a, Tensor&& b);
Tensor operator-(Tensor&& a, const Tensor& b);
Tensor operator-(const Tensor& a, Tensor&& b);
Tensor operator-(Tensor&& a, Tensor&& b);
Tensor operator*(Tensor&& a, const Tensor& b);
Tensor operator*(const Tensor& a, Tensor&& b);
Tensor operator*(Tensor&& a, Tensor&& b);
// Donation is on by default; switching it off (process-wide) makes the overloads above
// allocate as the const& ones do, to measure one against the other (examples/bench/bench_gpt2.cpp)
// or to check that a result does not depend on it. Returns the previous setting.
bool set_operand_donation(bool on);
bool operand_donation();

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// A tensor header over existing storage (no copy).
Tensor make_view(const Storage& storage, const Shape& sizes, const Shape& strides, int64_t offset, DType dtype);
// A fresh, dense, uninitialized tensor.
Tensor make_empty(const Shape& sizes, DType dtype, Device device, bool pinned = false);

}  // namespace brisk
