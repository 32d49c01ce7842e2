// tests/test_strided_walk.cpp: the CPU elementwise loop's tiled walk (Note [Tiled elementwise
// walk], kernels/cpu/loops.h) gives bit for bit what the output-order walk gives, and what the
// same op gives on contiguous copies, on transposed, permuted, sliced, expanded and
// broadcast layouts whose sizes are not multiples of the tile, in every floating dtype, with a
// transposed destination, and on one thread and many.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>

#include "brisk.h"
#include "kernels/cpu/loops.h"

using namespace brisk;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.sizes() == cb.sizes() && ca.dtype() == cb.dtype() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.numel()) * ca.element_size()) == 0;
}

// fn with the tiled walk on and off.
std::pair<Tensor, Tensor> both_walks(const std::function<Tensor()>& fn) {
  auto& tiling = kernels::cpu::elementwise_tiling();
  tiling = false;
  Tensor old_walk = fn();
  tiling = true;
  Tensor tiled = fn();
  return {old_walk, tiled};
}

}  // namespace

TEST_CASE("strided walk: tiled and output-order walks agree bit for bit on every layout") {
  for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    CAPTURE(dtype_name(dt));
    Tensor a = randn({70, 37}).to(dt), b = randn({37, 70}).to(dt);
    Tensor c = randn({3, 67, 5}).to(dt), d = randn({5, 67, 3}).to(dt);
    Tensor row = randn({70}).to(dt);
    struct Case {
      const char* name;
      std::function<Tensor()> fn, reference;
    } cases[] = {
        {"relu(a.t())", [&] { return relu(a.t()); }, [&] { return relu(a.t().contiguous()); }},
        {"a.t() + b", [&] { return a.t() + b; }, [&] { return a.t().contiguous() + b; }},
        {"b + a.t()", [&] { return b + a.t(); }, [&] { return b + a.t().contiguous(); }},
        {"a.t() * b.t().t()", [&] { return a.t() * b.t().t(); }, [&] { return a.t().contiguous() * b; }},
        {"permuted 3-D + 3-D",
         [&] {
           return permute(c, {2, 1, 0}) + d;
         },
         [&] {
           return permute(c, {2, 1, 0}).contiguous() + d;
         }},
        {"a.t() + row (broadcast)", [&] { return a.t() + row; }, [&] { return a.t().contiguous() + row; }},
        {"sliced transposed", [&] { return exp(slice(a, 0, 1, 70, 3).t()); },
         [&] { return exp(slice(a, 0, 1, 70, 3).t().contiguous()); }},
        {"expanded column",
         [&] {
           return expand(slice(b, 1, 0, 1), {37, 70}) - a.t();
         },
         [&] {
           return expand(slice(b, 1, 0, 1), {37, 70}).contiguous() - a.t().contiguous();
         }},
        {"where(a.t() > 0, a.t(), b)", [&] { return where(gt(a.t(), b), a.t(), b); },
         [&] { return where(gt(a.t().contiguous(), b), a.t().contiguous(), b); }},
        {"cast of a transposed", [&] { return a.t().to(DType::F32); },
         [&] { return a.t().contiguous().to(DType::F32); }},
        {"copy into a transposed destination",
         [&] {
           Tensor dst = zeros({70, 37}, dt);
           dst.t().copy_(b);
           return dst;
         },
         [&] { return b.t().contiguous(); }},
    };
    for (const Case& k : cases) {
      CAPTURE(k.name);
      auto [old_walk, tiled] = both_walks(k.fn);
      CHECK(same_bits(old_walk, tiled));
      CHECK(same_bits(tiled, k.reference()));
    }
  }
}

TEST_CASE("strided walk: large transposed inputs agree on one thread and on all of them") {
  Tensor a = randn({700, 513}), b = randn({513, 700});
  auto [old_walk, tiled] = both_walks([&] { return a.t() * b + 1.0; });
  CHECK(same_bits(old_walk, tiled));
  const int threads = get_num_threads();
  set_num_threads(1);
  Tensor one = a.t() * b + 1.0;
  set_num_threads(threads);
  CHECK(same_bits(one, tiled));
}
