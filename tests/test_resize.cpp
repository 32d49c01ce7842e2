// tests/test_resize.cpp: conv_transpose1d/2d, pad, interpolate, the 1-d and adaptive max pools
// and pixel_shuffle / pixel_unshuffle (nn/functional.h) and their modules (nn/layers_resize.h)
// against PyTorch 1.13 (tests/data/resize/resize.json, made by tests/make_resize_reference.py):
// outputs, max-pool indices and the gradients of sum(out * cot), in F32 (relative error at
// most 1e-5 for outputs, 1e-4 for gradients) and F64; gradcheck in F64 of each family;
// ConvTranspose2d loading PyTorch's state_dict; and the errors bad arguments give.
// Not here: the spec rows (strided, dtype and CUDA checks) of these functions
// (opcheck/specs_resize.cpp).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "brisk.h"
#include "tests/reference.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;
using brisk::test::json;
namespace F = brisk::nn::functional;

namespace {

using test::rel_err;
using test::tensor_of;

F::Pair pair_of(const json& j) { return {j[0].get<int64_t>(), j[1].get<int64_t>()}; }

std::optional<int64_t> opt_int(const json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<int64_t>();
}

// The case's op on `in`; `indices` receives max pooling's indices where the op has them.
Tensor run(const json& c, std::map<std::string, Tensor>& in, Tensor& indices) {
  const std::string op = c["op"];
  const json& a = c["args"];
  auto get = [&](const char* k) { return in.count(k) ? in[k] : Tensor(); };
  if (op == "conv_transpose2d")
    return F::conv_transpose2d(in["x"], in["w"], get("b"), pair_of(a["stride"]), pair_of(a["padding"]),
                               pair_of(a["output_padding"]), a["groups"].get<int64_t>(), pair_of(a["dilation"]));
  if (op == "conv_transpose1d")
    return F::conv_transpose1d(in["x"], in["w"], get("b"), a["stride"].get<int64_t>(), a["padding"].get<int64_t>(),
                               a["output_padding"].get<int64_t>(), a["groups"].get<int64_t>(),
                               a["dilation"].get<int64_t>());
  if (op == "pad")
    return F::pad(in["x"], a["pad"].get<std::vector<int64_t>>(), a["mode"].get<std::string>(),
                  a["value"].get<double>());
  if (op == "interpolate") {
    F::InterpolateOptions o;
    if (a.contains("size")) o.size = a["size"].get<std::vector<int64_t>>();
    if (a.contains("scale_factor")) o.scale_factor = a["scale_factor"].get<std::vector<double>>();
    o.mode = a["mode"].get<std::string>();
    if (a.contains("align_corners")) o.align_corners = a["align_corners"].get<bool>();
    if (a.contains("recompute_scale_factor")) o.recompute_scale_factor = a["recompute_scale_factor"].get<bool>();
    return F::interpolate(in["x"], o);
  }
  if (op == "max_pool1d") {
    auto [y, idx] = F::max_pool1d_with_indices(in["x"], a["kernel"].get<int64_t>(), opt_int(a["stride"]),
                                               a["padding"].get<int64_t>(), a["dilation"].get<int64_t>(),
                                               a["ceil_mode"].get<bool>());
    indices = idx;
    return y;
  }
  if (op == "avg_pool1d")
    return F::avg_pool1d(in["x"], a["kernel"].get<int64_t>(), opt_int(a["stride"]), a["padding"].get<int64_t>(),
                         a["ceil_mode"].get<bool>(), a["count_include_pad"].get<bool>());
  if (op == "adaptive_max_pool2d") {
    auto [y, idx] = F::adaptive_max_pool2d_with_indices(in["x"], pair_of(a["output_size"]));
    indices = idx;
    return y;
  }
  if (op == "adaptive_max_pool1d") {
    // PyTorch's 1-d indices are positions along L; ours come from the (1, L) plane, the same.
    nn::AdaptiveMaxPool2d pool(F::Pair{1, a["output_size"].get<int64_t>()});
    auto [y, idx] = pool.forward_with_indices(unsqueeze(in["x"], 2));
    indices = squeeze(idx, 2);
    Tensor y1 = F::adaptive_max_pool1d(in["x"], a["output_size"].get<int64_t>());
    CHECK(equal(y1, squeeze(y, 2)));
    return y1;
  }
  if (op == "adaptive_avg_pool1d") return F::adaptive_avg_pool1d(in["x"], a["output_size"].get<int64_t>());
  if (op == "pixel_shuffle") return F::pixel_shuffle(in["x"], a["factor"].get<int64_t>());
  if (op == "pixel_unshuffle") return F::pixel_unshuffle(in["x"], a["factor"].get<int64_t>());
  FAIL("unknown op " << op);
  return {};
}

// Worst errors over all cases of one dtype, printed under BRISK_PRINT_PARITY (docs/what-works.md numbers).
struct Worst {
  double out = 0, grad = 0;
};

void check_parity(DType dt, double out_tol, double grad_tol, std::map<std::string, Worst>& worst) {
  const json ref = test::read_reference("resize/resize.json");
  int checked = 0;
  for (const json& c : ref["cases"]) {
    const std::string name = c["name"];
    CAPTURE(name);
    std::map<std::string, Tensor> in;
    // Inputs and cotangents are F32 values written as 9 digits: read as F32, then widened.
    for (const auto& [k, v] : c["inputs"].items()) in[k] = cast(tensor_of(v, DType::F32), dt).requires_grad_(true);
    Tensor indices;
    Tensor out = run(c, in, indices);
    REQUIRE(out.dtype() == dt);
    const double e_out = rel_err(out, c["out"]);
    CHECK(e_out <= out_tol);
    if (c.contains("indices")) {
      REQUIRE(indices.defined());
      CHECK(equal(cast(indices, DType::I64), tensor_of(c["indices"], DType::I64)));
    }
    (out * cast(tensor_of(c["cot"], DType::F32), dt)).sum().backward();
    double e_grad = 0;
    for (const auto& grad : c["grads"].items()) {
      const std::string& k = grad.key();
      const json& g = grad.value();
      CAPTURE(k);
      REQUIRE(in[k].grad().defined());
      e_grad = std::max(e_grad, rel_err(in[k].grad(), g));
    }
    CHECK(e_grad <= grad_tol);
    Worst& w = worst[c["op"].get<std::string>()];
    w.out = std::max(w.out, e_out);
    w.grad = std::max(w.grad, e_grad);
    ++checked;
  }
  CHECK(checked == 79);
  if (std::getenv("BRISK_PRINT_PARITY")) {
    for (const auto& [op, w] : worst)
      std::printf("parity resize %-20s %s output %.2e grad %.2e\n", op.c_str(), dtype_name(dt), w.out, w.grad);
  }
}

// Runs f and returns the error text ("" when f did not throw).
template <class Fn>
std::string err(Fn&& f) {
  return error_text(std::forward<Fn>(f));
}

}  // namespace

TEST_CASE("resize: outputs, indices and gradients equal PyTorch's in F32 (1e-5 / 1e-4)") {
  std::map<std::string, Worst> worst;
  check_parity(DType::F32, 1e-5, 1e-4, worst);
}

TEST_CASE("resize: outputs, indices and gradients equal PyTorch's in F64") {
  std::map<std::string, Worst> worst;
  check_parity(DType::F64, 1e-10, 1e-10, worst);
}

TEST_CASE("resize: ConvTranspose2d loads PyTorch's state_dict and gives its output") {
  const json ref = test::read_reference("resize/resize.json");
  const json& m = ref["module"];
  nn::ConvTranspose2d ct(4, 6, 3, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}, .groups = 2});
  const auto params = ct.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[0].second.sizes() == Shape{4, 3, 3, 3});  // (C_in, C_out / groups, kh, kw)
  CHECK(params[1].first == "bias");
  CHECK(params[1].second.sizes() == Shape{6});
  ct.load_state_dict(test::state_of(m["state_dict"], DType::F32));
  const Tensor x = tensor_of(m["x"], DType::F32);
  CHECK(rel_err(ct.forward(x), m["out"]) <= 1e-5);
  CHECK(rel_err(ct.forward(x, {9, 10}), m["out_size_9_10"]) <= 1e-5);
  CHECK(error_text([&] {
          ct.forward(x, {9, 11});
        }).find("ConvTranspose2d: requested output size (9, 11)") != std::string::npos);
  // PyTorch's default init: weight and bias within 1 / sqrt(fan_in), fan_in = 3 * 3 * 3.
  nn::ConvTranspose2d fresh(4, 6, 3, {.groups = 2});
  const double bound = 1.0 / std::sqrt(27.0);
  CHECK(max(abs(fresh.parameter("weight"))).item<double>() <= bound);
  CHECK(max(abs(fresh.parameter("bias"))).item<double>() <= bound);
  CHECK(max(abs(fresh.parameter("weight"))).item<double>() > 0.5 * bound);
}

TEST_CASE("resize: the modules call their functional forms") {
  manual_seed(3);
  const Tensor x4 = randn({2, 8, 4, 6}), x3 = randn({2, 3, 10});
  CHECK(equal(nn::PixelShuffle(2).forward(x4), F::pixel_shuffle(x4, 2)));
  CHECK(equal(nn::PixelUnshuffle(2).forward(x4), F::pixel_unshuffle(x4, 2)));
  CHECK(equal(nn::PixelUnshuffle(2).forward(nn::PixelShuffle(2).forward(x4)), x4));
  CHECK(equal(nn::Upsample({.scale_factor = {2}, .mode = "bilinear"}).forward(x4),
              F::interpolate(x4, {.scale_factor = {2.0}, .mode = "bilinear"})));
  CHECK(equal(nn::MaxPool1d(3, 2, 1).forward(x3), F::max_pool1d(x3, 3, 2, 1)));
  CHECK(equal(nn::AvgPool1d(3, 2, 1, false, false).forward(x3), F::avg_pool1d(x3, 3, 2, 1, false, false)));
  CHECK(equal(nn::AdaptiveMaxPool2d(3).forward(x4), F::adaptive_max_pool2d(x4, {3, 3})));
  CHECK(equal(nn::AdaptiveMaxPool1d(4).forward(x3), F::adaptive_max_pool1d(x3, 4)));
  CHECK(equal(nn::AdaptiveAvgPool1d(4).forward(x3), F::adaptive_avg_pool1d(x3, 4)));
  CHECK(equal(nn::ReflectionPad2d(2).forward(x4), F::pad(x4, {2, 2, 2, 2}, "reflect")));
  CHECK(equal(nn::ReplicationPad2d({1, 2, 3, 0}).forward(x4), F::pad(x4, {1, 2, 3, 0}, "replicate")));
  CHECK(equal(nn::CircularPad2d(1).forward(x4), F::pad(x4, {1, 1, 1, 1}, "circular")));
  CHECK(equal(nn::ZeroPad2d(1).forward(x4), F::pad(x4, {1, 1, 1, 1})));
  CHECK(equal(nn::ConstantPad2d(1, 2.5).forward(x4), F::pad(x4, {1, 1, 1, 1}, "constant", 2.5)));
  CHECK(equal(nn::ReflectionPad1d(2).forward(x3), F::pad(x3, {2, 2}, "reflect")));
  CHECK(equal(nn::ReplicationPad1d({0, 3}).forward(x3), F::pad(x3, {0, 3}, "replicate")));
  CHECK(equal(nn::ConstantPad1d(1, -1.0).forward(x3), F::pad(x3, {1, 1}, "constant", -1.0)));
  CHECK(equal(nn::CircularPad1d(2).forward(x3), F::pad(x3, {2, 2}, "circular")));
  nn::ConvTranspose1d ct1(3, 4, 3, 2, 1, 1);
  CHECK(ct1.parameter("weight").sizes() == Shape{3, 4, 3});
  CHECK(ct1.forward(x3).sizes() == Shape{2, 4, 20});  // (10 - 1) * 2 - 2 + 2 + 1 + 1
  CHECK(nn::MaxPool1d(2).forward_with_indices(x3).second.dtype() == DType::I64);
}

TEST_CASE("resize: gradients match finite differences in F64") {
  const GradcheckOptions opt{};
  auto leaf = [](const Shape& s, uint64_t seed) {
    Generator g(seed);
    return uniform(s, -1, 1, DType::F64, Device::cpu(), &g).requires_grad_(true);
  };
  // conv_transpose2d: the plain path and the padded one (output_padding >= stride), with bias.
  CHECK(gradcheck(
      [](const std::vector<Tensor>& in) {
        return F::conv_transpose2d(in[0], in[1], in[2], {2, 1}, {1, 0}, {1, 0}, 1, {1, 1});
      },
      {leaf({2, 2, 3, 3}, 1), leaf({2, 3, 2, 3}, 2), leaf({3}, 3)}, opt));
  CHECK(gradcheck(
      [](const std::vector<Tensor>& in) {
        return F::conv_transpose2d(in[0], in[1], {}, {1, 1}, {1, 1}, {1, 2}, 2, {2, 3});
      },
      {leaf({1, 4, 3, 3}, 4), leaf({4, 2, 2, 2}, 5)}, opt));
  for (const char* mode : {"constant", "reflect", "replicate", "circular"}) {
    CAPTURE(mode);
    CHECK(gradcheck(
        [mode](const std::vector<Tensor>& in) {
          return F::pad(in[0], {3, -1, 2, 2}, mode);
        },
        {leaf({1, 2, 4, 4}, 6)}, opt));
  }
  for (std::string mode : {"nearest", "nearest-exact", "bilinear"}) {
    CAPTURE(mode);
    CHECK(gradcheck(
        [mode](const std::vector<Tensor>& in) {
          return F::interpolate(in[0], {.size = {5, 7}, .mode = mode});
        },
        {leaf({1, 2, 3, 4}, 7)}, opt));
  }
  CHECK(gradcheck(
      [](const std::vector<Tensor>& in) {
        return F::interpolate(in[0], {.scale_factor = {1.5}, .mode = "trilinear", .align_corners = true});
      },
      {leaf({1, 1, 2, 3, 2}, 8)}, opt));
  CHECK(gradcheck(
      [](const std::vector<Tensor>& in) {
        return F::adaptive_max_pool2d(in[0], {3, 2});
      },
      {leaf({2, 2, 5, 5}, 9)}, opt));
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return F::max_pool1d(in[0], 3, 2, 1, 1, true); },
                  {leaf({2, 2, 8}, 10)}, opt));
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return F::pixel_unshuffle(F::pixel_shuffle(in[0], 2) * 2, 2); },
                  {leaf({1, 8, 2, 3}, 11)}, opt));
}

TEST_CASE("resize: bad arguments are clear errors naming the op, the shapes and the argument") {
  const Tensor x = zeros({1, 2, 4, 5});
  // pad
  CHECK(err([&] {
          F::pad(x, {1, 1}, "mirror");
        }) == "pad: unknown padding mode 'mirror' (expected constant, reflect, replicate or circular)");
  CHECK(err([&] {
          F::pad(x, {5, 0}, "reflect");
        }) == "pad: reflect padding (5, 0) of dim 3 must be smaller than its size 5 (input (1, 2, 4, 5))");
  CHECK(err([&] {
          F::pad(x, {0, 0, 1, 4}, "reflect");
        }) == "pad: reflect padding (1, 4) of dim 2 must be smaller than its size 4 (input (1, 2, 4, 5))");
  CHECK(err([&] {
          F::pad(x, {6, 0}, "circular");
        }).find("circular padding (6, 0) of dim 3 must be at most its size 5") != std::string::npos);
  CHECK(err([&] {
          F::pad(x, {1, 2, 3});
        }).find("pad: the padding list must hold (before, after) pairs") != std::string::npos);
  CHECK(err([&] {
          F::pad(x, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
        }) == "pad: 5 (before, after) pairs for a 4-D input (1, 2, 4, 5)");
  CHECK(err([&] { F::pad(x, {-4, -2}); }).find("pad: padding (-4, -2) of dim 3 (size 5)") != std::string::npos);
  CHECK(err([&] { F::pad(x, {1, 1}, "reflect", 2.0); }) == "pad: mode 'reflect' takes no fill value, got 2");
  CHECK(err([&] {
          F::pad(zeros({2, 3}, DType::I64), {1, 1}, "replicate");
        }).find("pad: mode 'replicate' takes a floating") != std::string::npos);
  CHECK(F::pad(ones({2, 3}, DType::I64), {1, 0}, "constant", 7).sizes() == Shape{2, 4});
  // conv_transpose2d
  const Tensor w = zeros({2, 3, 3, 3});
  CHECK(err([&] {
          F::conv_transpose2d(x, w, {}, {2, 2}, {0, 0}, {2, 0});
        }) ==
        "conv_transpose2d: output_padding (2, 0) must be non-negative and smaller than either stride (2, 2) or "
        "dilation (1, 1), height fails");
  CHECK(err([&] {
          F::conv_transpose2d(x, w, {}, {1, 1}, {0, 0}, {0, 1}, 1, {1, 1});
        }).find("width fails") != std::string::npos);
  CHECK(err([&] {
          F::conv_transpose2d(x, zeros({3, 3, 3, 3}));
        }) ==
        "conv_transpose2d: input (1, 2, 4, 5) has 2 channels but weight (3, 3, 3, 3) (C_in, C_out / groups, kh, kw) "
        "expects 3");
  CHECK(err([&] {
          F::conv_transpose2d(x, w, {}, {1, 1}, {0, 0}, {0, 0}, 3);
        }).find("groups (3) must divide") != std::string::npos);
  CHECK(err([&] { F::conv_transpose2d(x, w, zeros({4})); }).find("conv_transpose2d: bias (4) does not match the 3") !=
        std::string::npos);
  CHECK(err([&] { F::conv_transpose2d(x, w, {}, {1, 1}, {3, 3}); }).find("gives an empty output") != std::string::npos);
  // Conv3d does not exist; a 5-D input says so.
  CHECK(err([&] {
          F::conv2d(zeros({1, 2, 3, 4, 5}), zeros({2, 2, 1, 1}));
        }) ==
        "conv2d: input (1, 2, 3, 4, 5) is 5-D; brisk has no conv3d (3-D convolution is not implemented), conv2d "
        "takes (B, C, H, W)");
  CHECK(err([&] {
          F::conv_transpose2d(zeros({1, 2, 3, 4, 5}), w);
        }).find("brisk has no conv_transpose3d") != std::string::npos);
  // pixel_shuffle
  CHECK(err([&] {
          F::pixel_shuffle(zeros({1, 6, 2, 2}), 2);
        }) == "pixel_shuffle: the 6 channels of input (1, 6, 2, 2) are not divisible by upscale_factor^2 = 2^2");
  CHECK(err([&] {
          F::pixel_unshuffle(zeros({1, 1, 4, 5}), 2);
        }) ==
        "pixel_unshuffle: the height 4 and width 5 of input (1, 1, 4, 5) must be divisible by downscale_factor 2");
  CHECK(err([&] { F::pixel_shuffle(zeros({4, 2}), 2); }).find("at least 3 dims") != std::string::npos);
  CHECK(err([&] { F::pixel_shuffle(x, 0); }).find("upscale_factor must be positive, got 0") != std::string::npos);
  // interpolate
  CHECK(err([&] { F::interpolate(x, {}); }) ==
        "interpolate: give exactly one of size and scale_factor (got 0 sizes and 0 scale factors)");
  CHECK(err([&] {
          F::interpolate(x, {.size = {2, 2}, .scale_factor = {2}});
        }).find("exactly one of") != std::string::npos);
  CHECK(err([&] {
          F::interpolate(x, {.size = {2, 2, 2}});
        }) == "interpolate: size must hold 1 or 2 values for input (1, 2, 4, 5), got 3");
  CHECK(err([&] { F::interpolate(x, {.size = {0, 3}}); }).find("output sizes must be positive") != std::string::npos);
  CHECK(err([&] { F::interpolate(x, {.scale_factor = {0.1}}); }) ==
        "interpolate: scale_factor 0.1 gives output size 0 for dim 2 of size 4 (input (1, 2, 4, 5))");
  CHECK(err([&] { F::interpolate(x, {.size = {8}, .mode = "bicubic"}); }).find("unknown mode 'bicubic'") !=
        std::string::npos);
  CHECK(err([&] {
          F::interpolate(zeros({1, 2, 4}), {.size = {8}, .mode = "bilinear"});
        }) == "interpolate: mode 'bilinear' takes a 4-D input (2 spatial dims), got (1, 2, 4)");
  CHECK(err([&] { F::interpolate(x, {.size = {8}, .align_corners = true}); }).find("align_corners is only for") !=
        std::string::npos);
  CHECK(err([&] { F::interpolate(zeros({2, 4}), {.size = {8}}); }).find("input must be 3-D") != std::string::npos);
  // pooling
  CHECK(err([&] {
          F::adaptive_max_pool2d(x, {0, 2});
        }) == "adaptive_max_pool2d: output size must be two positive sizes, got (0, 2)");
  CHECK(err([&] {
          F::adaptive_max_pool2d(zeros({4, 5}), {2, 2});
        }).find("adaptive_max_pool2d: input must be 4-D") != std::string::npos);
  CHECK(err([&] {
          F::max_pool1d(zeros({1, 2, 3}), 5);
        }) ==
        "max_pool1d: input (1, 2, 3) of length 3 is too small for kernel_size 5 with padding 0 and dilation 1 (output "
        "length 0)");
  CHECK(err([&] {
          F::max_pool1d(zeros({1, 2, 8}), 3, 1, 2);
        }) == "max_pool1d: padding must be in [0, kernel_size / 2] = [0, 1], got 2");
  CHECK(err([&] { F::avg_pool1d(x, 2); }) == "avg_pool1d: input must be 3-D (B, C, L) or 2-D (C, L), got (1, 2, 4, 5)");
  CHECK(err([&] {
          F::adaptive_avg_pool1d(zeros({1, 2, 8}), 0);
        }) == "adaptive_avg_pool1d: output_size must be positive, got 0");
}
