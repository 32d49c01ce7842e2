// tests/test_hooks.cpp: removable hook handles (HookHandle, engine/tensor.h) on leaves,
// non-leaves and post-accumulate hooks; removing one hook leaves the others; a handle that
// outlives its tensor is harmless; a leaf's hooks also run under functional grad(), as
// PyTorch documents, and change what grad() returns.
#include <doctest/doctest.h>

#include "brisk.h"

using namespace brisk;

TEST_CASE("hooks: handles remove exactly their hook") {
  Tensor w = from_vector({1, 2, 3}, {3}).requires_grad_();
  int calls_a = 0, calls_b = 0;
  HookHandle a = w.register_hook([&](const Tensor& g) {
    ++calls_a;
    return g * 2.0;
  });
  HookHandle b = w.register_hook([&](const Tensor& g) {
    ++calls_b;
    return Tensor();
  });
  (w * w).sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{4, 8, 12});  // 2w, doubled
  CHECK(calls_a == 1);
  CHECK(calls_b == 1);
  a.remove();
  CHECK_FALSE(a.active());
  a.remove();  // a second remove does nothing
  w.zero_grad();
  (w * w).sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  CHECK(calls_a == 1);
  CHECK(calls_b == 2);

  // A non-leaf's hook (on its grad_fn) and a post-accumulate hook.
  Tensor x = from_vector({1, 1}, {2}).requires_grad_();
  Tensor h = x * 3.0;
  HookHandle hh = h.register_hook([](const Tensor& g) { return g * 10.0; });
  int post = 0;
  HookHandle ph = x.register_post_accumulate_grad_hook([&](const Tensor&) { ++post; });
  hh.remove();
  ph.remove();
  h.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 3});
  CHECK(post == 0);

  HookHandle dangling;
  {
    Tensor t = zeros({2}).requires_grad_();
    dangling = t.register_hook([](const Tensor& g) { return g; });
  }
  CHECK_NOTHROW(dangling.remove());  // its tensor is gone
  CHECK_THROWS_WITH_AS(zeros({2}).register_hook([](const Tensor& g) { return g; }),
                       doctest::Contains("does not require grad"), Error);
}

TEST_CASE("hooks: a leaf's hooks run under grad()") {
  Tensor w = from_vector({1, 2}, {2}).requires_grad_();
  int calls = 0;
  w.register_hook([&](const Tensor& g) {
    ++calls;
    return g + 1.0;
  });
  Tensor y = (w * w).sum();
  auto g = grad(std::vector<Tensor>{y}, std::vector<Tensor>{w});
  CHECK(calls == 1);
  CHECK(g[0].to_vector<double>() == std::vector<double>{3, 5});  // 2w + 1
  CHECK_FALSE(w.grad().defined());                               // grad() leaves .grad alone
}
