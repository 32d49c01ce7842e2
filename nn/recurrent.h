// nn/recurrent.h: recurrent layers as PyTorch's torch.nn has them: the cells RNNCell, LSTMCell,
// GRUCell (one time step) and the sequence layers RNN, LSTM, GRU (multi-layer, bidirectional,
// batch_first, dropout between layers, optional initial state). Parameter names, shapes, gate
// order (LSTM i, f, g, o; GRU r, z, n) and init (U(-1/sqrt(hidden), 1/sqrt(hidden))) are
// PyTorch's, so a PyTorch state_dict loads unchanged. Written with engine ops (linear, sigmoid,
// tanh, cat, stack), so autograd needs nothing of its own; LSTM and GRU layers run the fused
// sequence ops below where the device has them (Note [Fused recurrent layers]).
// Not here: a fused cuDNN RNN or packed (variable-length) sequences.
//
//   nn::LSTM lstm(10, 20, {.num_layers = 2, .batch_first = true, .bidirectional = true});
//   auto [out, h_n, c_n] = lstm.forward(x, {});    // x (B, T, 10) -> out (B, T, 40)
//   auto [out2, h2] = gru.forward(x, h0);           // h0 (num_layers * D, B, hidden)
#pragma once

#include <string>

#include "engine/functions.h"
#include "nn/module.h"

namespace brisk::nn {

// An LSTM's (h, c) pair: an initial state (both defined or both undefined) or a cell's result.
struct LSTMState {
  Tensor h{};
  Tensor c{};
};

// ---- cells: input (B, input_size) or unbatched (input_size); the state likewise
// (B, hidden_size) or (hidden_size); an undefined state is zeros.
// Parameters: weight_ih (G * hidden, input), weight_hh (G * hidden, hidden), bias_ih, bias_hh
// (G * hidden) with G = 1 (RNN), 4 (LSTM), 3 (GRU).

// h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act "tanh" or "relu" (torch.nn.RNNCell).
class RNNCell : public Module {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true, const std::string& nonlinearity = "tanh");
  Tensor forward(const Tensor& input, const Tensor& hx);
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  int64_t input_size, hidden_size;
  std::string nonlinearity;
};

// torch.nn.LSTMCell: returns (h', c').
class LSTMCell : public Module {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  LSTMState forward(const Tensor& input, const LSTMState& state);
  Tensor forward(const Tensor& input) override { return forward(input, LSTMState{}).h; }
  int64_t input_size, hidden_size;
};

// torch.nn.GRUCell.
class GRUCell : public Module {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  Tensor forward(const Tensor& input, const Tensor& hx);
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  int64_t input_size, hidden_size;
};

// ---- sequence layers
// Options in PyTorch's keyword order (designated initializers must keep it).
struct RNNOptions {
  int64_t num_layers = 1;
  std::string nonlinearity = "tanh";  // RNN only: "tanh" or "relu"
  bool bias = true;
  bool batch_first = false;  // (B, T, *) instead of (T, B, *); states stay (L * D, B, H)
  double dropout = 0.0;      // on each layer's output but the last, in training
  bool bidirectional = false;
  int64_t proj_size = 0;  // LSTM only: h projected to proj_size (weight_hr_l{k})
};

// What RNN, GRU (RNNResult: output, h_n) and LSTM (LSTMResult: output, h_n, c_n) return; the
// structs live with the fused sequence ops (engine/functions.h).
using ::brisk::LSTMResult;
using ::brisk::RNNResult;

// The shared machinery of RNN, LSTM and GRU (PyTorch's RNNBase). Parameters per layer k and
// direction (suffix "" forward, "_reverse" backward), registered in PyTorch's order:
// weight_ih_l{k}{sfx} (G * H, in_k), weight_hh_l{k}{sfx} (G * H, H_out), bias_ih_l{k}{sfx},
// bias_hh_l{k}{sfx} (G * H) when bias, weight_hr_l{k}{sfx} (proj_size, H) when proj_size > 0;
// in_0 = input_size, in_k = D * H_out after, H_out = proj_size or H.
class RNNBase : public Module {
 public:
  enum class Mode { RnnTanh, RnnRelu, Lstm, Gru };
  RNNBase(const char* type, Mode mode, int64_t input_size, int64_t hidden_size, RNNOptions options);
  // The output sequence only (so the layer fits in a Sequential).
  Tensor forward(const Tensor& input) override { return run(input, {}, {}).output; }
  int64_t input_size, hidden_size;
  RNNOptions options;

 protected:
  // h0 / c0: undefined (zeros) or (num_layers * D, B, H_out) / (..., H); unbatched without B.
  LSTMResult run(const Tensor& input, const Tensor& h0, const Tensor& c0);

 private:
  Mode mode_;
  // Whether the fused sequence ops take this layer (Note [Fused recurrent layers]).
  bool fused(const Tensor& x) const;
  // run() through them: x (T, B, in), states (L * D, B, *) checked and defined.
  LSTMResult run_fused(const Tensor& x, const Tensor& h_init, const Tensor& c_init, bool unbatched);
};

// torch.nn.RNN (Elman RNN, tanh or relu).
class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  using RNNBase::forward;
  RNNResult forward(const Tensor& input, const Tensor& h0);
};

// torch.nn.LSTM; state {h0, c0} or {} for zeros.
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  using RNNBase::forward;
  LSTMResult forward(const Tensor& input, const LSTMState& state);
};

// torch.nn.GRU.
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  using RNNBase::forward;
  RNNResult forward(const Tensor& input, const Tensor& h0);
};

// The fused sequence ops' public forms (engine/functions.h), under their old names.
namespace functional {
using ::brisk::gru_sequence;
using ::brisk::lstm_sequence;
}  // namespace functional

}  // namespace brisk::nn
