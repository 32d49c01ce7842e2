// opcheck/specs_attention.cpp: specs of the fused attention op and its backward op
// (engine/ops/attention.cpp) through scaled_dot_product_attention: plain F64 loops of
// softmax(q k^T * scale + mask) v as the reference, over leading dims, T != S, head sizes that
// are not a multiple of the vector width, causal (square and T != S), a Bool key-padding
// mask, an additive float mask, a custom scale, and dropout (its mask regenerated from the
// Philox stream the op documents); F32 and BF16 (the op's BF16 kernel) against F64, gradcheck
// in F64 (which runs the backward op); BF16 at head sizes 32-128 with odd T and S. The math
// form (scaled_dot_product_attention_math) is checked against the same loops.
// Not here: parity with PyTorch and the memory bound (tests/test_attention.cpp).
#include <cmath>
#include <limits>

#include "opcheck/spec.h"

namespace brisk::opcheck {
namespace {

using Ts = std::vector<Tensor>;
using V = std::vector<double>;

struct Options {
  bool causal = false;
  bool additive = false;  // a float mask built from the shapes (constant: no gradient)
  double scale = 0;       // 0: 1 / sqrt(D)
  double dropout = 0;
  uint64_t seed = 7;
};

// The additive mask of a (T, S) problem: values in [-1, 1) with every third score of the
// first row from the second on masked out (-inf; the row keeps a key), broadcast over the
// leading dims.
Tensor additive_mask(int64_t T, int64_t S) {
  V m = uniform_values({T, S}, -1, 1, 99).to_vector<double>();
  for (int64_t j = 1; j < S; j += 3) m[size_t(j)] = -std::numeric_limits<double>::infinity();
  return from_vector(m, {T, S}, DType::F64);
}

// in: q (*, T, D), k (*, S, D), v (*, S, Dv)[, mask Bool broadcastable] -> out (*, T, Dv) in F64.
Tensor attention_ref(const Ts& in, const Options& o) {
  const Tensor& q = in[0];
  const int64_t T = q.size(-2), D = q.size(-1), S = in[1].size(-2), Dv = in[2].size(-1);
  const int64_t N = q.numel() / (T * D);
  const V qv = q.detach().to_vector<double>(), kv = in[1].detach().to_vector<double>(),
          vv = in[2].detach().to_vector<double>();
  Shape scores_shape = q.sizes();
  scores_shape[scores_shape.size() - 1] = S;
  V allowed(size_t(N * T * S), 1.0);
  if (in.size() == 4) allowed = expand(in[3], scores_shape).contiguous().to(DType::F64).to_vector<double>();
  const V add = o.additive ? additive_mask(T, S).to_vector<double>() : V(size_t(T * S), 0.0);
  const double scale = o.scale > 0 ? o.scale : 1 / std::sqrt(double(D));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  V out(size_t(N * T * Dv));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < T; ++i) {
      V s(static_cast<size_t>(S));
      double mx = neg_inf;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qv[size_t((n * T + i) * D + d)] * kv[size_t((n * S + j) * D + d)];
        double v = dot * scale + add[size_t(i * S + j)];
        if (allowed[size_t((n * T + i) * S + j)] == 0 || (o.causal && j > i)) v = neg_inf;
        s[size_t(j)] = v;
        mx = std::max(mx, v);
      }
      double l = 0;
      for (double& v : s) l += (v = std::exp(v - mx));
      for (int64_t j = 0; j < S; ++j) {
        double w = s[size_t(j)] / l;
        if (o.dropout > 0) {
          const uint64_t e = uint64_t((n * T + i) * S + j);
          w = double(philox_uniform(o.seed, 0, e)) >= o.dropout ? w / (1 - o.dropout) : 0.0;
        }
        for (int64_t d = 0; d < Dv; ++d) out[size_t((n * T + i) * Dv + d)] += w * vv[size_t((n * S + j) * Dv + d)];
      }
    }
  }
  Shape shape = q.sizes();
  shape[shape.size() - 1] = Dv;
  return from_vector(out, shape, DType::F64);
}

Tensor attention_fn(const Ts& in, const Options& o, bool math) {
  const int64_t T = in[0].size(-2), S = in[1].size(-2);
  Tensor mask = in.size() == 4 ? in[3] : Tensor();
  if (o.additive) mask = additive_mask(T, S).to(in[0].dtype());
  const std::optional<double> scale = o.scale > 0 ? std::optional<double>(o.scale) : std::nullopt;
  Generator g(o.seed);  // offset 0: the stream the reference regenerates
  return math ? scaled_dot_product_attention_math(in[0], in[1], in[2], mask, o.dropout, o.causal, scale, &g)
              : scaled_dot_product_attention(in[0], in[1], in[2], mask, o.dropout, o.causal, scale, &g);
}

Tensor vals(const Shape& s, uint64_t seed) { return uniform_values(s, -1, 1, seed); }

// A (B, 1, 1, S) key-padding mask, true = attend: the last `pad` keys of batch 1 are padding.
Tensor key_padding(int64_t B, int64_t S, int64_t pad) {
  V m(size_t(B * S), 1.0);
  for (int64_t j = S - pad; j < S; ++j) m[size_t(S + j)] = 0;
  return from_vector(m, {B, 1, 1, S}, DType::F64).to(DType::Bool);
}

OpSpec spec(const std::string& name, Options o, bool math, std::function<std::vector<OpCase>()> cases) {
  OpSpec s;
  s.name = name + (math ? " (math form)" : "");
  s.covers = math ? std::vector<OpId>{} : std::vector<OpId>{OpId::Attention, OpId::AttentionBackward};
  s.fn = [o, math](const Ts& in) { return attention_fn(in, o, math); };
  s.reference = [o](const Ts& in) { return attention_ref(in, o); };
  s.cases = std::move(cases);
  s.integers = false;
  s.rejects_layouts = false;
  // BF16 runs the op's BF16 kernel (the math form: BF16 matmuls and an F32 softmax). Each input
  // is off by up to 2^-9 relative and P is rounded to BF16 before P v: at most 2.3e-3 here
  // (measured; 2e-3 fails a few elements), against F64 values of the unrounded inputs.
  s.dtypes = {DType::F32, DType::BF16};
  s.tol_half = 5e-3;
  return s;
}

std::vector<OpCase> plain_cases() {
  return {
      {"(2, 3) heads, T 5, S 7, D 4, Dv 6", {vals({2, 3, 5, 4}, 1), vals({2, 3, 7, 4}, 2), vals({2, 3, 7, 6}, 3)}},
      {"no leading dims, T 1, S 1", {vals({1, 3}, 4), vals({1, 3}, 5), vals({1, 2}, 6)}},
      {"T 70, S 130 (partial tiles), D 5", {vals({1, 70, 5}, 7), vals({1, 130, 5}, 8), vals({1, 130, 3}, 9)}},
  };
}

std::vector<OpCase> causal_cases() {
  return {
      {"square T = S = 6", {vals({2, 6, 4}, 11), vals({2, 6, 4}, 12), vals({2, 6, 4}, 13)}},
      {"T 3, S 6 (top-left diagonal)", {vals({1, 2, 3, 5}, 14), vals({1, 2, 6, 5}, 15), vals({1, 2, 6, 5}, 16)}},
      {"T = S = 131 (tiles above the diagonal skipped)",
       {vals({1, 131, 3}, 17), vals({1, 131, 3}, 18), vals({1, 131, 2}, 19)}},
  };
}

std::vector<OpCase> mask_cases() {
  return {
      {"key padding (2, 1, 1, 7)",
       {vals({2, 3, 5, 4}, 21), vals({2, 3, 7, 4}, 22), vals({2, 3, 7, 4}, 23), key_padding(2, 7, 3)}},
  };
}

// BF16 at GPT-2-like head sizes: odd T and S across tile edges (kBq = kBk = 128). No gradcheck
// (the shapes are large for it; the small cases above check the backward op in F64).
std::vector<OpCase> head_cases() {
  return {
      {"D 32, T 67, S 131", {vals({2, 67, 32}, 31), vals({2, 131, 32}, 32), vals({2, 131, 32}, 33)}},
      {"D 64, T = S = 129", {vals({1, 2, 129, 64}, 34), vals({1, 2, 129, 64}, 35), vals({1, 2, 129, 64}, 36)}},
      {"D 128, T 33, S 257", {vals({1, 33, 128}, 37), vals({1, 257, 128}, 38), vals({1, 257, 128}, 39)}},
  };
}

std::vector<OpCase> head_mask_cases() {
  return {
      {"D 64, key padding (2, 1, 1, 131)",
       {vals({2, 2, 67, 64}, 41), vals({2, 2, 131, 64}, 42), vals({2, 2, 131, 64}, 43), key_padding(2, 131, 40)}},
  };
}

OpSpec head_spec(const std::string& name, Options o, std::function<std::vector<OpCase>()> cases) {
  OpSpec s = spec(name, o, false, std::move(cases));
  s.grad = false;
  return s;
}

}  // namespace

void add_attention_specs(std::vector<OpSpec>& specs) {
  for (bool math : {false, true}) {
    specs.push_back(spec("scaled_dot_product_attention", {}, math, plain_cases));
    specs.push_back(spec("scaled_dot_product_attention (causal)", {.causal = true}, math, causal_cases));
    specs.push_back(spec("scaled_dot_product_attention (Bool mask)", {}, math, mask_cases));
    specs.push_back(spec("scaled_dot_product_attention (additive mask, scale 0.3)", {.additive = true, .scale = 0.3},
                         math, plain_cases));
  }
  specs.push_back(head_spec("scaled_dot_product_attention (head sizes 32-128)", {}, head_cases));
  specs.push_back(head_spec("scaled_dot_product_attention (head sizes 32-128, causal)", {.causal = true}, head_cases));
  specs.push_back(
      head_spec("scaled_dot_product_attention (head sizes 32-128, additive mask)", {.additive = true}, head_cases));
  specs.push_back(head_spec("scaled_dot_product_attention (head sizes 32-128, Bool mask)", {}, head_mask_cases));
  // Dropout: the fused op's mask comes from element (n T + i) S + j of its stream (the math form
  // draws its own, so only the fused op has a loop reference).
  specs.push_back(
      spec("scaled_dot_product_attention (dropout 0.3)", {.causal = true, .dropout = 0.3}, false, causal_cases));
}

}  // namespace brisk::opcheck
