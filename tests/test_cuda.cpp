// tests/test_cuda.cpp: the CUDA backend's tests. Always run: the caching allocator's host
// logic (through a fake RawMemory), and, in a CUDA build, device discovery and the clean errors
// of a machine without a GPU. With a GPU: the whole op conformance table (opcheck/spec.h) on
// CUDA against the CPU, forward and backward, on contiguous, strided and transposed inputs;
// large inputs that take the multi-block paths; pinned memory; random streams; device errors;
// allocator statistics; streams and events; the nn kernels (cuDNN conv in F64/F32/F16/BF16 and
// with TF32, a ResNet block trained on both devices, batch norm running statistics, layer
// norm, pooling with ties and NaN). GPU tests return early (with a message) when
// cuda::device_count() is 0. Speed is measured in examples/bench/bench_cuda.cpp, not here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "opcheck/spec.h"
#ifdef BRISK_WITH_CUDA
#include "kernels/cuda/cuda.h"
#include "tests/cuda_test.h"
#endif

using namespace brisk;

// ---- the caching allocator's host logic (CPU only, runs in every build)
namespace {

struct FakeRaw {
  int allocs = 0;
  int frees = 0;
  int live = 0;
  int limit = 1 << 30;       // live blocks beyond this fail, as an out-of-memory device would
  int wrong_size_frees = 0;  // frees whose size is not the size the block was allocated with
  std::set<void*> blocks;
  std::map<void*, size_t> sizes;

  static void* alloc(size_t bytes, void* ctx) {
    auto* self = static_cast<FakeRaw*>(ctx);
    if (self->live >= self->limit) return nullptr;
    void* p = std::malloc(bytes);
    ++self->allocs;
    ++self->live;
    self->blocks.insert(p);
    self->sizes[p] = bytes;
    return p;
  }
  static void free(void* p, size_t bytes, void* ctx) {
    auto* self = static_cast<FakeRaw*>(ctx);
    if (self->sizes[p] != bytes) ++self->wrong_size_frees;
    self->sizes.erase(p);
    ++self->frees;
    --self->live;
    self->blocks.erase(p);
    std::free(p);
  }
  RawMemory raw() { return RawMemory{alloc, free, this}; }
};

}  // namespace

TEST_CASE("cuda: caching allocator rounds sizes to classes wasting at most a quarter") {
  CHECK(CachingAllocator::round_size(1) == 64);
  CHECK(CachingAllocator::round_size(64) == 64);
  CHECK(CachingAllocator::round_size(65) == 128);
  CHECK(CachingAllocator::round_size(256) == 256);
  CHECK(CachingAllocator::round_size(257) == 320);
  CHECK(CachingAllocator::round_size(1000) == 1024);
  CHECK(CachingAllocator::round_size(1025) == 1280);
  for (size_t b = 257; b < (size_t(1) << 22); b = b * 5 / 4 + 7) {
    const size_t r = CachingAllocator::round_size(b);
    CHECK(r >= b);
    CHECK(double(r) <= 1.25 * double(b));
    CHECK(CachingAllocator::round_size(r) == r);  // a class is its own class
  }
}

TEST_CASE("cuda: caching allocator reuses blocks per size class and stream") {
  FakeRaw fake;
  {
    CachingAllocator a(fake.raw());
    CHECK(a.allocate(0, 1) == nullptr);
    void* p = a.allocate(1000, /*stream=*/1);
    a.deallocate(p, 1000, 1);
    void* q = a.allocate(1000, /*stream=*/2);  // another stream: never the cached block
    CHECK(q != p);
    CHECK(fake.allocs == 2);
    void* r = a.allocate(900, /*stream=*/1);  // 900 and 1000 share the 1024 class
    CHECK(r == p);
    CHECK(fake.allocs == 2);
    AllocatorStats s = a.stats();
    CHECK(s.cache_hits == 1);
    CHECK(s.system_allocs == 2);
    CHECK(s.allocated == 2048);
    CHECK(s.cached == 0);
    a.deallocate(q, 1000, 2);
    a.deallocate(r, 900, 1);
    s = a.stats();
    CHECK(s.allocated == 0);
    CHECK(s.cached == 2048);
    CHECK(s.peak == 2048);
    a.reset_peak();
    CHECK(a.stats().peak == 0);
    a.empty_cache();
    CHECK(a.stats().cached == 0);
    CHECK(fake.frees == 2);
    CHECK(fake.live == 0);
  }
  CHECK(fake.live == 0);
}

TEST_CASE("cuda: caching allocator rounds large requests to 64 KiB and reuses them best fit") {
  constexpr size_t MiB = size_t(1) << 20, KiB = 1024;
  CHECK(CachingAllocator::round_size(MiB - 1) == MiB);  // the last class below is 1 MiB itself
  CHECK(CachingAllocator::round_size(MiB) == MiB);
  CHECK(CachingAllocator::round_size(MiB + 1) == MiB + 64 * KiB);
  CHECK(CachingAllocator::round_size(10000000) == 10027008);  // 153 x 64 KiB, not the 10.5 MB class
  FakeRaw fake;
  {
    CachingAllocator a(fake.raw());
    void* p8 = a.allocate(8 * MiB, 1);
    a.deallocate(p8, 8 * MiB, 1);
    void* p6 = a.allocate(6 * MiB, 1);  // 8 / 6 is more than a quarter larger: a new block
    CHECK(p6 != p8);
    void* other = a.allocate(7 * MiB, 2);  // another stream: never the cached block
    CHECK(other != p8);
    void* p7 = a.allocate(7 * MiB, 1);  // at most a quarter larger: the 8 MiB block
    CHECK(p7 == p8);
    CHECK(fake.allocs == 3);
    CHECK(a.stats().allocated == 21 * MiB);  // the 8 MiB block counts as 8
    a.deallocate(p7, 7 * MiB, 1);            // returned under its own size, not the request's
    CHECK(a.stats().cached == 8 * MiB);
    CHECK(a.stats().allocated == 13 * MiB);
    void* again = a.allocate(8 * MiB, 1);  // so an 8 MiB request finds it
    CHECK(again == p8);
    CHECK(fake.allocs == 3);
    void* small = a.allocate(4 * MiB + 1, 1);  // best fit: the smallest free block that fits
    a.deallocate(small, 4 * MiB + 1, 1);
    void* p5 = a.allocate(5 * MiB, 1);
    a.deallocate(p5, 5 * MiB, 1);
    a.deallocate(again, 8 * MiB, 1);
    void* p5b = a.allocate(5 * MiB - 100, 1);
    CHECK(p5b == p5);
    a.deallocate(p5b, 5 * MiB - 100, 1);
    a.deallocate(p6, 6 * MiB, 1);
    a.deallocate(other, 7 * MiB, 2);
    CHECK(a.stats().allocated == 0);
    // A size whose rounding would wrap around is refused, not served with a small block.
    CHECK_THROWS_AS(a.allocate(std::numeric_limits<size_t>::max() - 5, 1), OutOfMemoryError);
    CHECK(a.stats().allocated == 0);
  }
  CHECK(fake.live == 0);
  CHECK(fake.wrong_size_frees == 0);  // each block went back to the raw allocator with its own size
}

TEST_CASE("cuda: caching allocator empties its cache and retries when memory runs out") {
  FakeRaw fake;
  CachingAllocator a(fake.raw());
  fake.limit = 2;
  void* p = a.allocate(4096);
  void* q = a.allocate(100);
  a.deallocate(q, 100);           // cached, holding the second of the two allowed blocks
  void* r = a.allocate(1 << 20);  // fails, empties the cache (frees q), retries
  CHECK(r != nullptr);
  CHECK(fake.frees == 1);
  CHECK_THROWS_AS(a.allocate(1 << 21), Error);  // nothing cached left: a clear error
  a.deallocate(p, 4096);
  a.deallocate(r, 1 << 20);
  a.empty_cache();
  CHECK(fake.live == 0);
}

TEST_CASE("cuda: the caching allocator's destructor returns cached blocks") {
  FakeRaw fake;
  {
    CachingAllocator a(fake.raw());
    a.deallocate(a.allocate(512, 3), 512, 3);
    CHECK(fake.live == 1);
  }
  CHECK(fake.live == 0);
}

#ifdef BRISK_WITH_CUDA

namespace {

using test::kGpu;

// Same values as `t` (a CPU tensor) on `device`, in one of three layouts: 0 dense, 1 strided
// (every other element of a wider buffer), 2 transposed storage (column-major matrices).
Tensor on_device(const Tensor& t, Device device, int layout) {
  NoGradGuard ng;
  if (layout == 0 || t.dim() == 0 || t.numel() == 0) return t.to(device).clone();
  if (layout == 1) {
    Shape wide = t.sizes();
    wide[wide.size() - 1] *= 2;
    Tensor buf = zeros(wide, t.dtype(), device);
    Tensor v = slice(buf, -1, 0, wide.back(), 2);
    v.copy_(t);
    return v;
  }
  if (t.dim() < 2) return on_device(t, device, 1);
  Shape swapped = t.sizes();
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Tensor buf = zeros(swapped, t.dtype(), device);
  Tensor v = transpose(buf, -1, -2);
  v.copy_(t);
  return v;
}

std::vector<Tensor> with_dtype(const std::vector<Tensor>& in, DType t) {
  std::vector<Tensor> out;
  NoGradGuard ng;
  for (const Tensor& x : in) out.push_back(is_floating(x.dtype()) ? cast(x, t) : x);
  return out;
}

double device_tolerance(const opcheck::OpSpec& spec, DType t) {
  switch (t) {
    case DType::F64: return spec.name.find("normal") != std::string::npos ? 1e-6 : 1e-9;
    case DType::F32: return std::max(spec.tol_f32, 1e-5);
    case DType::F16:
    case DType::BF16: return std::max(spec.tol_half, 1e-2);
    default: return 0;
  }
}

bool close(const Tensor& got, const Tensor& want, double tol) {
  if (!(got.sizes() == want.sizes())) return false;
  return allclose(cast(got.to(Device::cpu()), DType::F64), cast(want, DType::F64), tol, tol);
}

// Ops every op spec needs on CUDA; a spec covering an op without a CUDA kernel is reported.
bool has_cuda_kernels(const opcheck::OpSpec& spec, std::string& missing) {
  for (OpId id : spec.covers) {
    if (!op_def(id).kernels[int(DeviceType::CUDA)] && !op_def(id).view) {
      missing = op_name(id);
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("cuda: device discovery never fails and an absent GPU is a clear error") {
  int n = -1;
  CHECK_NOTHROW(n = cuda::device_count());
  CHECK(n >= 0);
  CHECK(cuda::is_available() == (n > 0));
  CHECK_NOTHROW(cuda::synchronize());  // every device (none is fine)
  if (n > 0) return;
  Tensor x = ones({2, 3});
  CHECK_THROWS_WITH_AS(x.to(Device::cuda()), doctest::Contains("no such device"), Error);
  CHECK_THROWS_WITH_AS(zeros({2}, DType::F32, Device::cuda()), doctest::Contains("cuda:0"), Error);
  CHECK_THROWS_AS(x.pin_memory(), Error);
  CHECK_THROWS_AS(cuda::memory_stats(0), Error);
  CHECK_THROWS_AS(cuda::Stream::create(0), Error);
  MESSAGE("no CUDA device: the GPU tests below skip themselves");
}

TEST_CASE("cuda: every op in ops.def has a CUDA kernel, except the listed ones") {
  // Ops that have no CUDA kernel on purpose, with the reason. An op missing from the CUDA
  // backend and not listed here fails this test, so a new op cannot leave the GPU behind
  // unnoticed.
  std::map<std::string, const char*> allowed;
#ifndef BRISK_WITH_CUDNN
  for (const char* op : {"conv2d", "conv2d_backward_input", "conv2d_backward_weight", "batch_norm"}) {
    allowed[op] = "built without cuDNN (configure found none; see docs/DECISIONS.md, Without cuDNN)";
  }
#endif
  // brisk::linalg's decompositions (Note [Linear algebra ops] in engine/ops/linalg.cpp) and the
  // sampling ops run on the CPU only: on CUDA they fail with "<op>: no kernel for device cuda".
  for (const char* op :
       {"linalg_solve", "linalg_cholesky", "linalg_slogdet", "linalg_qr", "linalg_eigh", "bernoulli", "multinomial"}) {
    allowed[op] = "CPU only (Eigen / host sampling): the CUDA error is \"no kernel for device cuda\"";
  }
  // The fused recurrent layers (Note [Fused recurrent layers] in kernels/cpu/recurrent.cpp): on
  // CUDA nn::LSTM / nn::GRU run their per-step ops instead (RNNBase::fused asks for a kernel).
  for (const char* op : {"lstm_sequence", "lstm_sequence_backward", "gru_sequence", "gru_sequence_backward"}) {
    allowed[op] = "CPU only so far: nn::LSTM and nn::GRU take their per-step ops on CUDA";
  }
  // The int8 inference ops (Note [Int8 ops] in engine/ops/quantized.cpp): the quantized modules
  // are CPU inference (the VNNI GEMM); kernels/cuda/gemm_i8.cu has a GEMM but no module uses it.
  for (const char* op : {"int8_pack_weight", "int8_linear", "int8_conv2d", "quantize_affine", "dequantize_affine"}) {
    allowed[op] = "CPU only: quantized modules run on the CPU (compress/quantize.h)";
  }
  std::vector<std::string> missing;
  for (int i = 0; i < kNumOps; ++i) {
    const OpDef& d = op_def(OpId(i));
    if (d.view || d.kernels[int(DeviceType::CUDA)]) continue;
    auto it = allowed.find(d.name);
    if (it != allowed.end()) {
      const std::string why = std::string(d.name) + ": no CUDA kernel (" + it->second + ")";
      MESSAGE(why);
      continue;
    }
    missing.push_back(d.name);
  }
  std::string list;
  for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
  CHECK_MESSAGE(missing.empty(), "ops without a CUDA kernel: ", list);
}

TEST_CASE("cuda: op specs match the CPU forward and backward, on dense, strided and transposed inputs") {
  BRISK_REQUIRE_GPU();
  int checked = 0;
  std::set<std::string> skipped, cpu_only;
  for (const opcheck::OpSpec& spec : opcheck::op_specs()) {
    if (!spec.cuda) continue;
    std::string missing;
    if (!has_cuda_kernels(spec, missing)) {
      skipped.insert(missing);
      continue;
    }
    std::vector<DType> dtypes = {DType::F64};
    for (DType t : spec.dtypes) dtypes.push_back(t);
    for (const opcheck::OpCase& c : spec.cases()) {
      for (DType t : dtypes) {
        for (int layout = 0; layout < 3; ++layout) {
          const std::string where =
              spec.name + " [" + c.label + "] " + dtype_name(t) + " layout " + std::to_string(layout);
          INFO(where);
          try {
            std::vector<Tensor> cpu_in = with_dtype(c.inputs, t);
            std::vector<Tensor> gpu_in;
            bool any_grad = false;
            for (Tensor& x : cpu_in) {
              Tensor g = on_device(x, kGpu, layout).detach();
              x = x.detach().clone();
              if (spec.grad && is_floating(x.dtype())) {
                x.requires_grad_();
                g.requires_grad_();
                any_grad = true;
              }
              gpu_in.push_back(g);
            }
            Tensor want = spec.fn(cpu_in);
            Tensor got = spec.fn(gpu_in);
            const double tol = device_tolerance(spec, t);
            REQUIRE_MESSAGE(got.dtype() == want.dtype(), "dtype ", got.dtype(), " vs CPU ", want.dtype());
            CHECK_MESSAGE(close(got, want, tol), "cuda ", got.to(Device::cpu()), "\ncpu ", want);
            ++checked;
            if (!any_grad || !want.requires_grad() || !is_floating(want.dtype())) continue;
            Tensor v = cast(opcheck::uniform_values(want.sizes(), -1, 1, 99), want.dtype());
            want.backward(v);
            got.backward(v.to(kGpu));
            for (size_t i = 0; i < cpu_in.size(); ++i) {
              if (!cpu_in[i].requires_grad()) continue;
              Tensor gw = cpu_in[i].grad(), gg = gpu_in[i].grad();
              CHECK_MESSAGE(gw.defined() == gg.defined(), "input ", i, ": gradient defined on one device only");
              if (!gw.defined() || !gg.defined()) continue;
              CHECK_MESSAGE(close(gg, gw, tol), "grad of input ", i, ": cuda ", gg.to(Device::cpu()), "\ncpu ", gw);
            }
          } catch (const std::exception& e) {
            // A spec whose fn makes CPU tensors itself (full(...) without a device) cannot run
            // on CUDA: reported below as a spec to fix, not as a kernel failure.
            const std::string what = e.what();
            if (what.find("on different devices") != std::string::npos) {
              cpu_only.insert(spec.name);
            } else if (what.find("no kernel for device cuda") != std::string::npos) {
              skipped.insert(what.substr(0, what.find(':')));  // the op without a CUDA kernel
            } else {
              FAIL_CHECK(where << " threw: " << e.what());
            }
          }
        }
      }
    }
  }
  std::string list;
  for (const std::string& m : skipped) list += (list.empty() ? "" : ", ") + m;
  if (!skipped.empty()) MESSAGE("specs skipped (op without a CUDA kernel): " << list);
  list.clear();
  for (const std::string& m : cpu_only) list += (list.empty() ? "" : ", ") + m;
  if (!cpu_only.empty()) MESSAGE("specs whose fn makes CPU tensors (pass in[0].device()): " << list);
  MESSAGE("op spec cases checked on CUDA: " << checked);
  CHECK(checked > 0);
}

namespace {

// Runs f on CPU inputs and on the same inputs moved to the GPU; compares.
void check_large(const char* what, const std::vector<Tensor>& in,
                 const std::function<Tensor(const std::vector<Tensor>&)>& f, double tol) {
  INFO(what);
  std::vector<Tensor> g;
  for (const Tensor& x : in) g.push_back(x.to(kGpu));
  Tensor want = f(in);
  Tensor got = f(g);
  CHECK(got.device() == kGpu);
  CHECK_MESSAGE(close(got, want, tol), what, ": cuda ", got.to(Device::cpu()), "\ncpu ", want);
}

Tensor u(const Shape& s, double lo = -1, double hi = 1, uint64_t seed = 1, DType t = DType::F32) {
  return opcheck::uniform_values(s, lo, hi, seed, t);
}

Tensor idx(int64_t n, int64_t bound, uint64_t seed) {
  return cast(opcheck::uniform_values({n}, 0, double(bound), seed), DType::I64);
}

}  // namespace

TEST_CASE("cuda: elementwise kernels on large, misaligned and broadcast inputs") {
  BRISK_REQUIRE_GPU();
  using V = std::vector<Tensor>;
  const Tensor a = u({(1 << 20) + 3}, -1, 1, 1), b = u({(1 << 20) + 3}, -1, 1, 2);
  check_large(
      "add, vectorized with a tail", {a, b}, [](const V& x) { return x[0] + x[1]; }, 1e-6);
  check_large(
      "mul, misaligned views", {a, b},
      [](const V& x) { return slice(x[0], 0, 1, 1000001) * slice(x[1], 0, 3, 1000003); }, 1e-6);
  check_large(
      "add a scalar", {a}, [](const V& x) { return x[0] * 2.5 + 1.0; }, 1e-6);
  check_large(
      "broadcast (1000, 1) + (1, 700)", {u({1000, 1}), u({1, 700}, -1, 1, 3)}, [](const V& x) { return x[0] + x[1]; },
      1e-6);
  check_large(
      "gelu on a transposed view", {u({300, 500})}, [](const V& x) { return gelu(transpose(x[0], 0, 1)); }, 1e-5);
  check_large(
      "where with broadcast", {u({64, 1, 33}), u({1, 50, 33}, -1, 1, 4)},
      [](const V& x) { return where(gt(x[0], x[1]), x[0], x[1]); }, 0);
  check_large(
      "cast F32 -> BF16 -> F32", {a}, [](const V& x) { return cast(cast(x[0], DType::BF16), DType::F32); }, 0);
  check_large(
      "cast F32 -> F16 -> F64", {a}, [](const V& x) { return cast(cast(x[0], DType::F16), DType::F64); }, 0);
  check_large(
      "cast F32 -> I64 -> F32", {a}, [](const V& x) { return cast(cast(x[0] * 1000.0, DType::I64), DType::F32); }, 0);
  check_large(
      "cast I64 -> U8 -> Bool -> F16", {a},
      [](const V& x) { return cast(cast(cast(cast(x[0] * 300.0, DType::I64), DType::U8), DType::Bool), DType::F16); },
      0);
  check_large(
      "integer arithmetic", {a},
      [](const V& x) {
        Tensor i = cast(x[0] * 1e6, DType::I64);
        Tensor j = cast(x[0] * 100.0, DType::I32);
        return cast(i * i - i + abs(i), DType::F64) + cast(maximum(j, neg(j)), DType::F64);
      },
      0);
  check_large(
      "comparisons on I64", {a},
      [](const V& x) {
        return cast(lt(cast(x[0] * 10.0, DType::I64), zeros({}, DType::I64, x[0].device())), DType::F32);
      },
      0);
  check_large(
      "masked_fill on F16", {a, b},
      [](const V& x) { return masked_fill(cast(x[0], DType::F16), gt(x[1], zeros_like(x[1])), -3.0); }, 0);
}

TEST_CASE("cuda: reductions, softmax and cross-entropy on large inputs") {
  BRISK_REQUIRE_GPU();
  using V = std::vector<Tensor>;
  const Tensor big = u({3000000}, 0, 1, 5);
  check_large(
      "sum of 3M elements (split)", {big}, [](const V& x) { return sum(x[0]); }, 1e-5);
  check_large(
      "sum of 3M elements in F64", {big}, [](const V& x) { return sum(cast(x[0], DType::F64)); }, 1e-12);
  check_large(
      "sum dim 0 of (4096, 300) (columns)", {u({4096, 300}, 0, 1, 6)}, [](const V& x) { return sum(x[0], {0}); }, 1e-5);
  check_large(
      "sum dim 1 of (300, 4096) (rows)", {u({300, 4096}, 0, 1, 7)}, [](const V& x) { return sum(x[0], {1}); }, 1e-5);
  check_large(
      "sum dims (0, 2) of (64, 50, 70), keepdim", {u({64, 50, 70}, 0, 1, 8)},
      [](const V& x) {
        return sum(x[0], {0, 2}, true);
      },
      1e-5);
  check_large(
      "sum of a transposed view", {u({700, 900}, 0, 1, 9)}, [](const V& x) { return sum(transpose(x[0], 0, 1), {1}); },
      1e-5);
  check_large(
      "sum of Bool to I64", {u({100000}, -1, 1, 10)}, [](const V& x) { return sum(gt(x[0], zeros_like(x[0]))); }, 0);
  check_large(
      "amax / amin over dims", {u({500, 600}, -1, 1, 11)},
      [](const V& x) { return amax(x[0], {1}) - amin(x[0], {0}).sum(); }, 1e-6);
  check_large(
      "var over 200000 rows (columns, split)", {u({200000, 3}, -1, 1, 12)}, [](const V& x) { return var(x[0], {0}); },
      1e-5);
  check_large(
      "var, unbiased = 0, over rows", {u({40, 5000}, -1, 1, 13)}, [](const V& x) { return var(x[0], {1}, 0); }, 1e-5);
  check_large(
      "argmax of 3M elements", {big}, [](const V& x) { return argmax(x[0]); }, 0);
  check_large(
      "argmin over dim 0", {u({3000, 200}, -1, 1, 14)}, [](const V& x) { return argmin(x[0], 0); }, 0);
  check_large(
      "argmax with ties (first wins)", {u({1000, 64}, -1, 1, 15)},
      [](const V& x) { return argmax(clamp(x[0], -0.5, 0.5), 1); }, 0);
  check_large(
      "softmax rows of 5000", {u({512, 5000}, -5, 5, 16)}, [](const V& x) { return softmax(x[0], 1); }, 1e-5);
  check_large(
      "log_softmax rows of 7 (warp per row)", {u({10000, 7}, -5, 5, 17)},
      [](const V& x) { return log_softmax(x[0], -1); }, 1e-5);
  check_large(
      "softmax over dim 0 (columns)", {u({300, 7, 5}, -5, 5, 18)}, [](const V& x) { return softmax(x[0], 0); }, 1e-5);
  check_large(
      "log_softmax in BF16", {u({64, 1000}, -5, 5, 19)},
      [](const V& x) { return log_softmax(cast(x[0], DType::BF16), 1); }, 1e-2);
  const Tensor logits = u({4096, 1000}, -4, 4, 20);
  Tensor target = idx(4096, 1000, 21);
  {
    NoGradGuard ng;
    Tensor mask = lt(opcheck::uniform_values({4096}, 0, 1, 22), full({}, 0.1, DType::F64));
    target = masked_fill(target, mask, -100.0);  // about 10% ignored rows
  }
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (double smoothing : {0.0, 0.1}) {
      check_large(
          "cross_entropy", {logits, target},
          [r, smoothing](const V& x) { return cross_entropy(x[0], x[1], r, smoothing); }, 1e-5);
      check_large(
          "cross_entropy backward", {logits, target},
          [r, smoothing](const V& x) {
            Tensor l = x[0].detach().clone().requires_grad_();
            Tensor loss = cross_entropy(l, x[1], r, smoothing);
            (r == Reduction::None ? sum(loss) : loss).backward();
            return l.grad();
          },
          1e-5);
    }
  }
}

TEST_CASE("cuda: matmul through cuBLASLt matches the CPU") {
  BRISK_REQUIRE_GPU();
  using V = std::vector<Tensor>;
  auto mm = [](const V& x) { return matmul(x[0], x[1]); };
  // F32: both sides round each of K products; sums of a few hundred terms of size ~1 differ by
  // a few 1e-6 (summation order), hence 5e-5 rather than 1e-5.
  const double f32 = 5e-5;
  check_large("(512, 384) @ (384, 256)", {u({512, 384}), u({384, 256}, -1, 1, 2)}, mm, f32);
  check_large(
      "transposed views", {u({384, 512}), u({256, 384}, -1, 1, 2)},
      [](const V& x) { return matmul(x[0].t(), x[1].t()); }, f32);
  check_large(
      "strided rows (copied first)", {u({64, 100}), u({50, 30}, -1, 1, 2)},
      [](const V& x) { return matmul(slice(x[0], 1, 0, 100, 2), x[1]); }, f32);
  check_large("batched (4, 3, 64, 32) @ (32, 48)", {u({4, 3, 64, 32}), u({32, 48}, -1, 1, 2)}, mm, f32);
  check_large("broadcast (3, 1, 64, 32) @ (5, 32, 16)", {u({3, 1, 64, 32}), u({5, 32, 16}, -1, 1, 2)}, mm, f32);
  check_large(
      "vector @ matrix and matrix @ vector", {u({77}), u({77, 33}, -1, 1, 2)},
      [](const V& x) { return matmul(x[0], x[1]).sum() + matmul(x[1].t(), x[0]).sum(); }, f32);
  check_large("K = 0 gives zeros", {u({5, 0}), u({0, 4}, -1, 1, 2)}, mm, 0);
  check_large("F64", {u({200, 300}, -1, 1, 1, DType::F64), u({300, 100}, -1, 1, 2, DType::F64)}, mm, 1e-12);
  check_large(
      "F16 with F32 accumulation", {u({256, 512}), u({512, 128}, -1, 1, 2)},
      [](const V& x) { return matmul(cast(x[0], DType::F16), cast(x[1], DType::F16)); }, 1e-2);
  check_large(
      "BF16 with F32 accumulation", {u({256, 512}), u({512, 128}, -1, 1, 2)},
      [](const V& x) { return matmul(cast(x[0], DType::BF16), cast(x[1], DType::BF16)); }, 1e-2);
  check_large(
      "I64", {u({20, 30}), u({30, 10}, -1, 1, 2)},
      [](const V& x) { return matmul(cast(x[0] * 100.0, DType::I64), cast(x[1] * 100.0, DType::I64)); }, 0);
  check_large(
      "backward", {u({64, 48}), u({48, 32}, -1, 1, 2)},
      [](const V& x) {
        Tensor a = x[0].detach().clone().requires_grad_(), b = x[1].detach().clone().requires_grad_();
        matmul(a, b).sum().backward();
        return cat({a.grad().flatten(), b.grad().flatten()});
      },
      f32);
  // TF32: about 1e-3 relative, off by default.
  CHECK_FALSE(cuda::allow_tf32());
  cuda::set_allow_tf32(true);
  check_large(
      "TF32", {u({256, 1024}), u({1024, 256}, -1, 1, 2)},
      [](const V& x) {
        Tensor y = matmul(x[0], x[1]);
        return y / 32.0;  // entries ~ N(0, sqrt(1024 / 9)): scaled to ~1
      },
      1e-3 * 4);
  cuda::set_allow_tf32(false);
}

TEST_CASE("cuda: index ops and cat on large inputs") {
  BRISK_REQUIRE_GPU();
  using V = std::vector<Tensor>;
  const Tensor x = u({10000, 64});
  check_large(
      "index_select rows", {x, idx(5000, 10000, 1)}, [](const V& v) { return index_select(v[0], 0, v[1]); }, 0);
  check_large(
      "index_select columns with I32 indices", {x, idx(100, 64, 2)},
      [](const V& v) { return index_select(v[0], 1, cast(v[1], DType::I32)); }, 0);
  check_large(
      "index_add with repeated indices", {x, idx(20000, 10000, 3), u({20000, 64}, -1, 1, 4)},
      [](const V& v) { return index_add(v[0], 0, v[1], v[2]); }, 1e-5);
  check_large(
      "index_add in F16", {x, idx(300, 100, 5), u({300, 64}, -1, 1, 6)},
      [](const V& v) { return index_add(cast(slice(v[0], 0, 0, 100), DType::F16), 0, v[1], cast(v[2], DType::F16)); },
      1e-2);
  const Tensor gi = cast(opcheck::uniform_values({500, 64}, 0, 10000, 7), DType::I64);
  check_large(
      "gather dim 0", {x, gi}, [](const V& v) { return gather(v[0], 0, v[1]); }, 0);
  check_large(
      "scatter_add with collisions",
      {zeros({100, 64}), cast(opcheck::uniform_values({5000, 64}, 0, 100, 8), DType::I64), u({5000, 64}, -1, 1, 9)},
      [](const V& v) { return scatter_add(v[0], 0, v[1], v[2]); }, 1e-5);
  check_large(
      "embedding backward", {u({1000, 32}), cast(opcheck::uniform_values({64, 20}, 0, 1000, 10), DType::I64)},
      [](const V& v) {
        Tensor w = v[0].detach().clone().requires_grad_();
        (embedding(w, v[1]) * 3.0).sum().backward();
        return w.grad();
      },
      1e-5);
  check_large(
      "cat along dim 1", {u({300, 17}), u({300, 1}, -1, 1, 2), u({300, 40}, -1, 1, 3)},
      [](const V& v) {
        return cat({v[0], v[1], v[2]}, 1);
      },
      0);
  check_large(
      "slice backward", {u({50, 60})},
      [](const V& v) {
        Tensor w = v[0].detach().clone().requires_grad_();
        slice(w, 1, 3, 50, 4).sum().backward();
        return w.grad();
      },
      0);
}

TEST_CASE("cuda: an out-of-range index is reported at the next synchronization") {
  BRISK_REQUIRE_GPU();
  Tensor x = ones({10, 4}, DType::F32, kGpu);
  Tensor bad = from_vector({1, 100, 2}, {3}, DType::I64, kGpu);
  Tensor y = index_select(x, 0, bad);  // queued; the kernel records the bad index
  CHECK_THROWS_WITH_AS(y.to_vector<float>(), doctest::Contains("index_select: index 100 is out of range"), Error);
  // The context is not poisoned: work continues.
  CHECK((x + x).sum().item<double>() == 80.0);
  CHECK_NOTHROW(cuda::synchronize());
}

TEST_CASE("cuda: rand, randn and dropout give the CPU's values for the same seed") {
  BRISK_REQUIRE_GPU();
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    INFO(dtype_name(t));
    Generator g1(77), g2(77);
    Tensor c = uniform({1001}, -2, 3, t, Device::cpu(), &g1);
    Tensor d = uniform({1001}, -2, 3, t, kGpu, &g2);
    CHECK(equal(d.to(Device::cpu()), c));  // bit for bit
    Tensor cn = normal({1001}, 0.5, 2, t, Device::cpu(), &g1);
    Tensor dn = normal({1001}, 0.5, 2, t, kGpu, &g2);
    CHECK(close(dn, cn, t == DType::F32 || t == DType::F64 ? 1e-5 : 1e-2));  // logf/cosf may differ by an ulp
    Tensor x = u({3, 333}, -1, 1, 3, t);
    Tensor cd = dropout(x, 0.3, true, &g1);
    Tensor dd = dropout(x.to(kGpu), 0.3, true, &g2);
    CHECK(equal(dd.to(Device::cpu()), cd));
    CHECK(g1.offset() == g2.offset());
  }
  check_large(
      "arange", {zeros({1})},
      [](const std::vector<Tensor>& v) {
        return cast(arange(-3.0, 7.0, 0.37, DType::F32, v[0].device()), DType::F64) +
               cast(arange(0.0, 100.0, 3.0, DType::I64, v[0].device()), DType::F64).sum();
      },
      0);
}

TEST_CASE("cuda: pinned memory and non_blocking copies round-trip") {
  BRISK_REQUIRE_GPU();
  Tensor x = u({1 << 20}, -1, 1, 4);
  Tensor p = x.pin_memory();
  CHECK(p.is_pinned());
  CHECK(cuda::pinned_memory_stats().allocated >= size_t(4) << 20);
  Tensor g = p.to(kGpu, /*non_blocking=*/true);
  Tensor back = g.to(Device::cpu());
  CHECK(equal(back, x));
  // Drop the pinned source while its copy may still be in flight: the block is not reused
  // until the copy is done (Note [Pinned memory reuse]).
  std::vector<Tensor> outs;
  for (int i = 0; i < 4; ++i) {
    Tensor src = (x * double(i + 1)).pin_memory();
    outs.push_back(src.to(kGpu, true));
  }
  for (int i = 0; i < 4; ++i) CHECK(equal(outs[size_t(i)].to(Device::cpu()), x * double(i + 1)));
  // copy_ with non_blocking into an existing device tensor.
  Tensor dst = zeros({1 << 20}, DType::F32, kGpu);
  dst.copy_(p, true);
  CHECK(equal(dst.to(Device::cpu()), x));
}

TEST_CASE("cuda: allocator statistics on the device") {
  BRISK_REQUIRE_GPU();
  cuda::synchronize();
  cuda::empty_cache(0);
  const AllocatorStats s0 = cuda::memory_stats(0);
  CHECK(s0.cached == 0);
  {
    Tensor t = empty({1 << 20}, DType::F32, kGpu);  // 4 MiB
    const AllocatorStats s1 = cuda::memory_stats(0);
    CHECK(s1.allocated >= s0.allocated + (size_t(4) << 20));
    CHECK(s1.peak >= s1.allocated);
    CHECK(s1.system_allocs == s0.system_allocs + 1);
  }
  const AllocatorStats s2 = cuda::memory_stats(0);
  CHECK(s2.allocated == s0.allocated);
  CHECK(s2.cached >= size_t(4) << 20);
  {
    Tensor t = empty({1 << 20}, DType::F32, kGpu);  // served from the cache
    const AllocatorStats s3 = cuda::memory_stats(0);
    CHECK(s3.system_allocs == s2.system_allocs);
    CHECK(s3.cache_hits == s2.cache_hits + 1);
  }
  cuda::empty_cache(0);
  CHECK(cuda::memory_stats(0).cached == 0);
  CHECK_THROWS_WITH_AS(empty({int64_t(1) << 46}, DType::F32, kGpu), doctest::Contains("out of memory"), Error);
  CHECK_NOTHROW((ones({4}, DType::F32, kGpu) + 1.0).to(Device::cpu()));
}

TEST_CASE("cuda: streams and events order work") {
  BRISK_REQUIRE_GPU();
  cuda::Stream s = cuda::Stream::create(0);
  CHECK(s.handle() != nullptr);
  CHECK(cuda::current_stream(0) == cuda::Stream::default_stream(0));
  cuda::Event start(true), stop(true);
  Tensor y;
  {
    cuda::StreamGuard guard(s);
    CHECK(cuda::current_stream(0) == s);
    Tensor x = ones({1 << 20}, DType::F32, kGpu);
    start.record(s);
    y = (x * 3.0).sum();
    stop.record(s);
  }
  CHECK(cuda::current_stream(0) == cuda::Stream::default_stream(0));
  stop.synchronize();
  CHECK(stop.query());
  CHECK(start.elapsed_ms(stop) >= 0);
  // The default stream waits for s before reading y.
  stop.block(cuda::Stream::default_stream(0));
  CHECK(y.item<double>() == 3.0 * (1 << 20));
  s.synchronize();
  CHECK(s.query());
}

// ---- nn ops: cuDNN conv and batch norm, hand-written pooling and layer norm
namespace {

namespace F = brisk::nn::functional;

// max |got - want| <= rel * max(1, max |want|): a tolerance relative to the tensor's scale, for
// results whose size grows with the problem (conv sums, gradients).
void check_scaled(const Tensor& got, const Tensor& want, double rel, const std::string& what) {
  INFO(what);
  REQUIRE_MESSAGE(got.sizes() == want.sizes(), what, ": sizes ", got.sizes(), " vs ", want.sizes());
  const std::vector<double> g = got.detach().to(Device::cpu()).to_vector<double>();
  const std::vector<double> w = want.detach().to(Device::cpu()).to_vector<double>();
  double scale = 1, err = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    scale = std::max(scale, std::abs(w[i]));
    err = std::max(err, std::abs(g[i] - w[i]));  // NaN makes err NaN: the check fails
  }
  CHECK_MESSAGE(err <= rel * scale, what, ": max error ", err, " against scale ", scale, " (allowed ", rel * scale,
                ")");
}

struct ConvCase {
  const char* name;
  Shape x, w;
  F::Pair stride, padding, dilation;
  int64_t groups;
};

// y = conv2d(x, w) and the gradients of x and w for the cotangent v.
std::vector<Tensor> conv_with_grads(const Tensor& x, const Tensor& w, const Tensor& v, const ConvCase& c) {
  Tensor xl = x.detach().clone().requires_grad_(), wl = w.detach().clone().requires_grad_();
  Tensor y = F::conv2d(xl, wl, {}, c.stride, c.padding, c.dilation, c.groups);
  y.backward(v);
  return {y.detach(), xl.grad(), wl.grad()};
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {"3x3, 64 -> 64 channels, padding 1", {8, 64, 14, 14}, {64, 64, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {"groups 4, stride 2, dilation 2, padding 2", {4, 16, 20, 18}, {32, 4, 3, 3}, {2, 2}, {2, 2}, {2, 2}, 4},
      {"depthwise 3x3, stride (2, 1), padding 1", {4, 32, 15, 16}, {32, 1, 3, 3}, {2, 1}, {1, 1}, {1, 1}, 32},
      {"1x1, stride 2", {8, 48, 9, 9}, {24, 48, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1},
      {"5x3 kernel, dilation (1, 3), padding (2, 3)", {2, 6, 17, 19}, {10, 6, 5, 3}, {1, 1}, {2, 3}, {1, 3}, 1},
      {"7x7, stride 2, padding 3 (a ResNet stem)", {2, 3, 32, 32}, {16, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}, 1},
  };
  return cases;
}

}  // namespace

// conv2d and batch_norm have CUDA kernels only in builds with cuDNN (cmake/cuda.cmake).
#ifdef BRISK_WITH_CUDNN

TEST_CASE("cuda: conv2d forward and gradients in F64, F32, F16 and BF16 match the CPU in F64") {
  BRISK_REQUIRE_GPU();
  CHECK_FALSE(cuda::allow_tf32());
  uint64_t seed = 300;
  for (const ConvCase& c : conv_cases()) {
    const Tensor x = u(c.x, -1, 1, ++seed, DType::F64), w = u(c.w, -1, 1, ++seed, DType::F64);
    Shape ys;
    {
      NoGradGuard ng;
      ys = F::conv2d(x, w, {}, c.stride, c.padding, c.dilation, c.groups).sizes();
    }
    const Tensor v = u(ys, -1, 1, ++seed, DType::F64);
    // F64 on both sides: the same sums in another order.
    {
      const std::vector<Tensor> want = conv_with_grads(x, w, v, c);
      const std::vector<Tensor> got = conv_with_grads(x.to(kGpu), w.to(kGpu), v.to(kGpu), c);
      const char* part[3] = {"y", "grad x", "grad w"};
      for (int i = 0; i < 3; ++i)
        check_scaled(got[size_t(i)], want[size_t(i)], 1e-12, std::string(c.name) + " F64 " + part[i]);
    }
    // F32 and F16 against F64 of the same (rounded) values: only the arithmetic differs.
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      const Tensor xt = cast(x, t), wt = cast(w, t), vt = cast(v, t);
      const std::vector<Tensor> want =
          conv_with_grads(cast(xt, DType::F64), cast(wt, DType::F64), cast(vt, DType::F64), c);
      const std::vector<Tensor> got = conv_with_grads(xt.to(kGpu), wt.to(kGpu), vt.to(kGpu), c);
      // F32: summation order (and Winograd/FFT transforms); 16-bit: the output's rounding.
      const double rel = t == DType::F32 ? 2e-5 : t == DType::F16 ? 4e-3 : 1.5e-2;
      const char* part[3] = {"y", "grad x", "grad w"};
      for (int i = 0; i < 3; ++i) {
        CHECK(got[size_t(i)].dtype() == t);
        check_scaled(got[size_t(i)], want[size_t(i)], rel, std::string(c.name) + " " + dtype_name(t) + " " + part[i]);
      }
    }
  }
}

TEST_CASE("cuda: conv2d honours the TF32 switch and reads strided inputs") {
  BRISK_REQUIRE_GPU();
  const ConvCase& c = conv_cases()[0];
  const Tensor x = u(c.x, -1, 1, 401, DType::F64), w = u(c.w, -1, 1, 402, DType::F64);
  NoGradGuard ng;
  const Tensor want =
      F::conv2d(cast(cast(x, DType::F32), DType::F64), cast(cast(w, DType::F32), DType::F64), {}, c.stride, c.padding);
  const Tensor xg = cast(x, DType::F32).to(kGpu), wg = cast(w, DType::F32).to(kGpu);
  // TF32 rounds the operands to 10 mantissa bits: errors ~1e-3 relative. With TF32 off (the
  // default, checked above at 2e-5) the same geometry's plan must not use it.
  cuda::set_allow_tf32(true);
  const Tensor fast = F::conv2d(xg, wg, {}, c.stride, c.padding);
  cuda::set_allow_tf32(false);
  check_scaled(fast, want, 5e-3, "TF32 conv");
  check_scaled(F::conv2d(xg, wg, {}, c.stride, c.padding), want, 2e-5, "F32 conv after TF32 was switched off");
  // A channels-last view and a sliced weight: copied to dense before cuDNN.
  const Tensor x_cl = permute(contiguous(permute(xg, {0, 2, 3, 1})), {0, 3, 1, 2});
  CHECK_FALSE(x_cl.is_contiguous());
  check_scaled(F::conv2d(x_cl, wg, {}, c.stride, c.padding), want, 2e-5, "channels-last input");
  const Tensor wide = cat({wg, wg}, 1);
  const Tensor w_view = slice(wide, 1, 0, c.w[1]);
  CHECK_FALSE(w_view.is_contiguous());
  check_scaled(F::conv2d(xg, w_view, {}, c.stride, c.padding), want, 2e-5, "sliced weight");
}

TEST_CASE("cuda: a ResNet basic block trains the same on CUDA and on the CPU") {
  BRISK_REQUIRE_GPU();
  // x -> conv3x3/2 -> bn -> relu -> conv3x3 -> bn, + conv1x1/2 shortcut -> relu -> global
  // average pool -> linear -> cross-entropy; then backward. Every parameter's gradient and the
  // batch norms' running statistics are compared.
  for (DType t : {DType::F64, DType::F32}) {
    INFO(dtype_name(t));
    const double rel = t == DType::F64 ? 1e-10 : 1e-4;
    auto param = [t](const Shape& s, double lo, double hi, uint64_t seed) { return u(s, lo, hi, seed, t); };
    const std::vector<Tensor> params = {param({16, 8, 3, 3}, -0.3, 0.3, 501), param({16}, 0.5, 1.5, 502),
                                        param({16}, -0.2, 0.2, 503),          param({16, 16, 3, 3}, -0.2, 0.2, 504),
                                        param({16}, 0.5, 1.5, 505),           param({16}, -0.2, 0.2, 506),
                                        param({16, 8, 1, 1}, -0.5, 0.5, 507), param({10, 16}, -0.5, 0.5, 508)};
    const Tensor x = u({6, 8, 12, 12}, -1, 2, 509, t);
    const Tensor target = cast(opcheck::uniform_values({6}, 0, 10, 510), DType::I64);
    struct Result {
      Tensor loss;
      std::vector<Tensor> grads, stats;
    };
    auto run = [&](Device d) {
      std::vector<Tensor> p;
      for (const Tensor& q : params) p.push_back(q.to(d).detach().requires_grad_());
      std::vector<Tensor> stats = {zeros({16}, t, d), ones({16}, t, d), zeros({16}, t, d), ones({16}, t, d)};
      Tensor xi = x.to(d).detach().requires_grad_();
      Tensor h = F::conv2d(xi, p[0], {}, {2, 2}, {1, 1});
      h = relu(F::batch_norm(h, stats[0], stats[1], p[1], p[2], true));
      h = F::conv2d(h, p[3], {}, {1, 1}, {1, 1});
      h = F::batch_norm(h, stats[2], stats[3], p[4], p[5], true);
      h = relu(h + F::conv2d(xi, p[6], {}, {2, 2}));
      h = reshape(F::adaptive_avg_pool2d(h, {1, 1}), {6, 16});
      Tensor loss = F::cross_entropy(F::linear(h, p[7]), target.to(d));
      loss.backward();
      Result r{loss.detach(), {xi.grad()}, stats};
      for (const Tensor& q : p) r.grads.push_back(q.grad());
      return r;
    };
    const Result want = run(Device::cpu());
    const Result got = run(kGpu);
    check_scaled(got.loss, want.loss, rel, "loss");
    for (size_t i = 0; i < want.grads.size(); ++i) {
      REQUIRE(got.grads[i].defined());
      check_scaled(got.grads[i], want.grads[i], rel,
                   i == 0 ? std::string("grad of x") : "grad of parameter " + std::to_string(i - 1));
    }
    for (size_t i = 0; i < want.stats.size(); ++i) {
      check_scaled(got.stats[i], want.stats[i], rel, "running statistic " + std::to_string(i));
    }
  }
}

TEST_CASE("cuda: batch norm layers keep the CPU's running statistics over training steps") {
  BRISK_REQUIRE_GPU();
  struct Layer {
    std::shared_ptr<nn::BatchNorm> cpu, gpu;
    Shape x;
  };
  std::vector<Layer> layers = {
      {std::make_shared<nn::BatchNorm2d>(12, 1e-5, 0.1),
       std::make_shared<nn::BatchNorm2d>(12, 1e-5, 0.1),
       {16, 12, 9, 7}},
      {std::make_shared<nn::BatchNorm1d>(20, 1e-3, 0.3), std::make_shared<nn::BatchNorm1d>(20, 1e-3, 0.3), {64, 20}},
      {std::make_shared<nn::BatchNorm1d>(5, 1e-5, 0.1), std::make_shared<nn::BatchNorm1d>(5, 1e-5, 0.1), {3, 5, 33}},
  };
  uint64_t seed = 600;
  for (Layer& l : layers) {
    INFO("input ", l.x);
    l.gpu->to(kGpu);
    for (int step = 0; step < 4; ++step) {
      // Each step a different mean and spread, so the running statistics move.
      const Tensor x = u(l.x, -1.0 + step, 1.0 + 3 * step, ++seed);
      const Tensor want = l.cpu->forward(x);
      const Tensor got = l.gpu->forward(x.to(kGpu));
      check_scaled(got, want, 1e-5, "training step " + std::to_string(step));
    }
    check_scaled(l.gpu->buffer("running_mean"), l.cpu->buffer("running_mean"), 1e-5, "running_mean");
    check_scaled(l.gpu->buffer("running_var"), l.cpu->buffer("running_var"), 1e-5, "running_var");
    l.cpu->eval();
    l.gpu->eval();
    const Tensor x = u(l.x, -2, 5, ++seed);
    check_scaled(l.gpu->forward(x.to(kGpu)), l.cpu->forward(x), 1e-5, "eval");
  }
}

#endif  // BRISK_WITH_CUDNN

TEST_CASE("cuda: batch_norm and layer_norm outputs and statistics match the CPU in every dtype") {
  BRISK_REQUIRE_GPU();
  auto outputs = [](OpId id, const std::vector<Tensor>& in, const Attrs& attrs) {
    std::vector<Tensor> out(3);
    call(id, in, attrs, out);
    return out;
  };
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(t));
    const double rel = t == DType::F64 ? 1e-12 : t == DType::F32 ? 1e-5 : t == DType::F16 ? 2e-3 : 1.5e-2;
#ifdef BRISK_WITH_CUDNN
    // batch_norm: (B, C, H, W), (B, C), (B, C, L), in training and eval; an empty batch in eval.
    for (const Shape& s : {Shape{32, 24, 14, 14}, Shape{256, 40}, Shape{4, 7, 301}, Shape{0, 3, 4}}) {
      const int64_t c = s[1];
      for (bool training : {true, false}) {
        if (training && s[0] == 0) continue;
        INFO("batch_norm ", s, training ? " training" : " eval");
        const std::vector<Tensor> in = {u(s, -1, 3, 701, t), u({c}, 0.5, 1.5, 702, t), u({c}, -0.5, 0.5, 703, t),
                                        u({c}, -0.5, 0.5, 704, t), u({c}, 0.5, 2, 705, t)};
        Attrs attrs;
        attrs.flag = training;
        attrs.b = 1e-5;
        std::vector<Tensor> gin;
        for (const Tensor& x : in) gin.push_back(x.to(kGpu));
        const std::vector<Tensor> want = outputs(OpId::BatchNorm, in, attrs);
        const std::vector<Tensor> got = outputs(OpId::BatchNorm, gin, attrs);
        for (int i = 0; i < 3; ++i) {
          CHECK(got[size_t(i)].dtype() == want[size_t(i)].dtype());
          // The statistics are F32 (F64): tight whatever x's dtype.
          check_scaled(got[size_t(i)], want[size_t(i)], i == 0 ? rel : (t == DType::F64 ? 1e-12 : 1e-5),
                       "output " + std::to_string(i));
        }
      }
    }
#endif  // BRISK_WITH_CUDNN
    // layer_norm: short rows (a warp per row), long rows (a loop per thread), several dims.
    for (const auto& [s, nd] : std::vector<std::pair<Shape, int>>{
             {{10000, 7}, 1}, {{64, 4096}, 1}, {{3, 70001}, 1}, {{2, 3, 5, 7}, 2}, {{4, 0}, 1}, {{0, 5}, 1}}) {
      INFO("layer_norm ", s, " over ", nd, " dims");
      Shape norm;
      for (int d = s.size() - nd; d < s.size(); ++d) norm.push_back(s[d]);
      const std::vector<Tensor> in = {u(s, -1, 3, 711, t), u(norm, 0.5, 1.5, 712, t), u(norm, -0.5, 0.5, 713, t)};
      Attrs attrs;
      attrs.dim = nd;
      attrs.a = 1e-5;
      std::vector<Tensor> gin;
      for (const Tensor& x : in) gin.push_back(x.to(kGpu));
      const std::vector<Tensor> want = outputs(OpId::LayerNorm, in, attrs);
      const std::vector<Tensor> got = outputs(OpId::LayerNorm, gin, attrs);
      for (int i = 0; i < 3; ++i) {
        CHECK(got[size_t(i)].dtype() == want[size_t(i)].dtype());
        check_scaled(got[size_t(i)], want[size_t(i)], i == 0 ? rel : (t == DType::F64 ? 1e-12 : 1e-5),
                     "output " + std::to_string(i));
      }
    }
  }
}

TEST_CASE("cuda: max_pool2d picks the CPU's index among ties and routes the same gradient") {
  BRISK_REQUIRE_GPU();
  struct PoolCase {
    const char* name;
    F::Pair kernel, stride, padding, dilation;
    bool ceil_mode;
  };
  const std::vector<PoolCase> cases = {
      {"3x3, stride 1, padding 1 (every element in 9 windows)", {3, 3}, {1, 1}, {1, 1}, {1, 1}, false},
      {"3x3, stride 2, padding 1, ceil_mode", {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
      {"2x2, stride 2", {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
      {"2x3, stride (1, 2), padding 1, dilation (2, 1)", {2, 3}, {1, 2}, {1, 1}, {2, 1}, false},
  };
  for (DType t : {DType::F64, DType::F32, DType::F16}) {
    for (const PoolCase& c : cases) {
      INFO(c.name, " ", dtype_name(t));
      // Values in {0, 1, 2}: most windows hold ties. Small integers are exact in every dtype.
      Tensor x = cast(cast(opcheck::uniform_values({3, 4, 13, 11}, 0, 3, 800), DType::I64), t);
      auto run = [&](const Tensor& in) {
        Tensor xl = in.detach().clone().requires_grad_();
        Tensor y = F::max_pool2d(xl, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
        Tensor v = cast(opcheck::uniform_values(y.sizes(), -1, 1, 801), t).to(in.device());
        y.backward(v);
        return std::pair{y.detach(), xl.grad()};
      };
      const auto [want_y, want_g] = run(x);
      const auto [got_y, got_g] = run(x.to(kGpu));
      CHECK(equal(got_y.to(Device::cpu()), want_y));
      // Same sum order as the CPU (output order): exact for F32/F64; F16 rounds each CPU step.
      check_scaled(got_g, want_g, t == DType::F16 ? 2e-3 : 0.0, "gradient");
      // The indices themselves, through the op.
      Attrs attrs;
      attrs.geometry = {c.stride[0],   c.stride[1],   c.padding[0], c.padding[1],
                        c.dilation[0], c.dilation[1], c.kernel[0],  c.kernel[1]};
      attrs.flag = c.ceil_mode;
      std::vector<Tensor> want(2), got(2);
      call(OpId::MaxPool2d, std::vector<Tensor>{x}, attrs, want);
      call(OpId::MaxPool2d, std::vector<Tensor>{x.to(kGpu)}, attrs, got);
      CHECK(equal(got[1].to(Device::cpu()), want[1]));
    }
  }
  // NaN wins its window, as on the CPU.
  Tensor x = opcheck::uniform_values({2, 3, 8, 8}, -1, 1, 802, DType::F32);
  {
    NoGradGuard ng;
    Tensor mask = lt(opcheck::uniform_values({2, 3, 8, 8}, 0, 1, 803, DType::F32), full({}, 0.05, DType::F32));
    x = where(mask, full({}, std::nan(""), DType::F32), x);
  }
  Attrs attrs;
  attrs.geometry = {2, 2, 1, 1, 1, 1, 3, 3};
  std::vector<Tensor> want(2), got(2);
  call(OpId::MaxPool2d, std::vector<Tensor>{x}, attrs, want);
  call(OpId::MaxPool2d, std::vector<Tensor>{x.to(kGpu)}, attrs, got);
  CHECK(equal(got[1].to(Device::cpu()), want[1]));
  const Tensor got_y = got[0].to(Device::cpu());
  CHECK(equal(ne(got_y, got_y), ne(want[0], want[0])));  // NaN where the CPU has NaN
}

TEST_CASE("cuda: average and adaptive pooling on large inputs match the CPU") {
  BRISK_REQUIRE_GPU();
  using V = std::vector<Tensor>;
  auto with_grad = [](std::function<Tensor(const Tensor&)> f) {
    return [f](const V& v) {
      Tensor x = v[0].detach().clone().requires_grad_();
      Tensor y = f(x);
      y.backward(cast(opcheck::uniform_values(y.sizes(), -1, 1, 901), y.dtype()).to(y.device()));
      return cat({y.detach().flatten(), x.grad().flatten()});
    };
  };
  const Tensor x = u({8, 32, 29, 31}, -1, 1, 902);
  check_large("avg_pool2d 3x3 stride 2 padding 1 ceil_mode, count_include_pad", {x}, with_grad([](const Tensor& t) {
                return F::avg_pool2d(t, {3, 3}, F::Pair{2, 2}, {1, 1}, true, true);
              }),
              1e-5);
  check_large("avg_pool2d 3x2 stride (2, 1) padding (1, 1) ceil_mode, count_include_pad false", {x},
              with_grad([](const Tensor& t) {
                return F::avg_pool2d(t, {3, 2}, F::Pair{2, 1}, {1, 1}, true, false);
              }),
              1e-5);
  check_large("avg_pool2d 2x2 in BF16", {x}, with_grad([](const Tensor& t) {
                return F::avg_pool2d(cast(t, DType::BF16), {2, 2});
              }),
              1e-2);
  check_large("adaptive_avg_pool2d to (1, 1)", {x}, with_grad([](const Tensor& t) {
                return F::adaptive_avg_pool2d(t, {1, 1});
              }),
              1e-5);
  check_large("adaptive_avg_pool2d to (7, 5) (overlapping windows)", {x}, with_grad([](const Tensor& t) {
                return F::adaptive_avg_pool2d(t, {7, 5});
              }),
              1e-5);
  check_large("adaptive_avg_pool2d to (40, 45) (upsampling)", {x}, with_grad([](const Tensor& t) {
                return F::adaptive_avg_pool2d(t, {40, 45});
              }),
              1e-5);
  check_large("adaptive_avg_pool2d in F16", {x}, with_grad([](const Tensor& t) {
                return F::adaptive_avg_pool2d(cast(t, DType::F16), {6, 6});
              }),
              1e-2);
}

TEST_CASE("cuda: layer_norm keeps F32 accuracy when the mean is large against the spread") {
  BRISK_REQUIRE_GPU();
  // Rows around 1e4 with a spread of 1: a plain F32 mean carries ~1e-3 of rounding into y;
  // the shifted moments (as on the CPU) do not.
  const Tensor x = u({64, 1000}, 1e4 - 1, 1e4 + 1, 720, DType::F32);
  const Tensor w = ones({1000}, DType::F32), b = zeros({1000}, DType::F32);
  Attrs attrs;
  attrs.dim = 1;
  attrs.a = 1e-5;
  std::vector<Tensor> want(3), got(3);
  call(OpId::LayerNorm, std::vector<Tensor>{x, w, b}, attrs, want);
  call(OpId::LayerNorm, std::vector<Tensor>{x.to(kGpu), w.to(kGpu), b.to(kGpu)}, attrs, got);
  check_scaled(got[0], want[0], 1e-5, "y");
  check_scaled(got[1], want[1], 1e-7, "mean");
}

TEST_CASE("cuda: causal attention and a GPT-2 block run on the device and match the CPU") {
  BRISK_REQUIRE_GPU();
  // The causal mask is built on the input's device (it was built on the CPU, so GPT-2 could
  // not run on CUDA).
  const Tensor q = u({2, 3, 5, 8}, -1, 1, 731, DType::F32), k = u({2, 3, 5, 8}, -1, 1, 732, DType::F32);
  const Tensor v = u({2, 3, 5, 8}, -1, 1, 733, DType::F32);
  Tensor want = nn::functional::scaled_dot_product_attention(q, k, v, {}, true);
  Tensor got = nn::functional::scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), {}, true);
  check_scaled(got, want, 1e-5, "causal attention");
  nn::MultiheadAttention cpu_mha(8, 2, 0.0, true, /*batch_first=*/true), gpu_mha(8, 2, 0.0, true, true);
  gpu_mha.load_state_dict(cpu_mha.state_dict());
  gpu_mha.to(kGpu);
  const Tensor x = u({2, 5, 8}, -1, 1, 734, DType::F32);
  check_scaled(gpu_mha.forward(x.to(kGpu), x.to(kGpu), x.to(kGpu), {}, true), cpu_mha.forward(x, x, x, {}, true), 1e-5,
               "causal MultiheadAttention");
}

TEST_CASE("cuda: max_pool2d windows that hold no input send their gradient to element 0, as on the CPU") {
  BRISK_REQUIRE_GPU();
  // H = 1, kernel 2, padding 1, dilation 2: both taps of every row window fall outside the
  // input, so every output names element 0 without covering it.
  for (DType t : {DType::F64, DType::F32}) {
    INFO(dtype_name(t));
    const Tensor x = u({2, 3, 1, 6}, -1, 1, 810, t);
    auto run = [&](const Tensor& in) {
      Tensor xl = in.detach().clone().requires_grad_();
      Tensor y = F::max_pool2d(xl, {2, 2}, F::Pair{1, 1}, {1, 1}, {2, 2}, false);
      y.backward(cast(opcheck::uniform_values(y.sizes(), -1, 1, 811), t).to(in.device()));
      return xl.grad();
    };
    check_scaled(run(x.to(kGpu)), run(x), 0.0, "gradient");
  }
}

TEST_CASE("cuda: max_pool2d_backward reports an index outside its plane") {
  BRISK_REQUIRE_GPU();
  Attrs attrs;
  attrs.geometry = {2, 2, 0, 0, 1, 1, 2, 2};
  attrs.shape = {1, 1, 4, 4};
  const Tensor g = ones({1, 1, 2, 2}, DType::F32, kGpu);
  const Tensor bad = from_vector({0, 3, 99, 15}, {1, 1, 2, 2}, DType::I64, kGpu);
  Tensor gx = call1(OpId::MaxPool2dBackward, {g, bad}, attrs);
  CHECK_THROWS_WITH_AS(gx.to_vector<float>(), doctest::Contains("max_pool2d_backward: index 99 is out of range"),
                       Error);
  CHECK_NOTHROW(cuda::synchronize());
}

#endif  // BRISK_WITH_CUDA
