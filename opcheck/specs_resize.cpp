// opcheck/specs_resize.cpp: specs of adaptive_max_pool2d and resample2d / resample2d_backward
// (engine/ops/pool.cpp, engine/ops/resize.cpp; references: plain loops over PyTorch's adaptive windows and over the
// resampling tables) and of the composites of engine/ops/conv.cpp, engine/ops/pool.cpp and
// engine/ops/resize.cpp built on other ops: conv_transpose2d, the 1-d pools, pad,
// interpolate and pixel_shuffle. The composites' forward values are checked against PyTorch
// (tests/test_resize.cpp, no plain reference here); their rows bring the table's other checks:
// strided inputs, F32 / BF16 against F64, gradcheck in F64, and CUDA against the CPU.
// Not here: PyTorch parity and the error messages (tests/test_resize.cpp).
#include <cmath>
#include <limits>

#include "engine/dispatch.h"
#include "engine/functions.h"
#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

using Pair = Pair;
using Ts = std::vector<Tensor>;

Tensor vals(const Shape& shape, uint64_t seed) { return uniform_values(shape, -1, 1, seed); }

OpSpec spec(const std::string& name, std::vector<OpId> covers, TensorFn fn, TensorFn ref,
            std::vector<std::pair<std::string, Ts>> cases, std::vector<DType> dtypes = {DType::F32, DType::BF16}) {
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
  s.dtypes = std::move(dtypes);
  return s;
}

// y (B, C, out_h, out_w): the max of each window [floor(i * in / out), ceil((i + 1) * in / out)).
Tensor adaptive_max_ref(const Tensor& x, Pair out) {
  const Shape s = x.sizes();
  const std::vector<double> v = x.detach().to_vector<double>();
  std::vector<double> y;
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t oh = 0; oh < out[0]; ++oh)
        for (int64_t ow = 0; ow < out[1]; ++ow) {
          const auto hs = int64_t(std::floor(double(oh * s[2]) / double(out[0])));
          const auto he = int64_t(std::ceil(double((oh + 1) * s[2]) / double(out[0])));
          const auto ws = int64_t(std::floor(double(ow * s[3]) / double(out[1])));
          const auto we = int64_t(std::ceil(double((ow + 1) * s[3]) / double(out[1])));
          double best = -std::numeric_limits<double>::infinity();
          for (int64_t ih = hs; ih < he; ++ih)
            for (int64_t iw = ws; iw < we; ++iw)
              best = std::max(best, v[size_t(((b * s[1] + c) * s[2] + ih) * s[3] + iw)]);
          y.push_back(best);
        }
  return from_vector(y, {s[0], s[1], out[0], out[1]}, DType::F64);
}

// ---- resample2d: fixed tables (2 taps per output row / column), weights of x's work dtype.
struct Tables {
  std::vector<double> ih, wh, iw, ww;  // (n, 2) each
};

const Tables kBlend{{0, 1, 3, 3, 2, 0},
                    {0.25, 0.75, 1, 0, -0.5, 1.5},
                    {4, 0, 1, 2, 2, 2, 3, 4, 0, 0, 1, 3, 2, 2},
                    {0.5, 0.5, 1, 0, 0.3, 0.7, 2, -1, 1, 0, 0.6, 0.4, 0, 1}};
const Tables kOneTap{{1, 1, 0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2},
                     {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0},
                     {4, 4, 3, 3, 4, 4},
                     {1, 0, 1, 0, 1, 0}};

Ts tables_for(const Tables& t, const Tensor& x) {
  const DType wt = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const int64_t ho = int64_t(t.ih.size() / 2), wo = int64_t(t.iw.size() / 2);
  return {from_vector(t.ih, {ho, 2}, DType::I64, x.device()), from_vector(t.wh, {ho, 2}, wt, x.device()),
          from_vector(t.iw, {wo, 2}, DType::I64, x.device()), from_vector(t.ww, {wo, 2}, wt, x.device())};
}

Tensor resample(const Tensor& x, const Tables& t) {
  const Ts tab = tables_for(t, x);
  return call1(OpId::Resample2d, {x, tab[0], tab[1], tab[2], tab[3]}, Attrs{});
}

// Calls visit(x flat index, y flat index, weight) for every product of resample2d.
template <class Visit>
void resample_loops(const Shape& x, const Tables& t, Visit visit) {
  const int64_t H = x[x.size() - 2], W = x[x.size() - 1], ho = int64_t(t.ih.size() / 2), wo = int64_t(t.iw.size() / 2);
  const int64_t planes = x.numel() / (H * W);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j)
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            const auto r = int64_t(t.ih[size_t(2 * i + a)]), c = int64_t(t.iw[size_t(2 * j + b)]);
            visit(size_t((p * H + r) * W + c), size_t((p * ho + i) * wo + j),
                  t.wh[size_t(2 * i + a)] * t.ww[size_t(2 * j + b)]);
          }
}

Shape resampled(Shape x, const Tables& t) {
  x[x.size() - 2] = int64_t(t.ih.size() / 2);
  x[x.size() - 1] = int64_t(t.iw.size() / 2);
  return x;
}

void add_resample_specs(std::vector<OpSpec>& specs) {
  for (const auto& [label, tables] : {std::pair{"2-tap blend", kBlend}, std::pair{"one tap", kOneTap}}) {
    const Tables t = tables;
    specs.push_back(spec(
        std::string("resample2d (") + label + ")", {OpId::Resample2d, OpId::Resample2dBackward},
        [t](const Ts& in) { return resample(in[0], t); },
        [t](const Ts& in) {
          const std::vector<double> x = in[0].detach().to_vector<double>();
          const Shape ys = resampled(in[0].sizes(), t);
          std::vector<double> y(size_t(ys.numel()), 0.0);
          resample_loops(in[0].sizes(), t, [&](size_t xi, size_t yi, double w) { y[yi] += w * x[xi]; });
          return from_vector(y, ys, DType::F64);
        },
        {{"(2, 3, 4, 5)", {vals({2, 3, 4, 5}, 82)}}, {"3-D (3, 4, 5)", {vals({3, 4, 5}, 83)}}},
        {DType::F32, DType::F16, DType::BF16}));
  }
  // The backward op as an op of its own (its gradcheck is a double backward).
  const Shape x_sizes{2, 2, 4, 5};
  specs.push_back(spec(
      "resample2d_backward (2-tap blend)", {OpId::Resample2dBackward},
      [x_sizes](const Ts& in) {
        const Ts tab = tables_for(kBlend, in[0]);
        Attrs a;
        a.shape = x_sizes;
        return call1(OpId::Resample2dBackward, {in[0], tab[0], tab[1], tab[2], tab[3]}, a);
      },
      [x_sizes](const Ts& in) {
        const std::vector<double> g = in[0].detach().to_vector<double>();
        std::vector<double> gx(size_t(x_sizes.numel()), 0.0);
        resample_loops(x_sizes, kBlend, [&](size_t xi, size_t yi, double w) { gx[xi] += w * g[yi]; });
        return from_vector(gx, x_sizes, DType::F64);
      },
      {{"grad (2, 2, 3, 7)", {vals(resampled(x_sizes, kBlend), 84)}}}, {DType::F32, DType::F16, DType::BF16}));
}

void add_resize_op_specs(std::vector<OpSpec>& specs) {
  add_resample_specs(specs);
  // ---- adaptive_max_pool2d, an op of its own
  for (auto [label, shape, out] : {std::tuple{"(3, 2) of 7x5", Shape{2, 3, 7, 5}, Pair{3, 2}},
                                   std::tuple{"(3, 3) of 4x4, overlapping windows", Shape{1, 2, 4, 4}, Pair{3, 3}},
                                   std::tuple{"(5, 7) of 3x5, upsampling windows", Shape{1, 2, 3, 5}, Pair{5, 7}},
                                   std::tuple{"(1, 1)", Shape{2, 2, 5, 6}, Pair{1, 1}}}) {
    specs.push_back(spec(
        std::string("adaptive_max_pool2d ") + label, {OpId::AdaptiveMaxPool2d},
        [out = out](const Ts& in) { return adaptive_max_pool2d(in[0], out); },
        [out = out](const Ts& in) { return adaptive_max_ref(in[0], out); }, {{"uniform values", {vals(shape, 70)}}},
        {DType::F32, DType::F16, DType::BF16}));
  }

  // ---- composites (values checked against PyTorch in tests/test_resize.cpp)
  specs.push_back(spec("conv_transpose2d (stride 2, padding 1, output_padding 1, bias)", {OpId::Conv2dBackwardInput},
                       [](const Ts& in) {
                         return conv_transpose2d(in[0], in[1], in[2], {2, 2}, {1, 1}, {1, 1});
                       },
                       nullptr, {{"batch 2", {vals({2, 3, 3, 4}, 71), vals({3, 2, 3, 3}, 72), vals({2}, 73)}}}));
  specs.push_back(spec("conv_transpose2d (groups 2, dilation 3, output_padding 2 >= stride 1)",
                       {OpId::Conv2dBackwardInput},
                       [](const Ts& in) {
                         return conv_transpose2d(in[0], in[1], {}, {1, 1}, {1, 1}, {2, 2}, 2, {3, 3});
                       },
                       nullptr, {{"batch 1", {vals({1, 4, 3, 3}, 74), vals({4, 1, 2, 2}, 75)}}}));
  specs.push_back(spec("max_pool1d (3, stride 2, padding 1)", {OpId::MaxPool2d},
                       [](const Ts& in) { return max_pool1d(in[0], 3, 2, 1); }, nullptr,
                       {{"batch 2", {vals({2, 3, 9}, 76)}}}));
  specs.push_back(spec("avg_pool1d (4, stride 3, padding 2, ceil_mode, count_include_pad false)", {OpId::AvgPool2d},
                       [](const Ts& in) { return avg_pool1d(in[0], 4, 3, 2, true, false); }, nullptr,
                       {{"batch 2", {vals({2, 3, 9}, 77)}}}));
  for (const char* mode : {"constant", "reflect", "replicate", "circular"}) {
    specs.push_back(spec(std::string("pad ") + mode + " (2, 1, -1, 3)", {OpId::Resample2d, OpId::Cat},
                         [mode](const Ts& in) {
                           return pad(in[0], {2, 1, -1, 3}, mode);
                         },
                         nullptr, {{"(2, 2, 4, 5)", {vals({2, 2, 4, 5}, 78)}}}));
  }
  specs.push_back(spec("interpolate nearest (7, 9)", {OpId::Resample2d},
                       [](const Ts& in) {
                         return interpolate(in[0], {.size = {7, 9}});
                       },
                       nullptr, {{"(2, 2, 4, 5)", {vals({2, 2, 4, 5}, 79)}}}));
  for (bool align : {false, true}) {
    specs.push_back(spec(std::string("interpolate bilinear (7, 3), align_corners ") + (align ? "true" : "false"),
                         {OpId::Resample2d},
                         [align](const Ts& in) {
                           return interpolate(in[0], {.size = {7, 3}, .mode = "bilinear", .align_corners = align});
                         },
                         nullptr, {{"(2, 2, 4, 5)", {vals({2, 2, 4, 5}, 80)}}}));
  }
  specs.push_back(spec("pixel_shuffle (2)", {OpId::Permute}, [](const Ts& in) { return pixel_shuffle(in[0], 2); },
                       nullptr, {{"(2, 8, 3, 2)", {vals({2, 8, 3, 2}, 81)}}}));
}

}  // namespace

// Called once by op_specs() (opcheck/spec.cpp).
void add_resize_specs(std::vector<OpSpec>& specs) { add_resize_op_specs(specs); }

}  // namespace brisk::opcheck
