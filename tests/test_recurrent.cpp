// tests/test_recurrent.cpp: RNN, LSTM, GRU and their cells against PyTorch
// (tests/data/recurrent/recurrent.json, made by tests/make_recurrent_reference.py): weights
// loaded by PyTorch's names (strict, so the names and shapes are proven), outputs, final
// states and the gradients of a weighted sum of the outputs w.r.t. inputs, initial states and
// every parameter, in F32 (1e-5 / 1e-4) and F64 (1e-12); PyTorch's init range; dropout between
// layers; and the errors for bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/functions.h"
#include "nn/recurrent.h"
#include "tests/reference.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;
using brisk::test::json;

namespace {

const json& reference() {
  static const json j = test::read_reference("recurrent/recurrent.json");
  return j;
}
const json& find_case(const std::string& name) { return test::find_case(reference(), name); }
using test::rel_err;
using test::state_of;
using test::tensor_of;
using test::Worst;

std::shared_ptr<nn::Module> build(const json& cfg) {
  const std::string kind = cfg["kind"];
  if (kind == "lstm_cell") return std::make_shared<nn::LSTMCell>(3, 4);
  if (kind == "gru_cell") return std::make_shared<nn::GRUCell>(3, 4);
  if (kind == "rnn_cell") return std::make_shared<nn::RNNCell>(3, 4);
  nn::RNNOptions o;
  o.num_layers = cfg.value("num_layers", 1);
  o.nonlinearity = cfg.value("nonlinearity", "tanh");
  o.bias = cfg.value("bias", true);
  o.batch_first = cfg.value("batch_first", false);
  o.bidirectional = cfg.value("bidirectional", false);
  o.proj_size = cfg.value("proj_size", 0);
  const int64_t in = cfg["input_size"], hidden = cfg["hidden_size"];
  if (kind == "lstm") return std::make_shared<nn::LSTM>(in, hidden, o);
  if (kind == "gru") return std::make_shared<nn::GRU>(in, hidden, o);
  return std::make_shared<nn::RNN>(in, hidden, o);
}

// Runs the module of `kind` on the named inputs; returns the named outputs.
std::map<std::string, Tensor> run(nn::Module& m, const std::string& kind, std::map<std::string, Tensor>& x) {
  auto get = [&](const char* k) { return x.count(k) ? x[k] : Tensor(); };
  if (kind == "lstm") {
    nn::LSTMResult r = static_cast<nn::LSTM&>(m).forward(x["input"], {get("h0"), get("c0")});
    return {{"output", r.output}, {"h_n", r.h_n}, {"c_n", r.c_n}};
  }
  if (kind == "gru" || kind == "rnn") {
    nn::RNNResult r = kind == "gru" ? static_cast<nn::GRU&>(m).forward(x["input"], get("h0"))
                                    : static_cast<nn::RNN&>(m).forward(x["input"], get("h0"));
    return {{"output", r.output}, {"h_n", r.h_n}};
  }
  if (kind == "lstm_cell") {
    nn::LSTMState s = static_cast<nn::LSTMCell&>(m).forward(x["input"], {get("h0"), get("c0")});
    return {{"h", s.h}, {"c", s.c}};
  }
  if (kind == "gru_cell") return {{"h", static_cast<nn::GRUCell&>(m).forward(x["input"], get("h0"))}};
  return {{"h", static_cast<nn::RNNCell&>(m).forward(x["input"], get("h0"))}};
}

// The whole check of one reference case in one dtype.
void check_case(const json& c, DType dt, double out_tol, double grad_tol) {
  auto m = build(c["config"]);
  m->to(dt);
  nn::LoadReport rep = m->load_state_dict(state_of(c["params"], dt));  // strict: names and shapes must match
  CHECK(rep.ok());
  m->train(false);
  std::map<std::string, Tensor> x;
  for (auto& [k, v] : c["inputs"].items()) x[k] = tensor_of(v, dt).requires_grad_(true);
  std::map<std::string, Tensor> out = run(*m, c["config"]["kind"], x);
  Worst worst;
  Tensor loss = zeros({}, dt);
  for (auto& output : c["outputs"].items()) {
    const std::string& k = output.key();
    const json& ref = output.value();
    const double e = rel_err(out[k], ref);
    CHECK_MESSAGE(e <= out_tol, c["name"], " ", k, " ", dtype_name(dt), " ", e);
    worst.out = std::max(worst.out, e);
    loss = loss + (out[k] * tensor_of(c["loss_weights"][k], dt)).sum();
  }
  loss.backward();
  auto check_grad = [&](const std::string& key, const Tensor& g) {
    const double e = rel_err(g, c["grads"][key]);
    CHECK_MESSAGE(e <= grad_tol, c["name"], " grad ", key, " ", dtype_name(dt), " ", e);
    worst.grad = std::max(worst.grad, e);
  };
  for (auto& [k, t] : x) check_grad("input." + k, t.grad());
  int params = 0;
  for (auto& [k, p] : m->named_parameters()) {
    check_grad("param." + k, p.grad());
    ++params;
  }
  worst.print(c, dt);
  CHECK(params == int(c["params"].size()));
}

void check_case(const std::string& name) {
  const json& c = find_case(name);
  check_case(c, DType::F32, 1e-5, 1e-4);
  check_case(c, DType::F64, 1e-12, 1e-12);
}

}  // namespace

TEST_CASE("recurrent: LSTM, 2 layers, bidirectional, batch_first, with (h0, c0), matches PyTorch") {
  check_case("lstm_2layer_bidirectional_batch_first");
}

TEST_CASE("recurrent: LSTM without an initial state starts from zeros as PyTorch") { check_case("lstm_default_state"); }

TEST_CASE("recurrent: LSTM with proj_size, bidirectional, 2 layers, matches PyTorch") {
  check_case("lstm_proj_bidirectional");
}

TEST_CASE("recurrent: LSTM on an unbatched (T, input) sequence matches PyTorch") { check_case("lstm_unbatched"); }

TEST_CASE("recurrent: GRU, 2 layers, bidirectional, with h0, matches PyTorch") {
  check_case("gru_2layer_bidirectional");
}

TEST_CASE("recurrent: GRU batch_first without bias matches PyTorch") { check_case("gru_batch_first_no_bias"); }

TEST_CASE("recurrent: RNN tanh (2 layers) and relu (bidirectional, batch_first) match PyTorch") {
  check_case("rnn_tanh_2layer");
  check_case("rnn_relu_bidirectional_batch_first");
}

TEST_CASE("recurrent: LSTMCell, GRUCell and RNNCell match PyTorch, with and without a state") {
  check_case("lstm_cell");
  check_case("lstm_cell_default_state");
  check_case("gru_cell");
  check_case("gru_cell_unbatched");
  check_case("rnn_cell");
}

TEST_CASE("recurrent: parameters are PyTorch's names, in its order, with its init range") {
  nn::LSTM lstm(3, 5, {.num_layers = 2, .bidirectional = true, .proj_size = 2});
  std::vector<std::string> names;
  for (auto& [k, p] : lstm.named_parameters()) names.push_back(k);
  const std::vector<std::string> want = {
      "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",           "bias_hh_l0",
      "weight_hr_l0",         "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
      "bias_hh_l0_reverse",   "weight_hr_l0_reverse", "weight_ih_l1",         "weight_hh_l1",
      "bias_ih_l1",           "bias_hh_l1",           "weight_hr_l1",         "weight_ih_l1_reverse",
      "weight_hh_l1_reverse", "bias_ih_l1_reverse",   "bias_hh_l1_reverse",   "weight_hr_l1_reverse"};
  CHECK(names == want);
  CHECK(lstm.parameter("weight_ih_l1").sizes() == Shape{20, 4});  // layer 1 reads D * proj_size features
  CHECK(lstm.parameter("weight_hh_l0").sizes() == Shape{20, 2});
  CHECK(lstm.parameter("weight_hr_l0").sizes() == Shape{2, 5});

  nn::GRU gru(8, 100);
  const double bound = 1.0 / std::sqrt(100.0);
  double lo = 1, hi = -1;
  for (const Tensor& p : gru.parameters())
    for (double v : p.to_vector<double>()) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(hi - lo > 1.9 * bound);  // the whole range is used (30000 draws)
}

TEST_CASE("recurrent: dropout acts between layers in training only, never after the last layer") {
  manual_seed(3);
  Tensor x = randn({6, 2, 3});
  nn::LSTM one(3, 4, {.dropout = 0.5});
  nn::LSTM two(3, 4, {.num_layers = 2, .dropout = 0.5});
  nn::LSTM one_plain(3, 4);
  one_plain.load_state_dict(one.state_dict());
  nn::LSTM two_plain(3, 4, {.num_layers = 2});
  two_plain.load_state_dict(two.state_dict());
  // One layer: nothing to drop (PyTorch warns; the result is the plain one).
  CHECK(allclose(one.forward(x, {}).output, one_plain.forward(x, {}).output, 0, 0));
  // Two layers, training: layer 1 reads a dropped copy of layer 0's output.
  CHECK(!allclose(two.forward(x, {}).output, two_plain.forward(x, {}).output));
  // Layer 0's final state is before any dropout.
  CHECK(allclose(two.forward(x, {}).h_n.select(0, 0), two_plain.forward(x, {}).h_n.select(0, 0), 0, 0));
  two.eval();
  CHECK(allclose(two.forward(x, {}).output, two_plain.forward(x, {}).output, 0, 0));
}

TEST_CASE("recurrent: the one-tensor forward returns the output sequence") {
  nn::GRU gru(3, 4, {.batch_first = true, .bidirectional = true});
  Tensor x = randn({2, 5, 3});
  Tensor y = gru(x);
  CHECK(y.sizes() == Shape{2, 5, 8});
  CHECK(allclose(y, gru.forward(x, {}).output, 0, 0));
}

TEST_CASE("recurrent: bad input is a clear error naming the layer and shapes") {
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  auto text = [](auto f) { return error_text(f); };
  CHECK(text([&] {
          lstm.forward(randn({2, 3, 4, 3}), {});
        }).find("LSTM: expected input (T, B, 3)") != std::string::npos);
  CHECK(text([&] {
          lstm.forward(randn({5, 2, 7}), {});
        }).find("has 7 features, expected input_size 3") != std::string::npos);
  CHECK(text([&] {
          lstm.forward(randn({5, 2, 3}), {randn({2, 3, 4}), randn({2, 2, 4})});
        }).find("LSTM: h0 has shape (2, 3, 4), expected (2, 2, 4)") != std::string::npos);
  CHECK(text([&] {
          lstm.forward(randn({5, 2, 3}), {randn({2, 2, 4}), Tensor()});
        }).find("both h0 and c0") != std::string::npos);
  CHECK(text([&] { lstm.forward(randn({0, 2, 3}), {}); }).find("is empty") != std::string::npos);
  nn::GRU gru(3, 4);
  CHECK(text([&] {
          gru.forward(randn({5, 3}), randn({1, 2, 4}));
        }).find("GRU: h0 has shape (1, 2, 4), expected (1, 4)") != std::string::npos);
  CHECK(text([] { nn::RNN(3, 4, {.nonlinearity = "sigmoid"}); }).find("unknown nonlinearity 'sigmoid'") !=
        std::string::npos);
  CHECK(text([] { nn::GRU(3, 4, {.nonlinearity = "relu"}); }).find("GRU: nonlinearity 'relu' applies to RNN only") !=
        std::string::npos);
  CHECK(text([] { nn::GRU(3, 4, {.proj_size = 2}); }).find("proj_size is supported for LSTM only") !=
        std::string::npos);
  CHECK(text([] { nn::LSTM(3, 4, {.proj_size = 4}); }).find("must be smaller than hidden_size") != std::string::npos);
  CHECK(text([] { nn::LSTM(3, 0); }).find("must be positive") != std::string::npos);
  CHECK(text([] { nn::LSTM(3, 4, {.dropout = 1.5}); }).find("dropout must be in [0, 1]") != std::string::npos);
  nn::LSTMCell cell(3, 4);
  CHECK(text([&] {
          cell.forward(randn({2, 5}), {});
        }).find("LSTMCell: input (2, 5) has 5 features") != std::string::npos);
  CHECK(text([&] {
          cell.forward(randn({2, 3}), {randn({3, 4}), randn({3, 4})});
        }).find("LSTMCell: h has shape (3, 4), expected (2, 4)") != std::string::npos);
  nn::GRUCell gcell(3, 4);
  CHECK(text([&] {
          gcell.forward(randn({2, 2, 3}), Tensor());
        }).find("GRUCell: expected input (B, 3) or (3)") != std::string::npos);
}

TEST_CASE("recurrent: the fused LSTM and GRU carry a NaN forward in time and keep an empty batch empty, as PyTorch") {
  manual_seed(11);
  nn::LSTM lstm(3, 4, {.batch_first = true});
  nn::GRU gru(3, 4, {.batch_first = true});
  Tensor x = randn({2, 5, 3});
  x.select(0, 0).select(0, 1).select(0, 2).fill_(NAN);  // sample 0, step 1
  const nn::LSTMResult l = lstm.forward(x, {});
  const nn::RNNResult g = gru.forward(x, Tensor());
  for (const Tensor& out : {l.output, g.output}) {
    const std::vector<float> v = out.to_vector<float>();
    // sample 0: steps 0 finite, 1.. NaN (the state carries it); sample 1 untouched.
    CHECK(std::isfinite(v[0]));
    CHECK(std::isnan(v[1 * 4]));
    CHECK(std::isnan(v[4 * 4 + 3]));
    for (size_t i = 5 * 4; i < v.size(); ++i) CHECK(std::isfinite(v[i]));
  }
  CHECK(std::isnan(l.c_n.to_vector<float>()[0]));
  const Tensor empty = zeros({0, 5, 3});
  CHECK(lstm.forward(empty, {}).output.sizes() == Shape{0, 5, 4});
  CHECK(gru.forward(empty, Tensor()).h_n.sizes() == Shape{1, 0, 4});
}
