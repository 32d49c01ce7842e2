// opcheck/specs_recurrent.cpp: specs of the fused recurrent ops (engine/ops/recurrent.cpp)
// through their public forms lstm_sequence and gru_sequence (engine/functions.h):
// forward and reverse, against plain F64 loops of the LSTM and GRU equations; F32 against F64,
// gradcheck in F64 (which runs the backward ops). The checked output joins the output sequence
// with the final state(s), so the gradients of h_n and c_n are checked too.
// Not here: the layers that call them, against PyTorch (tests/test_recurrent.cpp).
#include <cmath>

#include "engine/functions.h"
#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

using Ts = std::vector<Tensor>;
using V = std::vector<double>;

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

Tensor flat(const Tensor& t) { return t.reshape({-1}); }

// Steps in order: t = 0 .. T-1, or T-1 .. 0 when reverse.
int64_t step_time(int64_t s, int64_t T, bool reverse) { return reverse ? T - 1 - s : s; }

// in: gx (T, B, 4H), w_hh (4H, H), h0, c0 (B, H) -> y, h_n, c_n flattened and joined.
Tensor lstm_ref(const Ts& in, bool reverse) {
  const int64_t T = in[0].size(0), B = in[0].size(1), H = in[0].size(2) / 4;
  const V gx = in[0].detach().to_vector<double>(), w = in[1].detach().to_vector<double>();
  V h = in[2].detach().to_vector<double>(), c = in[3].detach().to_vector<double>();
  V y(size_t(T * B * H));
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = step_time(s, T, reverse);
    V hn(h.size()), cn(c.size());
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        double a[4];
        for (int64_t k = 0; k < 4; ++k) {
          double v = gx[size_t((t * B + b) * 4 * H + k * H + j)];
          for (int64_t q = 0; q < H; ++q) v += h[size_t(b * H + q)] * w[size_t((k * H + j) * H + q)];
          a[k] = v;
        }
        const double i = sigmoid(a[0]), f = sigmoid(a[1]), g = std::tanh(a[2]), o = sigmoid(a[3]);
        cn[size_t(b * H + j)] = f * c[size_t(b * H + j)] + i * g;
        hn[size_t(b * H + j)] = o * std::tanh(cn[size_t(b * H + j)]);
        y[size_t((t * B + b) * H + j)] = hn[size_t(b * H + j)];
      }
    }
    h = hn;
    c = cn;
  }
  V all = y;
  all.insert(all.end(), h.begin(), h.end());
  all.insert(all.end(), c.begin(), c.end());
  return from_vector(all, {int64_t(all.size())}, DType::F64);
}

// in: gx (T, B, 3H), w_hh (3H, H), b_hh (3H), h0 (B, H) -> y, h_n flattened and joined.
Tensor gru_ref(const Ts& in, bool reverse) {
  const int64_t T = in[0].size(0), B = in[0].size(1), H = in[0].size(2) / 3;
  const V gx = in[0].detach().to_vector<double>(), w = in[1].detach().to_vector<double>();
  const V bias = in[2].detach().to_vector<double>();
  V h = in[3].detach().to_vector<double>();
  V y(size_t(T * B * H));
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = step_time(s, T, reverse);
    V hn(h.size());
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        double gh[3];
        for (int64_t k = 0; k < 3; ++k) {
          double v = bias[size_t(k * H + j)];
          for (int64_t q = 0; q < H; ++q) v += h[size_t(b * H + q)] * w[size_t((k * H + j) * H + q)];
          gh[k] = v;
        }
        const double* x = gx.data() + (t * B + b) * 3 * H;
        const double r = sigmoid(x[j] + gh[0]), z = sigmoid(x[H + j] + gh[1]);
        const double n = std::tanh(x[2 * H + j] + r * gh[2]);
        hn[size_t(b * H + j)] = (1 - z) * n + z * h[size_t(b * H + j)];
        y[size_t((t * B + b) * H + j)] = hn[size_t(b * H + j)];
      }
    }
    h = hn;
  }
  V all = y;
  all.insert(all.end(), h.begin(), h.end());
  return from_vector(all, {int64_t(all.size())}, DType::F64);
}

Tensor vals(const Shape& shape, uint64_t seed) { return uniform_values(shape, -1, 1, seed); }

OpSpec lstm_spec(bool reverse) {
  OpSpec s;
  s.name = reverse ? "lstm_sequence (reverse)" : "lstm_sequence";
  s.covers = {OpId::LstmSequence, OpId::LstmSequenceBackward};
  s.fn = [reverse](const Ts& in) {
    const LSTMResult r = lstm_sequence(in[0], in[1], in[2], in[3], reverse);
    return cat({flat(r.output), flat(r.h_n), flat(r.c_n)}, 0);
  };
  s.reference = [reverse](const Ts& in) { return lstm_ref(in, reverse); };
  s.cases = [] {
    return std::vector<OpCase>{
        {"T 3, B 2, H 3", {vals({3, 2, 12}, 1), vals({12, 3}, 2), vals({2, 3}, 3), vals({2, 3}, 4)}},
        {"T 1, B 1, H 5", {vals({1, 1, 20}, 5), vals({20, 5}, 6), vals({1, 5}, 7), vals({1, 5}, 8)}},
        {"T 2, B 0 (empty batch)", {vals({2, 0, 8}, 9), vals({8, 2}, 10), vals({0, 2}, 11), vals({0, 2}, 12)}},
    };
  };
  s.cuda = false;  // CPU kernels only: other devices run the layers' per-step ops
  s.integers = false;
  return s;
}

OpSpec gru_spec(bool reverse) {
  OpSpec s;
  s.name = reverse ? "gru_sequence (reverse)" : "gru_sequence";
  s.covers = {OpId::GruSequence, OpId::GruSequenceBackward};
  s.fn = [reverse](const Ts& in) {
    const RNNResult r = gru_sequence(in[0], in[1], in[2], in[3], reverse);
    return cat({flat(r.output), flat(r.h_n)}, 0);
  };
  s.reference = [reverse](const Ts& in) { return gru_ref(in, reverse); };
  s.cases = [] {
    return std::vector<OpCase>{
        {"T 3, B 2, H 3", {vals({3, 2, 9}, 11), vals({9, 3}, 12), vals({9}, 13), vals({2, 3}, 14)}},
        {"T 2, B 3, H 4", {vals({2, 3, 12}, 15), vals({12, 4}, 16), vals({12}, 17), vals({3, 4}, 18)}},
    };
  };
  s.cuda = false;
  s.integers = false;
  return s;
}

}  // namespace

void add_recurrent_specs(std::vector<OpSpec>& specs) {
  for (bool reverse : {false, true}) {
    specs.push_back(lstm_spec(reverse));
    specs.push_back(gru_spec(reverse));
  }
}

}  // namespace brisk::opcheck
