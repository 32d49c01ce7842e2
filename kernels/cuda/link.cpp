// kernels/cuda/link.cpp: how the library brisk_cuda joins a program (Note [Backend libraries]
// in engine/backend.cpp): a static initializer adds the CUDA backend's registrar to brisk::init(), and
// brisk_cuda_linked is the symbol brisk::cuda's link interface forces with `-u`, which keeps
// this object (and so everything it refers to) in the link.
// It also adds the CUDA section of the environment report (kernels/cuda/env_report.cpp).
// Not here: the kernels and the backend (kernels/cuda/*.cu, kernels/cuda/backend.cpp).
#include "engine/backend.h"
#include "engine/env.h"
#include "kernels/cuda/register.h"

extern "C" {
int brisk_cuda_linked = 1;
}

namespace brisk::kernels::cuda {
EnvSection env_section(const EnvOptions& options);  // kernels/cuda/env_report.cpp
}

namespace {

void register_with_env() {
  brisk::kernels::cuda::register_all();
  brisk::add_env_section(&brisk::kernels::cuda::env_section);
}

[[maybe_unused]] const bool g_added = (brisk::add_backend_init(&register_with_env), true);

}  // namespace
