// kernels/cuda/link.cpp: how the library brisk_cuda joins a program (Note [Backend libraries]
// in init.cpp): a static initializer adds the CUDA backend's registrar to brisk::init(), and
// brisk_cuda_linked is the symbol brisk::cuda's link interface forces with `-u`, which keeps
// this object (and so everything it refers to) in the link.
// Not here: the kernels and the backend (kernels/cuda/*.cu, kernels/cuda/backend.cpp).
#include "engine/backend.h"
#include "kernels/cuda/register.h"

extern "C" {
int brisk_cuda_linked = 1;
}

namespace {

[[maybe_unused]] const bool g_added = (brisk::add_backend_init(&brisk::kernels::cuda::register_all), true);

}  // namespace
