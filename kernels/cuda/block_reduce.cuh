// kernels/cuda/block_reduce.cuh: the CUDA block reductions, in one place: group_reduce (the
// threads of one row: warp shuffles, then shared memory across the row's warps) and
// lanes_reduce (a shared-memory tree over the lanes of each output in the generic reduction
// kernel). Both take a combine function, so sums, NaN-aware maxima and the accumulators of
// kernels/reduce_ops.h all go through them.
// Not here: what is reduced (kernels/cuda/reduce.cu, norm.cu), the ops' arithmetic.
#pragma once

#include "kernels/cuda/loops.cuh"

namespace brisk::kernels::cuda {

// A block of (bx, by) threads holds `by` groups (rows) of bx threads, bx a power of two in
// [32, kBlock]. Returns, to every thread of a group, f folded over the group's bx values.
// Every thread of the block must call it (rows past the end take part with neutral values),
// so the __syncthreads inside are safe; A must be a type __shfl_xor_sync takes.
template <class A, class F>
__device__ A group_reduce(A v, F f) {
  __shared__ A smem[kBlock / 32];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = f(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (blockDim.x == 32) return v;
  const int warps = blockDim.x / 32;
  A* s = smem + threadIdx.y * warps;
  __syncthreads();  // the previous call's readers are done
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  A r = s[0];
  for (int w = 1; w < warps; ++w) r = f(r, s[w]);
  return r;
}

// smem holds one accumulator per thread (index tid); each output owns `lanes` of them, lane k
// at tid + k * lane_stride, lanes a power of two. After the call, lane 0 of each output holds
// op.combine folded over its lanes, in lane order. Every thread of the block must call it.
template <class Acc, class Op>
__device__ void lanes_reduce(Acc* smem, int tid, int lane, int lanes, int lane_stride, const Op& op) {
  __syncthreads();
  for (int w = lanes / 2; w > 0; w /= 2) {
    if (lane < w) smem[tid] = op.combine(smem[tid], smem[tid + w * lane_stride]);
    __syncthreads();
  }
}

struct SumF {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

}  // namespace brisk::kernels::cuda
