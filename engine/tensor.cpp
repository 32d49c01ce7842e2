// engine/tensor.cpp: Tensor's metadata, data access, printing, autograd accessors and the
// in-place methods (see Note [In-place ops]).
#include "engine/tensor.h"

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "engine/autograd.h"
#include "engine/dispatch.h"
#include "engine/functions.h"

namespace brisk {

TensorImpl::TensorImpl() = default;
TensorImpl::~TensorImpl() = default;

Tensor make_view(const Storage& storage, const Shape& sizes, const Shape& strides, int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor make_empty(const Shape& sizes, DType dtype, Device device, bool pinned) {
  // See Note [Checked sizes] in engine/shape.h: every allocation's shape passes here.
  size_t bytes = size_t(checked_numel(sizes, dtype_size(dtype), "empty")) * dtype_size(dtype);
  return make_view(make_storage(bytes, device, pinned), sizes, contiguous_strides(sizes), 0, dtype);
}

int64_t Tensor::size(int64_t d) const { return impl_->sizes[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  // An empty tensor is contiguous whatever its strides, as in PyTorch (its zero-size dim breaks
  // the stride chain: empty((2, 0, 5, 5)) has strides (25, 25, 5, 1)).
  for (int64_t s : impl_->sizes) {
    if (s == 0) return true;
  }
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    int64_t s = impl_->sizes[i];
    if (s == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= s;
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return detail::cat("Tensor(", dtype(), ", ", device(), ", ", sizes(), ")");
}

void* Tensor::data_ptr() const {
  BRISK_CHECK(defined(), "data_ptr: undefined tensor");
  char* base = static_cast<char*>(impl_->storage->data);
  if (base == nullptr) return nullptr;  // empty storage: no element to point at, whatever the offset
  return base + impl_->offset * int64_t(element_size());
}

// ---- host-side element access: used by item/to_vector/printing, never on hot paths.
namespace {
template <class T>
void read_all(const Tensor& t, T* dst) {
  Tensor c = t.device().is_cpu() ? t : t.to(Device::cpu());
  int n = c.dim();
  const Shape& sz = c.sizes();
  const Shape& st = c.strides();
  int64_t numel = c.numel();
  dispatch_all(c.dtype(), "to_vector", [&](auto tag) {
    using S = decltype(tag);
    const S* base = static_cast<const S*>(c.data_ptr());
    Shape idx = Shape::filled(n, 0);
    int64_t off = 0;
    for (int64_t k = 0; k < numel; ++k) {
      dst[k] = static_cast<T>(static_cast<compute_t<S>>(base[off]));
      for (int d = n - 1; d >= 0; --d) {
        if (++idx[d] < sz[d]) {
          off += st[d];
          break;
        }
        off -= st[d] * (sz[d] - 1);
        idx[d] = 0;
      }
    }
  });
}
}  // namespace

template <ValueType T>
T Tensor::item() const {
  BRISK_CHECK(defined() && numel() == 1, "item: needs a tensor with one element, got ", str());
  T v{};
  read_all<T>(*this, &v);
  return v;
}

template <ValueType T>
std::vector<T> Tensor::to_vector() const {
  BRISK_CHECK(defined(), "to_vector: undefined tensor");
  std::vector<T> v(static_cast<size_t>(numel()));
  read_all<T>(*this, v.data());
  return v;
}

#define BRISK_INSTANTIATE(T)          \
  template T Tensor::item<T>() const; \
  template std::vector<T> Tensor::to_vector<T>() const;
BRISK_INSTANTIATE(float)
BRISK_INSTANTIATE(double)
BRISK_INSTANTIATE(int64_t)
BRISK_INSTANTIATE(int32_t)
BRISK_INSTANTIATE(uint8_t)
BRISK_INSTANTIATE(int8_t)
#undef BRISK_INSTANTIATE
template <>
bool Tensor::item<bool>() const {
  return item<double>() != 0;
}
template <>
std::vector<bool> Tensor::to_vector<bool>() const {
  std::vector<double> d = to_vector<double>();
  return std::vector<bool>(d.begin(), d.end());
}

// ---- printing: PyTorch-like nested brackets, long dims summarized.
namespace {
void print_rec(std::ostream& os, const std::vector<double>& v, const Shape& sz, int d, int64_t off, int64_t stride,
               bool is_float, int indent) {
  if (d == sz.size()) {
    double x = v[size_t(off)];
    if (!is_float) {
      os << int64_t(x);
    } else if (std::isnan(x) || std::isinf(x)) {
      os << x;
    } else {
      os << std::fixed << std::setprecision(4) << x;
    }
    return;
  }
  int64_t n = sz[d];
  int64_t inner = stride / std::max<int64_t>(n, 1);
  os << '[';
  const int64_t kEdge = 3;
  for (int64_t i = 0; i < n; ++i) {
    if (n > 2 * kEdge + 1 && i == kEdge) {
      os << "..., ";
      i = n - kEdge - 1;
      continue;
    }
    print_rec(os, v, sz, d + 1, off + i * inner, inner, is_float, indent + 1);
    if (i + 1 < n) os << (d + 1 == sz.size() ? ", " : ",\n" + std::string(size_t(indent + 1), ' '));
  }
  os << ']';
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::vector<double> v = t.to_vector<double>();
  std::ostringstream s;
  s << "tensor(";
  if (t.dim() == 0) {
    print_rec(s, v, t.sizes(), 0, 0, 1, is_floating(t.dtype()), 7);
  } else {
    print_rec(s, v, t.sizes(), 0, 0, t.numel(), is_floating(t.dtype()), 7);
  }
  s << ", dtype=" << t.dtype();
  if (!t.device().is_cpu()) s << ", device=" << t.device();
  if (t.grad_fn())
    s << ", grad_fn=<" << t.grad_fn()->name() << ">";  // as PyTorch prints it
  else if (t.requires_grad())
    s << ", requires_grad";
  s << ")";
  return os << s.str();
}

// ---- autograd accessors
namespace {
AutogradMeta& meta(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl->autograd) impl->autograd = std::make_unique<AutogradMeta>();
  return *impl->autograd;
}
const std::shared_ptr<Node> kNoNode;
}  // namespace

bool Tensor::requires_grad() const {
  const AutogradMeta* m = impl_->autograd.get();
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::requires_grad_(bool on) {
  BRISK_CHECK(is_leaf() || on, "requires_grad_: only leaf tensors can stop requiring grad; use detach()");
  BRISK_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got ", dtype());
  meta(*this).requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }

const std::shared_ptr<Node>& Tensor::grad_fn() const { return impl_->autograd ? impl_->autograd->grad_fn : kNoNode; }

int Tensor::output_nr() const { return impl_->autograd ? impl_->autograd->output_nr : 0; }

Tensor Tensor::grad() const { return impl_->autograd ? impl_->autograd->grad : Tensor(); }

void Tensor::set_grad(const Tensor& g) const {
  BRISK_CHECK(!g.defined() || (g.sizes() == sizes() && g.device() == device()), "set_grad: gradient ", g.str(),
              " does not match tensor ", str());
  meta(*this).grad = g;
}

void Tensor::zero_grad(bool set_to_none) const {
  if (!impl_->autograd || !impl_->autograd->grad.defined()) return;
  if (set_to_none) {
    impl_->autograd->grad = Tensor();
  } else {
    NoGradGuard ng;
    impl_->autograd->grad.zero_();
  }
}

void Tensor::retain_grad() const {
  BRISK_CHECK(requires_grad(), "retain_grad: tensor does not require grad");
  if (is_leaf()) return;  // leaves keep their grad anyway
  AutogradMeta& m = meta(*this);
  if (m.retains_grad) return;
  m.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_;
  m.grad_fn->pre_hooks.emplace_back(m.output_nr, [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      AutogradMeta& mm = *impl->autograd;
      mm.grad = mm.grad.defined() ? mm.grad + g : g.detach().clone();
    }
    return Tensor();
  });
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  Tensor outs[1] = {*this};
  if (gradient.defined()) {
    Tensor grads[1] = {gradient};
    brisk::backward(outs, grads, retain_graph, create_graph);
  } else {
    brisk::backward(outs, {}, retain_graph, create_graph);
  }
}

Tensor Tensor::detach() const {
  return make_view(impl_->storage, impl_->sizes, impl_->strides, impl_->offset, impl_->dtype);
}

void Tensor::set_data(const Tensor& src) const {
  BRISK_CHECK(src.defined(), "set_data: undefined source");
  BRISK_CHECK(!requires_grad() || is_floating(src.dtype()),
              "set_data: a tensor that requires grad needs floating data, got ", src.dtype());
  impl_->storage = src.impl()->storage;
  impl_->sizes = src.impl()->sizes;
  impl_->strides = src.impl()->strides;
  impl_->offset = src.impl()->offset;
  impl_->dtype = src.impl()->dtype;
  if (impl_->autograd && impl_->autograd->grad.defined() &&
      (impl_->autograd->grad.device() != src.device() || impl_->autograd->grad.dtype() != src.dtype())) {
    impl_->autograd->grad = Tensor();  // a gradient of the old placement no longer fits
  }
}

Tensor& Tensor::detach_() {
  if (impl_->autograd) {
    impl_->autograd->grad_fn.reset();
    impl_->autograd->requires_grad = false;
  }
  return *this;
}

// A removed hook is left as an empty function (skipped where hooks run), so that the indices
// other handles hold stay valid.
HookHandle Tensor::register_hook(GradHook hook) const {
  BRISK_CHECK(requires_grad(), "register_hook: tensor does not require grad");
  BRISK_CHECK(hook, "register_hook: empty hook");
  AutogradMeta& m = meta(*this);
  if (m.grad_fn) {
    const size_t i = m.grad_fn->pre_hooks.size();
    m.grad_fn->pre_hooks.emplace_back(m.output_nr, std::move(hook));
    return HookHandle([node = std::weak_ptr<Node>(m.grad_fn), i] {
      if (auto n = node.lock()) n->pre_hooks[i].second = nullptr;
    });
  }
  const size_t i = m.hooks.size();
  m.hooks.push_back(std::move(hook));
  return HookHandle([impl = std::weak_ptr<TensorImpl>(impl_), i] {
    if (auto t = impl.lock()) t->autograd->hooks[i] = nullptr;
  });
}

HookHandle Tensor::register_post_accumulate_grad_hook(PostAccumulateHook hook) const {
  BRISK_CHECK(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook: needs a leaf that requires grad");
  BRISK_CHECK(hook, "register_post_accumulate_grad_hook: empty hook");
  AutogradMeta& m = meta(*this);
  const size_t i = m.post_hooks.size();
  m.post_hooks.push_back(std::move(hook));
  return HookHandle([impl = std::weak_ptr<TensorImpl>(impl_), i] {
    if (auto t = impl.lock()) t->autograd->post_hooks[i] = nullptr;
  });
}

// ---- conveniences
Tensor Tensor::to(Device d, bool non_blocking) const { return to_device(*this, d, non_blocking); }
Tensor Tensor::to(DType t) const { return cast(*this, t); }
Tensor Tensor::to(Device d, DType t, bool non_blocking) const { return cast(to_device(*this, d, non_blocking), t); }
Tensor Tensor::pin_memory() const {
  BRISK_CHECK(device().is_cpu(), "pin_memory: tensor is on ", device(), ", only CPU tensors can be pinned");
  if (is_pinned()) return *this;
  Tensor out = make_empty(sizes(), dtype(), Device::cpu(), /*pinned=*/true);
  NoGradGuard ng;
  out.copy_(*this);
  return out;
}
Tensor Tensor::contiguous() const { return brisk::contiguous(*this); }
Tensor Tensor::clone() const { return brisk::clone(*this); }
Tensor Tensor::view(const Shape& s) const { return brisk::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return brisk::reshape(*this, s); }
Tensor Tensor::flatten(int64_t a, int64_t b) const { return brisk::flatten(*this, a, b); }
Tensor Tensor::permute(const Shape& d) const { return brisk::permute(*this, d); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return brisk::transpose(*this, a, b); }
Tensor Tensor::t() const {
  BRISK_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dims, got ", sizes());
  return dim() < 2 ? *this : brisk::transpose(*this, 0, 1);
}
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const { return brisk::narrow(*this, d, s, l); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return brisk::slice(*this, d, s, e, st); }
Tensor Tensor::select(int64_t d, int64_t i) const { return brisk::select(*this, d, i); }
Tensor Tensor::expand(const Shape& s) const { return brisk::expand(*this, s); }
Tensor Tensor::squeeze(int64_t d) const { return brisk::squeeze(*this, d); }
Tensor Tensor::squeeze() const { return brisk::squeeze(*this); }
Tensor Tensor::unsqueeze(int64_t d) const { return brisk::unsqueeze(*this, d); }
Tensor Tensor::sum(const Shape& d, bool k) const { return brisk::sum(*this, d, k); }
Tensor Tensor::mean(const Shape& d, bool k) const { return brisk::mean(*this, d, k); }
Tensor Tensor::matmul(const Tensor& o) const { return brisk::matmul(*this, o); }
Tensor Tensor::exp() const { return brisk::exp(*this); }
Tensor Tensor::log() const { return brisk::log(*this); }
Tensor Tensor::pow(double e) const { return brisk::pow(*this, e); }
Tensor Tensor::relu() const { return brisk::relu(*this); }
Tensor Tensor::abs() const { return brisk::abs(*this); }
Tensor Tensor::sqrt() const { return brisk::sqrt(*this); }
Tensor Tensor::neg() const { return brisk::neg(*this); }

// Note [In-place ops]
// An in-place op runs the ordinary op with the target passed as its output, so kernels need
// no in-place variants; dispatch bumps the target's version. While gradients are recorded,
// the result is computed out of place from a clone (so the node's saved inputs stay valid),
// copied into the target, and the target takes the new node as its history ("rebase").
// A leaf that requires grad cannot be changed in place while grad mode is on (its gradient
// would be wrong), nor can a view while recording (its base's history would be wrong).
namespace {
template <class Compute>
Tensor& inplace(Tensor& self, const char* name, const Tensor* other, Compute&& compute) {
  BRISK_CHECK(self.defined(), name, ": undefined tensor");
  bool recording = GradMode::enabled() && (self.requires_grad() || (other && other->requires_grad()));
  BRISK_CHECK(!(GradMode::enabled() && self.requires_grad() && self.is_leaf()), name,
              ": a leaf tensor that requires grad cannot be modified in place (do it under NoGradGuard), tensor ",
              self.str());
  if (!recording) {
    compute(self, /*out=*/self);
    return self;
  }
  BRISK_CHECK(!self.impl()->is_view, name,
              ": in-place change of a view while recording gradients is not supported, tensor ", self.str());
  Tensor result = compute(self.clone(), Tensor());
  BRISK_CHECK(result.sizes() == self.sizes(), name, ": result shape ", result.sizes(), " does not match target ",
              self.sizes());
  {
    NoGradGuard ng;
    Tensor outs[1] = {self};
    Tensor ins[1] = {result};
    Attrs attrs;
    attrs.dtype = self.dtype();
    call(OpId::Cast, ins, attrs, outs);
  }
  AutogradMeta& m = meta(self);
  m.grad_fn = result.grad_fn();
  m.output_nr = result.output_nr();
  m.requires_grad = true;
  return self;
}

// Runs the binary op of an in-place method (`name`) with `out` as output when out is defined,
// else out of place. `a` is the target: its dtype is the result's, so an operand whose values
// it cannot hold is an error (PyTorch's rule), not a silent truncation: a floating operand of an
// integer or Bool target, a non-Bool operand of a Bool target.
Tensor run_binary(const char* name, OpId id, const Tensor& a, const Tensor& b, const Attrs& attrs, const Tensor& out) {
  BRISK_CHECK(
      !(is_floating(b.dtype()) && !is_floating(a.dtype())) && !(a.dtype() == DType::Bool && b.dtype() != DType::Bool),
      name, ": the result type ", b.dtype(), " cannot be written in place into a tensor of dtype ", a.dtype(),
      " (shape ", a.sizes(), "); cast first or use the out-of-place op");
  Tensor bb = b.dtype() == a.dtype() ? b : cast(b, a.dtype());
  Tensor ins[2] = {a, bb};
  Tensor outs[1] = {out};
  call(id, ins, attrs, outs);
  return outs[0];
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  Attrs attrs;
  attrs.a = alpha;
  return inplace(*this, "add_", &other, [&](const Tensor& s, const Tensor& out) {
    return run_binary("add_", OpId::Add, s, other, attrs, out);
  });
}
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  Attrs attrs;
  attrs.a = alpha;
  return inplace(*this, "sub_", &other, [&](const Tensor& s, const Tensor& out) {
    return run_binary("sub_", OpId::Sub, s, other, attrs, out);
  });
}
Tensor& Tensor::mul_(const Tensor& other) {
  return inplace(*this, "mul_", &other,
                 [&](const Tensor& s, const Tensor& out) { return run_binary("mul_", OpId::Mul, s, other, {}, out); });
}
Tensor& Tensor::div_(const Tensor& other) {
  return inplace(*this, "div_", &other,
                 [&](const Tensor& s, const Tensor& out) { return run_binary("div_", OpId::Div, s, other, {}, out); });
}
Tensor& Tensor::add_(double value) { return add_(scalar_operand(value, *this)); }
Tensor& Tensor::mul_(double value) { return mul_(scalar_operand(value, *this)); }
Tensor& Tensor::zero_() { return fill_(0.0); }
Tensor& Tensor::fill_(double value) {
  return inplace(*this, "fill_", nullptr, [&](const Tensor& s, const Tensor& out) {
    Attrs attrs;
    attrs.a = value;
    attrs.shape = s.sizes();
    attrs.dtype = s.dtype();
    attrs.device = s.device();
    Tensor outs[1] = {out};
    call(OpId::Fill, {}, attrs, outs);
    return outs[0];
  });
}
Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) {
  return inplace(*this, "copy_", &src, [&](const Tensor& s, const Tensor& out) {
    Tensor from = src.device() == s.device() ? src : to_device(src, s.device(), non_blocking);
    if (!(from.sizes() == s.sizes())) from = brisk::expand(from, s.sizes());
    Attrs attrs;
    attrs.dtype = s.dtype();
    Tensor ins[1] = {from};
    Tensor outs[1] = {out};
    call(OpId::Cast, ins, attrs, outs);
    return outs[0];
  });
}

// ---- operators
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_operand(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_operand(b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_operand(b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_operand(b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_operand(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_operand(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_operand(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_operand(a, b), b); }

}  // namespace brisk
