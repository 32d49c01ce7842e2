// engine/threads.h: how many threads brisk's kernels use (one OpenMP pool, shared by GEMM,
// convolution, elementwise and reduction kernels): set_num_threads as torch.set_num_threads.
// The data loader's workers are separate (data::LoaderOptions::num_workers). Not here: the
// spin policy of idle OpenMP threads, which libgomp reads once at start from OMP_WAIT_POLICY
// (docs/performance.md: set OMP_WAIT_POLICY=passive on shared or oversubscribed machines).
#pragma once

namespace brisk {

// n >= 1; the default is OpenMP's (OMP_NUM_THREADS, else one per core).
void set_num_threads(int n);
int get_num_threads();

// Denormal (subnormal) floats flushed to zero, as torch.set_flush_denormal: on x86 it sets
// MXCSR's FTZ and DAZ bits on the calling thread and on the kernels' OpenMP threads, and
// returns true; elsewhere it changes nothing and returns false. Off by default. Arithmetic on
// denormals takes a slow path on x86 CPUs: a GPT head whose softmax gradients underflowed ran
// its backward GEMMs 1.7-2x slower (docs/performance.md); flushing gives up values below
// 1.2e-38 (F32) or 2.2e-308 (F64) for that speed. Threads started afterwards by a thread that
// has it inherit it, and set_num_threads applies it to a grown pool.
bool set_flush_denormal(bool on);

}  // namespace brisk
