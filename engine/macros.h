// engine/macros.h: the few macros brisk has (host/device marking, branch hints).
// Not a place for helpers: checks live in error.h, the op list in ops.def.
#pragma once

#if defined(__CUDACC__)
#define BRISK_HD __host__ __device__
#define BRISK_INLINE __host__ __device__ __forceinline__
#else
#define BRISK_HD
#define BRISK_INLINE inline
#endif

#define BRISK_LIKELY(x) __builtin_expect(!!(x), 1)
#define BRISK_UNLIKELY(x) __builtin_expect(!!(x), 0)
