// tests/test_quantize.cpp: compress/quantize.h against PyTorch (tests/data/quantize/reference.json,
// made by tests/make_quantize_reference.py with PyTorch 2.15): observer qparams (min-max,
// per-channel, moving average, histogram with its L2 search), quantize / dequantize, fake
// quantization forward and straight-through backward, fbgemm's choose_qparams, and the dynamic
// quantized Linear (within one int8 step of torch.ao.nn.quantized.dynamic.Linear). Then exact
// arithmetic: quantized Linear / Conv2d equal the F32 layer on dequantized operands,
// conv + bn (+ relu) folding equals the unfolded model, static PTQ and QAT flows end to end,
// safetensors round trips, and the errors.
// Not here: the int8 GEMM itself (tests/test_gemm_i8.cpp), speed (examples/bench/bench_int8.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "brisk.h"
#include "compress/quantize.h"
#include "tests/paths.h"
#include "tests/test_util.h"

using namespace brisk;
namespace q = brisk::nn::quantize;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const json& reference() {
  static const json ref = [] {
    std::ifstream in(::brisk::test::data_dir() / "quantize" / "reference.json");
    REQUIRE(in.good());
    return json::parse(in);
  }();
  return ref;
}

Tensor tensor_of(const json& t) {
  std::vector<double> v = t["values"].get<std::vector<double>>();
  Shape s;
  for (const json& d : t["shape"]) s.push_back(d.get<int64_t>());
  return from_vector(v, s);
}

std::vector<float> floats(const json& a) {
  std::vector<float> out;
  for (const json& v : a) out.push_back(float(v.get<double>()));
  return out;
}

std::vector<int64_t> ints(const json& a) { return a.get<std::vector<int64_t>>(); }

q::QDType qdtype(const std::string& s) { return s == "qint8" ? q::QDType::QInt8 : q::QDType::QUInt8; }

q::QScheme qscheme(const std::string& s) {
  if (s == "per_tensor_affine") return q::QScheme::PerTensorAffine;
  if (s == "per_tensor_symmetric") return q::QScheme::PerTensorSymmetric;
  if (s == "per_channel_affine") return q::QScheme::PerChannelAffine;
  return q::QScheme::PerChannelSymmetric;
}

q::ObserverOptions options_of(const json& c) {
  q::ObserverOptions o{
      .dtype = qdtype(c["dtype"]), .qscheme = qscheme(c["qscheme"]), .reduce_range = c["reduce_range"].get<bool>()};
  if (c.contains("ch_axis")) o.ch_axis = c["ch_axis"].get<int64_t>();
  if (c.contains("quant_min")) o.quant_min = c["quant_min"].get<int64_t>();
  if (c.contains("quant_max")) o.quant_max = c["quant_max"].get<int64_t>();
  return o;
}

// Copies value into the parameter at a dotted path (any depth).
void set_parameter(nn::Module& model, const std::string& name, const Tensor& value) {
  for (auto& [n, p] : model.named_parameters())
    if (n == name) {
      p.detach().copy_(value);
      return;
    }
  FAIL("no parameter " << name);
}

void check_qparams(const q::QParams& got, const json& c) {
  CHECK(got.scale.to_vector<float>() == floats(c["scale"]));
  CHECK(got.zero_point.to_vector<int64_t>() == ints(c["zero_point"]));
}

}  // namespace

TEST_CASE("quantize: min-max, per-channel and moving-average observers give PyTorch's qparams exactly") {
  const json& ref = reference();
  std::vector<Tensor> batches;
  for (const json& b : ref["observer_batches"]) batches.push_back(tensor_of(b));
  int cases = 0;
  for (const json& c : ref["observers"]) {
    CAPTURE(c["name"].get<std::string>());
    const q::ObserverOptions o = options_of(c);
    std::unique_ptr<q::Observer> obs;
    if (c["kind"] == "minmax") {
      obs = std::make_unique<q::MinMaxObserver>(o);
    } else {
      obs = std::make_unique<q::MovingAverageMinMaxObserver>(o, float(c["averaging_constant"].get<double>()));
    }
    for (int64_t i = 0; i < c["batches"].get<int64_t>(); ++i) obs->observe(batches[size_t(i)]);
    check_qparams(obs->calculate_qparams(), c);
    ++cases;
  }
  CHECK(cases >= 20);
}

TEST_CASE("quantize: the histogram observer's histogram, L2 search and qparams equal PyTorch's") {
  const json& ref = reference();
  std::vector<Tensor> data;
  for (const json& b : ref["histogram_data"]) data.push_back(tensor_of(b));
  for (const json& c : ref["histograms"]) {
    CAPTURE(c["name"].get<std::string>());
    q::HistogramObserver obs(options_of(c), c["bins"].get<int64_t>());
    for (int64_t i = 0; i < c["batches"].get<int64_t>(); ++i) obs.observe(data[size_t(i)]);
    if (c.contains("histogram")) CHECK(obs.histogram == floats(c["histogram"]));
    const auto [lo, hi] = obs.search_range();
    CHECK(lo == float(c["search_min"].get<double>()));
    CHECK(hi == float(c["search_max"].get<double>()));
    check_qparams(obs.calculate_qparams(), c);
  }
}

TEST_CASE("quantize: percentile clipping takes the histogram's quantiles") {
  const json& ref = reference();
  const Tensor x = tensor_of(ref["histogram_data"][0]);
  for (const json& c : ref["percentiles"]) {
    q::HistogramObserver obs({}, 2048, q::HistogramMethod::Percentile, c["percentile"].get<double>());
    obs.observe(x);
    const auto [lo, hi] = obs.search_range();
    CHECK(lo == doctest::Approx(c["min"].get<double>()).epsilon(1e-5));
    CHECK(hi == doctest::Approx(c["max"].get<double>()).epsilon(1e-5));
  }
  // The 0.99 quantiles clip the outliers (20, 15, -11, ...) away.
  q::HistogramObserver p99({}, 2048, q::HistogramMethod::Percentile, 0.99);
  p99.observe(x);
  CHECK(p99.search_range().second < 3.0f);
  CHECK(p99.search_range().first > -3.0f);
}

TEST_CASE("quantize: quantize_per_tensor / per_channel and dequantize equal torch's") {
  const json& ref = reference();
  const Tensor x = tensor_of(ref["quantize_x"]);
  for (const json& c : ref["quantize"]) {
    const q::QTensor qt =
        q::quantize_per_tensor(x, float(c["scale"].get<double>()), c["zero_point"].get<int64_t>(), qdtype(c["dtype"]));
    CHECK(qt.int_repr.dtype() == (c["dtype"] == "qint8" ? DType::I8 : DType::U8));
    CHECK(qt.int_repr.to_vector<int64_t>() == ints(c["int_repr"]));
    const std::vector<float> got = qt.dequantize().to_vector<float>(), want = floats(c["dequantized"]);
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
  }
  const json& c = ref["quantize_per_channel"];
  const std::vector<float> s = floats(c["scales"]);
  const std::vector<int64_t> z = ints(c["zero_points"]);
  const q::QTensor qt = q::quantize_per_channel(x, from_data(s.data(), Shape{3}), from_data(z.data(), Shape{3}),
                                                c["axis"].get<int64_t>(), q::QDType::QInt8);
  CHECK(qt.int_repr.to_vector<int64_t>() == ints(c["int_repr"]));
  const std::vector<float> got = qt.dequantize().to_vector<float>(), want = floats(c["dequantized"]);
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
}

TEST_CASE("quantize: fake quantization forward equals torch's and its backward is the straight-through estimator") {
  const json& ref = reference();
  const Tensor g = tensor_of(ref["fake_grad_out"]);
  {
    const json& c = ref["fake_per_tensor"];
    Tensor x = tensor_of(ref["fake_x"]).requires_grad_();
    Tensor y = q::fake_quantize_per_tensor_affine(x, float(c["scale"].get<double>()), c["zero_point"].get<int64_t>(),
                                                  c["quant_min"].get<int64_t>(), c["quant_max"].get<int64_t>());
    CHECK(y.to_vector<float>() == floats(c["y"]));
    y.backward(g);
    CHECK(x.grad().to_vector<float>() == floats(c["grad"]));
  }
  {
    const json& c = ref["fake_per_channel"];
    Tensor x = tensor_of(ref["fake_x"]).requires_grad_();
    const std::vector<float> s = floats(c["scales"]);
    const std::vector<int64_t> z = ints(c["zero_points"]);
    Tensor y = q::fake_quantize_per_channel_affine(x, from_data(s.data(), Shape{3}), from_data(z.data(), Shape{3}),
                                                   c["axis"].get<int64_t>(), c["quant_min"].get<int64_t>(),
                                                   c["quant_max"].get<int64_t>());
    CHECK(y.to_vector<float>() == floats(c["y"]));
    y.backward(g);
    const std::vector<float> grad = x.grad().to_vector<float>(), want = floats(c["grad"]);
    CHECK(grad == want);
    // The reference clamps some and passes others: both cases are exercised.
    CHECK(std::count(want.begin(), want.end(), 0.0f) > 0);
    CHECK(std::count(want.begin(), want.end(), 0.0f) < int64_t(want.size()) / 2);
  }
}

TEST_CASE("quantize: choose_qparams equals fbgemm's ChooseQuantizationParams") {
  for (const json& c : reference()["choose_qparams"]) {
    const auto [s, z] = q::choose_qparams(float(c["min"].get<double>()), float(c["max"].get<double>()), 0, 255,
                                          c["reduce_range"].get<bool>());
    CHECK(s == float(c["scale"].get<double>()));
    CHECK(z == c["zero_point"].get<int64_t>());
  }
}

TEST_CASE("quantize: DynamicQuantLinear is within one int8 step of torch's dynamic quantized Linear") {
  const json& c = reference()["dynamic_linear"];
  const Tensor x = tensor_of(c["x"]);
  auto model =
      std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(33, 20)});
  auto& lin = dynamic_cast<nn::Linear&>(*(*model)[0]);
  lin.weight().detach().copy_(tensor_of(c["weight"]));
  const std::vector<float> b = floats(c["bias"]);
  lin.bias().detach().copy_(from_data(b.data(), Shape{20}));
  q::quantize_dynamic(model);
  auto* dq = dynamic_cast<q::DynamicQuantLinear*>((*model)[0].get());
  REQUIRE(dq != nullptr);
  CHECK(dq->buffer("weight").to_vector<int64_t>() == ints(c["weight_int"]));
  CHECK(dq->buffer("weight_scale").to_vector<float>() == floats(c["weight_scales"]));
  const std::vector<float> got = (*model)(x).to_vector<float>(), want = floats(c["y"]["values"]);
  // One int8 step of the input moves an output by x_scale * |w| summed over one input: bound
  // it by x_scale * max_k |W[o, k]|.
  const float xs = float(c["x_scale"].get<double>());
  const std::vector<float> w = floats(c["weight"]["values"]);
  int exact = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const size_t o = i % 20;
    float wmax = 0;
    for (size_t k = 0; k < 33; ++k) wmax = std::max(wmax, std::abs(w[o * 33 + k]));
    CHECK(std::abs(got[i] - want[i]) <= xs * wmax + 1e-5f);
    exact += std::abs(got[i] - want[i]) <= 1e-5f * (1 + std::abs(want[i]));
  }
  CHECK(exact > int(want.size()) * 9 / 10);  // the same quantization: nearly all agree to rounding
}

TEST_CASE("quantize: quantize_dynamic with default_dynamic_qconfig equals torch's quantize_dynamic with no qconfig") {
  const json& c = reference()["dynamic_default"];
  // The same nesting as the reference: Linear, ReLU, Sequential(Linear).
  auto inner =
      std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(16, 6)});
  auto model = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(24, 16), std::make_shared<nn::ReLU>(), inner});
  {
    NoGradGuard g;
    for (size_t i = 0; i < c["names"].size(); ++i)
      set_parameter(*model, c["names"][i].get<std::string>(), tensor_of(c["params"][i]));
  }
  q::quantize_dynamic(model, q::default_dynamic_qconfig());
  const std::vector<q::DynamicQuantLinear*> layers = {dynamic_cast<q::DynamicQuantLinear*>((*model)[0].get()),
                                                      dynamic_cast<q::DynamicQuantLinear*>((*inner)[0].get())};
  for (size_t l = 0; l < layers.size(); ++l) {
    REQUIRE(layers[l] != nullptr);
    const json& want = c["layers"][l];
    CHECK(layers[l]->buffer("weight").to_vector<int64_t>() == ints(want["weight_int"]));
    // One scale for the whole weight (per tensor), PyTorch's bit for bit.
    CHECK(layers[l]->buffer("weight_scale").to_vector<float>() ==
          std::vector<float>{float(want["weight_scale"].get<double>())});
    CHECK(layers[l]->buffer("weight_zero_point").to_vector<int64_t>() == std::vector<int64_t>{0});
  }
  const std::vector<float> got = (*model)(tensor_of(c["x"])).to_vector<float>(), want = floats(c["y"]["values"]);
  REQUIRE(got.size() == want.size());
  // The same int8 arithmetic: equal up to the F32 rounding of the requantized hidden layer.
  for (size_t i = 0; i < want.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-4f * (1 + std::abs(want[i])));

  // brisk's default stays per channel (the header says why): one scale per output row.
  auto per_channel =
      std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(24, 16)});
  q::quantize_dynamic(per_channel);
  CHECK((*per_channel)[0]->buffer("weight_scale").numel() == 16);
  CHECK(test::error_text([&] { q::quantize_dynamic(per_channel, q::QConfig{}); }).find("no weight observer") !=
        std::string::npos);
}

TEST_CASE(
    "quantize: static PTQ with torch's default_qconfig and get_default_qconfig(fbgemm) gives PyTorch's qparams and "
    "outputs") {
  const json& r = reference()["static_ptq"];
  for (const json& c : r["cases"]) {
    const std::string name = c["qconfig"];
    CAPTURE(name);
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(16, 12), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(12, 5)});
    {
      NoGradGuard g;
      set_parameter(*model, "0.weight", tensor_of(r["params"]["fc1.weight"]));
      set_parameter(*model, "0.bias", tensor_of(r["params"]["fc1.bias"]));
      set_parameter(*model, "2.weight", tensor_of(r["params"]["fc2.weight"]));
      set_parameter(*model, "2.bias", tensor_of(r["params"]["fc2.bias"]));
    }
    q::prepare(model, name == "fbgemm" ? q::get_default_qconfig("fbgemm") : q::default_qconfig());
    {
      NoGradGuard g;
      for (const json& b : r["calibration"]) (*model)(tensor_of(b));
    }
    q::convert(model);
    const std::vector<nn::Module*> layers = {(*model)[0].get(), (*model)[2].get()};
    const char* keys[] = {"fc1", "fc2"};
    for (size_t l = 0; l < 2; ++l) {
      REQUIRE(layers[l]->type_name() == "QuantizedLinear");
      // The input's qparams come from observers of F32 values that brisk and PyTorch compute
      // with different GEMMs: equal to a few ulps.
      const float scale = layers[l]->buffer("input_scale").item<float>();
      CHECK(std::abs(scale - float(c["input_scale"][l].get<double>())) <= 1e-6f * scale);
      CHECK(layers[l]->buffer("input_zero_point").item<int64_t>() == c["input_zero_point"][l].get<int64_t>());
      CHECK(layers[l]->buffer("weight").to_vector<int64_t>() == ints(c[keys[l]]["weight_int"]));
      CHECK(layers[l]->buffer("weight_scale").to_vector<float>() == floats(c[keys[l]]["weight_scale"]));
    }
    CHECK(layers[0]->buffer("weight_scale").numel() == (name == "fbgemm" ? 12 : 1));
    // PyTorch rounds the last layer's output to quint8 (brisk returns it in F32): within half
    // of that step, plus one input step where the hidden layer's requantization rounds the
    // other way (rare: most agree to the half step).
    NoGradGuard g;
    const std::vector<float> got = (*model)(tensor_of(r["x"])).to_vector<float>(), want = floats(c["y"]["values"]);
    REQUIRE(got.size() == want.size());
    const float out_step = float(c["output_scale"].get<double>());
    const float hidden_step = float(c["input_scale"][1].get<double>());
    const float w2max = amax(abs(layers[1]->buffer("weight").to(DType::F32))).item<float>() *
                        amax(layers[1]->buffer("weight_scale")).item<float>();
    int within_half = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK(std::abs(got[i] - want[i]) <= 0.5f * out_step + hidden_step * w2max + 1e-5f);
      within_half += std::abs(got[i] - want[i]) <= 0.5f * out_step + 1e-5f;
    }
    CHECK(within_half >= int(want.size()) * 9 / 10);
  }
  CHECK(test::error_text([] { q::get_default_qconfig("onednn-gpu"); }).find("unknown backend") != std::string::npos);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(4, 4)});
  CHECK(test::error_text([&] { q::prepare(m, q::default_dynamic_qconfig()); }).find("use quantize_dynamic") !=
        std::string::npos);
}

namespace {

// A small conv net with batch norms whose statistics are not the identity.
std::shared_ptr<nn::Sequential> conv_net(uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(3, 8, 3, nn::ConvOptions{.padding = {1, 1}}), std::make_shared<nn::BatchNorm2d>(8),
      std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Conv2d>(8, 6, 3, nn::ConvOptions{.stride = {2, 2}, .bias = false}),
      std::make_shared<nn::BatchNorm2d>(6), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(6 * 2 * 2, 10), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(10, 4)});
  NoGradGuard g;
  for (auto& [name, t] : net->named_buffers()) {
    if (name.find("running_mean") != std::string::npos) t.copy_(randn(t.sizes()) * 0.3);
    if (name.find("running_var") != std::string::npos) t.copy_(rand(t.sizes()) + 0.5);
  }
  for (auto& [name, t] : net->named_parameters()) {
    if (name == "1.weight" || name == "4.weight") t.copy_(rand(t.sizes()) + 0.5);
    if (name == "1.bias" || name == "4.bias") t.copy_(randn(t.sizes()) * 0.2);
  }
  net->eval();
  return net;
}

double max_abs_diff(const Tensor& a, const Tensor& b) { return amax(abs(sub(a, b))).item<double>(); }

}  // namespace

TEST_CASE("quantize: conv + bn (+ relu) folding equals the unfolded float model") {
  auto ref = conv_net(3);
  auto fused = conv_net(3);
  q::fuse(fused);
  CHECK(fused->named_children()[0].second->type_name() == "Fused");
  CHECK(fused->named_children()[1].second->type_name() == "Identity");
  CHECK(fused->named_children()[2].second->type_name() == "Identity");
  CHECK(fused->named_children()[5].second->type_name() == "Identity");  // max pool absorbed by conv 3
  CHECK(dynamic_cast<q::Fused&>(*fused->named_children()[3].second).pool);
  CHECK(fused->named_children()[7].second->type_name() == "Fused");  // linear + relu
  const Tensor x = randn(Shape{2, 3, 12, 12});
  NoGradGuard g;
  const Tensor want = (*ref)(x), got = (*fused)(x);
  CHECK(max_abs_diff(want, got) < 1e-5 * (1 + amax(abs(want)).item<double>()));
  // Training mode keeps batch statistics: folding then would be wrong, so it is an error.
  auto training = conv_net(3);
  training->train();
  CHECK(test::error_text([&] { q::fuse(training); }).find("eval mode") != std::string::npos);
}

TEST_CASE("quantize: QuantizedLinear and QuantizedConv2d equal the F32 layer on dequantized operands") {
  manual_seed(5);
  const auto wopt = q::ObserverOptions{.dtype = q::QDType::QInt8, .qscheme = q::QScheme::PerChannelSymmetric};
  const q::QParams in = q::calculate_qparams({-2.0f}, {3.0f}, {.reduce_range = true});
  for (auto [relu, pool] : {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}}) {
    nn::Conv2d conv(5, 7, 3, nn::ConvOptions{.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}});
    q::MinMaxObserver wobs(wopt);
    wobs.observe(conv.parameter("weight").detach());
    const q::QParams wq = wobs.calculate_qparams();
    q::QuantizedConv2d qconv(conv, conv.parameter("weight"), conv.maybe_parameter("bias"), wq, in, relu, pool);
    const Tensor x = randn(Shape{3, 5, 9, 11});
    const Tensor xd = q::quantize(x, in).dequantize();
    const Tensor wd = q::quantize(conv.parameter("weight").detach(), wq).dequantize();
    NoGradGuard g;
    Tensor want = nn::functional::conv2d(xd, wd, conv.maybe_parameter("bias"), {2, 1}, {1, 2}, {1, 2});
    if (relu) want = brisk::relu(want);
    if (pool) want = nn::functional::max_pool2d(want, {2, 2});  // (5, 11) -> (2, 5): floor
    const Tensor got = qconv(x);
    CHECK(got.sizes() == want.sizes());
    CHECK(max_abs_diff(got, want) < 1e-4);
  }
  nn::Linear lin(37, 19);
  q::MinMaxObserver wobs(wopt);
  wobs.observe(lin.weight().detach());
  const q::QParams wq = wobs.calculate_qparams();
  q::QuantizedLinear ql(lin.weight(), lin.bias(), wq, in, true);
  const Tensor x = randn(Shape{4, 6, 37});  // leading dims are kept
  NoGradGuard g;
  const Tensor want = brisk::relu(nn::functional::linear(
      q::quantize(x, in).dequantize(), q::quantize(lin.weight().detach(), wq).dequantize(), lin.bias()));
  const Tensor got = ql(x);
  CHECK(got.sizes() == Shape{4, 6, 19});
  CHECK(max_abs_diff(got, want) < 1e-4);
}

TEST_CASE("quantize: static PTQ (fuse, prepare, calibrate, convert) of a conv net stays close to F32") {
  auto ref = conv_net(4);
  auto model = conv_net(4);
  q::prepare(model);
  NoGradGuard g;
  for (int i = 0; i < 4; ++i) (*model)(randn(Shape{8, 3, 12, 12}));
  q::convert(model);
  CHECK(model->named_children()[0].second->type_name() == "QuantizedConv2d");
  CHECK(model->named_children()[3].second->type_name() == "QuantizedConv2d");
  CHECK(model->named_children()[7].second->type_name() == "QuantizedLinear");
  CHECK(model->named_children()[9].second->type_name() == "QuantizedLinear");
  const Tensor x = randn(Shape{16, 3, 12, 12});
  const Tensor want = (*ref)(x), got = (*model)(x);
  const double range = amax(abs(want)).item<double>();
  CHECK(max_abs_diff(got, want) < 0.08 * range);
  // Classes mostly agree.
  const double agree = mean(cast(eq(argmax(got, 1), argmax(want, 1)), DType::F32)).item<double>();
  CHECK(agree >= 0.8);
}

TEST_CASE("quantize: QAT fine-tunes through fake quantization and converts to the same function") {
  auto model = conv_net(6);
  q::prepare_qat(model);
  CHECK(model->is_training());
  optim::SGD opt(model->parameters(), {.lr = 0.05});
  const Tensor x = randn(Shape{16, 3, 12, 12});
  const Tensor y = randint(0, 4, Shape{16});
  double first = 0, last = 0;
  for (int step = 0; step < 15; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < first);
  model->eval();
  Tensor fake;
  {
    NoGradGuard g;
    fake = (*model)(x);
  }
  q::convert(model);
  CHECK(model->named_children()[0].second->type_name() == "QuantizedConv2d");
  NoGradGuard g;
  const Tensor got = (*model)(x);
  // The same quantization of weights and inputs; only F32 rounding in between differs.
  CHECK(max_abs_diff(got, fake) < 1e-3 * (1 + amax(abs(fake)).item<double>()));
}

TEST_CASE("quantize: quantized models save and load as safetensors; int8 into F32 is an error") {
  const fs::path dir = fs::temp_directory_path() / "brisk_test_quantize";
  fs::create_directories(dir);
  const std::string path = (dir / "q.safetensors").string();
  auto model = conv_net(7);
  q::prepare(model, q::minmax_qconfig());
  NoGradGuard g;
  for (int i = 0; i < 2; ++i) (*model)(randn(Shape{4, 3, 12, 12}));
  q::convert(model);
  q::save_quantized(*model, path);
  const SafetensorsFile file = load_safetensors(path);
  std::map<std::string, DType> dtypes;
  for (const auto& [n, t] : file.tensors) dtypes[n] = t.dtype();
  CHECK(dtypes.at("0.weight") == DType::I8);
  CHECK(dtypes.at("0.weight_scale") == DType::F32);
  CHECK(dtypes.at("0.weight_zero_point") == DType::I64);
  CHECK(dtypes.at("0.input_scale") == DType::F32);
  CHECK(dtypes.at("0.input_zero_point") == DType::I64);
  CHECK(dtypes.at("7.bias") == DType::F32);

  // A skeleton of the same architecture, filled from the file, computes the same.
  auto skeleton = conv_net(8);
  q::prepare(skeleton, q::minmax_qconfig());
  q::convert(skeleton, {.allow_uncalibrated = true});
  const Tensor x = randn(Shape{3, 3, 12, 12});
  CHECK(max_abs_diff((*skeleton)(x), (*model)(x)) > 1e-3);
  q::load_quantized(*skeleton, path);
  CHECK(max_abs_diff((*skeleton)(x), (*model)(x)) == 0.0);

  auto f32 = conv_net(7);
  const std::string err = test::error_text([&] { q::load_quantized(*f32, path); });
  CHECK(err.find("'0.weight' is I8") != std::string::npos);
  CHECK(err.find("F32") != std::string::npos);
  // A float file is not a quantized one.
  const std::string fpath = (dir / "f.safetensors").string();
  nn::save_module(*f32, fpath);
  CHECK(test::error_text([&] { q::load_quantized(*skeleton, fpath); }).find("not a quantized model") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("quantize: unsupported layers, uncalibrated convert and bad options are clear errors") {
  auto with_ln = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::LayerNorm>(4)});
  const std::string err = test::error_text([&] { q::prepare(with_ln); });
  CHECK(err.find("cannot quantize '1' (LayerNorm)") != std::string::npos);
  // Explicitly kept in F32.
  auto kept = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::LayerNorm>(4)});
  q::prepare(kept, q::minmax_qconfig(), {.keep_unsupported_float = true});
  {
    NoGradGuard g;
    (*kept)(randn(Shape{2, 4}));
  }
  q::convert(kept);
  CHECK((*kept)[0]->type_name() == "QuantizedLinear");
  CHECK((*kept)[1]->type_name() == "LayerNorm");

  auto never_run =
      std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(4, 4)});
  q::prepare(never_run);
  CHECK(test::error_text([&] { q::convert(never_run); }).find("calibration") != std::string::npos);

  auto grouped = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Conv2d>(4, 4, 3, nn::ConvOptions{.groups = 2})});
  q::prepare(grouped);
  {
    NoGradGuard g;
    (*grouped)(randn(Shape{1, 4, 5, 5}));
  }
  CHECK(test::error_text([&] { q::convert(grouped); }).find("groups") != std::string::npos);

  CHECK_THROWS_AS(q::MinMaxObserver({.qscheme = q::QScheme::PerTensorSymmetric, .reduce_range = true}), Error);
  CHECK_THROWS_AS(q::MinMaxObserver({.quant_min = 0, .quant_max = 300}), Error);
  CHECK_THROWS_AS(q::HistogramObserver({.qscheme = q::QScheme::PerChannelAffine}), Error);
  CHECK_THROWS_AS(q::fake_quantize_per_tensor_affine(randn(Shape{3}), 0.0f, 0, 0, 255), Error);
  CHECK_THROWS_AS(q::fake_quantize_per_tensor_affine(randn(Shape{3}), 0.1f, 300, 0, 255), Error);
  CHECK_THROWS_AS(q::quantize_per_tensor(randn(Shape{3}, DType::F64), 0.1f, 0, q::QDType::QUInt8), Error);
  q::MinMaxObserver per_channel({.ch_axis = 3, .qscheme = q::QScheme::PerChannelAffine});
  CHECK_THROWS_AS(per_channel.observe(randn(Shape{2, 3})), Error);
  q::DynamicQuantLinear dq(
      nn::Linear(8, 3), q::calculate_qparams({-1, -1, -1}, {1, 1, 1},
                                             {.dtype = q::QDType::QInt8, .qscheme = q::QScheme::PerChannelSymmetric}));
  CHECK(test::error_text([&] { dq(randn(Shape{2, 7})); }).find("expects (*, 8)") != std::string::npos);
}

TEST_CASE("quantize: a quantized model's summary reports its int8 weights (buffers), not just 0 parameters") {
  manual_seed(5);
  auto model = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(16, 8), std::make_shared<nn::ReLU>()});
  const std::string before = model->summary();
  CHECK(before.find("0: Linear (136 parameters)\n") != std::string::npos);  // no buffers: no buffer part
  nn::ModulePtr q = nn::quantize::quantize_dynamic(model);
  const std::string after = q->summary();
  CAPTURE(after);
  // 16 x 8 int8 weights (128 bytes), then per-channel scales and zero points and the F32 bias.
  int64_t values = 0, bytes = 0;
  for (const auto& [name, b] : q->named_buffers()) {
    values += b.numel();
    bytes += b.numel() * int64_t(dtype_size(b.dtype()));
  }
  CHECK(values >= 128 + 8);
  CHECK(bytes < 4 * values);  // int8 weights: fewer bytes than F32 values would take
  const std::string line =
      "(0 parameters; buffers: " + std::to_string(values) + " values, " + std::to_string(bytes) + " bytes)";
  CHECK(after.find(line) != std::string::npos);
}
