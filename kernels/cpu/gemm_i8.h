// kernels/cpu/gemm_i8.h: the CPU int8 GEMM, c = (a - a_zero_point) @ b with 8-bit operands and
// int32 accumulation: a u8 (activations, with a zero point) or s8, b s8 (weights) packed once
// into the layout vpdpbusd reads. Two paths chosen at run time (Note [Int8 GEMM] in
// kernels/cpu/gemm_i8.cpp): an AVX512-VNNI register-blocked kernel and plain loops; plus a plain
// reference for the tests. Results as int32, or as F32 through a fused epilogue
// (scale per column, bias, ReLU) that quantized Linear and Conv2d use (compress/quantize.h).
// Not here: choosing scales and zero points (compress/quantize.h), im2col (compress/quantize.cpp), batching.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace brisk::kernels::cpu {

// b (K, N) s8, packed once (weights at convert time): panels of 16 columns, each [K/4][16][4]
// bytes (the pair of four k per lane that vpdpbusd multiplies), K padded to a multiple of 4 and
// N to a multiple of 16 with zeros; col_sum[j] = sum over k of b[k, j] (the zero-point
// correction). Any strides: a Linear weight (N, K) viewed as (K, N) packs in place.
struct PackedI8 {
  int64_t k = 0, n = 0;    // logical sizes
  int64_t kp = 0, np = 0;  // padded sizes
  std::vector<int8_t> data;
  std::vector<int32_t> col_sum;  // (np), zero past n
  bool empty() const { return data.empty(); }
};
PackedI8 pack_i8(MatrixRef<const int8_t> b);
// The padded sizes of a packed (k, n): kp = k rounded up to 4, np = n rounded up to 16 (1 at least).
int64_t packed_i8_kp(int64_t k);
int64_t packed_i8_np(int64_t n);
// pack_i8 into caller-owned memory: data (kp * np) and col_sum (np), written whole.
void pack_i8_into(MatrixRef<const int8_t> b, int8_t* data, int32_t* col_sum);

// A packed b by address: a PackedI8, or the tensors of the int8 ops (engine/ops/quantized.cpp)
// that hold one.
struct PackedI8Ref {
  int64_t k = 0, n = 0, kp = 0, np = 0;
  const int8_t* data = nullptr;
  const int32_t* col_sum = nullptr;
  PackedI8Ref() = default;
  PackedI8Ref(int64_t k, int64_t n, const int8_t* data, const int32_t* col_sum)
      : k(k), n(n), kp(packed_i8_kp(k)), np(packed_i8_np(n)), data(data), col_sum(col_sum) {}
  PackedI8Ref(const PackedI8& p)  // NOLINT: implicit, so a PackedI8 passes where a reference is taken
      : k(p.k), n(p.n), kp(p.kp), np(p.np), data(p.data.data()), col_sum(p.col_sum.data()) {}
  bool empty() const { return data == nullptr; }
};

// The F32 epilogue: out[i, j] = fma(float(acc[i, j]), a_scale * col_scale[j], bias[j]), then
// max(0, .) when relu; acc is the exact int32 (a - a_zero_point) @ b. col_scale has n entries;
// bias n entries or null. out may have any strides (conv writes (pixels, channels) into NCHW).
struct I8Epilogue {
  float a_scale = 1.0f;
  const float* col_scale = nullptr;
  const float* bias = nullptr;
  bool relu = false;
  MatrixRef<float> out{};
};

// c = (a - a_zero_point) @ b exactly (int32, wrapping as vpdpbusd does). a: (M, K) u8 with any
// strides; c: (M, N) with a unit column stride. threads: 0 picks (all OpenMP threads for a large
// product outside a parallel region), 1 runs on the calling thread.
void gemm_u8s8(MatrixRef<const uint8_t> a, int32_t a_zero_point, const PackedI8Ref& b, MatrixRef<int32_t> c,
               int threads = 0);
// The same into F32 through the epilogue.
void gemm_u8s8(MatrixRef<const uint8_t> a, int32_t a_zero_point, const PackedI8Ref& b, const I8Epilogue& epilogue,
               int threads = 0);
// s8 activations: a + 128 is multiplied as u8 and 128 * col_sum subtracted (exact).
void gemm_s8s8(MatrixRef<const int8_t> a, const PackedI8Ref& b, MatrixRef<int32_t> c, int threads = 0);

// Plain loops over the unpacked b, each c[i, j] summed in int64 and narrowed (for tests).
void gemm_u8s8_reference(MatrixRef<const uint8_t> a, int32_t a_zero_point, MatrixRef<const int8_t> b,
                         MatrixRef<int32_t> c);
void gemm_u8s8_reference(MatrixRef<const uint8_t> a, int32_t a_zero_point, MatrixRef<const int8_t> b,
                         const I8Epilogue& epilogue);
void gemm_s8s8_reference(MatrixRef<const int8_t> a, MatrixRef<const int8_t> b, MatrixRef<int32_t> c);

// q[i] = clamp(zero_point + nearbyint(x[i] * (1 / scale)), qmin, qmax): torch.quantize_per_tensor's
// rounding (half to even, in F32), AVX-512 where the CPU has it. The activations' quantization.
void quantize_u8(const float* x, int64_t n, float scale, int32_t zero_point, int32_t qmin, int32_t qmax, uint8_t* q);
// The smallest and largest of x[0, n) (n > 0; NaN are skipped).
void min_max(const float* x, int64_t n, float& lo, float& hi);

// Which kernel the int8 GEMM runs: Auto takes VNNI where the CPU has AVX512-VNNI (CPUID), else
// Plain (scalar loops over the packed layout). BRISK_I8_GEMM=auto|vnni|plain sets the start.
enum class I8GemmPath { Auto, Vnni, Plain };
void set_i8_gemm_path(I8GemmPath path);
I8GemmPath i8_gemm_path();  // resolved (never Auto)
const char* i8_gemm_path_name(I8GemmPath path);

}  // namespace brisk::kernels::cpu
