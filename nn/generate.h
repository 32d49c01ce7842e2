// nn/generate.h: autoregressive generation for causal language models. A KV cache that an
// attention module owns, the CausalLM interface a decoder implements (GPT2 does), and
// CausalLM::generate with greedy decoding or sampling (temperature, top-k, top-p, repetition
// penalty) from a seeded generator, over batched prompts of different lengths (left padding,
// Hugging Face's attention_mask convention).
//
//   auto gpt = nn::models::GPT2::from_pretrained("gpt2-dir");       // config.json + model.safetensors
//   gpt->eval();
//   Tensor out = gpt->generate(prompt_ids, {.max_new_tokens = 64, .do_sample = true, .top_p = 0.9, .seed = 1});
// Not here: the cache itself (nn/kv_cache.h), tokenizers (text/bpe.h), beam search (not written).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "nn/kv_cache.h"
#include "nn/module.h"

namespace brisk::nn {

// Hugging Face generate()'s options, under its names and in GenerationConfig's order. Greedy
// unless do_sample (or a temperature of 0, which always means greedy); the processors run in
// HF's order: repetition penalty, then (sampling only) temperature, top-k, top-p.
struct GenerationOptions {
  int64_t max_new_tokens = 20;
  bool do_sample = false;
  bool use_cache = true;  // false recomputes every position each step (the reference)
  double temperature = 1.0;
  int64_t top_k = 0;                   // 0: off (HF's default is 50 when sampling; brisk asks for it explicitly)
  double top_p = 1.0;                  // nucleus: the smallest set of tokens whose probability reaches top_p
  double repetition_penalty = 1.0;     // CTRL's: a seen token's logit divided (> 0) or multiplied (< 0)
  int64_t pad_token_id = 0;            // what a finished row emits while others go on
  std::vector<int64_t> stop_tokens{};  // eos_token_id: a row ends after emitting one of these
  std::optional<uint64_t> seed{};      // sampling draws from Generator(seed); else the default generator
};

// A decoder-only language model that generation can drive.
class CausalLM : public Module {
 public:
  using Module::Module;

  // Logits (B, t, vocab) of the tokens `ids` (B, t) I64, which follow what the cache holds when
  // use_cache (else they are the whole sequence). attention_mask: (B, cached + t), nonzero for a
  // real token and 0 for padding (left padding: the pads come first); undefined: all real.
  // last_only: the logits of the last position only, (B, 1, vocab).
  virtual Tensor forward_step(const Tensor& ids, const Tensor& attention_mask, bool use_cache, bool last_only) = 0;
  virtual void reset_cache() = 0;  // every attention module's cache: new sequence
  virtual void reserve_cache(int64_t positions) = 0;
  virtual int64_t cached_length() const = 0;
  virtual int64_t max_positions() const = 0;  // the longest sequence the model takes

  // The prompts followed by up to max_new_tokens tokens each: (B, T + n) I64, n the steps taken
  // (fewer when every row stopped). input_ids (B, T) I64, left padded when their lengths differ,
  // with attention_mask (B, T) marking the pads with 0. Runs without grad; the cache is reset
  // first and holds the sequence afterwards.
  Tensor generate(const Tensor& input_ids, const GenerationOptions& options = {}, const Tensor& attention_mask = {});
};

// Prompts of different lengths as one left-padded batch: ids (B, Tmax) I64 with pad_token_id in
// front of the shorter ones, and attention_mask (B, Tmax) I64 with 0 there.
struct PaddedBatch {
  Tensor input_ids{};
  Tensor attention_mask{};
};
PaddedBatch left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_token_id = 0);

}  // namespace brisk::nn
