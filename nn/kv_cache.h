// nn/kv_cache.h: the keys and values an attention module keeps while generating (GPT2Attention
// and MultiheadAttention own one each; nn/generate.h drives them).
// Not here: the masks and positions of a cached step (the models' forward_step), generation.
#pragma once

#include <cstdint>
#include <utility>

#include "engine/tensor.h"

namespace brisk::nn {

// The keys and values of the positions an attention module has seen, (B, H, capacity, D) each,
// filled up to length(). reserve() preallocates (generate() reserves prompt + new tokens, so
// decoding allocates nothing); append() beyond the capacity grows it by doubling. reset() starts
// a new sequence and keeps the memory; clear() frees it.
class KVCache {
 public:
  // Appends k and v, (B, H, t, D), at position length(); returns every key and value so far as
  // (B, H, length(), D) views of the cache (valid until the next append).
  std::pair<Tensor, Tensor> append(const Tensor& k, const Tensor& v);
  void reserve(int64_t positions);  // takes effect at the next allocation
  void reset() { length_ = 0; }
  void clear();
  int64_t length() const { return length_; }
  int64_t capacity() const { return k_.defined() ? k_.size(2) : 0; }

 private:
  Tensor k_{}, v_{};
  int64_t length_ = 0;
  int64_t reserved_ = 0;
};

}  // namespace brisk::nn
