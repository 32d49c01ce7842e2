// nn/kv_cache.cpp: the KV cache (nn/kv_cache.h).
#include "nn/kv_cache.h"

#include <algorithm>

#include "engine/functions.h"

namespace brisk::nn {

std::pair<Tensor, Tensor> KVCache::append(const Tensor& k, const Tensor& v) {
  BRISK_CHECK(
      k.dim() == 4 && v.dim() == 4 && k.size(0) == v.size(0) && k.size(1) == v.size(1) && k.size(2) == v.size(2),
      "KVCache::append: expects keys and values (B, H, t, D) with equal B, H and t, got ", k.str(), " and ", v.str());
  const int64_t t = k.size(2), need = length_ + t;
  auto fits = [&](const Tensor& cache, const Tensor& x) {
    return cache.defined() && cache.size(0) == x.size(0) && cache.size(1) == x.size(1) && cache.size(3) == x.size(3) &&
           cache.dtype() == x.dtype() && cache.device() == x.device();
  };
  if (length_ > 0) {
    BRISK_CHECK(fits(k_, k) && fits(v_, v), "KVCache::append: keys ", k.str(), " and values ", v.str(),
                " do not continue the cached ", k_.str(), " and ", v_.str(), " (reset() starts a new sequence)");
  }
  if (!fits(k_, k) || !fits(v_, v) || need > capacity()) {
    // A new shape (a new batch) allocates at the reserved size; a longer sequence doubles.
    int64_t cap = std::max(need, reserved_);
    if (length_ > 0) cap = std::max(need, 2 * capacity());
    Tensor nk = empty({k.size(0), k.size(1), cap, k.size(3)}, k.dtype(), k.device());
    Tensor nv = empty({v.size(0), v.size(1), cap, v.size(3)}, v.dtype(), v.device());
    if (length_ > 0) {
      nk.narrow(2, 0, length_).copy_(k_.narrow(2, 0, length_));
      nv.narrow(2, 0, length_).copy_(v_.narrow(2, 0, length_));
    }
    k_ = nk;
    v_ = nv;
  }
  k_.narrow(2, length_, t).copy_(k);
  v_.narrow(2, length_, t).copy_(v);
  length_ = need;
  return {k_.narrow(2, 0, length_), v_.narrow(2, 0, length_)};
}

void KVCache::reserve(int64_t positions) {
  BRISK_CHECK(positions >= 0, "KVCache::reserve: positions must be >= 0, got ", positions);
  reserved_ = positions;
}

void KVCache::clear() {
  k_ = Tensor();
  v_ = Tensor();
  length_ = 0;
}

}  // namespace brisk::nn
