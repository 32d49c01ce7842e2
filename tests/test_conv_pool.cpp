// tests/test_conv_pool.cpp: conv2d and pooling beyond their specs (opcheck/specs_nn.cpp): error
// messages, PyTorch's max-pool indices, the threaded paths against the single-sample path, and
// the op parameter records, the direct F32 kernel against the F64 path, and Sequential's ReLU /
// max-pool reordering.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "engine/op_params.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm_f32.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "opcheck/spec.h"

using namespace brisk;
using namespace brisk::opcheck;
namespace F = brisk::nn::functional;

namespace {

// ---- errors and details the table does not express

// A small deterministic generator for test data with ties and special values: next() gives 31
// random bits.
struct Lcg {
  uint64_t state;
  uint64_t operator()() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("conv2d: errors name the op and the shapes") {
  const Tensor x = zeros({2, 4, 5, 5}), w = zeros({6, 2, 3, 3});
  std::string e = error_of([&] { F::conv2d(x, zeros({6, 3, 3, 3})); });
  CHECK_MESSAGE(e.find("conv2d: input (2, 4, 5, 5) has 4 channels but weight (6, 3, 3, 3)") != std::string::npos, e);
  e = error_of([&] { F::conv2d(x, w, {}, {1, 1}, {0, 0}, {1, 1}, 3); });
  CHECK_MESSAGE(e.find("conv2d: groups (3) must divide the input channels") != std::string::npos, e);
  e = error_of([&] { F::conv2d(x, zeros({6, 4, 7, 3})); });
  CHECK_MESSAGE(e.find("larger than the padded input") != std::string::npos, e);
  e = error_of([&] { F::conv2d(zeros({4, 5, 5}), zeros({6, 4, 3, 3})); });
  CHECK_MESSAGE(e.find("conv2d: input must be 4-D (B, C, H, W), got (4, 5, 5)") != std::string::npos, e);
  e = error_of([&] { F::conv2d(x, zeros({6, 4, 3, 3}), zeros({5})); });
  CHECK_MESSAGE(e.find("conv2d: bias (5)") != std::string::npos, e);
  e = error_of([&] { F::conv2d(x, zeros({6, 4, 3, 3}, DType::F64)); });
  CHECK_MESSAGE(e.find("conv2d: dtypes differ") != std::string::npos, e);
  e = error_of([&] { F::max_pool2d(zeros({2, 5, 5}), {2, 2}); });
  CHECK_MESSAGE(e.find("max_pool2d: input must be 4-D") != std::string::npos, e);
  e = error_of([&] { F::max_pool2d(x, {2, 2}, std::nullopt, {2, 2}); });
  CHECK_MESSAGE(e.find("max_pool2d: padding (2, 2) must be at most half the kernel size") != std::string::npos, e);
  e = error_of([&] { F::avg_pool2d(zeros({1, 1, 2, 2}), {3, 3}); });
  CHECK_MESSAGE(e.find("avg_pool2d: input (1, 1, 2, 2) is too small") != std::string::npos, e);
  e = error_of([&] { F::linear(zeros({3, 5}), zeros({4, 6})); });
  CHECK_MESSAGE(e.find("linear: input (3, 5) does not have the 6 features") != std::string::npos, e);
}

TEST_CASE("max_pool2d: indices are flat positions within each plane, as PyTorch's") {
  // x (1, 2, 4, 4) = 0..31: every 2x2 window's maximum is its bottom-right element.
  std::vector<double> v(32);
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i);
  const Tensor x = from_vector(v, {1, 2, 4, 4});
  Attrs attrs;
  attrs.geometry = {2, 2, 0, 0, 1, 1, 2, 2};
  const Tensor in[1] = {x};
  Tensor out[2];
  call(OpId::MaxPool2d, in, attrs, out);
  CHECK(out[1].dtype() == DType::I64);
  CHECK(out[1].to_vector<int64_t>() == std::vector<int64_t>{5, 7, 13, 15, 5, 7, 13, 15});
  CHECK(out[0].to_vector<double>() == std::vector<double>{5, 7, 13, 15, 21, 23, 29, 31});
}

TEST_CASE("max_pool2d: the F32 2x2 kernel (AVX-512 where present) equals the F64 loop at every row width") {
  // Widths 2..41 cover the masked short step (n < 8, n = 8, 8 < n < 16), whole 16-output steps
  // and odd last columns; values in quarters (many ties, exact in both dtypes) and some NaNs.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Lcg next{12345};
  for (int64_t W = 2; W <= 41; ++W) {
    for (int64_t H : {2, 3, 6}) {
      std::vector<double> v(size_t(2 * 3 * H * W));
      for (double& e : v) e = next() % 17 == 0 ? nan : double(int64_t(next() % 9) - 4) / 4;
      const Tensor x64 = from_vector(v, {2, 3, H, W}, DType::F64);
      const Tensor x32 = x64.to(DType::F32);
      Attrs attrs;
      attrs.geometry = {2, 2, 0, 0, 1, 1, 2, 2};
      Tensor out64[2], out32[2];
      const Tensor in64[1] = {x64}, in32[1] = {x32};
      call(OpId::MaxPool2d, in64, attrs, out64);
      call(OpId::MaxPool2d, in32, attrs, out32);
      CHECK_MESSAGE(out32[1].to_vector<int64_t>() == out64[1].to_vector<int64_t>(), "H ", H, " W ", W);
      const std::vector<double> y64 = out64[0].to_vector<double>(), y32 = out32[0].to(DType::F64).to_vector<double>();
      bool same = y64.size() == y32.size();
      for (size_t i = 0; same && i < y64.size(); ++i)
        same = (std::isnan(y64[i]) && std::isnan(y32[i])) || y64[i] == y32[i];
      CHECK_MESSAGE(same, "H ", H, " W ", W);
    }
  }
}

TEST_CASE("conv2d: large batches (threaded paths) match the same samples one at a time") {
  // Big enough for the OpenMP splits; F64 so the comparison is tight. One sample at a time runs
  // the unsplit path, which the conv specs check against direct loops.
  auto check = [](const Shape& xs, const Shape& ws, int64_t groups, uint64_t seed, F::Pair stride = {1, 1},
                  F::Pair padding = {1, 1}) {
    const F::Pair dilation{1, 1};
    const Tensor x = leaf(uniform_values(xs, -1, 1, seed)), w = leaf(uniform_values(ws, -1, 1, seed + 1));
    const Tensor y = F::conv2d(x, w, {}, stride, padding, dilation, groups);
    const Tensor g = uniform_values(y.sizes(), -1, 1, seed + 2);
    y.backward(g);
    Tensor w_grad = zeros(ws, DType::F64);
    for (int64_t b = 0; b < xs[0]; ++b) {
      const Tensor xb = leaf(x.detach().slice(0, b, b + 1)), wb = leaf(w.detach());
      const Tensor yb = F::conv2d(xb, wb, {}, stride, padding, dilation, groups);
      CHECK(allclose(yb, y.detach().slice(0, b, b + 1), 1e-12, 1e-12));
      yb.backward(g.slice(0, b, b + 1));
      CHECK(allclose(xb.grad(), x.grad().slice(0, b, b + 1), 1e-12, 1e-12));
      w_grad = w_grad + wb.grad();
    }
    CHECK(allclose(w.grad(), w_grad, 1e-10, 1e-10));
  };
  SUBCASE("im2col + GEMM, 3x3, padding 1") { check({8, 6, 12, 12}, {16, 6, 3, 3}, 1, 70); }
  SUBCASE("im2col + GEMM, batch 3 (GEMMs split across threads)") { check({3, 8, 12, 12}, {16, 8, 3, 3}, 1, 73); }
  SUBCASE("depthwise, channel multiplier 2") { check({8, 16, 24, 24}, {32, 1, 3, 3}, 16, 76); }
  // Note [Batch-folded conv]: planes under 1024 output pixels fold the batch into the GEMM's N,
  // in chunks of at most 2^22 column entries (here K * P = 576 * 961: chunks of 7 and 2).
  SUBCASE("batch folded into N, two chunks") { check({9, 64, 31, 31}, {8, 64, 3, 3}, 1, 79); }
  SUBCASE("batch folded, stride 2 onto 1x1 planes, groups 2") { check({5, 8, 2, 2}, {6, 4, 3, 3}, 2, 82, {2, 2}); }
  // Note [Live taps]: on 1x1 planes a 3x3 / padding 1 conv keeps only its centre tap.
  SUBCASE("batch folded, 3x3 on 1x1 planes: one live tap") { check({4, 6, 1, 1}, {5, 6, 3, 3}, 1, 88); }
  SUBCASE("batch folded, 1x1 stride 2 (a ResNet downsample)") {
    check({4, 6, 7, 7}, {10, 6, 1, 1}, 1, 85, {2, 2}, {0, 0});
  }
}

TEST_CASE("conv2d: the direct F32 kernel (forward, input and weight gradients) equals the F64 path") {
  // Note [Direct conv]: widths 1 to 44 (vectors spanning several rows, a last partial vector),
  // partial output-channel panels (13, 9), 3x3, 5x3, 1x3 (no padding rows: the wrapped reads
  // land on real rows) and 3x1 kernels, two depth chunks (120 channels x 9 taps), a transposed
  // (strided) input, batch 1 (strips split across threads) and 4 (samples across threads),
  // with and without bias; for the weight gradient column tails (27, 45, 150, 6 and 7 taps), row tails (8 and 13
  // channels) and a batch of 11 (sample blocks of 4 and the rest). Every case is also checked against DirectConv::fits,
  // so the kernel runs where the case says it does (the input gradient needs 8 input channels).
  using kernels::cpu::conv::DirectConv;
  struct Case {
    int64_t B, C, H, W, O, kh, kw;
    bool bias, transposed;
  };
  const Case cases[] = {
      {4, 3, 14, 14, 8, 3, 3, true, false},   {1, 5, 28, 28, 13, 3, 3, false, false},
      {2, 9, 7, 7, 16, 3, 3, true, false},    {2, 8, 9, 15, 9, 1, 3, true, false},
      {1, 120, 14, 14, 8, 3, 3, true, false}, {3, 10, 12, 13, 12, 5, 3, false, true},
      {2, 16, 5, 44, 16, 3, 5, true, false},  {1, 8, 6, 1, 8, 3, 1, true, false},
      {3, 2, 9, 12, 8, 1, 3, false, false},   {11, 1, 10, 10, 16, 7, 1, true, false},
      {2, 8, 4, 3, 8, 3, 13, true, false},  // padding 6 on a 3-wide input: reads wrap past whole rows
  };
  uint64_t seed = 300;
  for (const Case& c : cases) {
    const int64_t ph = (c.kh - 1) / 2, pw = (c.kw - 1) / 2;
    const DirectConv::Geometry fwd{c.C, c.H, c.W, c.O, c.kh, c.kw, ph, pw, c.H, c.W};
    const DirectConv::Geometry bwd{c.O, c.H, c.W, c.C, c.kh, c.kw, ph, pw, c.H, c.W};
    const bool avx512 = kernels::cpu::f32_gemm_path() == kernels::cpu::F32GemmPath::Avx512;
    CHECK(DirectConv::fits(fwd) == avx512);
    CHECK(DirectConv::fits(bwd) == (avx512 && c.C >= 8));
    // transposed: x32 is a (W, H)-major view, read in place (the strided copy into the grid)
    const Tensor base64 = c.transposed ? uniform_values({c.B, c.C, c.W, c.H}, -1, 1, seed++)
                                       : uniform_values({c.B, c.C, c.H, c.W}, -1, 1, seed++);
    const Tensor base32 = leaf(base64.to(DType::F32));
    const Tensor x32 = c.transposed ? base32.transpose(2, 3) : base32;
    const Tensor xr = leaf(c.transposed ? base64.transpose(2, 3).contiguous() : base64);
    if (c.transposed) CHECK(x32.stride(3) != 1);
    const Tensor w64 = leaf(uniform_values({c.O, c.C, c.kh, c.kw}, -1, 1, seed++)),
                 w32 = leaf(w64.detach().to(DType::F32));
    const Tensor b64 = c.bias ? uniform_values({c.O}, -1, 1, seed++) : Tensor();
    const Tensor y32 = F::conv2d(x32, w32, c.bias ? b64.to(DType::F32) : Tensor(), {1, 1}, {ph, pw});
    const Tensor y64 = F::conv2d(xr, w64, b64, {1, 1}, {ph, pw});
    REQUIRE(y32.sizes() == y64.sizes());
    const double tol = 2e-6 * std::sqrt(double(c.C * c.kh * c.kw));
    CHECK_MESSAGE(allclose(y32.detach().to(DType::F64), y64.detach(), tol, tol), "C ", c.C, " O ", c.O, " W ", c.W);
    const Tensor g = uniform_values(y64.sizes(), -1, 1, seed++);
    y32.backward(g.to(DType::F32));
    y64.backward(g);
    const double gtol = 2e-6 * std::sqrt(double(c.O * c.kh * c.kw));
    const Tensor gx32 = c.transposed ? base32.grad().transpose(2, 3) : base32.grad();
    CHECK_MESSAGE(allclose(gx32.to(DType::F64), xr.grad(), gtol, gtol), "C ", c.C, " O ", c.O, " W ", c.W);
    const double wtol = 2e-6 * std::sqrt(double(c.B * c.H * c.W));
    CHECK_MESSAGE(allclose(w32.grad().to(DType::F64), w64.grad(), wtol, wtol), "C ", c.C, " O ", c.O, " W ", c.W);
  }
  // A kernel wider than the padded row reaches (3x13, padding 6, width 3): some taps meet no
  // column, which the flat runs of im2col / col2im and of the depthwise loops once walked
  // outside the plane (ASan). Depthwise against the same channels one group at a time, F64.
  {
    const Tensor x = leaf(uniform_values({2, 4, 4, 3}, -1, 1, 901)),
                 w = leaf(uniform_values({4, 1, 3, 13}, -1, 1, 902));
    const Tensor y = F::conv2d(x, w, {}, {1, 1}, {1, 6}, {1, 1}, 4);
    const Tensor g = uniform_values(y.sizes(), -1, 1, 903);
    y.backward(g);
    for (int64_t c = 0; c < 4; ++c) {
      const Tensor xc = leaf(x.detach().slice(1, c, c + 1)), wc = leaf(w.detach().slice(0, c, c + 1));
      const Tensor yc = F::conv2d(xc, wc, {}, {1, 1}, {1, 6});
      CHECK(allclose(yc, y.detach().slice(1, c, c + 1), 1e-12, 1e-12));
      yc.backward(g.slice(1, c, c + 1));
      CHECK(allclose(xc.grad(), x.grad().slice(1, c, c + 1), 1e-12, 1e-12));
      CHECK(allclose(wc.grad(), w.grad().slice(0, c, c + 1), 1e-12, 1e-12));
    }
  }
  // Edge values: an inf in one input channel makes only that channel's weight gradient (and the
  // outputs it reaches) non-finite, as in the F64 path; the weight gradient's last, partial
  // vector reads other planes past the outputs, which must not turn into 0 * inf = NaN. Width 1
  // (3x1 kernel) puts the next channels right behind each plane.
  {
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> v = uniform_values({2, 8, 6, 1}, -1, 1, 904).to_vector<double>();
    v[size_t((1 * 8 + 5) * 6 + 2)] = inf;  // sample 1, channel 5, row 2
    const Tensor x64 = from_vector(v, {2, 8, 6, 1}, DType::F64);
    const Tensor w64 = leaf(uniform_values({8, 8, 3, 1}, -1, 1, 905)), w32 = leaf(w64.detach().to(DType::F32));
    const Tensor y64 = F::conv2d(x64, w64, {}, {1, 1}, {1, 0}),
                 y32 = F::conv2d(x64.to(DType::F32), w32, {}, {1, 1}, {1, 0});
    const Tensor g = uniform_values(y64.sizes(), 0.5, 1, 906);
    y64.backward(g);
    y32.backward(g.to(DType::F32));
    const std::vector<double> a = w32.grad().to(DType::F64).to_vector<double>(), b = w64.grad().to_vector<double>();
    int64_t nonfinite = 0, mismatches = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const bool channel5 = (i / 3) % 8 == 5;
      nonfinite += !std::isfinite(a[i]);
      mismatches += channel5 ? !(std::isinf(a[i]) && a[i] == b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))
                             : !(std::abs(a[i] - b[i]) < 1e-5);
    }
    CHECK(mismatches == 0);
    CHECK(nonfinite > 0);
    CHECK(nonfinite <= 8 * 3);  // channel 5's taps only
  }
  // No input channels (PyTorch allows it): the output is the bias; the direct kernel leaves it
  // to im2col + GEMM, which writes it.
  {
    const Tensor x = zeros({2, 0, 5, 5}), w = zeros({8, 0, 3, 3}), b = uniform_values({8}, -1, 1, 907, DType::F32);
    const Tensor y = F::conv2d(x, w, b, {1, 1}, {1, 1});
    CHECK(equal(y, b.reshape({1, 8, 1, 1}).expand({2, 8, 5, 5})));
    CHECK_FALSE(DirectConv::fits({0, 5, 5, 8, 3, 3, 1, 1, 5, 5}));
  }
  // Off (BRISK_CONV=im2col does the same at start-up), the same problems go to im2col.
  kernels::cpu::conv::set_direct_conv(false);
  CHECK_FALSE(DirectConv::fits({3, 14, 14, 8, 3, 3, 1, 1, 14, 14}));
  kernels::cpu::conv::set_direct_conv(true);
  // Unpadded, asymmetrically padded, even and narrow-output problems are not taken (conv.cpp
  // also sends strided, dilated and grouped ones to im2col before asking).
  CHECK_FALSE(DirectConv::fits({3, 16, 16, 8, 3, 3, 0, 0, 14, 14}));  // no padding: output narrower
  CHECK_FALSE(DirectConv::fits({3, 16, 16, 8, 3, 3, 2, 2, 18, 18}));  // padding 2: output wider
  CHECK_FALSE(DirectConv::fits({3, 16, 16, 8, 2, 2, 1, 1, 17, 17}));  // even kernel
  CHECK_FALSE(DirectConv::fits({3, 14, 14, 4, 3, 3, 1, 1, 14, 14}));  // fewer than 8 output channels
}

TEST_CASE("conv2d: the Winograd F(2x2, 3x3) kernel (forward, input and weight gradients) equals the F64 path") {
  // Note [Winograd conv]: the CNN's second layer; odd planes (tiles past the edge); channel
  // counts off the vector width (17 -> 32, 33 -> 48, 20, 50) in both directions, so the padded
  // channels and every column-block width (64 / 48 / 32 / 16) of the micro kernel run; the
  // smallest plane taken (4 x 4); several tile blocks per plane (128 channels, 40 wide); a
  // transposed (strided) input; batches of 1 to 13 (samples shared out unevenly); with and
  // without bias. WinogradConv::fits is checked too, so each case runs where it says.
  using kernels::cpu::conv::WinogradConv;
  struct Case {
    int64_t B, C, H, W, O;
    bool bias, transposed;
  };
  const Case cases[] = {
      {4, 32, 14, 14, 64, true, false}, {3, 16, 7, 7, 16, false, false},  {2, 17, 5, 9, 33, true, true},
      {1, 48, 4, 4, 20, true, false},   {5, 20, 6, 31, 50, false, false}, {1, 128, 9, 40, 128, true, false},
      {13, 16, 8, 8, 24, true, false},
  };
  const bool avx512 = kernels::cpu::f32_gemm_path() == kernels::cpu::F32GemmPath::Avx512;
  uint64_t seed = 500;
  for (const Case& c : cases) {
    CHECK(WinogradConv::fits({c.C, c.O, c.H, c.W}) == avx512);
    CHECK(WinogradConv::fits({c.O, c.C, c.H, c.W}) == avx512);
    const Tensor base64 = c.transposed ? uniform_values({c.B, c.C, c.W, c.H}, -1, 1, seed++)
                                       : uniform_values({c.B, c.C, c.H, c.W}, -1, 1, seed++);
    const Tensor base32 = leaf(base64.to(DType::F32));
    const Tensor x32 = c.transposed ? base32.transpose(2, 3) : base32;
    const Tensor xr = leaf(c.transposed ? base64.transpose(2, 3).contiguous() : base64);
    const Tensor w64 = leaf(uniform_values({c.O, c.C, 3, 3}, -1, 1, seed++)), w32 = leaf(w64.detach().to(DType::F32));
    const Tensor b64 = c.bias ? uniform_values({c.O}, -1, 1, seed++) : Tensor();
    const Tensor y32 = F::conv2d(x32, w32, c.bias ? b64.to(DType::F32) : Tensor(), {1, 1}, {1, 1});
    const Tensor y64 = F::conv2d(xr, w64, b64, {1, 1}, {1, 1});
    REQUIRE(y32.sizes() == y64.sizes());
    const double tol = 2e-6 * std::sqrt(double(c.C * 9));
    CHECK_MESSAGE(allclose(y32.detach().to(DType::F64), y64.detach(), tol, tol), "C ", c.C, " O ", c.O, " W ", c.W);
    const Tensor g = uniform_values(y64.sizes(), -1, 1, seed++);
    y32.backward(g.to(DType::F32));
    y64.backward(g);
    const double gtol = 2e-6 * std::sqrt(double(c.O * 9));
    const Tensor gx32 = c.transposed ? base32.grad().transpose(2, 3) : base32.grad();
    CHECK_MESSAGE(allclose(gx32.to(DType::F64), xr.grad(), gtol, gtol), "C ", c.C, " O ", c.O, " W ", c.W);
    const double wtol = 2e-6 * std::sqrt(double(c.B * c.H * c.W));
    CHECK_MESSAGE(allclose(w32.grad().to(DType::F64), w64.grad(), wtol, wtol), "C ", c.C, " O ", c.O, " W ", c.W);
  }
  // Non-finite inputs: an inf makes every output it reaches non-finite, as in F64, and may reach
  // through the transforms the other outputs of the 2 x 2 tiles whose 4 x 4 input tile holds it
  // (where inf - inf meet: a NaN; cuDNN's Winograd does the same), but nothing else; the weight
  // gradient goes non-finite in that input channel's taps only. Finite outputs match F64.
  {
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> v = uniform_values({2, 16, 8, 8}, -1, 1, 950).to_vector<double>();
    v[size_t(((1 * 16 + 3) * 8 + 5) * 8 + 2)] = inf;  // sample 1, channel 3, row 5, column 2
    const Tensor x64 = from_vector(v, {2, 16, 8, 8}, DType::F64);
    const Tensor w64 = leaf(uniform_values({16, 16, 3, 3}, -1, 1, 951)), w32 = leaf(w64.detach().to(DType::F32));
    const Tensor y64 = F::conv2d(x64, w64, {}, {1, 1}, {1, 1}),
                 y32 = F::conv2d(x64.to(DType::F32), w32, {}, {1, 1}, {1, 1});
    const std::vector<double> a = y32.detach().to(DType::F64).to_vector<double>(), b = y64.detach().to_vector<double>();
    int64_t bad = 0, outside = 0, nonfinite = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const int64_t col = int64_t(i % 8), row = int64_t(i / 8 % 8), sample = int64_t(i / (8 * 8 * 16));
      const bool in_tiles = sample == 1 && row >= 4 && row <= 7 && col <= 3;  // tile rows 2-3, tile columns 0-1
      nonfinite += !std::isfinite(a[i]);
      if (!std::isfinite(b[i])) {
        bad += std::isfinite(a[i]);  // where F64 is non-finite, so is F32
      } else if (!std::isfinite(a[i])) {
        outside += !in_tiles;
      } else {
        bad += !(std::abs(a[i] - b[i]) < 1e-5);
      }
    }
    CHECK(bad == 0);
    CHECK(outside == 0);
    CHECK(nonfinite >= 9 * 16);  // its 3 x 3 reach, at most the 4 x 4 outputs of its tiles, x 16 channels
    CHECK(nonfinite <= 16 * 16);
    const Tensor g = uniform_values(y64.sizes(), 0.5, 1, 952);
    y64.backward(g);
    y32.backward(g.to(DType::F32));
    const std::vector<double> ga = w32.grad().to(DType::F64).to_vector<double>(), gb = w64.grad().to_vector<double>();
    int64_t wrong = 0;
    for (size_t i = 0; i < ga.size(); ++i) {
      const bool channel3 = (i / 9) % 16 == 3;
      wrong += channel3 ? std::isfinite(ga[i]) : !(std::abs(ga[i] - gb[i]) < 1e-4);
    }
    CHECK(wrong == 0);
  }
  // An empty batch (PyTorch: an empty output, zero weight gradient, an empty input gradient).
  {
    const Tensor x = leaf(zeros({0, 16, 8, 8})), w = leaf(uniform_values({16, 16, 3, 3}, -1, 1, 953, DType::F32));
    const Tensor y = F::conv2d(x, w, {}, {1, 1}, {1, 1});
    CHECK(y.sizes() == Shape{0, 16, 8, 8});
    y.backward(zeros(y.sizes()));
    CHECK(equal(w.grad(), zeros({16, 16, 3, 3})));
    CHECK(x.grad().sizes() == Shape{0, 16, 8, 8});
  }
  // What it leaves to the direct kernel: fewer than 16 channels either way, planes under 4 x 4;
  // and nothing while switched off (BRISK_CONV=direct or im2col at start-up).
  CHECK_FALSE(WinogradConv::fits({15, 32, 14, 14}));
  CHECK_FALSE(WinogradConv::fits({32, 15, 14, 14}));
  CHECK_FALSE(WinogradConv::fits({32, 32, 3, 14}));
  CHECK_FALSE(WinogradConv::fits({32, 32, 14, 3}));
  kernels::cpu::conv::set_winograd_conv(false);
  CHECK_FALSE(WinogradConv::fits({32, 64, 14, 14}));
  kernels::cpu::conv::set_winograd_conv(true);
}

TEST_CASE("Sequential: ReLU then MaxPool2d runs as the pool then the ReLU, with the same values and gradients") {
  // Note [ReLU before max pool] in nn/module.cpp. Values in halves: many ties, exact zeros of
  // both signs, windows with no positive element, and NaNs; several pool geometries (padding,
  // dilation, ceil mode); the unswapped reference is built from the functions directly.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Lcg next{777};
  struct Geometry {
    F::Pair kernel;
    std::optional<F::Pair> stride;
    F::Pair padding, dilation;
    bool ceil_mode;
  };
  const Geometry geometries[] = {{{2, 2}, std::nullopt, {0, 0}, {1, 1}, false},
                                 {{3, 3}, F::Pair{2, 2}, {1, 1}, {1, 1}, true},
                                 {{2, 3}, F::Pair{1, 2}, {1, 1}, {2, 1}, false}};
  for (const Geometry& geo : geometries) {
    for (DType dt : {DType::F64, DType::F32}) {
      std::vector<double> v(size_t(2 * 3 * 7 * 9));
      for (double& e : v) {
        const uint64_t r = next() % 23;
        e = r == 0 ? nan : r == 1 ? -0.0 : double(int64_t(next() % 9) - 5) / 2;
      }
      const Tensor values = from_vector(v, {2, 3, 7, 9}, DType::F64).to(dt);
      const Tensor xa = values.clone().requires_grad_(), xb = values.clone().requires_grad_();
      nn::Sequential seq{
          std::make_shared<nn::ReLU>(),
          std::make_shared<nn::MaxPool2d>(geo.kernel, geo.stride, geo.padding, geo.dilation, geo.ceil_mode)};
      const Tensor y = seq(xa);
      const Tensor ref = F::max_pool2d(relu(xb), geo.kernel, geo.stride, geo.padding, geo.dilation, geo.ceil_mode);
      REQUIRE(y.grad_fn());
      CHECK(y.grad_fn()->name() == "ReluBackward0");  // the ReLU ran last
      REQUIRE(y.sizes() == ref.sizes());
      const std::vector<double> yv = y.detach().to(DType::F64).to_vector<double>();
      const std::vector<double> rv = ref.detach().to(DType::F64).to_vector<double>();
      int64_t mismatches = 0, nans = 0, zeros = 0;
      for (size_t i = 0; i < yv.size(); ++i) {
        nans += std::isnan(rv[i]);
        zeros += rv[i] == 0;
        mismatches += !((std::isnan(yv[i]) && std::isnan(rv[i])) || yv[i] == rv[i]);
      }
      CHECK(mismatches == 0);
      CHECK(nans > 0);   // the data reaches the NaN case
      CHECK(zeros > 0);  // and windows with nothing positive
      const Tensor g = uniform_values(y.sizes(), 0.5, 1.5, 91, dt);
      y.backward(g);
      ref.backward(g);
      CHECK(equal(xa.grad(), xb.grad()));
      CHECK(sum(abs(xa.grad())).item<double>() > 0);
    }
  }
  // A hook on either module would see the reordering, so then the written order runs.
  auto act = std::make_shared<nn::ReLU>();
  nn::Sequential seq{act, std::make_shared<nn::MaxPool2d>(2)};
  Shape seen;
  act->register_forward_hook([&](nn::Module&, const Tensor&, Tensor& out) { seen = out.sizes(); });
  const Tensor y = seq(uniform_values({1, 2, 4, 6}, -1, 1, 5).requires_grad_());
  CHECK(seen == Shape{1, 2, 4, 6});
  CHECK(y.sizes() == Shape{1, 2, 2, 3});
  CHECK(y.grad_fn()->name() != "ReluBackward0");
}

TEST_CASE("op params: conv and pool parameters read back what they stored, in attrs.geometry's layout") {
  Attrs conv;
  ConvParams{.stride = {2, 3}, .padding = {1, 0}, .dilation = {2, 1}, .groups = 4}.store(conv);
  const ConvParams c = ConvParams::from(conv);
  CHECK(c.stride == Hw{2, 3});
  CHECK(c.padding == Hw{1, 0});
  CHECK(c.dilation == Hw{2, 1});
  CHECK(c.groups == 4);
  // The layout code that builds Attrs by field relies on (tests, benchmarks).
  CHECK(conv.geometry == Shape{2, 3, 1, 0, 2, 1, 0, 0});
  Attrs pool;
  PoolParams{.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}, .ceil_mode = true, .count_include_pad = false}
      .store(pool);
  const PoolParams p = PoolParams::from(pool, "avg_pool2d");
  CHECK(p.kernel == Hw{3, 2});
  CHECK(p.stride == Hw{2, 1});
  CHECK(p.padding == Hw{1, 1});
  CHECK(p.dilation == Hw{1, 1});
  CHECK(p.ceil_mode);
  CHECK_FALSE(p.count_include_pad);
  CHECK(pool.geometry == Shape{2, 1, 1, 1, 1, 1, 3, 2});
  Attrs bad;
  bad.geometry = {1, 1};
  const std::string e = error_of([&] { PoolParams::from(bad, "max_pool2d"); });
  CHECK_MESSAGE(e.find("max_pool2d: attrs.geometry must hold 8 values") != std::string::npos, e);
}

}  // namespace
