// nn/init.h: parameter initializers, in place and unrecorded, with PyTorch's names, fan rules
// and gains, so a layer built here starts from the same distribution as in PyTorch. Each
// takes an optional Generator (default: the process generator, see engine/random.h).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "engine/random.h"
#include "engine/tensor.h"

namespace brisk::nn::init {

// (fan_in, fan_out) of a weight: dim 1 / dim 0 times the receptive field (dims 2..).
std::pair<int64_t, int64_t> fans(const Tensor& w);
// PyTorch's calculate_gain: "linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu", "selu".
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

enum class FanMode { FanIn, FanOut };

void uniform_(Tensor& t, double low = 0, double high = 1, Generator* gen = nullptr);
void normal_(Tensor& t, double mean = 0, double std = 1, Generator* gen = nullptr);
void constant_(Tensor& t, double value);
void zeros_(Tensor& t);
void ones_(Tensor& t);
void xavier_uniform_(Tensor& t, double gain = 1, Generator* gen = nullptr);
void xavier_normal_(Tensor& t, double gain = 1, Generator* gen = nullptr);
void kaiming_uniform_(Tensor& t, double a = 0, FanMode mode = FanMode::FanIn,
                      const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
void kaiming_normal_(Tensor& t, double a = 0, FanMode mode = FanMode::FanIn,
                     const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
// Normal(mean, std) truncated to [a, b] by inverse-CDF sampling (as PyTorch).
void trunc_normal_(Tensor& t, double mean = 0, double std = 1, double a = -2, double b = 2, Generator* gen = nullptr);
// A (semi-)orthogonal matrix from the QR decomposition of a normal matrix (dims 1.. flattened).
void orthogonal_(Tensor& t, double gain = 1, Generator* gen = nullptr);

// The default init of Linear and Conv layers in PyTorch: weight kaiming_uniform(a = sqrt(5)),
// i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias with the same bound.
void linear_default_(Tensor& weight, Tensor& bias, Generator* gen = nullptr);

// ---- building without initializing (torch.nn.utils.skip_init)
//
// While a SkipInitGuard is alive on this thread, the functions above leave their tensor as it
// is and draw nothing from the generator: a module built meanwhile keeps the uninitialized
// memory of its parameters (tensors that constructors make with zeros() or ones() are still
// filled). For weights that a load overwrites at once: building GPT-2 124M and loading its
// safetensors then costs the allocation and the read, not 124M random draws. Guards nest.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;
};
bool init_skipped();  // a SkipInitGuard is alive on this thread

// M(args...) built under a SkipInitGuard: `auto gpt = nn::init::skip_init<GPT2>(config);` then
// load its weights (a strict load checks that every parameter was given a value).
template <class M, class... Args>
std::shared_ptr<M> skip_init(Args&&... args) {
  SkipInitGuard guard;
  return std::make_shared<M>(std::forward<Args>(args)...);
}

}  // namespace brisk::nn::init
