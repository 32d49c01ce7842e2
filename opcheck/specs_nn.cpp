// opcheck/specs_nn.cpp: specs of the convolution and pooling ops (engine/ops/conv.cpp,
// engine/ops/pool.cpp) and of linear, conv1d and conv2d. References are plain direct loops in F64 (no
// im2col, no GEMM), written from PyTorch's definitions; the backward ops are checked twice:
// by gradcheck of the forward ops, and as ops of their own (reference + gradcheck, which
// exercises double backward). Cases are small so that gradcheck stays fast.
// Not here: errors and threaded paths (tests/test_conv_pool.cpp); timing
// (examples/bench/bench_conv.cpp).
#include <cmath>
#include <limits>

#include "engine/functions.h"
#include "engine/op_params.h"
#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

using Pair = Pair;
using Ts = std::vector<Tensor>;

// A 4-D F64 tensor's values with (b, c, h, w) indexing.
struct Grid {
  Shape s;
  std::vector<double> v;
  explicit Grid(const Tensor& t) : s(t.sizes()), v(t.detach().to_vector<double>()) {}
  Grid(const Shape& shape) : s(shape), v(size_t(shape.numel()), 0.0) {}
  size_t at(int64_t b, int64_t c, int64_t h, int64_t w) const { return size_t(((b * s[1] + c) * s[2] + h) * s[3] + w); }
  double& operator()(int64_t b, int64_t c, int64_t h, int64_t w) { return v[at(b, c, h, w)]; }
  double operator()(int64_t b, int64_t c, int64_t h, int64_t w) const { return v[at(b, c, h, w)]; }
  Tensor tensor() const { return from_vector(v, s, DType::F64); }
};

// ---- convolution
struct ConvArgs {
  Pair stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

Hw hw(Pair p) { return {p[0], p[1]}; }

Attrs conv_attrs(const ConvArgs& a) {
  Attrs attrs;
  ConvParams{.stride = hw(a.stride), .padding = hw(a.padding), .dilation = hw(a.dilation), .groups = a.groups}.store(
      attrs);
  return attrs;
}

Shape conv_out(const Shape& x, const Shape& w, const ConvArgs& a) {
  return {x[0], w[0], (x[2] + 2 * a.padding[0] - a.dilation[0] * (w[2] - 1) - 1) / a.stride[0] + 1,
          (x[3] + 2 * a.padding[1] - a.dilation[1] * (w[3] - 1) - 1) / a.stride[1] + 1};
}

// Calls visit(x index, w index, y index) for every multiply of the direct convolution
// y[b, o, oh, ow] += x[b, g * Cg + c, oh * sh - ph + i * dh, ow * sw - pw + j * dw] * w[o, c, i, j].
template <class Visit>
void conv_loops(const Shape& x, const Shape& w, const ConvArgs& a, Visit visit) {
  const Shape y = conv_out(x, w, a);
  const int64_t cg = w[1], og = w[0] / a.groups;
  Grid X(x), W(w), Y(y);
  for (int64_t b = 0; b < y[0]; ++b)
    for (int64_t o = 0; o < y[1]; ++o)
      for (int64_t oh = 0; oh < y[2]; ++oh)
        for (int64_t ow = 0; ow < y[3]; ++ow)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < w[2]; ++i)
              for (int64_t j = 0; j < w[3]; ++j) {
                const int64_t ih = oh * a.stride[0] - a.padding[0] + i * a.dilation[0];
                const int64_t iw = ow * a.stride[1] - a.padding[1] + j * a.dilation[1];
                if (ih < 0 || ih >= x[2] || iw < 0 || iw >= x[3]) continue;
                visit(X.at(b, (o / og) * cg + c, ih, iw), W.at(o, c, i, j), Y.at(b, o, oh, ow));
              }
}

// y = conv2d(x, w) + bias
Tensor conv_ref(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvArgs& a) {
  Grid X(x), W(w), Y(conv_out(x.sizes(), w.sizes(), a));
  conv_loops(x.sizes(), w.sizes(), a, [&](size_t xi, size_t wi, size_t yi) { Y.v[yi] += X.v[xi] * W.v[wi]; });
  if (bias.defined()) {
    const std::vector<double> bv = bias.detach().to_vector<double>();
    for (int64_t b = 0; b < Y.s[0]; ++b)
      for (int64_t o = 0; o < Y.s[1]; ++o)
        for (int64_t h = 0; h < Y.s[2]; ++h)
          for (int64_t v = 0; v < Y.s[3]; ++v) Y(b, o, h, v) += bv[size_t(o)];
  }
  return Y.tensor();
}

Tensor optional_input(const Ts& in, size_t i) { return in.size() > i ? in[i] : Tensor(); }

// conv2d with fixed arguments; cases give (x, w) or (x, w, bias).
OpSpec conv_spec(const std::string& name, ConvArgs a, std::vector<std::pair<std::string, Ts>> cases) {
  OpSpec s;
  s.name = name;
  s.covers = {OpId::Conv2d, OpId::Conv2dBackwardInput, OpId::Conv2dBackwardWeight};
  s.fn = [a](const Ts& in) {
    return conv2d(in[0], in[1], optional_input(in, 2), a.stride, a.padding, a.dilation, a.groups);
  };
  s.reference = [a](const Ts& in) { return conv_ref(in[0], in[1], optional_input(in, 2), a); };
  s.cases = [cases] {
    std::vector<OpCase> out;
    for (const auto& [label, in] : cases) out.push_back({label, in});
    return out;
  };
  s.dtypes = {DType::F32, DType::BF16};
  return s;
}

Tensor vals(const Shape& shape, uint64_t seed) { return uniform_values(shape, -1, 1, seed); }

void add_conv_specs(std::vector<OpSpec>& specs) {
  specs.push_back(conv_spec("conv2d (3x3, padding 1)", {.padding = {1, 1}},
                            {{"batch 1, bias", {vals({1, 2, 5, 5}, 1), vals({3, 2, 3, 3}, 2), vals({3}, 3)}},
                             {"batch 2, no bias", {vals({2, 3, 4, 6}, 4), vals({2, 3, 3, 3}, 5)}}}));
  specs.push_back(conv_spec("conv2d (stride 2, padding 1, 2x3 kernel)", {.stride = {2, 2}, .padding = {1, 1}},
                            {{"batch 2", {vals({2, 3, 7, 6}, 6), vals({4, 3, 2, 3}, 7), vals({4}, 8)}},
                             {"batch 1", {vals({1, 2, 5, 5}, 9), vals({2, 2, 2, 3}, 10)}}}));
  specs.push_back(conv_spec("conv2d (dilation (2, 1), padding (2, 1), stride (1, 2))",
                            {.stride = {1, 2}, .padding = {2, 1}, .dilation = {2, 1}},
                            {{"batch 2", {vals({2, 2, 7, 6}, 11), vals({3, 2, 3, 2}, 12), vals({3}, 13)}}}));
  specs.push_back(conv_spec("conv2d (groups 2)", {.padding = {1, 1}, .groups = 2},
                            {{"batch 2", {vals({2, 4, 5, 5}, 14), vals({6, 2, 3, 3}, 15), vals({6}, 16)}}}));
  specs.push_back(conv_spec("conv2d (depthwise, stride 2, padding 1)",
                            {.stride = {2, 2}, .padding = {1, 1}, .groups = 3},
                            {{"batch 2", {vals({2, 3, 6, 6}, 17), vals({3, 1, 3, 3}, 18), vals({3}, 19)}},
                             {"channel multiplier 2, batch 1", {vals({1, 3, 5, 5}, 20), vals({6, 1, 3, 3}, 21)}}}));
  // Note [Channels-last depthwise]: 16+ channels, one per group, rows narrower than 16.
  specs.push_back(conv_spec("conv2d (depthwise, 16 channels, narrow rows: channels-last)",
                            {.padding = {1, 1}, .groups = 16},
                            {{"batch 2, 5x4", {vals({2, 16, 5, 4}, 90), vals({16, 1, 3, 3}, 91), vals({16}, 92)}}}));
  specs.push_back(conv_spec("conv2d (depthwise, 16 channels, stride 2, dilation 2: channels-last)",
                            {.stride = {2, 2}, .padding = {2, 1}, .dilation = {2, 1}, .groups = 16},
                            {{"batch 3, 3x3", {vals({3, 16, 3, 3}, 93), vals({16, 1, 3, 3}, 94)}}}));
  specs.push_back(conv_spec("conv2d (depthwise, padding (1, 2), dilation (1, 2): same size)",
                            {.padding = {1, 2}, .dilation = {1, 2}, .groups = 3},
                            {{"batch 2", {vals({2, 3, 5, 6}, 80), vals({3, 1, 3, 3}, 81), vals({3}, 82)}},
                             {"channel multiplier 2, batch 1", {vals({1, 3, 4, 7}, 83), vals({6, 1, 3, 3}, 84)}}}));
  specs.push_back(
      conv_spec("conv2d (1x1)", {}, {{"batch 2", {vals({2, 4, 3, 3}, 22), vals({5, 4, 1, 1}, 23), vals({5}, 24)}}}));
  specs.push_back(conv_spec("conv2d (1x1, groups 2, stride 2)", {.stride = {2, 2}, .groups = 2},
                            {{"batch 2", {vals({2, 4, 5, 4}, 25), vals({4, 2, 1, 1}, 26)}}}));
  {
    // conv1d: conv2d over a height of 1; the reference is the 2-D one on (B, C, 1, L).
    OpSpec s;
    s.name = "conv1d (stride 2, padding 1)";
    s.covers = {OpId::Conv2d, OpId::Conv2dBackwardInput, OpId::Conv2dBackwardWeight};
    s.fn = [](const Ts& in) { return conv1d(in[0], in[1], optional_input(in, 2), 2, 1); };
    s.reference = [](const Ts& in) {
      const Shape xs = in[0].sizes(), ws = in[1].sizes();
      const Tensor x = from_vector(in[0].detach().to_vector<double>(), {xs[0], xs[1], 1, xs[2]}, DType::F64);
      const Tensor w = from_vector(in[1].detach().to_vector<double>(), {ws[0], ws[1], 1, ws[2]}, DType::F64);
      const Tensor y = conv_ref(x, w, optional_input(in, 2), {.stride = {1, 2}, .padding = {0, 1}});
      return from_vector(y.to_vector<double>(), {y.size(0), y.size(1), y.size(3)}, DType::F64);
    };
    s.cases = [] {
      return std::vector<OpCase>{{"batch 2, bias", {vals({2, 3, 9}, 27), vals({4, 3, 3}, 28), vals({4}, 29)}}};
    };
    specs.push_back(s);
  }
  {
    // linear = matmul with the transposed weight, plus bias.
    OpSpec s;
    s.name = "linear";
    s.covers = {OpId::Matmul};
    s.fn = [](const Ts& in) { return linear(in[0], in[1], optional_input(in, 2)); };
    s.reference = [](const Ts& in) {
      const Tensor &x = in[0], &w = in[1];
      const std::vector<double> xv = x.detach().to_vector<double>(), wv = w.detach().to_vector<double>();
      const Tensor b = optional_input(in, 2);
      const std::vector<double> bv = b.defined() ? b.detach().to_vector<double>() : std::vector<double>{};
      const int64_t n_in = w.size(1), n_out = w.size(0), rows = x.numel() / n_in;
      std::vector<double> y(size_t(rows * n_out));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < n_out; ++o) {
          double acc = bv.empty() ? 0 : bv[size_t(o)];
          for (int64_t k = 0; k < n_in; ++k) acc += xv[size_t(r * n_in + k)] * wv[size_t(o * n_in + k)];
          y[size_t(r * n_out + o)] = acc;
        }
      Shape ys = x.sizes();
      ys[ys.size() - 1] = n_out;
      return from_vector(y, ys, DType::F64);
    };
    s.cases = [] {
      return std::vector<OpCase>{{"(3, 5) with bias", {vals({3, 5}, 30), vals({4, 5}, 31), vals({4}, 32)}},
                                 {"(2, 3, 5), no bias", {vals({2, 3, 5}, 33), vals({4, 5}, 34)}}};
    };
    s.dtypes = {DType::F32, DType::BF16};
    specs.push_back(s);
  }
  {
    // The backward ops as ops of their own: forward against the direct loops, and gradcheck,
    // which runs their backward formulas (double backward of conv2d).
    const ConvArgs a{.stride = {2, 2}, .padding = {1, 1}, .groups = 2};
    const Shape x_sizes{2, 4, 6, 5}, w_sizes{4, 2, 3, 3};
    OpSpec s;
    s.name = "conv2d_backward_input (stride 2, padding 1, groups 2)";
    s.covers = {OpId::Conv2dBackwardInput, OpId::Conv2d, OpId::Conv2dBackwardWeight};
    s.fn = [=](const Ts& in) {
      Attrs attrs = conv_attrs(a);
      attrs.shape = x_sizes;
      return call1(OpId::Conv2dBackwardInput, {in[0], in[1]}, attrs);
    };
    s.reference = [=](const Ts& in) {
      Grid G(in[0]), W(in[1]), X(x_sizes);
      conv_loops(x_sizes, in[1].sizes(), a, [&](size_t xi, size_t wi, size_t yi) { X.v[xi] += G.v[yi] * W.v[wi]; });
      return X.tensor();
    };
    s.cases = [=] {
      return std::vector<OpCase>{{"batch 2", {vals(conv_out(x_sizes, w_sizes, a), 35), vals(w_sizes, 36)}}};
    };
    s.dtypes = {DType::F32, DType::BF16};
    specs.push_back(s);

    s.name = "conv2d_backward_weight (stride 2, padding 1, groups 2)";
    s.fn = [=](const Ts& in) {
      Attrs attrs = conv_attrs(a);
      attrs.shape = w_sizes;
      return call1(OpId::Conv2dBackwardWeight, {in[0], in[1]}, attrs);
    };
    s.reference = [=](const Ts& in) {
      Grid G(in[0]), X(in[1]), W(w_sizes);
      conv_loops(in[1].sizes(), w_sizes, a, [&](size_t xi, size_t wi, size_t yi) { W.v[wi] += G.v[yi] * X.v[xi]; });
      return W.tensor();
    };
    s.cases = [=] {
      return std::vector<OpCase>{{"batch 2", {vals(conv_out(x_sizes, w_sizes, a), 37), vals(x_sizes, 38)}}};
    };
    specs.push_back(s);
  }
}

// ---- pooling
struct PoolArgs {
  Pair kernel{2, 2};
  std::optional<Pair> stride;
  Pair padding{0, 0}, dilation{1, 1};
  bool ceil_mode = false;
  bool count_include_pad = true;
  Pair st() const { return stride.value_or(kernel); }
};

// PyTorch's pooling output size, written out again independently of engine/ops/pool.cpp.
int64_t pool_len(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const double exact = double(in + 2 * p - d * (k - 1) - 1) / double(s);
  int64_t out = int64_t(ceil_mode ? std::ceil(exact) : std::floor(exact)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

Shape pool_out(const Shape& x, const PoolArgs& a) {
  return {x[0], x[1], pool_len(x[2], a.kernel[0], a.st()[0], a.padding[0], a.dilation[0], a.ceil_mode),
          pool_len(x[3], a.kernel[1], a.st()[1], a.padding[1], a.dilation[1], a.ceil_mode)};
}

Attrs pool_attrs(const PoolArgs& a) {
  Attrs attrs;
  PoolParams{.kernel = hw(a.kernel),
             .stride = hw(a.st()),
             .padding = hw(a.padding),
             .dilation = hw(a.dilation),
             .ceil_mode = a.ceil_mode,
             .count_include_pad = a.count_include_pad}
      .store(attrs);
  return attrs;
}

// Max over each window (padding counts as -inf); also returns the flat argmax per plane.
std::pair<Grid, Grid> max_pool_ref(const Tensor& x, const PoolArgs& a) {
  Grid X(x), Y(pool_out(x.sizes(), a)), I(Y.s);
  for (int64_t b = 0; b < Y.s[0]; ++b)
    for (int64_t c = 0; c < Y.s[1]; ++c)
      for (int64_t oh = 0; oh < Y.s[2]; ++oh)
        for (int64_t ow = 0; ow < Y.s[3]; ++ow) {
          double best = -std::numeric_limits<double>::infinity();
          int64_t arg = -1;
          for (int64_t i = 0; i < a.kernel[0]; ++i)
            for (int64_t j = 0; j < a.kernel[1]; ++j) {
              const int64_t ih = oh * a.st()[0] - a.padding[0] + i * a.dilation[0];
              const int64_t iw = ow * a.st()[1] - a.padding[1] + j * a.dilation[1];
              if (ih < 0 || ih >= X.s[2] || iw < 0 || iw >= X.s[3]) continue;
              const double v = X(b, c, ih, iw);  // NaN wins (the last one), as PyTorch's `v > best || isnan(v)`
              if (arg < 0 || v > best || std::isnan(v)) best = v, arg = ih * X.s[3] + iw;
            }
          Y(b, c, oh, ow) = best;
          I(b, c, oh, ow) = double(arg);
        }
  return {Y, I};
}

// Mean over each window, as PyTorch: the window is clipped to input + padding, its divisor
// counts the padding when count_include_pad, and is then clipped to the input.
// visit(b, c, oh, ow, ih, iw, 1 / divisor) for every element of every window.
template <class Visit>
void avg_pool_loops(const Shape& x, const PoolArgs& a, Visit visit) {
  const Shape y = pool_out(x, a);
  for (int64_t b = 0; b < y[0]; ++b)
    for (int64_t c = 0; c < y[1]; ++c)
      for (int64_t oh = 0; oh < y[2]; ++oh)
        for (int64_t ow = 0; ow < y[3]; ++ow) {
          const int64_t hs = oh * a.st()[0] - a.padding[0], ws = ow * a.st()[1] - a.padding[1];
          const int64_t he = std::min(hs + a.kernel[0], x[2] + a.padding[0]);
          const int64_t we = std::min(ws + a.kernel[1], x[3] + a.padding[1]);
          int64_t inside = 0;
          for (int64_t ih = std::max<int64_t>(hs, 0); ih < std::min(he, x[2]); ++ih)
            for (int64_t iw = std::max<int64_t>(ws, 0); iw < std::min(we, x[3]); ++iw) ++inside;
          const double divisor = a.count_include_pad ? double((he - hs) * (we - ws)) : double(inside);
          for (int64_t ih = std::max<int64_t>(hs, 0); ih < std::min(he, x[2]); ++ih)
            for (int64_t iw = std::max<int64_t>(ws, 0); iw < std::min(we, x[3]); ++iw)
              visit(b, c, oh, ow, ih, iw, 1.0 / divisor);
        }
}

OpSpec pool_spec(const std::string& name, std::vector<OpId> covers, TensorFn fn, TensorFn ref,
                 std::vector<std::pair<std::string, Ts>> cases) {
  OpSpec s;
  s.name = name;
  s.covers = std::move(covers);
  s.fn = std::move(fn);
  s.reference = std::move(ref);
  s.cases = [cases] {
    std::vector<OpCase> out;
    for (const auto& [label, in] : cases) out.push_back({label, in});
    return out;
  };
  s.dtypes = {DType::F32, DType::F16, DType::BF16};
  return s;
}

OpSpec max_pool_spec(const std::string& name, PoolArgs a, std::vector<std::pair<std::string, Ts>> cases) {
  return pool_spec(
      name, {OpId::MaxPool2d, OpId::MaxPool2dBackward},
      [a](const Ts& in) { return max_pool2d(in[0], a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode); },
      [a](const Ts& in) { return max_pool_ref(in[0], a).first.tensor(); }, std::move(cases));
}

OpSpec avg_pool_spec(const std::string& name, PoolArgs a, std::vector<std::pair<std::string, Ts>> cases) {
  return pool_spec(
      name, {OpId::AvgPool2d, OpId::AvgPool2dBackward},
      [a](const Ts& in) { return avg_pool2d(in[0], a.kernel, a.stride, a.padding, a.ceil_mode, a.count_include_pad); },
      [a](const Ts& in) {
        Grid X(in[0]), Y(pool_out(in[0].sizes(), a));
        avg_pool_loops(X.s, a, [&](int64_t b, int64_t c, int64_t oh, int64_t ow, int64_t ih, int64_t iw, double k) {
          Y(b, c, oh, ow) += X(b, c, ih, iw) * k;
        });
        return Y.tensor();
      },
      std::move(cases));
}

// PyTorch's adaptive windows [floor(i * in / out), ceil((i + 1) * in / out)).
// visit(b, c, oh, ow, ih, iw, 1 / count) for every element of every window.
template <class Visit>
void adaptive_loops(const Shape& x, Pair out, Visit visit) {
  for (int64_t b = 0; b < x[0]; ++b)
    for (int64_t c = 0; c < x[1]; ++c)
      for (int64_t oh = 0; oh < out[0]; ++oh)
        for (int64_t ow = 0; ow < out[1]; ++ow) {
          const auto hs = int64_t(std::floor(double(oh * x[2]) / double(out[0])));
          const auto he = int64_t(std::ceil(double((oh + 1) * x[2]) / double(out[0])));
          const auto ws = int64_t(std::floor(double(ow * x[3]) / double(out[1])));
          const auto we = int64_t(std::ceil(double((ow + 1) * x[3]) / double(out[1])));
          for (int64_t ih = hs; ih < he; ++ih)
            for (int64_t iw = ws; iw < we; ++iw) visit(b, c, oh, ow, ih, iw, 1.0 / double((he - hs) * (we - ws)));
        }
}

OpSpec adaptive_spec(const std::string& name, Pair out, std::vector<std::pair<std::string, Ts>> cases) {
  return pool_spec(
      name, {OpId::AdaptiveAvgPool2d, OpId::AdaptiveAvgPool2dBackward},
      [out](const Ts& in) { return adaptive_avg_pool2d(in[0], out); },
      [out](const Ts& in) {
        Grid X(in[0]), Y(Shape{X.s[0], X.s[1], out[0], out[1]});
        adaptive_loops(X.s, out, [&](int64_t b, int64_t c, int64_t oh, int64_t ow, int64_t ih, int64_t iw, double k) {
          Y(b, c, oh, ow) += X(b, c, ih, iw) * k;
        });
        return Y.tensor();
      },
      std::move(cases));
}

void add_pool_specs(std::vector<OpSpec>& specs) {
  specs.push_back(
      max_pool_spec("max_pool2d (2x2)", {},
                    {{"batch 2", {vals({2, 3, 6, 6}, 40)}}, {"batch 1, odd sizes (floor)", {vals({1, 2, 5, 7}, 41)}}}));
  specs.push_back(
      max_pool_spec("max_pool2d (3x3, stride 2, padding 1, ceil_mode)",
                    {.kernel = {3, 3}, .stride = Pair{2, 2}, .padding = {1, 1}, .ceil_mode = true},
                    {{"batch 2, 6x6", {vals({2, 2, 6, 6}, 42)}}, {"batch 1, 5x7", {vals({1, 2, 5, 7}, 43)}}}));
  specs.push_back(max_pool_spec("max_pool2d (2x2, stride 2, padding 1, ceil_mode: last window dropped)",
                                {.stride = std::nullopt, .padding = {1, 1}, .ceil_mode = true},
                                {{"batch 2, 5x5", {vals({2, 2, 5, 5}, 44)}}}));
  specs.push_back(max_pool_spec("max_pool2d (2x3 kernel, stride (1, 2), dilation (2, 1), padding (1, 1))",
                                {.kernel = {2, 3}, .stride = Pair{1, 2}, .padding = {1, 1}, .dilation = {2, 1}},
                                {{"batch 2", {vals({2, 2, 7, 8}, 45)}}}));
  {
    // -inf padding: an all-negative border still picks an input element, never the padding.
    OpSpec s = max_pool_spec("max_pool2d (3x3, stride 1, padding 1) of negative values",
                             {.kernel = {3, 3}, .stride = Pair{1, 1}, .padding = {1, 1}},
                             {{"batch 1", {uniform_values({1, 2, 4, 4}, -3, -1, 46)}}});
    specs.push_back(s);
  }

  {
    // Edge values: NaN (once and twice in a window), -inf, ties and signed zeros; both the 2x2
    // fast path and the general loop.
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    Tensor x = from_vector({1, 2, 2, nan, 0, -inf, -inf, 1, 3, 3,   nan, nan, -inf, -inf, -inf, -inf,
                            5, 5, 5, 5,   1, -0.0, 0.0,  2, 4, nan, -1,  0,   0.5,  0.5,  -inf, 7},
                           {1, 2, 4, 4}, DType::F64);
    for (PoolArgs a : {PoolArgs{}, PoolArgs{.kernel = {3, 3}, .stride = Pair{1, 1}, .padding = {1, 1}}}) {
      OpSpec s = max_pool_spec(
          "max_pool2d (" + std::to_string(a.kernel[0]) + "x" + std::to_string(a.kernel[0]) + ") of NaN, -inf and ties",
          a, {{"edge values", {x}}});
      s.grad = false;  // not differentiable at ties; the gradients are tested in test_edge_values.cpp
      s.dtypes = {DType::F32};
      specs.push_back(s);
    }
  }

  specs.push_back(avg_pool_spec("avg_pool2d (2x2)", {}, {{"batch 2", {vals({2, 3, 6, 6}, 50)}}}));
  specs.push_back(avg_pool_spec("avg_pool2d (3x3, stride 2, padding 1, count_include_pad)",
                                {.kernel = {3, 3}, .stride = Pair{2, 2}, .padding = {1, 1}},
                                {{"batch 2", {vals({2, 2, 6, 7}, 51)}}}));
  specs.push_back(avg_pool_spec(
      "avg_pool2d (3x2, stride 2, padding 1, ceil_mode, count_include_pad false)",
      {.kernel = {3, 2}, .stride = Pair{2, 2}, .padding = {1, 1}, .ceil_mode = true, .count_include_pad = false},
      {{"batch 2", {vals({2, 2, 6, 7}, 52)}}, {"batch 1", {vals({1, 3, 5, 5}, 53)}}}));
  specs.push_back(avg_pool_spec("avg_pool2d (2x2, padding 1, ceil_mode, count_include_pad)",
                                {.stride = std::nullopt, .padding = {1, 1}, .ceil_mode = true},
                                {{"batch 1", {vals({1, 2, 5, 4}, 54)}}}));

  specs.push_back(adaptive_spec(
      "adaptive_avg_pool2d (3, 2)", {3, 2},
      {{"batch 2, 7x5", {vals({2, 3, 7, 5}, 60)}}, {"batch 1, 4x4 (overlapping windows)", {vals({1, 2, 4, 4}, 61)}}}));
  specs.push_back(adaptive_spec("adaptive_avg_pool2d (1, 1)", {1, 1}, {{"batch 2", {vals({2, 3, 5, 6}, 62)}}}));

  // The pooling backward ops as ops of their own (their gradcheck is a double backward).
  {
    const PoolArgs a{.kernel = {3, 3}, .stride = Pair{2, 2}, .padding = {1, 1}, .ceil_mode = true};
    const Shape x_sizes{2, 2, 6, 5};
    OpSpec s = pool_spec(
        "max_pool2d_backward (3x3, stride 2, padding 1, ceil_mode)", {OpId::MaxPool2dBackward},
        [=](const Ts& in) {
          Attrs attrs = pool_attrs(a);
          attrs.shape = x_sizes;
          return call1(OpId::MaxPool2dBackward, {in[0], in[1]}, attrs);
        },
        [=](const Ts& in) {
          Grid G(in[0]), I(in[1]), X(x_sizes);
          for (int64_t b = 0; b < G.s[0]; ++b)
            for (int64_t c = 0; c < G.s[1]; ++c)
              for (int64_t oh = 0; oh < G.s[2]; ++oh)
                for (int64_t ow = 0; ow < G.s[3]; ++ow) {
                  const auto k = int64_t(I(b, c, oh, ow));
                  X(b, c, k / x_sizes[3], k % x_sizes[3]) += G(b, c, oh, ow);
                }
          return X.tensor();
        },
        {});
    s.cases = [=] {
      const Tensor x = vals(x_sizes, 63);
      const Tensor idx = cast(max_pool_ref(x, a).second.tensor(), DType::I64);
      return std::vector<OpCase>{{"batch 2, overlapping windows", {vals(pool_out(x_sizes, a), 64), idx}}};
    };
    specs.push_back(s);
  }
  {
    const PoolArgs a{
        .kernel = {3, 2}, .stride = Pair{2, 2}, .padding = {1, 1}, .ceil_mode = true, .count_include_pad = false};
    const Shape x_sizes{2, 2, 6, 7};
    specs.push_back(pool_spec(
        "avg_pool2d_backward (3x2, stride 2, padding 1, ceil_mode, count_include_pad false)", {OpId::AvgPool2dBackward},
        [=](const Ts& in) {
          Attrs attrs = pool_attrs(a);
          attrs.shape = x_sizes;
          return call1(OpId::AvgPool2dBackward, {in[0]}, attrs);
        },
        [=](const Ts& in) {
          Grid G(in[0]), X(x_sizes);
          avg_pool_loops(x_sizes, a,
                         [&](int64_t b, int64_t c, int64_t oh, int64_t ow, int64_t ih, int64_t iw, double k) {
                           X(b, c, ih, iw) += G(b, c, oh, ow) * k;
                         });
          return X.tensor();
        },
        {{"batch 2", {vals(pool_out(x_sizes, a), 65)}}}));
  }
  {
    const Shape x_sizes{2, 2, 7, 5};
    const Pair out{3, 2};
    specs.push_back(pool_spec(
        "adaptive_avg_pool2d_backward (3, 2)", {OpId::AdaptiveAvgPool2dBackward},
        [=](const Ts& in) {
          Attrs attrs;
          attrs.shape = x_sizes;
          return call1(OpId::AdaptiveAvgPool2dBackward, {in[0]}, attrs);
        },
        [=](const Ts& in) {
          Grid G(in[0]), X(x_sizes);
          adaptive_loops(x_sizes, out,
                         [&](int64_t b, int64_t c, int64_t oh, int64_t ow, int64_t ih, int64_t iw, double k) {
                           X(b, c, ih, iw) += G(b, c, oh, ow) * k;
                         });
          return X.tensor();
        },
        {{"batch 2", {vals({2, 2, 3, 2}, 66)}}}));
  }
}

void add_specs(std::vector<OpSpec>& specs) {
  add_conv_specs(specs);
  add_pool_specs(specs);
}

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_nn_specs(std::vector<OpSpec>& specs) { add_specs(specs); }

}  // namespace brisk::opcheck
