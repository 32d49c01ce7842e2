// nn/generate.cpp: the KV cache and the generation loop (nn/generate.h).
#include "nn/generate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

#include "engine/functions.h"
#include "engine/grad_mode.h"
#include "engine/random.h"

namespace brisk::nn {

// ---- left padding

PaddedBatch left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_token_id) {
  BRISK_CHECK(!prompts.empty(), "left_pad: no prompts");
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const auto b = int64_t(prompts.size()), t = int64_t(longest);
  std::vector<int64_t> ids(size_t(b * t), pad_token_id), mask(size_t(b * t), 0);
  for (int64_t i = 0; i < b; ++i) {
    const auto& p = prompts[size_t(i)];
    const int64_t off = t - int64_t(p.size());
    for (size_t j = 0; j < p.size(); ++j) {
      ids[size_t(i * t + off) + j] = p[j];
      mask[size_t(i * t + off) + j] = 1;
    }
  }
  return {from_data(ids.data(), {b, t}), from_data(mask.data(), {b, t})};
}

// ---- the logits processors, on one row of float logits (Hugging Face's, in its order)

namespace {

// CTRL's repetition penalty over every id in the row so far (the prompt included, pads too:
// Hugging Face's RepetitionPenaltyLogitsProcessor gathers over input_ids as they are).
void apply_repetition_penalty(std::vector<float>& logits, const std::vector<int64_t>& seen, double penalty) {
  std::vector<char> done(logits.size(), 0);
  for (int64_t id : seen) {
    if (id < 0 || size_t(id) >= logits.size() || done[size_t(id)]) continue;
    done[size_t(id)] = 1;
    float& l = logits[size_t(id)];
    l = l < 0 ? float(l * penalty) : float(l / penalty);
  }
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Keeps the tokens whose logit is at least the k-th largest (ties at the k-th kept, as HF).
void apply_top_k(std::vector<float>& logits, int64_t k) {
  if (k <= 0 || size_t(k) >= logits.size()) return;
  std::vector<float> sorted = logits;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[size_t(k - 1)];
  for (float& l : logits)
    if (l < kth) l = kNegInf;
}

// HF's TopPLogitsWarper: sorted ascending, the tokens whose cumulative probability is at most
// 1 - top_p are removed; the most likely token always stays.
void apply_top_p(std::vector<float>& logits, double top_p) {
  if (top_p >= 1.0) return;
  const size_t n = logits.size();
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[size_t(a)] < logits[size_t(b)]; });
  const float mx = logits[size_t(order.back())];
  double total = 0;
  for (float l : logits) total += l == kNegInf ? 0.0 : std::exp(double(l - mx));
  double cum = 0;
  for (size_t r = 0; r + 1 < n; ++r) {
    float& l = logits[size_t(order[r])];
    cum += l == kNegInf ? 0.0 : std::exp(double(l - mx)) / total;
    if (cum > 1.0 - top_p) break;
    l = kNegInf;
  }
}

// One token drawn from softmax(logits) with the uniform u in [0, 1).
int64_t sample(const std::vector<float>& logits, double u) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    total += p[i] = logits[i] == kNegInf ? 0.0 : std::exp(double(logits[i] - mx));
  double target = u * total, cum = 0;
  int64_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    last = int64_t(i);
    cum += p[i];
    if (target < cum) return int64_t(i);
  }
  return last;  // rounding left target at the very top
}

int64_t argmax_first(const std::vector<float>& logits) {
  return int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

// ---- the loop

Tensor CausalLM::generate(const Tensor& input_ids, const GenerationOptions& o, const Tensor& attention_mask) {
  const std::string who = "generate";
  BRISK_CHECK(input_ids.dim() == 2 && input_ids.dtype() == DType::I64 && input_ids.size(1) > 0 && input_ids.size(0) > 0,
              who, ": input_ids must be (B, T) I64 with B, T > 0, got ", input_ids.str());
  const int64_t b = input_ids.size(0), t0 = input_ids.size(1);
  if (attention_mask.defined()) {
    BRISK_CHECK(attention_mask.dim() == 2 && attention_mask.size(0) == b && attention_mask.size(1) == t0, who,
                ": attention_mask must be (B, T) as input_ids ", input_ids.str(), ", got ", attention_mask.str());
  }
  BRISK_CHECK(o.max_new_tokens >= 0, who, ": max_new_tokens must be >= 0, got ", o.max_new_tokens);
  BRISK_CHECK(t0 + o.max_new_tokens <= max_positions(), who, ": the prompt's ", t0, " tokens and max_new_tokens ",
              o.max_new_tokens, " exceed the model's ", max_positions(), " positions");
  BRISK_CHECK(o.temperature >= 0 && o.top_p > 0 && o.top_p <= 1 && o.repetition_penalty > 0 && o.top_k >= 0, who,
              ": needs temperature >= 0, 0 < top_p <= 1, repetition_penalty > 0 and top_k >= 0; got temperature ",
              o.temperature, ", top_p ", o.top_p, ", repetition_penalty ", o.repetition_penalty, ", top_k ", o.top_k);
  const bool sampling = o.do_sample && o.temperature > 0;

  NoGradGuard no_grad;
  const Device device = input_ids.device();
  std::vector<std::vector<int64_t>> seqs(static_cast<size_t>(b)), masks(static_cast<size_t>(b));
  {
    const auto ids = input_ids.to_vector<int64_t>();
    const auto m = attention_mask.defined() ? attention_mask.to_vector<int64_t>() : std::vector<int64_t>(ids.size(), 1);
    for (int64_t i = 0; i < b; ++i) {
      seqs[size_t(i)].assign(ids.begin() + i * t0, ids.begin() + (i + 1) * t0);
      masks[size_t(i)].assign(m.begin() + i * t0, m.begin() + (i + 1) * t0);
      for (int64_t& x : masks[size_t(i)]) x = x != 0;
    }
  }
  bool padded = false;
  for (const auto& m : masks) padded = padded || std::find(m.begin(), m.end(), 0) != m.end();
  std::unique_ptr<Generator> own;
  if (o.seed) own = std::make_unique<Generator>(*o.seed);
  Generator* gen = own ? own.get() : &default_generator();

  auto as_tensor = [&](const std::vector<std::vector<int64_t>>& rows, int64_t from) {
    const int64_t len = int64_t(rows[0].size()) - from;
    std::vector<int64_t> flat;
    flat.reserve(size_t(b * len));
    for (const auto& r : rows) flat.insert(flat.end(), r.begin() + from, r.end());
    return from_data(flat.data(), {b, len}, device);
  };

  reset_cache();
  if (o.use_cache) reserve_cache(t0 + o.max_new_tokens);
  std::vector<char> finished(static_cast<size_t>(b), 0);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const int64_t len = int64_t(seqs[0].size());
    Tensor ids = o.use_cache && step > 0 ? as_tensor(seqs, len - 1) : as_tensor(seqs, 0);
    Tensor mask = padded ? as_tensor(masks, 0) : Tensor();
    Tensor logits = forward_step(ids, mask, o.use_cache, /*last_only=*/true);  // (B, 1, V)
    BRISK_CHECK(logits.dim() == 3 && logits.size(0) == b, who, ": forward_step gave ", logits.str(),
                ", expected (B, 1, vocab)");
    const int64_t vocab = logits.size(-1);
    const auto all = logits.narrow(1, logits.size(1) - 1, 1).to(DType::F32).to_vector<float>();
    // One uniform per row and step, drawn whether or not the row is finished: a row's tokens
    // then do not depend on when the others stop.
    std::vector<double> u;
    if (sampling) u = rand({b}, DType::F64, Device::cpu(), gen).to_vector<double>();
    bool all_done = true;
    for (int64_t i = 0; i < b; ++i) {
      int64_t next = o.pad_token_id;
      if (!finished[size_t(i)]) {
        std::vector<float> row(all.begin() + i * vocab, all.begin() + (i + 1) * vocab);
        if (o.repetition_penalty != 1.0) apply_repetition_penalty(row, seqs[size_t(i)], o.repetition_penalty);
        if (sampling) {
          if (o.temperature != 1.0)
            for (float& l : row) l = float(l / o.temperature);
          apply_top_k(row, o.top_k);
          apply_top_p(row, o.top_p);
          next = sample(row, u[size_t(i)]);
        } else {
          next = argmax_first(row);
        }
        if (std::find(o.stop_tokens.begin(), o.stop_tokens.end(), next) != o.stop_tokens.end()) finished[size_t(i)] = 1;
      }
      seqs[size_t(i)].push_back(next);
      masks[size_t(i)].push_back(1);  // as HF: the tokens after a row's stop stay visible to it
      all_done = all_done && finished[size_t(i)];
    }
    if (all_done) break;
  }
  return as_tensor(seqs, 0);
}

}  // namespace brisk::nn
