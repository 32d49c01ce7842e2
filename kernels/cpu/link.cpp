// kernels/cpu/link.cpp: how the CPU kernels join a program (Note [Backend libraries] in
// engine/backend.cpp): a static initializer adds their registrar (register_all, which registers
// the CPU backend and every CPU kernel) to brisk::init(), and brisk_kernels_cpu_linked is the
// symbol brisk::brisk's link interface forces with `-u`, which keeps this object (and so every
// kernel file it refers to) in the link although nothing else names it.
// Not here: the kernels (kernels/cpu/*.cpp) and the registrars (kernels/cpu/register.h).
#include "engine/backend.h"
#include "kernels/cpu/register.h"

extern "C" {
int brisk_kernels_cpu_linked = 1;
}

namespace {

[[maybe_unused]] const bool g_added = (brisk::add_backend_init(&brisk::kernels::cpu::register_all), true);

}  // namespace
