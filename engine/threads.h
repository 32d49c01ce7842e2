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

}  // namespace brisk
