// tests/test_opcheck.cpp: the installable op checker (opcheck/check.h) finds what it is for: a
// replacement kernel that is right on contiguous inputs but wrong on other layouts, one that is
// off by one ulp (bit for bit against the built-in kernel), a wrong integer kernel; it passes
// the built-in kernels, names unknown ops, and its A/B timer restores the thread count. Also
// the scalar promotion the checker's integer pass found missing (Note [Scalar operands]).
#include <doctest/doctest.h>

#include <cmath>

#include "brisk.h"
#include "engine/kernel_override.h"
#include "opcheck/check.h"

using namespace brisk;
namespace oc = brisk::opcheck;

namespace {

// A relu that walks its input as if every dim were packed at the last dim's stride: right for
// contiguous and for every-other-element inputs (strides (2c, 2)), wrong for a transposed one.
// It wraps its reads into the input's extent, so it is wrong without reading out of bounds.
void relu_last_stride_only(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  const int64_t step = in[0].dim() == 0 ? 1 : in[0].strides().back();
  int64_t extent = 1;  // elements from data_ptr() to the last one the tensor reaches
  for (int64_t d = 0; d < in[0].dim(); ++d) extent += (in[0].sizes()[d] - 1) * in[0].strides()[d];
  for (int64_t i = 0; i < in[0].numel(); ++i) {
    const float v = x[(i * step) % extent];
    y[i] = v > 0 || v != v ? v : 0.0f;
  }
}

bool has_failure(const oc::CheckReport& r, const std::string& check, const std::string& layout_or_dtype) {
  for (const oc::CheckFailure& f : r.failures)
    if (f.check == check && (f.layout == layout_or_dtype || f.dtype == layout_or_dtype)) return true;
  return false;
}

}  // namespace

TEST_CASE("opcheck: the built-in relu passes every check, in every dtype and layout") {
  oc::CheckReport r = oc::check_op("relu", {.against_builtin = true});
  CHECK_MESSAGE(r.ok(), r.str());
  CHECK(r.specs >= 1);
  CHECK(r.comparisons > 50);
  CHECK(std::find(r.dtypes.begin(), r.dtypes.end(), "BF16") != r.dtypes.end());
  CHECK(std::find(r.dtypes.begin(), r.dtypes.end(), "I32") != r.dtypes.end());
  CHECK(r.str().find("relu") != std::string::npos);
}

TEST_CASE("opcheck: a kernel that ignores all but the last stride fails on transposed inputs") {
  const OpId id = op_id("relu");
  KernelOverride guard(id, DeviceType::CPU, relu_last_stride_only, {DType::F32});

  oc::CheckReport all = oc::check_op(id);
  CHECK_FALSE(all.ok());
  CHECK_MESSAGE(has_failure(all, "layout", "transposed"), all.str());
  CHECK_MESSAGE(has_failure(all, "layout", "permuted"), all.str());
  for (const oc::CheckFailure& f : all.failures) {
    CHECK(f.dtype == "F32");  // the other dtypes run the built-in kernel
    CHECK(f.layout != "strided");
    CHECK(f.layout != "contiguous");
  }
  CHECK(all.str().find("transposed") != std::string::npos);

  // Restricted to the layouts it handles, the same kernel passes.
  oc::CheckReport strided = oc::check_op(id, {.layouts = {oc::Layout::Strided, oc::Layout::Offset}});
  CHECK_MESSAGE(strided.ok(), strided.str());
}

TEST_CASE("opcheck: bit for bit against the built-in kernel catches one ulp that tolerances pass") {
  const OpId id = op_id("relu");
  KernelOverride guard(id, DeviceType::CPU,
                       [&guard](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                         guard.previous()(in, out, a);
                         float* y = out[0].data<float>();
                         for (int64_t i = 0; i < out[0].numel(); ++i)
                           if (y[i] > 0) y[i] = std::nextafter(y[i], 1e30f);
                       },
                       {DType::F32});
  oc::CheckReport tolerant = oc::check_op(id);
  CHECK_MESSAGE(tolerant.ok(), tolerant.str());
  oc::CheckReport bitwise = oc::check_op(id, {.against_builtin = true});
  CHECK_FALSE(bitwise.ok());
  CHECK_MESSAGE(has_failure(bitwise, "built-in", "F32"), bitwise.str());
}

TEST_CASE("opcheck: a wrong integer kernel is caught in its dtype, exactly") {
  const OpId id = op_id("add");
  KernelOverride guard(id, DeviceType::CPU,
                       [&guard](std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
                         guard.previous()(in, out, a);
                         int32_t* y = out[0].data<int32_t>();  // the dispatcher allocates a contiguous output
                         for (int64_t i = 0; i < out[0].numel(); ++i) y[i] += 1;
                       },
                       {DType::I32});
  oc::CheckReport r = oc::check_op(id, {.gradients = false});
  CHECK_FALSE(r.ok());
  CHECK_MESSAGE(has_failure(r, "dtype", "I32"), r.str());
  for (const oc::CheckFailure& f : r.failures) CHECK(f.dtype == "I32");
  // Without the integer pass nothing runs the replaced kernel.
  oc::CheckReport floats = oc::check_op(id, {.integers = false, .gradients = false});
  CHECK_MESSAGE(floats.ok(), floats.str());
}

TEST_CASE("opcheck: an unknown op is a clear error, nothing compared is not a pass") {
  CHECK_THROWS_WITH_AS(oc::check_op("rel"), doctest::Contains("no op named 'rel'"), Error);
  oc::CheckReport r =
      oc::check_op("relu", {.reference = false, .dtypes = false, .integers = false, .gradients = false, .layouts = {}});
  CHECK_FALSE(r.ok());  // nothing compared is not a pass
  CHECK(r.comparisons == 0);
}

TEST_CASE("opcheck: time_ab sweeps thread counts and restores the thread count") {
  const int before = get_num_threads();
  Tensor x = randn({64, 64});
  int a_runs = 0, b_runs = 0;
  std::vector<oc::TimingRow> rows =
      oc::time_ab([&] { ++a_runs, relu(x); }, [&] { ++b_runs, exp(x); }, {.warmup = 1, .reps = 3, .threads = {1, 2}});
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].threads == 1);
  CHECK(rows[1].threads == 2);
  CHECK(a_runs == 8);  // (1 warm-up + 3 timed) per thread count
  CHECK(b_runs == 8);
  for (const oc::TimingRow& row : rows) CHECK((row.a_us > 0 && row.b_us > 0));
  CHECK(get_num_threads() == before);
  const std::string table = oc::timing_table(rows, "relu", "exp");
  CHECK(table.find("relu") != std::string::npos);
  CHECK(table.find("exp") != std::string::npos);

  // time_against_builtin with nothing replaced times the built-in against itself.
  std::vector<oc::TimingRow> same = oc::time_against_builtin(op_id("relu"), [&] { relu(x); }, {.warmup = 0, .reps = 2});
  REQUIRE(same.size() == 1);
  CHECK(same[0].threads == before);
}

TEST_CASE("scalar operands: a fractional number with an integer tensor computes in floating point") {
  Tensor i = from_vector(std::vector<double>{-1, 2, 3}, {3}, DType::I32);
  Tensor half = i * 0.5;
  CHECK(half.dtype() == DType::F32);
  CHECK(half.to_vector<double>() == std::vector<double>{-0.5, 1, 1.5});
  CHECK((i + 0.25).to_vector<double>() == std::vector<double>{-0.75, 2.25, 3.25});
  CHECK((i * 2.0).dtype() == DType::I32);  // an integral number keeps the integer dtype
  CHECK((i * 2.0).to_vector<double>() == std::vector<double>{-2, 4, 6});
  CHECK((i * std::nan("")).dtype() == DType::F32);
  CHECK_THROWS_WITH_AS(add(i, i, 0.5), doctest::Contains("add"), Error);
  Tensor c = clamp(i, -0.5, 2.5);
  CHECK(c.dtype() == DType::F32);
  CHECK(c.to_vector<double>() == std::vector<double>{-0.5, 2, 2.5});
  Tensor m = i.clone();
  // In place the target's dtype is the result's: 0.5 would truncate to 0, so it is an error.
  CHECK_THROWS_WITH_AS(m.mul_(0.5), doctest::Contains("mul_: the result type F32 cannot be written in place"), Error);
  CHECK_THROWS_AS(m.add_(ones({3}, DType::F32)), Error);
  CHECK(m.mul_(2.0).to_vector<double>() == std::vector<double>{-2, 4, 6});
  Tensor f = ones({3});
  CHECK(f.add_(i).to_vector<double>() == std::vector<double>{0, 3, 4});  // integer into floating is fine
}
