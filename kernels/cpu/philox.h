// kernels/cpu/philox.h: the Philox uniforms of a run of elements of a stream, for CPU kernels
// that draw inside a larger loop (the fused attention's dropout). Element e of stream (seed,
// offset) is philox_uniform(seed, offset, e) of engine/random.h, bit for bit; 16 counters per
// AVX-512 vector where the CPU has it (kernels/cpu/random.cpp). Internal to kernels/cpu.
#pragma once

#include <cstdint>

namespace brisk::kernels::cpu {

// u[k] = philox_uniform(seed, offset, first + k) for k < n.
void philox_uniforms(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, float* u);

}  // namespace brisk::kernels::cpu
