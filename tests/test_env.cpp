// tests/test_env.cpp: the environment report (engine/env.h): the engine's and the CPU
// kernels' sections with their fields, values that follow the process (threads), the 16-bit
// dtype checks, the CUDA section in CUDA builds (0 devices without a GPU), errors.
#include <doctest/doctest.h>

#include <thread>

#include "brisk.h"
#include "engine/env.h"
#include "engine/threads.h"
#include "kernels/cpu/gemm_bf16.h"
#ifdef BRISK_WITH_CUDA
#include "kernels/cuda/cuda.h"
#endif

using namespace brisk;

TEST_CASE("env: the report has its sections and fields") {
  EnvReport r = env_report(EnvOptions{.check_dtype = std::nullopt, .libraries = false});
  for (const char* key : {"version", "build type", "compiler", "flags", "backends linked"}) {
    INFO(key);
    REQUIRE(r.find("brisk", key) != nullptr);
  }
  CHECK(*r.find("brisk", "version") == "0.1.0");
  for (const char* key : {"model", "features", "logical cores", "memory", "OpenMP max threads", "brisk threads"}) {
    INFO(key);
    REQUIRE(r.find("cpu", key) != nullptr);
    CHECK(!r.find("cpu", key)->empty());
  }
  CHECK(*r.find("cpu", "logical cores") == std::to_string(std::thread::hardware_concurrency()));
  CHECK(*r.find("cpu kernels", "bf16 matmul") == kernels::cpu::bf16_gemm_path_name(kernels::cpu::bf16_gemm_path()));
  CHECK(r.find("cpu", "no such key") == nullptr);
  CHECK(r.find("no such section", "model") == nullptr);
  std::string text = r.to_string();
  CHECK(text.find("cpu kernels\n") != std::string::npos);
  CHECK(text.find("  logical cores: ") != std::string::npos);
  CHECK(r.summary().find("brisk 0.1.0") == 0);
  CHECK(r.all_checks_ok());  // no dtype asked: no checks

  int before = get_num_threads();
  set_num_threads(1);
  CHECK(*env_report({}).find("cpu", "brisk threads") == "1");
  set_num_threads(before);
}

TEST_CASE("env: 16-bit dtype checks") {
  EnvReport bf16 = env_report(EnvOptions{.check_dtype = DType::BF16, .libraries = false});
  bool found = false;
  for (const EnvSection& s : bf16.sections) {
    if (s.name != "cpu kernels") continue;
    REQUIRE(s.checks.size() == 1);
    CHECK(s.checks[0].ok == kernels::cpu::bf16_gemm_native());
    CHECK(s.checks[0].message.find("bf16 on cpu") == 0);
    found = true;
  }
  CHECK(found);
  EnvReport f16 = env_report(EnvOptions{.check_dtype = DType::F16, .libraries = false});
  CHECK_FALSE(f16.all_checks_ok());  // no native F16 arithmetic on the CPU
  CHECK(f16.summary().find("WARNING: f16 on cpu") != std::string::npos);
  CHECK_THROWS_WITH_AS(env_report(EnvOptions{.check_dtype = DType::F32}), doctest::Contains("F16 or BF16"), Error);
}

#ifdef BRISK_WITH_CUDA
TEST_CASE("env: the CUDA section lists every device") {
  EnvReport r = env_report(EnvOptions{.check_dtype = DType::BF16, .libraries = true});
  REQUIRE(r.find("cuda", "devices") != nullptr);
  int n = kernels::cuda::device_count();
  CHECK(*r.find("cuda", "devices") == std::to_string(n));
  for (int d = 0; d < n; ++d) CHECK(r.find("cuda", "cuda:" + std::to_string(d)) != nullptr);
  CHECK(r.find("cuda", "runtime") != nullptr);
  CHECK(r.find("cuda", "cuBLASLt") != nullptr);
}
#endif
