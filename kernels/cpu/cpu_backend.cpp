// kernels/cpu/cpu_backend.cpp: the CPU Backend (host memory from the caching allocator) and
// the CPU kernels' section of the environment report (engine/env.h): which GEMM paths run and
// whether F16/BF16 run natively.
#include <cstring>
#include <string>

#include "engine/backend.h"
#include "engine/env.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/gemm_i8.h"
#include "kernels/cpu/register.h"
#include "kernels/cpu/scratch.h"

namespace brisk::kernels::cpu {

namespace {
class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::CPU; }
  int device_count() const override { return 1; }
  Allocator& allocator(int) override { return cpu_allocator(); }
  void copy(void* dst, Device, const void* src, Device, size_t bytes, bool) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void memset(void* dst, int value, size_t bytes, Device) override {
    if (bytes) std::memset(dst, value, bytes);
  }
  void synchronize(int) override {}
};
}  // namespace

// F16 and BF16 tensors are stored as 16 bits and computed in F32 by every CPU kernel; only
// the BF16 matmul has native instructions (AMX-BF16, AVX512-BF16), and without them it runs
// an F32 emulation that is slower than F32 itself (Note [BF16 GEMM]).
namespace {
EnvSection cpu_kernels_section(const EnvOptions& options) {
  EnvSection s{"cpu kernels"};
  s.entries.push_back({"f32 matmul", f32_gemm_path_name(f32_gemm_path())});
  s.entries.push_back({"bf16 matmul", bf16_gemm_path_name(bf16_gemm_path())});
  s.entries.push_back({"int8 matmul", i8_gemm_path_name(i8_gemm_path())});
  if (options.check_dtype) {
    EnvCheck c;
    if (*options.check_dtype == DType::BF16) {
      c.ok = bf16_gemm_native();
      c.message = c.ok ? std::string("bf16 on cpu: native matmul (") + bf16_gemm_path_name(bf16_gemm_path()) +
                             "), other ops in F32"
                       : "bf16 on cpu: no AVX512-BF16 or AMX-BF16 here; BF16 matmuls are emulated and slower than F32";
    } else {
      c.ok = false;
      c.message = "f16 on cpu: no native F16 arithmetic; every op converts to F32 (use BF16 or F32 on the CPU)";
    }
    s.checks.push_back(c);
  }
  return s;
}
}  // namespace

void register_backend() {
  static CpuBackend backend;
  brisk::register_backend(&backend);
  add_env_section(&cpu_kernels_section);
  add_empty_cache_hook([] { g_workspace_trim.fetch_add(1, std::memory_order_relaxed); });
}

}  // namespace brisk::kernels::cpu
