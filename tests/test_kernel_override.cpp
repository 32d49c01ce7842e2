// tests/test_kernel_override.cpp: replacing a kernel at run time (engine/kernel_override.h):
// per-dtype replacement with fallback, the scoped guard and nested guards, callables with
// state, the previous kernel as a callable, recording off inside kernels, and clear errors.
#include <doctest/doctest.h>

#include <thread>

#include "brisk.h"
#include "engine/kernel_override.h"

using namespace brisk;

namespace {

// A relu that writes 7 everywhere: easy to tell from the built-in one. Expects a contiguous
// output (the dispatcher allocates it), reads nothing.
void fill_seven(std::span<const Tensor>, std::span<Tensor> out, const Attrs&) {
  NoGradGuard ng;
  out[0].fill_(7.0);
}

std::vector<double> relu_of(const std::vector<double>& v, DType t) {
  return relu(from_vector(v, {int64_t(v.size())}, t)).to_vector<double>();
}

}  // namespace

TEST_CASE("kernel override: op_id finds ops by name and rejects unknown ones") {
  CHECK(op_name(op_id("relu")) == std::string("relu"));
  CHECK(op_name(op_id("matmul")) == std::string("matmul"));
  std::string e;
  try {
    op_id("rel");
  } catch (const Error& err) {
    e = err.what();
  }
  CHECK_MESSAGE(e.find("op_id: no op named 'rel'") != std::string::npos, e);
  CHECK_MESSAGE(e.find("relu") != std::string::npos, e);  // suggested
}

TEST_CASE("kernel override: the guard replaces for its scope, per dtype, and restores") {
  const OpId r = op_id("relu");
  const std::vector<double> x = {-1, 2, -3};
  {
    int calls = 0;
    KernelOverride guard(r, DeviceType::CPU,
                         [&calls](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                           ++calls;  // a kernel may hold state
                           fill_seven(in, out, a);
                         },
                         {DType::F32});
    CHECK(is_kernel_replaced(r, DeviceType::CPU));
    CHECK(relu_of(x, DType::F32) == std::vector<double>{7, 7, 7});
    CHECK(relu_of(x, DType::F64) == std::vector<double>{0, 2, 0});  // F64 falls back to the built-in
    CHECK(calls == 1);

    // previous() is the built-in kernel as a callable: usable as a fallback or a reference.
    Tensor in = from_vector(x, {3}, DType::F32);
    Tensor out = zeros({3}, DType::F32);
    Tensor ins[1] = {in};
    Tensor outs[1] = {out};
    guard.previous()(ins, outs, Attrs{});
    CHECK(out.to_vector<double>() == std::vector<double>{0, 2, 0});
    CHECK(calls == 1);
  }
  CHECK_FALSE(is_kernel_replaced(r, DeviceType::CPU));
  CHECK(relu_of(x, DType::F32) == std::vector<double>{0, 2, 0});
}

TEST_CASE("kernel override: nested guards unwind in order, replace_kernel stacks") {
  const OpId r = op_id("relu");
  const std::vector<double> x = {-1, 2};
  {
    KernelOverride outer(r, DeviceType::CPU, fill_seven);
    CHECK(relu_of(x, DType::F64) == std::vector<double>{7, 7});
    {
      // The inner kernel doubles what the outer one (its previous kernel) gives.
      Kernel prev;
      KernelOverride inner(r, DeviceType::CPU,
                           [&prev](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                             prev(in, out, a);
                             out[0].mul_(2.0);
                           });
      prev = inner.previous();
      CHECK(relu_of(x, DType::F64) == std::vector<double>{14, 14});
    }
    CHECK(relu_of(x, DType::F64) == std::vector<double>{7, 7});
  }
  CHECK(relu_of(x, DType::F64) == std::vector<double>{0, 2});

  Kernel builtin = replace_kernel(r, DeviceType::CPU, fill_seven, {DType::F64});
  CHECK(relu_of(x, DType::F64) == std::vector<double>{7, 7});
  CHECK(bool(current_kernel(r, DeviceType::CPU, DType::F64)));
  restore_builtin_kernel(r, DeviceType::CPU);
  CHECK(relu_of(x, DType::F64) == std::vector<double>{0, 2});
  CHECK(bool(builtin));
}

TEST_CASE("kernel override: ops a kernel calls are not recorded; the op itself is") {
  const OpId n = op_id("neg");
  bool inner_recorded = true;
  KernelOverride guard(n, DeviceType::CPU, [&](std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
    Tensor r = mul(in[0], full({}, -1.0, in[0].dtype()));  // an op inside a kernel
    inner_recorded = r.requires_grad() || bool(r.grad_fn());
    out[0].copy_(r);
  });
  Tensor x = from_vector({1, 2, 3}, {3}).requires_grad_();
  Tensor y = neg(x);
  CHECK_FALSE(inner_recorded);
  CHECK(y.to_vector<double>() == std::vector<double>{-1, -2, -3});
  y.sum().backward();  // neg's own backward, recorded by the dispatcher
  CHECK(x.grad().to_vector<double>() == std::vector<double>{-1, -1, -1});
}

TEST_CASE("kernel override: a dtype the replacement does not take, with no kernel beneath, has no kernel") {
  // A device without a built-in kernel for the op: on a CPU-only build every CUDA slot is empty.
  const OpId r = op_id("relu");
  if (builtin_kernel(r, DeviceType::CUDA)) return;  // a CUDA build has one; nothing to test
  KernelOverride guard(r, DeviceType::CUDA, fill_seven, {DType::F16});
  CHECK(bool(current_kernel(r, DeviceType::CUDA, DType::F16)));
  CHECK_FALSE(bool(current_kernel(r, DeviceType::CUDA, DType::F32)));
}

TEST_CASE("kernel override: empty kernels and bad ids are rejected") {
  CHECK_THROWS_AS(replace_kernel(op_id("relu"), DeviceType::CPU, Kernel{}), Error);
  CHECK_THROWS_AS(replace_kernel(OpId(9999), DeviceType::CPU, fill_seven), Error);
  CHECK_FALSE(is_kernel_replaced(op_id("relu"), DeviceType::CPU));
}

TEST_CASE("kernel override: replaced kernels run from several threads") {
  const OpId r = op_id("relu");
  std::atomic<int> calls{0};
  KernelOverride guard(r, DeviceType::CPU, [&calls](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
    calls.fetch_add(1);
    fill_seven(in, out, a);
  });
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        if (relu_of({-1.0}, DType::F64) != std::vector<double>{7}) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(calls.load() == 200);
  CHECK(wrong.load() == 0);
}
