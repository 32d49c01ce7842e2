// engine/custom_function.h: autograd functions with a hand-written backward, the counterpart
// of torch.autograd.Function (and of LibTorch's torch::autograd::Function<T>, whose names the
// context keeps: save_for_backward, get_saved_variables, mark_non_differentiable,
// needs_input_grad, saved_data, set_materialize_grads).
//
//   struct Cube : autograd::Function<Cube> {
//     static std::string name() { return "Cube"; }        // node: CubeBackward (optional)
//     static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x) {
//       ctx.save_for_backward({x});
//       return x * x * x;                                 // runs with grad mode off
//     }
//     static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, std::vector<Tensor> g) {
//       Tensor x = ctx.get_saved_variables()[0];
//       return {g[0] * 3.0 * x * x};                      // one per forward argument
//     }
//   };
//   Tensor y = Cube::apply(x);
//
// forward may take any arguments (tensors get gradients; others, such as a double, get an
// undefined tensor back from backward) and return a Tensor or a std::vector<Tensor>; backward
// gets one gradient per output (zeros where an output got none, unless
// set_materialize_grads(false)) and returns one per forward argument. A backward made of brisk
// ops is itself differentiable: under create_graph it is recorded, so double backward and
// gradgradcheck work. A backward that leaves the tape (reads values on the host) is not.
// An output that is one of the inputs is returned as a copy (the copy gets the history).
#pragma once

#include <any>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/error.h"

namespace brisk::autograd {

class FunctionNode;
class FunctionCtx;

using FunctionForward = std::function<std::vector<Tensor>(FunctionCtx&)>;
using FunctionBackward = std::function<std::vector<Tensor>(FunctionCtx&, std::vector<Tensor> grad_outputs)>;

// The untemplated form: `inputs` are the tensors that may get gradients (forward reads them
// through its captures); backward returns one gradient per entry of `inputs`. The backward
// node is named name + "Backward"; errors name the function.
std::vector<Tensor> apply_function(const std::string& name, const std::vector<Tensor>& inputs,
                                   const FunctionForward& forward, FunctionBackward backward);

class FunctionCtx {
 public:
  // forward: the tensors backward will need (inputs or outputs of forward). Each is checked on
  // use against in-place changes made after forward, as the built-in ops' saved tensors are.
  void save_for_backward(std::vector<Tensor> tensors);
  // backward: the saved tensors in the order saved; an error in forward or after a backward
  // without retain_graph freed them.
  std::vector<Tensor> get_saved_variables() const;
  // forward: outputs that get no gradient (indices, masks): they do not require grad, and
  // backward still receives a (zero) gradient slot for each.
  void mark_non_differentiable(const std::vector<Tensor>& outputs);
  // false: backward receives undefined tensors for outputs that got no gradient (default: zeros).
  void set_materialize_grads(bool value) { materialize_grads_ = value; }
  // Whether tensor input i (counting the tensor arguments of forward only) needs a gradient;
  // known in forward and in backward.
  bool needs_input_grad(size_t i) const;

  // Values other than tensors that backward needs (a scale, a shape). Tensors belong in
  // save_for_backward: a tensor here is neither version-checked nor freed with the graph.
  std::unordered_map<std::string, std::any> saved_data;

 private:
  friend class FunctionNode;
  friend std::vector<Tensor> apply_function(const std::string&, const std::vector<Tensor>&, const FunctionForward&,
                                            FunctionBackward);
  std::string name_{};
  std::vector<Tensor> to_save_{};     // as given in forward, packed once the outputs are known
  std::vector<SavedTensor> saved_{};  // packed
  std::unordered_set<const TensorImpl*> non_differentiable_{};
  std::vector<bool> needs_input_grad_{};
  std::weak_ptr<Node> owner_{};
  bool in_backward_ = false;
  bool released_ = false;
  bool materialize_grads_ = true;
};

// CRTP base: Derived supplies static forward(FunctionCtx&, args...) and
// static backward(FunctionCtx&, std::vector<Tensor>), optionally static std::string name().
template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    using Result = decltype(Derived::forward(std::declval<FunctionCtx&>(), args...));
    static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, std::vector<Tensor>>,
                  "autograd::Function: forward must return Tensor or std::vector<Tensor>");
    std::vector<Tensor> tensors;
    std::vector<size_t> position;  // the argument position of each tensor input
    size_t pos = 0;
    (
        [&](const auto& a) {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(a)>, Tensor>) {
            tensors.push_back(a);
            position.push_back(pos);
          }
          ++pos;
        }(args),
        ...);
    const std::string fn = function_name();
    auto forward = [&](FunctionCtx& ctx) -> std::vector<Tensor> {
      if constexpr (std::is_same_v<Result, Tensor>)
        return {Derived::forward(ctx, args...)};
      else
        return Derived::forward(ctx, args...);
    };
    auto backward = [fn, position](FunctionCtx& ctx, std::vector<Tensor> grads) {
      std::vector<Tensor> per_arg = Derived::backward(ctx, std::move(grads));
      BRISK_CHECK(per_arg.size() == sizeof...(Args), fn, ": backward returned ", per_arg.size(),
                  " gradients; it must return one per argument of forward (", sizeof...(Args),
                  "), an undefined Tensor for those that get none");
      std::vector<Tensor> out;
      out.reserve(position.size());
      for (size_t p : position) out.push_back(per_arg[p]);
      return out;
    };
    std::vector<Tensor> outs = apply_function(fn, tensors, forward, backward);
    if constexpr (std::is_same_v<Result, Tensor>)
      return outs[0];
    else
      return outs;
  }

 private:
  static std::string function_name() {
    if constexpr (requires { Derived::name(); })
      return std::string(Derived::name());
    else
      return "CustomFunction";
  }
};

}  // namespace brisk::autograd
