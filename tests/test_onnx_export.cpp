// tests/test_onnx_export.cpp: ONNX export (interop/onnx_export.h). Zoo models exported at one
// batch size pass ONNX's checker and shape inference (inside export) and, imported back with
// brisk's own importer (interop/onnx_import.h), give the module's outputs at another batch size
// (and, for the sequence models, with a dynamic sequence axis, at other lengths);
// initializers keep the parameters' names; errors name the op. The ONNX Runtime side is
// tests/onnx_ort_check.sh (the case "onnx export: sample models" writes the models it runs).
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "brisk.h"
#include "interop/onnx_export.h"
#include "interop/onnx_import.h"

using namespace brisk;

namespace {

// Embedding, a 2-layer bidirectional LSTM or GRU over (T, B, E), a linear head: (B, T) ids to
// (B, T, vocab) logits.
class RecurrentLM : public nn::Module {
 public:
  explicit RecurrentLM(bool lstm) : Module("RecurrentLM") {
    register_module("embed", std::make_shared<nn::Embedding>(50, 16));
    const nn::RNNOptions o{.num_layers = 2, .bidirectional = true};
    if (lstm)
      register_module("rnn", std::make_shared<nn::LSTM>(16, 24, o));
    else
      register_module("rnn", std::make_shared<nn::GRU>(16, 24, o));
    register_module("head", std::make_shared<nn::Linear>(48, 50));
  }
  Tensor forward(const Tensor& ids) override {
    Tensor e = (*child("embed"))(ids).transpose(0, 1);
    return (*child("head"))((*child("rnn"))(e)).transpose(0, 1);
  }
};

// nn::TransformerEncoder under a causal mask made in the forward from the input's length, as
// PyTorch's generate_square_subsequent_mask(x.size(1)) is used.
class CausalEncoder : public nn::Module {
 public:
  CausalEncoder() : Module("CausalEncoder") {
    nn::TransformerOptions o;
    o.dim_feedforward = 64;
    o.batch_first = true;
    o.dropout = 0.0;
    register_module("encoder", std::make_shared<nn::TransformerEncoder>(
                                   std::make_shared<nn::TransformerEncoderLayer>(32, 4, o), 2));
  }
  Tensor forward(const Tensor& x) override {
    Tensor mask = nn::generate_square_subsequent_mask(x.size(1));
    return static_cast<nn::TransformerEncoder&>(submodule("encoder"))(x, mask);
  }
};

// A learned position table and a max-size causal mask (a buffer), each cut to the input's
// length T as many language models do: x (B, T, 16) + table[:T], then attention of x on itself
// under mask[:T, :T].
class TableCut : public nn::Module {
 public:
  TableCut() : Module("TableCut") {
    register_parameter("table", randn({12, 16}));
    Tensor above = gt(arange(12).unsqueeze(0), arange(12).unsqueeze(1));
    register_buffer("mask", masked_fill(zeros({12, 12}), above, -std::numeric_limits<double>::infinity()));
  }
  Tensor forward(const Tensor& x) override {
    const int64_t t = x.size(1);
    Tensor h = x + parameter("table").narrow(0, 0, t);
    Tensor scores = matmul(h, h.transpose(1, 2)) * 0.25 + buffer("mask").narrow(0, 0, t).narrow(1, 0, t);
    return matmul(softmax(scores, -1), h);
  }
};

// A head fused into its loss (linear_cross_entropy): a training loss, which export refuses by name.
class FusedHeadLoss : public nn::Module {
 public:
  FusedHeadLoss() : Module("FusedHeadLoss") { register_parameter("weight", randn({5, 4})); }
  Tensor forward(const Tensor& x) override {
    return linear_cross_entropy(x, parameter("weight"), zeros({x.size(0)}, DType::I64));
  }
};

struct ZooCase {
  std::string name;
  std::function<std::shared_ptr<nn::Module>()> make;
  std::function<Tensor(int64_t batch, int64_t seq)> input;  // seq: the length of a sequence model's input
  bool sequence = false;  // dim 1 of the input and the output is the sequence (dynamic too)
};

// Traced at batch 2 and length 7; checked there and at sizes the trace did not see (a sequence
// model's at other lengths too).
constexpr int64_t kTraceBatch = 2, kTraceSeq = 7;
const std::vector<std::pair<int64_t, int64_t>> kCheckSizes = {{2, 7}, {5, 7}, {5, 11}, {3, 4}};

brisk::onnx::ExportOptions dynamic_options(const ZooCase& c) {
  std::map<int64_t, std::string> axes = {{0, "batch"}};
  if (c.sequence) axes[1] = "seq";
  return {.dynamic_axes = {{"input", axes}, {"output", axes}}};
}

std::vector<ZooCase> zoo() {
  using namespace nn::models;
  return {
      {"mlp",
       [] {
         return std::make_shared<MLP>(std::vector<int64_t>{20, 32, 16, 5});
       },
       [](int64_t b, int64_t) {
         return randn({b, 20});
       }},
      {"small_cnn", [] { return std::make_shared<SmallCNN>(); },
       [](int64_t b, int64_t) {
         return randn({b, 1, 28, 28});
       }},
      {"resnet18", [] { return resnet18(10); },
       [](int64_t b, int64_t) {
         return randn({b, 3, 64, 64});
       }},
      {"vgg11", [] { return vgg11(10); },
       [](int64_t b, int64_t) {
         return randn({b, 3, 32, 32});
       }},
      {"mobilenet_v2", [] { return std::make_shared<MobileNetV2>(10); },
       [](int64_t b, int64_t) {
         return randn({b, 3, 32, 32});
       }},
      {"gpt2_small",
       [] {
         return std::make_shared<GPT2>(
             GPT2Config{.vocab_size = 97, .n_positions = 16, .n_embd = 32, .n_layer = 2, .n_head = 4, .dropout = 0.0});
       },
       [](int64_t b, int64_t t) {
         return randint(0, 97, {b, t}, DType::I64);
       },
       true},
      {"lstm_lm", [] { return std::make_shared<RecurrentLM>(true); },
       [](int64_t b, int64_t t) {
         return randint(0, 50, {b, t}, DType::I64);
       },
       true},
      {"gru_lm", [] { return std::make_shared<RecurrentLM>(false); },
       [](int64_t b, int64_t t) {
         return randint(0, 50, {b, t}, DType::I64);
       },
       true},
      {"transformer_encoder",
       [] {
         nn::TransformerOptions o;
         o.dim_feedforward = 64;
         o.batch_first = true;
         o.dropout = 0.0;
         auto layer = std::make_shared<nn::TransformerEncoderLayer>(32, 4, o);
         return std::make_shared<nn::TransformerEncoder>(layer, 2);
       },
       [](int64_t b, int64_t t) {
         return randn({b, t, 32});
       },
       true},
      // The erf GELU feed-forward: linear_gelu (Note [Linear with GELU]) exported as linear's
      // nodes and gelu's.
      {"transformer_encoder_gelu",
       [] {
         nn::TransformerOptions o;
         o.dim_feedforward = 64;
         o.batch_first = true;
         o.dropout = 0.0;
         o.activation = "gelu";
         auto layer = std::make_shared<nn::TransformerEncoderLayer>(32, 4, o);
         return std::make_shared<nn::TransformerEncoder>(layer, 2);
       },
       [](int64_t b, int64_t t) {
         return randn({b, t, 32});
       },
       true},
      {"table_cut", [] { return std::make_shared<TableCut>(); },
       [](int64_t b, int64_t t) {
         return randn({b, t, 16});
       },
       true},
      {"causal_encoder", [] { return std::make_shared<CausalEncoder>(); },
       [](int64_t b, int64_t t) {
         return randn({b, t, 32});
       },
       true},
  };
}

double rel_err(const Tensor& got, const Tensor& want) {
  const double scale = std::max(1.0, max(abs(want.to(DType::F64))).item<double>());
  return max(abs(got.to(DType::F64) - want.to(DType::F64))).item<double>() / scale;
}

}  // namespace

// A linear layer whose forward quantizes and dequantizes its input (quint8, per tensor) and its
// weight (qint8, per output channel) through quantize_affine / dequantize_affine, as a
// fake-quantized layer runs.
class QdqLinear : public nn::Module {
 public:
  QdqLinear() : Module("QdqLinear") { register_module("fc", std::make_shared<nn::Linear>(12, 6)); }
  Tensor forward(const Tensor& x) override {
    namespace q = nn::quantize;
    const Tensor& w = submodule("fc").parameter("weight");
    const Tensor scales = amax(abs(w), {1}) / 127.0;
    const Tensor xq = q::quantize_per_tensor(x, 0.03f, 128, q::QDType::QUInt8).dequantize();
    const Tensor wq = q::quantize_per_channel(w, scales, zeros({6}, DType::I64), 0, q::QDType::QInt8).dequantize();
    return nn::functional::linear(xq, wq, submodule("fc").parameter("bias"));
  }
};

// The compression toolkit's int8 models (names ending "_int8": tests/onnx_ort_check.py allows
// them one quantization step): an MLP through quantize_dynamic, a conv net through static PTQ
// (fuse conv + batch norm + ReLU + 2x2 max pool, calibrate, convert).
std::vector<ZooCase> int8_zoo() {
  namespace q = nn::quantize;
  return {
      {"mlp_dynamic_int8",
       [] {
         auto mlp = std::make_shared<nn::models::MLP>(std::vector<int64_t>{20, 32, 16, 5});
         mlp->eval();
         return q::quantize_dynamic(mlp);
       },
       [](int64_t b, int64_t) {
         return randn({b, 20});
       }},
      {"cnn_static_int8",
       [] {
         auto net = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
             std::make_shared<nn::Conv2d>(1, 8, 3, nn::ConvOptions{.padding = {1, 1}}),
             std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
             std::make_shared<nn::Conv2d>(8, 16, 3, nn::ConvOptions{.stride = {2, 2}, .padding = {1, 1}}),
             std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
             std::make_shared<nn::Linear>(16 * 7 * 7, 10)});
         net->eval();
         nn::ModulePtr m = q::prepare(net);
         NoGradGuard no_grad;
         for (int i = 0; i < 4; ++i) (*m)(randn({8, 1, 28, 28}));
         return q::convert(m);
       },
       [](int64_t b, int64_t) {
         return randn({b, 1, 28, 28});
       }},
      {"qdq_linear_int8", [] { return std::make_shared<QdqLinear>(); },
       [](int64_t b, int64_t) {
         return randn({b, 12});
       }},
  };
}

TEST_CASE("onnx export: zoo models round-trip through the importer at another batch size") {
  const auto dir = std::filesystem::temp_directory_path() / "brisk_onnx_export";
  std::filesystem::create_directories(dir);
  for (const ZooCase& c : zoo()) {
    CAPTURE(c.name);
    manual_seed(1);
    auto model = c.make();
    model->eval();
    const std::string path = (dir / (c.name + ".onnx")).string();
    brisk::onnx::export_model(*model, {c.input(kTraceBatch, kTraceSeq)}, path, dynamic_options(c));
    auto imported = brisk::onnx::load_model(path);
    // The initializers are the parameters, by name.
    auto state = imported->state_dict();
    for (const auto& named : model->named_parameters()) {
      bool found = false;
      for (const auto& [n, t] : state) found = found || (n == named.first && t.sizes() == named.second.sizes());
      const std::string param = named.first;  // (clang: no structured binding inside CAPTURE)
      CAPTURE(param);
      CHECK(found);
    }
    // Attention comes back as brisk's fused op (Note [Attention in imported graphs]).
    if (c.name == "gpt2_small" || c.name.starts_with("transformer_encoder")) {
      const auto types = imported->op_types();
      CHECK(std::any_of(types.begin(), types.end(), [](const std::string& t) { return t.starts_with("Attention"); }));
      CHECK(std::find(types.begin(), types.end(), "Softmax") == types.end());
    }
    // So does GPT-2's tanh GELU (Note [GELU in imported graphs]).
    if (c.name == "gpt2_small") {
      const auto types = imported->op_types();
      CHECK(std::any_of(types.begin(), types.end(), [](const std::string& t) { return t.starts_with("Gelu (tanh"); }));
      CHECK(std::find(types.begin(), types.end(), "Tanh") == types.end());
    }
    NoGradGuard no_grad;
    for (const auto& size : kCheckSizes) {
      const int64_t batch = size.first, seq = size.second;  // named: clang's CAPTURE takes no structured binding
      if (!c.sequence && seq != kTraceSeq) continue;
      CAPTURE(batch);
      CAPTURE(seq);
      Tensor x = c.input(batch, seq);
      const double err = rel_err((*imported)(x), (*model)(x));
      CAPTURE(err);
      CHECK(err < 1e-5);
    }
  }
}

TEST_CASE("onnx export: what cannot be exported is named") {
  auto model = std::make_shared<nn::models::MLP>(std::vector<int64_t>{4, 3});
  model->train();
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(4, 4));
  net->push_back(std::make_shared<nn::Dropout>(0.5));
  net->train();
  CHECK_THROWS_WITH_AS(brisk::onnx::export_model_bytes(*net, {randn({2, 4})}),
                       doctest::Contains("dropout in training mode"), Error);
  auto bn = std::make_shared<nn::BatchNorm2d>(3);
  bn->train();
  CHECK_THROWS_WITH_AS(brisk::onnx::export_model_bytes(*bn, {randn({2, 3, 4, 4})}), doctest::Contains("batch_norm"),
                       Error);
  CHECK_THROWS_WITH_AS(brisk::onnx::export_model_bytes(*model, {}), doctest::Contains("needs example inputs"), Error);
  FusedHeadLoss head;
  CHECK_THROWS_WITH_AS(brisk::onnx::export_model_bytes(head, {randn({2, 4})}),
                       doctest::Contains("linear_cross_entropy is a training loss with no ONNX mapping"), Error);
  CHECK_THROWS_WITH_AS(brisk::onnx::export_model_bytes(*model, {randn({2, 4})}, {.opset_version = 9}),
                       doctest::Contains("opset 9"), Error);
  // Dynamic sizes are matched by value (Note [Dynamic sizes]): two axes at one size, or one at 1,
  // cannot be told apart.
  auto lm = std::make_shared<nn::models::GPT2>(
      nn::models::GPT2Config{.vocab_size = 11, .n_positions = 8, .n_embd = 8, .n_layer = 1, .n_head = 2});
  lm->eval();
  const brisk::onnx::ExportOptions both{.dynamic_axes = {{"input", {{0, "batch"}, {1, "seq"}}}}};
  CHECK_THROWS_WITH_AS(brisk::onnx::export_model_bytes(*lm, {zeros({3, 3}, DType::I64)}, both),
                       doctest::Contains("dynamic axes 'batch' and 'seq' are both traced at size 3"), Error);
  CHECK_THROWS_WITH_AS(brisk::onnx::export_model_bytes(*lm, {zeros({1, 3}, DType::I64)}, both),
                       doctest::Contains("is traced at size 1"), Error);
}

TEST_CASE("onnx export: int8 models become QDQ graphs with the int8 weights as initializers") {
  for (const ZooCase& c : int8_zoo()) {
    CAPTURE(c.name);
    manual_seed(2);
    auto model = c.make();
    ::onnx::ModelProto m;
    REQUIRE(m.ParseFromString(brisk::onnx::export_model_bytes(*model, {c.input(2, kTraceSeq)})));
    int quantize = 0, dequantize = 0, int8_weights = 0;
    for (const auto& n : m.graph().node()) {
      quantize += n.op_type() == "QuantizeLinear";
      dequantize += n.op_type() == "DequantizeLinear";
    }
    for (const auto& t : m.graph().initializer()) {
      if (t.data_type() != ::onnx::TensorProto::INT8) continue;
      ++int8_weights;
      CHECK(t.name().ends_with("weight"));  // the quantized module's buffer, under its state_dict name
    }
    if (c.name == "qdq_linear_int8") {  // quantize_affine and dequantize_affine, of x and of the weight
      CHECK(quantize == 2);
      CHECK(dequantize == 2);
      continue;
    }
    const int layers = 3;             // Linear x 3, or Conv2d x 2 and Linear
    CHECK(quantize == layers);        // one per layer's input
    CHECK(dequantize == 2 * layers);  // its input and its weight
    CHECK(int8_weights == layers);
  }
}

// One quantization step of an output: quint8 over its range, as a requantizing module would
// take it ((max(0, hi) - min(0, lo)) / 255), the tolerance tests/onnx_ort_check.py gives ONNX
// Runtime on the same models.
double quantization_step(const Tensor& y) {
  return (std::max(0.0, max(y).item<double>()) - std::min(0.0, min(y).item<double>())) / 255;
}

TEST_CASE("onnx export: int8 QDQ graphs import again and agree within one quantization step") {
  for (const ZooCase& c : int8_zoo()) {
    CAPTURE(c.name);
    manual_seed(3);
    auto model = c.make();
    const auto dir = std::filesystem::temp_directory_path();
    const std::string path = (dir / ("brisk_qdq_" + c.name + ".onnx")).string();
    brisk::onnx::export_model(*model, {c.input(kTraceBatch, kTraceSeq)}, path,
                              {.dynamic_axes = {{"input", {{0, "batch"}}}, {"output", {{0, "batch"}}}}});
    auto imported = brisk::onnx::load_model(path);
    const auto types = imported->op_types();
    CHECK(std::find(types.begin(), types.end(), "QuantizeLinear") != types.end());
    NoGradGuard no_grad;
    for (int64_t batch : {2, 5}) {
      CAPTURE(batch);
      Tensor x = c.input(batch, kTraceSeq);
      const Tensor want = (*model)(x);
      const double steps = max(abs((*imported)(x)-want)).item<double>() / quantization_step(want);
      CAPTURE(steps);
      CHECK(steps <= 1.0);
    }
    std::filesystem::remove(path);
  }
}

TEST_CASE("onnx export: the file is a valid model with opset 17 and the module's names") {
  auto model = std::make_shared<nn::models::MLP>(std::vector<int64_t>{6, 8, 3});
  model->eval();
  const std::string bytes =
      brisk::onnx::export_model_bytes(*model, {randn({4, 6})}, {.dynamic_axes = {{"input", {{0, "n"}}}}});
  ::onnx::ModelProto m;
  REQUIRE(m.ParseFromString(bytes));
  CHECK(m.opset_import(0).version() == 17);
  CHECK(m.graph().input(0).name() == "input");
  CHECK(m.graph().input(0).type().tensor_type().shape().dim(0).dim_param() == "n");
  CHECK(m.graph().output(0).name() == "output");
  std::vector<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.push_back(t.name());
  for (const auto& [name, p] : model->named_parameters())
    CHECK(std::find(inits.begin(), inits.end(), name) != inits.end());
}

TEST_CASE("onnx export: external data for the weights, read back by the importer") {
  const auto dir = std::filesystem::temp_directory_path() / "brisk_onnx_external";
  std::filesystem::create_directories(dir);
  manual_seed(2);
  auto model = nn::models::resnet18(10);
  model->eval();
  const std::string path = (dir / "resnet.onnx").string();
  brisk::onnx::export_model(*model, {randn({2, 3, 32, 32})}, path,
                            {.dynamic_axes = {{"input", {{0, "batch"}}}}, .external_data = true});
  CHECK(std::filesystem::file_size(path) < 200000);  // the weights (45 MB) are beside it
  CHECK(std::filesystem::file_size(path + ".data") > 40000000);
  auto imported = brisk::onnx::load_model(path);
  NoGradGuard no_grad;
  Tensor x = randn({3, 3, 32, 32});
  CHECK(rel_err((*imported)(x), (*model)(x)) < 1e-5);

  // Hostile entries: outside the folder, a range past the end, a length that does not fit.
  ::onnx::ModelProto m;
  {
    std::ifstream f(path, std::ios::binary);
    REQUIRE(m.ParseFromIstream(&f));
  }
  auto with = [&](const char* key, const std::string& value) {
    ::onnx::ModelProto bad = m;
    for (auto& t : *bad.mutable_graph()->mutable_initializer()) {
      for (auto& e : *t.mutable_external_data())
        if (e.key() == key) e.set_value(value);
    }
    const std::string out = (dir / "bad.onnx").string();
    std::ofstream(out, std::ios::binary) << bad.SerializeAsString();
    return out;
  };
  CHECK_THROWS_WITH_AS(brisk::onnx::load_model(with("location", "../resnet.onnx.data")),
                       doctest::Contains("must be a relative path inside the model's folder"), Error);
  CHECK_THROWS_WITH_AS(brisk::onnx::load_model(with("location", "/etc/passwd")),
                       doctest::Contains("must be a relative path inside the model's folder"), Error);
  CHECK_THROWS_WITH_AS(brisk::onnx::load_model(with("offset", "999999999999")), doctest::Contains("lies outside"),
                       Error);
  CHECK_THROWS_WITH_AS(brisk::onnx::load_model(with("length", "12")), doctest::Contains("but its shape and dtype need"),
                       Error);
  std::filesystem::remove_all(dir);
}

// Writes each zoo model (traced at batch 2, length 7) and its inputs and outputs at the sizes of
// kCheckSizes (input_<B> or, for a sequence model, input_<B>x<T>; output_ the same) into
// $BRISK_ONNX_SAMPLE_DIR for tests/onnx_ort_check.sh; does nothing without it.
TEST_CASE("onnx export: sample models") {
  const char* out = std::getenv("BRISK_ONNX_SAMPLE_DIR");
  if (!out) return;
  std::vector<ZooCase> cases = zoo();
  for (ZooCase& c : int8_zoo()) cases.push_back(std::move(c));
  for (const ZooCase& c : cases) {
    manual_seed(1);
    auto model = c.make();
    model->eval();
    brisk::onnx::export_model(*model, {c.input(kTraceBatch, kTraceSeq)}, std::string(out) + "/" + c.name + ".onnx",
                              dynamic_options(c));
    // An int8 model's QDQ graph imported again into brisk: ONNX Runtime must agree with it too.
    std::shared_ptr<brisk::onnx::OnnxModel> reimported;
    if (c.name.ends_with("_int8")) reimported = brisk::onnx::load_model(std::string(out) + "/" + c.name + ".onnx");
    NoGradGuard no_grad;
    NamedTensors io;
    for (const auto& [batch, seq] : kCheckSizes) {
      if (!c.sequence && seq != kTraceSeq) continue;
      Tensor x = c.input(batch, seq);
      const std::string size = c.sequence ? std::to_string(batch) + "x" + std::to_string(seq) : std::to_string(batch);
      io.emplace_back("input_" + size, x);
      io.emplace_back("output_" + size, (*model)(x).contiguous());
      if (reimported) io.emplace_back("reimported_" + size, (*reimported)(x).contiguous());
    }
    save_safetensors(std::string(out) + "/" + c.name + ".safetensors", io);
    if (c.name == "resnet18") {  // also with its weights as external data, which ONNX Runtime reads too
      brisk::onnx::export_model(
          *model, {c.input(kTraceBatch, kTraceSeq)}, std::string(out) + "/resnet18_external.onnx",
          {.dynamic_axes = {{"input", {{0, "batch"}}}, {"output", {{0, "batch"}}}}, .external_data = true});
      save_safetensors(std::string(out) + "/resnet18_external.safetensors", io);
    }
  }
}
