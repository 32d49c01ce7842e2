// tests/test_generate.cpp: generation with a KV cache (nn/generate.h) on GPT-2, against Hugging
// Face transformers' GPT2LMHeadModel (tests/data/generate, made by
// tests/make_generate_reference.py: a small GPT-2 with random weights as HF saves it): the
// logits of a fixed batch, greedy generate() token for token (one prompt; three left-padded
// prompts; stop tokens; repetition penalty), each with the cache and without it; the cache's
// logits against the full forward; seeded sampling; the cache's growth; errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "brisk.h"
#include "tests/paths.h"
#include "tests/test_util.h"

using namespace brisk;
using nn::models::GPT2;

namespace {

std::filesystem::path dir() { return ::brisk::test::data_dir() / "generate"; }

const nlohmann::json& expected() {
  static const nlohmann::json j = [] {
    std::ifstream f(dir() / "expected.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}

std::shared_ptr<GPT2> model() {
  static std::shared_ptr<GPT2> m = [] {
    auto g = GPT2::from_pretrained(dir().string());
    g->eval();
    return g;
  }();
  return m;
}

std::vector<std::vector<int64_t>> rows(const Tensor& t) {
  const auto v = t.to_vector<int64_t>();
  std::vector<std::vector<int64_t>> r;
  for (int64_t i = 0; i < t.size(0); ++i) r.emplace_back(v.begin() + i * t.size(1), v.begin() + (i + 1) * t.size(1));
  return r;
}

std::vector<std::vector<int64_t>> as_rows(const nlohmann::json& j) {
  return j.get<std::vector<std::vector<int64_t>>>();
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(DType::F64) - b.to(DType::F64))).item<double>();
}

}  // namespace

TEST_CASE("generate: GPT-2 from a Hugging Face directory gives transformers' logits") {
  const auto ref = load_safetensors((dir() / "logits.safetensors").string());
  const Tensor& ids = ref.tensors[0].first == "ids" ? ref.tensors[0].second : ref.tensors[1].second;
  const Tensor& logits = ref.tensors[0].first == "ids" ? ref.tensors[1].second : ref.tensors[0].second;
  NoGradGuard no_grad;
  Tensor out = (*model())(ids.to(DType::I64));
  REQUIRE(out.shape() == logits.shape());
  const double err = max_abs_diff(out, logits);
  CAPTURE(err);
  CHECK(err < 2e-5);
  CHECK(model()->config.n_embd == 48);
  CHECK(model()->config.vocab_size == 211);
}

TEST_CASE("generate: from_pretrained reads a checkpoint whose tensors are not aligned") {
  // The same file with one more space in its header: every tensor starts at an odd offset
  // (as files from writers that do not pad the header, MLX's for one).
  const std::string bytes = test::read_bytes(dir() / "model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  REQUIRE(n % 2 == 0);
  std::string header = bytes.substr(8, size_t(n)) + " ";
  const uint64_t odd = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &odd, 8);
  out += header + bytes.substr(8 + size_t(n));
  const auto tmp = std::filesystem::temp_directory_path() / "brisk_generate_unaligned";
  std::filesystem::create_directories(tmp);
  std::ofstream(tmp / "model.safetensors", std::ios::binary) << out;
  std::filesystem::copy_file(dir() / "config.json", tmp / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto g = GPT2::from_pretrained(tmp.string());
  g->eval();
  NoGradGuard no_grad;
  Tensor ids = randint(0, 211, {1, 9}, DType::I64);
  CHECK(max_abs_diff((*g)(ids), (*model())(ids)) == 0);
  std::filesystem::remove_all(tmp);
}

TEST_CASE("generate: greedy decoding equals transformers' generate, with the cache and without") {
  const auto& e = expected();
  const int64_t pad = e["pad_token_id"].get<int64_t>();
  auto check = [&](const char* name, const std::vector<std::vector<int64_t>>& prompts, nn::GenerationOptions o) {
    CAPTURE(name);
    o.pad_token_id = pad;
    const nn::PaddedBatch batch = nn::left_pad(prompts, pad);
    const auto want = as_rows(e[name]);
    for (bool cache : {true, false}) {
      CAPTURE(cache);
      o.use_cache = cache;
      Tensor got = model()->generate(batch.input_ids, o, batch.attention_mask);
      CHECK(rows(got) == want);
    }
  };
  const auto prompts = as_rows(e["prompts"]);
  const std::vector<std::vector<int64_t>> single = {e["single_prompt"].get<std::vector<int64_t>>()};
  check("single", single, {.max_new_tokens = 40});
  check("padded", prompts, {.max_new_tokens = 20});
  check("stop", prompts, {.max_new_tokens = 20, .stop_tokens = {e["stop_token"].get<int64_t>()}});
  check("penalty", single, {.max_new_tokens = 40, .repetition_penalty = 1.3});
  // Without a mask the unpadded prompt is the same sequence.
  Tensor ids = nn::left_pad(single).input_ids;
  CHECK(rows(model()->generate(ids, {.max_new_tokens = 40})) == as_rows(e["single"]));
}

TEST_CASE("generate: the cache's logits equal the full forward's, one token at a time and in chunks") {
  NoGradGuard no_grad;
  auto m = model();
  Tensor ids = randint(0, 211, {2, 30}, DType::I64);
  Tensor full = (*m)(ids);  // (2, 30, V)
  for (int64_t chunk : {1, 7}) {
    CAPTURE(chunk);
    m->reset_cache();
    std::vector<Tensor> parts;
    for (int64_t at = 0; at < 30; at += chunk) {
      const int64_t n = std::min<int64_t>(chunk, 30 - at);
      parts.push_back(m->forward_step(ids.narrow(1, at, n), {}, /*use_cache=*/true, /*last_only=*/false));
    }
    CHECK(m->cached_length() == 30);
    const double err = max_abs_diff(cat(parts, 1), full);
    CAPTURE(err);
    CHECK(err < 1e-5);
  }
  m->reset_cache();
  CHECK(m->cached_length() == 0);
}

TEST_CASE("generate: left padding leaves each row's logits as it is alone") {
  NoGradGuard no_grad;
  auto m = model();
  const std::vector<std::vector<int64_t>> prompts = {{4, 8, 15, 16, 23, 42}, {100, 7}};
  const nn::PaddedBatch batch = nn::left_pad(prompts, 0);
  for (bool cache : {false, true}) {
    m->reset_cache();
    Tensor padded = m->forward_step(batch.input_ids, batch.attention_mask, cache, /*last_only=*/true);
    for (size_t i = 0; i < prompts.size(); ++i) {
      Tensor alone = (*m)(nn::left_pad({prompts[i]}).input_ids).narrow(1, int64_t(prompts[i].size()) - 1, 1);
      const double err = max_abs_diff(padded.narrow(0, int64_t(i), 1), alone);
      CAPTURE(i);
      CAPTURE(err);
      CHECK(err < 1e-5);
    }
  }
}

TEST_CASE("generate: sampling is reproducible from a seed and top_k = 1 is greedy") {
  auto m = model();
  const nn::PaddedBatch batch = nn::left_pad({{3, 14, 15, 92}, {65, 35}}, 0);
  nn::GenerationOptions o{
      .max_new_tokens = 25, .do_sample = true, .temperature = 0.9, .top_k = 40, .top_p = 0.95, .seed = 1234};
  Tensor a = m->generate(batch.input_ids, o, batch.attention_mask);
  Tensor b = m->generate(batch.input_ids, o, batch.attention_mask);
  CHECK(rows(a) == rows(b));
  o.use_cache = false;
  CHECK(rows(m->generate(batch.input_ids, o, batch.attention_mask)) == rows(a));
  o.use_cache = true;
  o.seed = 4321;
  CHECK(rows(m->generate(batch.input_ids, o, batch.attention_mask)) != rows(a));
  // The sampled tokens spread (temperature 2, no truncation): not all one token.
  o.temperature = 2.0;
  o.top_k = 0;
  o.top_p = 1.0;
  const auto wide = rows(m->generate(batch.input_ids, o, batch.attention_mask))[0];
  CHECK(std::set<int64_t>(wide.begin() + 4, wide.end()).size() > 5);
  nn::GenerationOptions k1{.max_new_tokens = 25, .do_sample = true, .top_k = 1, .seed = 7};
  nn::GenerationOptions greedy{.max_new_tokens = 25};
  CHECK(rows(m->generate(batch.input_ids, k1, batch.attention_mask)) ==
        rows(m->generate(batch.input_ids, greedy, batch.attention_mask)));
  // A tiny top_p keeps the most likely token alone: greedy again.
  nn::GenerationOptions p0{.max_new_tokens = 25, .do_sample = true, .top_p = 1e-6, .seed = 7};
  CHECK(rows(m->generate(batch.input_ids, p0, batch.attention_mask)) ==
        rows(m->generate(batch.input_ids, greedy, batch.attention_mask)));
}

TEST_CASE("generate: the KV cache preallocates, grows by doubling and keeps its values") {
  nn::KVCache c;
  c.reserve(4);
  Tensor k = randn({2, 3, 3, 5}), v = randn({2, 3, 3, 5});
  auto kv = c.append(k, v);
  CHECK(c.capacity() == 4);
  CHECK(kv.first.shape() == Shape{2, 3, 3, 5});
  Tensor k2 = randn({2, 3, 2, 5}), v2 = randn({2, 3, 2, 5});
  kv = c.append(k2, v2);
  CHECK(c.length() == 5);
  CHECK(c.capacity() == 8);
  CHECK(max_abs_diff(kv.first, cat({k, k2}, 2)) == 0);
  CHECK(max_abs_diff(kv.second, cat({v, v2}, 2)) == 0);
  CHECK_THROWS_WITH_AS(c.append(randn({1, 3, 1, 5}), randn({1, 3, 1, 5})),
                       doctest::Contains("do not continue the cached"), Error);
  c.reset();
  kv = c.append(randn({1, 3, 1, 5}), randn({1, 3, 1, 5}));  // a new batch after reset
  CHECK(kv.first.shape() == Shape{1, 3, 1, 5});
}

TEST_CASE("generate: errors name what is wrong") {
  auto m = model();
  Tensor ids = nn::left_pad({{1, 2, 3}}).input_ids;
  CHECK_THROWS_WITH_AS(m->generate(ids, {.max_new_tokens = 62}), doctest::Contains("exceed the model's 64 positions"),
                       Error);
  CHECK_THROWS_WITH_AS(m->generate(ids.to(DType::F32)), doctest::Contains("input_ids must be (B, T) I64"), Error);
  CHECK_THROWS_WITH_AS(m->generate(ids, {}, zeros({1, 4}, DType::I64)), doctest::Contains("attention_mask must be"),
                       Error);
  CHECK_THROWS_WITH_AS(m->generate(ids, {.do_sample = true, .top_p = 0.0}), doctest::Contains("0 < top_p <= 1"), Error);
  // A config that does not fit the weights: the mismatching tensors are named.
  const auto tmp = std::filesystem::temp_directory_path() / "brisk_generate_mismatch";
  std::filesystem::create_directories(tmp);
  std::filesystem::copy_file(dir() / "model.safetensors", tmp / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  {
    std::ifstream in(dir() / "config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c["n_layer"] = 3;
    std::ofstream(tmp / "config.json") << c.dump();
  }
  CHECK_THROWS_WITH_AS(GPT2::from_pretrained(tmp.string()), doctest::Contains("missing keys: transformer.h.2"), Error);
  {
    std::ifstream in(dir() / "config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c["n_embd"] = 64;
    std::ofstream(tmp / "config.json") << c.dump();
  }
  CHECK_THROWS_WITH_AS(GPT2::from_pretrained(tmp.string()), doctest::Contains("shape mismatches"), Error);
  {
    std::ifstream in(dir() / "config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c["activation_function"] = "relu";
    std::ofstream(tmp / "config.json") << c.dump();
  }
  CHECK_THROWS_WITH_AS(GPT2::from_pretrained(tmp.string()), doctest::Contains("activation_function"), Error);
  std::filesystem::remove_all(tmp);
}

// The 4th position's output with the cache and no mask (what the padded call must differ from).
Tensor parts_of(nn::MultiheadAttention& mha, const Tensor& x, bool batch_first) {
  mha.cache.reset();
  Tensor first = x.narrow(batch_first ? 1 : 0, 0, 3), next = x.narrow(batch_first ? 1 : 0, 3, 1);
  mha(first, first, first, {}, false, {}, true, true);
  return mha(next, next, next, {}, false, {}, true, true).output;
}

TEST_CASE("generate: MultiheadAttention with use_cache equals the causal forward over the whole sequence") {
  NoGradGuard no_grad;
  manual_seed(5);
  for (bool batch_first : {true, false}) {
    CAPTURE(batch_first);
    nn::MultiheadAttention mha(32, 4, 0.0, true, batch_first);
    mha.eval();
    Tensor x = batch_first ? randn({2, 11, 32}) : randn({11, 2, 32});
    Tensor full = mha(x, x, x, {}, /*need_weights=*/false, {}, true, /*is_causal=*/true).output;
    mha.use_cache = true;
    for (int64_t chunk : {1, 4}) {
      CAPTURE(chunk);
      mha.cache.reset();
      std::vector<Tensor> parts;
      for (int64_t at = 0; at < 11; at += chunk) {
        const int64_t n = std::min<int64_t>(chunk, 11 - at);
        Tensor xs = x.narrow(batch_first ? 1 : 0, at, n);
        parts.push_back(mha(xs, xs, xs, {}, false, {}, true, /*is_causal=*/true).output);
      }
      const double err = max_abs_diff(cat(parts, batch_first ? 1 : 0), full);
      CAPTURE(err);
      CHECK(err < 1e-5);
    }
    // A key-padding mask over all cached keys: the padded key is ignored from then on.
    mha.cache.reset();
    Tensor first = x.narrow(batch_first ? 1 : 0, 0, 3), next = x.narrow(batch_first ? 1 : 0, 3, 1);
    mha(first, first, first, {}, false, {}, true, true);
    Tensor pad = zeros({2, 4}, DType::Bool);
    pad.narrow(1, 1, 1).fill_(1.0);
    Tensor with_pad = mha(next, next, next, pad, false, {}, true, true).output;
    mha.use_cache = false;
    Tensor four = x.narrow(batch_first ? 1 : 0, 0, 4);
    Tensor want = mha(four, four, four, pad, false, {}, true, true).output.narrow(batch_first ? 1 : 0, 3, 1);
    mha.use_cache = true;
    const double pad_err = max_abs_diff(with_pad, want);
    CAPTURE(pad_err);
    CHECK(pad_err < 1e-5);
    CHECK(max_abs_diff(with_pad, parts_of(mha, x, batch_first)) > 1e-3);  // the mask mattered
    CHECK_THROWS_WITH_AS(mha(next, next, next, zeros({2, 4}, DType::Bool), false, {}, true, true),
                         doctest::Contains("expected (B, S) = (2, 5)"), Error);
    mha.use_cache = false;
    mha.cache.clear();
  }
}
