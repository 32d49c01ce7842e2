// kernels/cuda/env_report.cpp: the "cuda" section of the environment report (engine/env.h):
// driver and runtime versions, the architectures brisk_cuda was compiled for, every GPU's
// name, memory, compute capability and SM count, the cuBLASLt and cuDNN versions (opening
// them, when EnvOptions::libraries), and whether each GPU runs the requested 16-bit dtype
// natively: BF16 needs compute capability 8.0 (Ampere), F16 tensor cores 7.0 (Volta).
// Added to the report by the backend's registrar (kernels/cuda/link.cpp).
#include <cuda_runtime.h>

#include <sstream>
#include <string>

#include "engine/env.h"
#include "engine/error.h"
#include "kernels/cuda/dynload.h"
#include "kernels/cuda/runtime.h"
#ifdef BRISK_WITH_CUDNN
#include "kernels/cuda/cudnn_handle.h"
#endif

namespace brisk::kernels::cuda {

namespace {

std::string version_string(int v) {  // CUDA's 1000 * major + 10 * minor
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string gib(size_t bytes) {
  std::ostringstream os;
  os.precision(3);
  os << double(bytes) / double(size_t(1) << 30) << " GiB";
  return os.str();
}

}  // namespace

EnvSection env_section(const EnvOptions& options) {
  EnvSection s{"cuda"};
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  (void)cudaGetLastError();
  s.entries.push_back({"driver", driver ? version_string(driver) : std::string("none (no NVIDIA driver)")});
  s.entries.push_back({"runtime", version_string(runtime)});
#ifdef BRISK_CUDA_ARCHS
  s.entries.push_back({"compiled for", BRISK_CUDA_ARCHS});
#endif
  int n = device_count();
  s.entries.push_back({"devices", std::to_string(n)});
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      (void)cudaGetLastError();
      s.entries.push_back({"cuda:" + std::to_string(d), "properties unavailable"});
      continue;
    }
    std::string cc = "sm_" + std::to_string(p.major) + std::to_string(p.minor);
    s.entries.push_back({"cuda:" + std::to_string(d), std::string(p.name) + ", " + gib(p.totalGlobalMem) + ", " + cc +
                                                          ", " + std::to_string(p.multiProcessorCount) + " SMs"});
    if (options.check_dtype) {
      bool bf16 = *options.check_dtype == DType::BF16;
      int need = bf16 ? 8 : 7;
      EnvCheck c;
      c.ok = p.major >= need;
      c.message = std::string(bf16 ? "bf16" : "f16") + " on cuda:" + std::to_string(d) + " (" + p.name + ", " + cc +
                  "): " +
                  (c.ok ? "native (tensor cores)"
                        : std::string("needs compute capability ") + std::to_string(need) + ".0 for native " +
                              (bf16 ? "BF16; use F16 with a GradScaler or F32" : "F16 tensor cores; use F32"));
      s.checks.push_back(c);
    }
  }
  if (options.libraries) {
    try {
      size_t v = cublas_lt().cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
      s.entries.push_back({"cuBLASLt", std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                                           std::to_string(v % 100)});
    } catch (const Error& e) {
      s.entries.push_back({"cuBLASLt", std::string("not loadable: ") + e.what()});
    }
#ifdef BRISK_WITH_CUDNN
    try {
      size_t v = cudnn().cudnnGetVersion();  // cuDNN 9: major * 10000 + minor * 100 + patch
      s.entries.push_back(
          {"cuDNN", std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100)});
    } catch (const Error& e) {
      s.entries.push_back({"cuDNN", std::string("not loadable: ") + e.what()});
    }
#else
    s.entries.push_back({"cuDNN", "not built in (no cuDNN headers at build time)"});
#endif
  }
  return s;
}

}  // namespace brisk::kernels::cuda
