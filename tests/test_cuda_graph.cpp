// tests/test_cuda_graph.cpp: CUDA graphs (cuda::Graph, kernels/cuda/graph.cpp). Always run: the
// caching allocator keeps a retained stream's blocks through empty_cache (the graph's private
// pool). In CUDA builds without a GPU: a Graph is a clear error and nothing is capturing. With a
// GPU: capture and replay of elementwise work fed through a static input; a whole SGD training
// step (forward, backward, momentum step) captured and replayed equal to the same steps run
// eagerly, with empty_cache between replays; item() inside the captured code and Adam's step
// are clear errors that leave the stream usable.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "brisk.h"
#ifdef BRISK_WITH_CUDA
#include "kernels/cuda/cuda.h"
#include "tests/cuda_test.h"
#endif

using namespace brisk;

namespace {

struct Counting {
  int allocs = 0, frees = 0;
};

void* counting_alloc(size_t bytes, void* ctx) {
  ++static_cast<Counting*>(ctx)->allocs;
  return std::malloc(bytes);
}

void counting_free(void* p, size_t, void* ctx) {
  ++static_cast<Counting*>(ctx)->frees;
  std::free(p);
}

}  // namespace

TEST_CASE("cuda graph pool: a retained stream's blocks survive empty_cache until released") {
  Counting c;
  CachingAllocator a(RawMemory{counting_alloc, counting_free, &c});
  void* pool = a.allocate(1000, /*stream=*/7);
  void* other = a.allocate(1000, /*stream=*/1);
  a.deallocate(pool, 1000, 7);
  a.deallocate(other, 1000, 1);
  a.retain_stream(7);
  a.retain_stream(7);  // counted: two graphs on one stream
  a.empty_cache();
  CHECK(c.frees == 1);  // stream 1's block went back
  CHECK(a.stats().cached == CachingAllocator::round_size(1000));
  CHECK(a.allocate(1000, 7) == pool);  // still the pool's block, served from the cache
  a.deallocate(pool, 1000, 7);
  a.release_stream(7);
  a.empty_cache();
  CHECK(c.frees == 1);  // one retain left
  a.release_stream(7);
  a.release_stream(7);  // one too many: harmless
  a.empty_cache();
  CHECK(c.frees == 2);
  CHECK(a.stats().cached == 0);
  CHECK(c.allocs == 2);
}

#ifdef BRISK_WITH_CUDA

TEST_CASE("cuda graph: without a GPU a Graph is a clear error") {
  CHECK_FALSE(cuda::is_capturing(0));
  if (test::has_gpu()) return;
  CHECK_THROWS_AS(cuda::Graph(0), Error);
}

TEST_CASE("cuda graph: elementwise work replays on new data in a static input") {
  BRISK_REQUIRE_GPU();
  Tensor x = zeros({1000}, DType::F32, test::kGpu);
  Tensor y;
  cuda::Graph g;
  g.capture([&] { y = relu(x * 2.0 + 1.0) - x.sum(); }, /*warmup=*/1);
  CHECK(g.captured());
  CHECK(g.num_nodes() >= 2);
  for (int k = 0; k < 3; ++k) {
    Tensor host = randn({1000});
    x.copy_(host.to(test::kGpu));
    g.replay();
    Tensor want = relu(host * 2.0 + 1.0) - host.sum();
    CHECK(allclose(y.to(Device::cpu()), want, 1e-5, 1e-4));
  }
  g.reset();
  CHECK_FALSE(g.captured());
  CHECK_THROWS_AS(g.replay(), Error);
}

TEST_CASE("cuda graph: a captured SGD training step equals the eager steps") {
  BRISK_REQUIRE_GPU();
  manual_seed(3);
  auto make = [] {
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Linear>(8, 32));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(32, 4));
    return m;
  };
  auto eager = make(), graphed = make();
  graphed->load_state_dict(eager->state_dict());
  eager->to(test::kGpu);
  graphed->to(test::kGpu);
  optim::SGD eager_opt(eager->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD graph_opt(graphed->named_parameters(), {.lr = 0.05, .momentum = 0.9});
  std::vector<Tensor> xs, ys;
  for (int k = 0; k < 8; ++k) {
    xs.push_back(randn({16, 8}));
    ys.push_back(randn({16, 4}));
  }
  auto eager_step = [&](int k) {
    eager_opt.zero_grad();
    Tensor loss = nn::functional::mse_loss((*eager)(xs[k].to(test::kGpu)), ys[k].to(test::kGpu));
    loss.backward();
    eager_opt.step();
    return loss.item<double>();
  };
  // The graph: two warm-up steps on batch 0 run for real, the captured step does not.
  Tensor sx = xs[0].to(test::kGpu), sy = ys[0].to(test::kGpu), loss;
  cuda::Graph g;
  g.capture(
      [&] {
        graph_opt.zero_grad();  // set to none: backward writes the gradients, it does not add
        loss = nn::functional::mse_loss((*graphed)(sx), sy);
        loss.backward();
        graph_opt.step();
      },
      /*warmup=*/2);
  eager_step(0);
  eager_step(0);
  for (int k = 1; k < 8; ++k) {
    const double want = eager_step(k);
    sx.copy_(xs[k].to(test::kGpu));
    sy.copy_(ys[k].to(test::kGpu));
    g.replay();
    if (k == 4) cuda::empty_cache();  // the graph's pool stays
    CHECK(loss.item<double>() == doctest::Approx(want).epsilon(1e-5));
  }
  const auto a = eager->named_parameters(), b = graphed->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(allclose(a[i].second.to(Device::cpu()), b[i].second.to(Device::cpu()), 1e-5, 1e-6));
  }
}

TEST_CASE("cuda graph: what cannot be recorded is a clear error and the stream stays usable") {
  BRISK_REQUIRE_GPU();
  Tensor x = ones({4}, DType::F32, test::kGpu);
  cuda::Graph g;
  try {
    g.capture([&] { (void)(x * 2.0).sum().item<double>(); }, /*warmup=*/0);
    FAIL("item() was captured");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("CUDA graph") != std::string::npos);
  }
  CHECK_FALSE(g.captured());
  CHECK_FALSE(cuda::is_capturing(0));
  CHECK((x * 3.0).sum().item<double>() == 12.0);  // eager work runs again

  Tensor w = ones({4}, DType::F32, test::kGpu);
  w.requires_grad_(true);
  optim::Adam adam(std::vector<Tensor>{w}, {.lr = 0.1});
  try {
    g.capture(
        [&] {
          adam.zero_grad();
          (w * w).sum().backward();
          adam.step();
        },
        /*warmup=*/0);
    FAIL("Adam's step was captured");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("Adam") != std::string::npos);
  }
  CHECK_FALSE(cuda::is_capturing(0));
  CHECK(w.sum().item<double>() == 4.0);  // the refused step changed nothing
}

#endif  // BRISK_WITH_CUDA
