// nn/recurrent.cpp: the recurrent cells and layers of nn/recurrent.h. One step of each cell
// kind is a small function over engine ops; the sequence layers run the steps layer by layer.
// Not here: the transformer layers (nn/transformer.cpp).
#include "nn/recurrent.h"

#include <cmath>
#include <vector>

#include "engine/dispatch.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace brisk::nn {

namespace F = functional;

namespace {

// Note [Recurrent steps]
// Each step takes gi = x W_ih^T + b_ih (B, G * H) and adds the hidden projection
// h W_hh^T + b_hh.
// Gate slices follow PyTorch's packing: LSTM rows [i | f | g | o], GRU rows [r | z | n]. The
// GRU keeps the hidden projection's n part apart, because its reset gate scales it before the
// input part is added: n = tanh(gi_n + r * (h W_hn^T + b_hn)), as PyTorch (and cuDNN).

Tensor gate(const Tensor& g, int64_t k, int64_t h) { return g.narrow(g.dim() - 1, k * h, h); }

Tensor rnn_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh, bool relu) {
  Tensor pre = gi + F::linear(h, w_hh, b_hh);
  return relu ? brisk::relu(pre) : brisk::tanh(pre);
}

// h (B, H_out), c (B, H); w_hr (H_out, H) or undefined (no projection).
LSTMState lstm_step(const Tensor& gi, const Tensor& h, const Tensor& c, const Tensor& w_hh, const Tensor& b_hh,
                    const Tensor& w_hr) {
  const int64_t hs = c.size(c.dim() - 1);
  Tensor gates = gi + F::linear(h, w_hh, b_hh);  // (B, 4H)
  Tensor i = sigmoid(gate(gates, 0, hs));
  Tensor f = sigmoid(gate(gates, 1, hs));
  Tensor g = brisk::tanh(gate(gates, 2, hs));
  Tensor o = sigmoid(gate(gates, 3, hs));
  Tensor c_next = f * c + i * g;
  Tensor h_next = o * brisk::tanh(c_next);
  if (w_hr.defined()) h_next = F::linear(h_next, w_hr);
  return {h_next, c_next};
}

Tensor gru_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh) {
  const int64_t hs = h.size(h.dim() - 1);
  Tensor gh = F::linear(h, w_hh, b_hh);  // (B, 3H)
  Tensor r = sigmoid(gate(gi, 0, hs) + gate(gh, 0, hs));
  Tensor z = sigmoid(gate(gi, 1, hs) + gate(gh, 1, hs));
  Tensor n = brisk::tanh(gate(gi, 2, hs) + r * gate(gh, 2, hs));
  return n + z * (h - n);  // (1 - z) * n + z * h
}

// Registers weight_ih{sfx}, weight_hh{sfx}, bias_ih{sfx}, bias_hh{sfx} with PyTorch's init.
void register_cell_params(Module& m, const std::string& sfx, int64_t gates, int64_t in, int64_t hidden, int64_t h_in,
                          bool bias) {
  m.register_parameter("weight_ih" + sfx, empty({gates * hidden, in}));
  m.register_parameter("weight_hh" + sfx, empty({gates * hidden, h_in}));
  if (bias) {
    m.register_parameter("bias_ih" + sfx, empty({gates * hidden}));
    m.register_parameter("bias_hh" + sfx, empty({gates * hidden}));
  }
}

// PyTorch's reset_parameters: every parameter U(-1/sqrt(hidden), 1/sqrt(hidden)).
void init_uniform(Module& m, int64_t hidden) {
  const double k = 1.0 / std::sqrt(double(hidden));
  for (Tensor p : m.parameters()) init::uniform_(p, -k, k);
}

void check_sizes(const char* type, int64_t input_size, int64_t hidden_size) {
  BRISK_CHECK(input_size > 0 && hidden_size > 0, type, ": input_size ", input_size, " and hidden_size ", hidden_size,
              " must be positive");
}

// A cell's input (B, in) or (in) and state (B, H) or (H): the batched views and whether the
// input was unbatched.
struct CellArgs {
  Tensor x{};
  bool unbatched = false;
};

CellArgs cell_input(const char* type, const Tensor& input, int64_t input_size) {
  BRISK_CHECK(input.defined(), type, ": undefined input");
  BRISK_CHECK(input.dim() == 1 || input.dim() == 2, type, ": expected input (B, ", input_size, ") or (", input_size,
              "), got ", input.sizes());
  BRISK_CHECK(input.size(input.dim() - 1) == input_size, type, ": input ", input.sizes(), " has ",
              input.size(input.dim() - 1), " features, expected input_size ", input_size);
  const bool unbatched = input.dim() == 1;
  return {unbatched ? input.unsqueeze(0) : input, unbatched};
}

Tensor cell_state(const char* type, const char* name, const Tensor& s, const CellArgs& a, int64_t hidden) {
  const Tensor& x = a.x;
  if (!s.defined()) return zeros({x.size(0), hidden}, x.dtype(), x.device());
  Shape want = a.unbatched ? Shape{hidden} : Shape{x.size(0), hidden};
  BRISK_CHECK(s.sizes() == want, type, ": ", name, " has shape ", s.sizes(), ", expected ", want);
  return a.unbatched ? s.unsqueeze(0) : s;
}

Tensor cell_output(const Tensor& h, const CellArgs& a) { return a.unbatched ? h.squeeze(0) : h; }

}  // namespace

// ---- cells

RNNCell::RNNCell(int64_t in, int64_t hidden, bool bias, const std::string& act)
    : Module("RNNCell"), input_size(in), hidden_size(hidden), nonlinearity(act) {
  check_sizes("RNNCell", in, hidden);
  BRISK_CHECK(act == "tanh" || act == "relu", "RNNCell: unknown nonlinearity '", act, "' (tanh or relu)");
  register_cell_params(*this, "", 1, in, hidden, hidden, bias);
  init_uniform(*this, hidden);
}

Tensor RNNCell::forward(const Tensor& input, const Tensor& hx) {
  CellArgs a = cell_input("RNNCell", input, input_size);
  Tensor h = cell_state("RNNCell", "hx", hx, a, hidden_size);
  Tensor gi = F::linear(a.x, parameter("weight_ih"), maybe_parameter("bias_ih"));
  return cell_output(rnn_step(gi, h, parameter("weight_hh"), maybe_parameter("bias_hh"), nonlinearity == "relu"), a);
}

LSTMCell::LSTMCell(int64_t in, int64_t hidden, bool bias) : Module("LSTMCell"), input_size(in), hidden_size(hidden) {
  check_sizes("LSTMCell", in, hidden);
  register_cell_params(*this, "", 4, in, hidden, hidden, bias);
  init_uniform(*this, hidden);
}

LSTMState LSTMCell::forward(const Tensor& input, const LSTMState& state) {
  BRISK_CHECK(state.h.defined() == state.c.defined(), "LSTMCell: give both h and c of the state, or neither");
  CellArgs a = cell_input("LSTMCell", input, input_size);
  Tensor h = cell_state("LSTMCell", "h", state.h, a, hidden_size);
  Tensor c = cell_state("LSTMCell", "c", state.c, a, hidden_size);
  Tensor gi = F::linear(a.x, parameter("weight_ih"), maybe_parameter("bias_ih"));
  LSTMState next = lstm_step(gi, h, c, parameter("weight_hh"), maybe_parameter("bias_hh"), Tensor());
  return {cell_output(next.h, a), cell_output(next.c, a)};
}

GRUCell::GRUCell(int64_t in, int64_t hidden, bool bias) : Module("GRUCell"), input_size(in), hidden_size(hidden) {
  check_sizes("GRUCell", in, hidden);
  register_cell_params(*this, "", 3, in, hidden, hidden, bias);
  init_uniform(*this, hidden);
}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) {
  CellArgs a = cell_input("GRUCell", input, input_size);
  Tensor h = cell_state("GRUCell", "hx", hx, a, hidden_size);
  Tensor gi = F::linear(a.x, parameter("weight_ih"), maybe_parameter("bias_ih"));
  return cell_output(gru_step(gi, h, parameter("weight_hh"), maybe_parameter("bias_hh")), a);
}

// ---- sequence layers

namespace {

int64_t gates_of(RNNBase::Mode m) {
  switch (m) {
    case RNNBase::Mode::Lstm: return 4;
    case RNNBase::Mode::Gru: return 3;
    default: return 1;
  }
}

}  // namespace

RNNBase::RNNBase(const char* type, Mode mode, int64_t in, int64_t hidden, RNNOptions opt)
    : Module(type), input_size(in), hidden_size(hidden), options(std::move(opt)), mode_(mode) {
  check_sizes(type, in, hidden);
  BRISK_CHECK(options.num_layers > 0, type, ": num_layers must be positive, got ", options.num_layers);
  BRISK_CHECK(options.dropout >= 0 && options.dropout <= 1, type, ": dropout must be in [0, 1], got ", options.dropout);
  BRISK_CHECK(options.proj_size >= 0, type, ": proj_size must be non-negative, got ", options.proj_size);
  BRISK_CHECK(options.proj_size == 0 || mode == Mode::Lstm, type, ": proj_size is supported for LSTM only");
  BRISK_CHECK(options.proj_size < hidden, type, ": proj_size ", options.proj_size, " must be smaller than hidden_size ",
              hidden);
  const int64_t dirs = options.bidirectional ? 2 : 1;
  const int64_t h_out = options.proj_size > 0 ? options.proj_size : hidden;
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    const int64_t layer_in = layer == 0 ? in : dirs * h_out;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string sfx = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      register_cell_params(*this, sfx, gates_of(mode), layer_in, hidden, h_out, options.bias);
      if (options.proj_size > 0) register_parameter("weight_hr" + sfx, empty({options.proj_size, hidden}));
    }
  }
  init_uniform(*this, hidden);
}

// Note [Per-step tensors]
// A layer reads its input as T tensors (B, F), one per step, and hands the next layer its
// outputs the same way; only the first layer's input is sliced (select) from a (T, B, F)
// tensor and only the last layer's outputs are stacked into one. A slice's backward builds a
// zero-filled gradient of the whole sliced tensor, so slicing T steps out of a (T, B, F) tensor
// that needs a gradient costs O(T^2 B F) in backward: when every layer sliced its (T, B, 4H)
// input projection, those zero fills and adds were 28% of an LSTM's forward + backward (2
// layers, T = 50, B = 32, H = 128, 1 thread: 134 ms, 85 ms with per-step tensors).
// The price: T small GEMMs x W_ih^T per layer instead of one (T * B, F) GEMM. The first
// layer's slices still cost O(T^2 B input_size) in backward when the input needs a gradient
// (an embedding's output); an unbind whose backward stacks the gradients would remove it.
//
// input (T, B, in) [(B, T, in) if batch_first, (T, in) unbatched]
//   -> per layer, direction and step: x_t W_ih^T + b_ih (B, G * H) and one cell step
//   -> output (T, B, D * H_out) [layout as the input], h_n / c_n (L * D, B, H_out / H)
LSTMResult RNNBase::run(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  const std::string& type = type_name();
  BRISK_CHECK(input.defined(), type, ": undefined input");
  BRISK_CHECK(input.dim() == 2 || input.dim() == 3, type, ": expected input ",
              options.batch_first ? "(B, T, " : "(T, B, ", input_size, ") or unbatched (T, ", input_size, "), got ",
              input.sizes());
  BRISK_CHECK(input.size(input.dim() - 1) == input_size, type, ": input ", input.sizes(), " has ",
              input.size(input.dim() - 1), " features, expected input_size ", input_size);
  const bool unbatched = input.dim() == 2;
  Tensor x = unbatched ? input.unsqueeze(1) : (options.batch_first ? input.transpose(0, 1) : input);  // (T, B, in)
  const int64_t steps = x.size(0), batch = x.size(1);
  BRISK_CHECK(steps > 0, type, ": the input sequence ", input.sizes(), " is empty");

  const int64_t dirs = options.bidirectional ? 2 : 1;
  const int64_t layers = options.num_layers;
  const int64_t h_out = options.proj_size > 0 ? options.proj_size : hidden_size;
  const bool lstm = mode_ == Mode::Lstm;
  if (lstm) BRISK_CHECK(h0.defined() == c0.defined(), type, ": give both h0 and c0 of the initial state, or neither");
  auto initial = [&](const Tensor& s, const char* name, int64_t features) {
    if (!s.defined()) return zeros({layers * dirs, batch, features}, x.dtype(), x.device());
    Shape want = unbatched ? Shape{layers * dirs, features} : Shape{layers * dirs, batch, features};
    BRISK_CHECK(s.sizes() == want, type, ": ", name, " has shape ", s.sizes(), ", expected ", want,
                " (num_layers * num_directions, ", unbatched ? "" : "B, ", "features) for input ", input.sizes());
    return unbatched ? s.unsqueeze(1) : s;
  };
  const Tensor h_init = initial(h0, "h0", h_out);
  const Tensor c_init = lstm ? initial(c0, "c0", hidden_size) : Tensor();

  if (fused(x)) return run_fused(x, h_init, c_init, unbatched);

  // The sequence as T per-step tensors (B, F); see Note [Per-step tensors].
  std::vector<Tensor> seq(static_cast<size_t>(steps));
  for (int64_t t = 0; t < steps; ++t) seq[size_t(t)] = x.select(0, t);
  std::vector<Tensor> h_final, c_final;
  for (int64_t layer = 0; layer < layers; ++layer) {
    std::vector<std::vector<Tensor>> dir_outs;  // [direction][t] (B, H_out)
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string sfx = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      const Tensor& w_ih = parameter("weight_ih" + sfx);
      const Tensor b_ih = maybe_parameter("bias_ih" + sfx);
      const Tensor& w_hh = parameter("weight_hh" + sfx);
      const Tensor b_hh = maybe_parameter("bias_hh" + sfx);
      const Tensor w_hr = maybe_parameter("weight_hr" + sfx);
      Tensor h = h_init.select(0, layer * dirs + d);  // (B, H_out)
      Tensor c = lstm ? c_init.select(0, layer * dirs + d) : Tensor();
      std::vector<Tensor> outs(static_cast<size_t>(steps));
      for (int64_t i = 0; i < steps; ++i) {
        const int64_t t = d == 0 ? i : steps - 1 - i;            // the reverse direction reads the sequence backwards
        const Tensor g = F::linear(seq[size_t(t)], w_ih, b_ih);  // (B, G * H)
        switch (mode_) {
          case Mode::RnnTanh: h = rnn_step(g, h, w_hh, b_hh, false); break;
          case Mode::RnnRelu: h = rnn_step(g, h, w_hh, b_hh, true); break;
          case Mode::Gru: h = gru_step(g, h, w_hh, b_hh); break;
          case Mode::Lstm: {
            LSTMState st = lstm_step(g, h, c, w_hh, b_hh, w_hr);
            h = st.h;
            c = st.c;
            break;
          }
        }
        outs[size_t(t)] = h;
      }
      dir_outs.push_back(std::move(outs));
      h_final.push_back(h);
      if (lstm) c_final.push_back(c);
    }
    // The next layer's input at step t: both directions' h side by side (B, D * H_out),
    // dropped out between layers in training.
    const bool last = layer + 1 == layers;
    for (int64_t t = 0; t < steps; ++t) {
      Tensor out = dirs == 1 ? dir_outs[0][size_t(t)] : cat({dir_outs[0][size_t(t)], dir_outs[1][size_t(t)]}, 1);
      seq[size_t(t)] = !last && options.dropout > 0 ? F::dropout(out, options.dropout, is_training()) : out;
    }
  }
  const Tensor output = stack(seq, 0);  // (T, B, D * H_out)

  LSTMResult r;
  r.output = unbatched ? output.squeeze(1) : (options.batch_first ? output.transpose(0, 1) : output);
  r.h_n = stack(h_final, 0);  // (L * D, B, H_out)
  if (lstm) r.c_n = stack(c_final, 0);
  if (unbatched) {
    r.h_n = r.h_n.squeeze(1);
    if (lstm) r.c_n = r.c_n.squeeze(1);
  }
  return r;
}

// Note [Fused recurrent layers] (kernels/cpu/recurrent.cpp): LSTM (without a projection) and
// GRU layers in F32 / F64 on a device with the fused kernels run one lstm_sequence /
// gru_sequence op per layer and direction after one input projection over the whole
// sequence; everything else (RNN, proj_size, 16-bit dtypes, devices without those kernels)
// takes the per-step ops below. Both give the same values and gradients (tests/test_recurrent.cpp).
bool RNNBase::fused(const Tensor& x) const {
  const OpId op = mode_ == Mode::Lstm ? OpId::LstmSequence : OpId::GruSequence;
  const bool kind = (mode_ == Mode::Lstm && options.proj_size == 0) || mode_ == Mode::Gru;
  return kind && (x.dtype() == DType::F32 || x.dtype() == DType::F64) && op_def(op).kernels[int(x.device().type)];
}

LSTMResult RNNBase::run_fused(const Tensor& x, const Tensor& h_init, const Tensor& c_init, bool unbatched) {
  const bool lstm = mode_ == Mode::Lstm;
  const int64_t dirs = options.bidirectional ? 2 : 1;
  Tensor seq = x;  // (T, B, F)
  std::vector<Tensor> h_final, c_final;
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    std::vector<Tensor> dir_outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string sfx = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      const Tensor& w_ih = parameter("weight_ih" + sfx);
      const Tensor& w_hh = parameter("weight_hh" + sfx);
      Tensor b_ih = maybe_parameter("bias_ih" + sfx), b_hh = maybe_parameter("bias_hh" + sfx);
      const int64_t k = layer * dirs + d;
      if (lstm) {  // both biases go into the input projection
        const Tensor bias = b_ih.defined() ? b_ih + b_hh : Tensor();
        const Tensor gx = F::linear(seq, w_ih, bias);  // (T, B, 4H)
        LSTMResult r = F::lstm_sequence(gx, w_hh, h_init.select(0, k), c_init.select(0, k), d == 1);
        dir_outs.push_back(r.output);
        h_final.push_back(r.h_n);
        c_final.push_back(r.c_n);
      } else {
        if (!b_hh.defined()) b_hh = zeros({w_hh.size(0)}, x.dtype(), x.device());
        const Tensor gx = F::linear(seq, w_ih, b_ih);  // (T, B, 3H)
        RNNResult r = F::gru_sequence(gx, w_hh, b_hh, h_init.select(0, k), d == 1);
        dir_outs.push_back(r.output);
        h_final.push_back(r.h_n);
      }
    }
    seq = dirs == 1 ? dir_outs[0] : cat(dir_outs, 2);  // (T, B, D * H)
    if (layer + 1 < options.num_layers && options.dropout > 0) seq = F::dropout(seq, options.dropout, is_training());
  }
  LSTMResult r;
  r.output = unbatched ? seq.squeeze(1) : (options.batch_first ? seq.transpose(0, 1) : seq);
  r.h_n = stack(h_final, 0);
  if (lstm) r.c_n = stack(c_final, 0);
  if (unbatched) {
    r.h_n = r.h_n.squeeze(1);
    if (lstm) r.c_n = r.c_n.squeeze(1);
  }
  return r;
}

namespace {

RNNBase::Mode rnn_mode(const std::string& act) {
  BRISK_CHECK(act == "tanh" || act == "relu", "RNN: unknown nonlinearity '", act, "' (tanh or relu)");
  return act == "relu" ? RNNBase::Mode::RnnRelu : RNNBase::Mode::RnnTanh;
}

RNNOptions tanh_only(const char* type, RNNOptions opt) {
  BRISK_CHECK(opt.nonlinearity == "tanh", type, ": nonlinearity '", opt.nonlinearity, "' applies to RNN only");
  return opt;
}

}  // namespace

RNN::RNN(int64_t in, int64_t hidden, RNNOptions opt) : RNNBase("RNN", rnn_mode(opt.nonlinearity), in, hidden, opt) {}

RNNResult RNN::forward(const Tensor& input, const Tensor& h0) {
  LSTMResult r = run(input, h0, Tensor());
  return {r.output, r.h_n};
}

LSTM::LSTM(int64_t in, int64_t hidden, RNNOptions opt)
    : RNNBase("LSTM", Mode::Lstm, in, hidden, tanh_only("LSTM", std::move(opt))) {}

LSTMResult LSTM::forward(const Tensor& input, const LSTMState& state) { return run(input, state.h, state.c); }

GRU::GRU(int64_t in, int64_t hidden, RNNOptions opt)
    : RNNBase("GRU", Mode::Gru, in, hidden, tanh_only("GRU", std::move(opt))) {}

RNNResult GRU::forward(const Tensor& input, const Tensor& h0) {
  LSTMResult r = run(input, h0, Tensor());
  return {r.output, r.h_n};
}

}  // namespace brisk::nn
