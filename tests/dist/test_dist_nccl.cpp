// tests/dist/test_dist_nccl.cpp: the NCCL backend (dist/nccl_group.cpp) on 2 ranks with one
// GPU each, inside the 2-rank MPI test binary (tests/dist/main.cpp starts the MPI world first;
// the NCCL groups here are further init_process_group calls). Every collective and dtype
// against the arithmetic, ordering with the compute stream, tensors held until their call
// completes, the debug check, the errors users meet. Each case skips itself where the machine
// has fewer GPUs than ranks (all ranks at once: they share the machine's count); on one GPU,
// `mpirun -np 1 brisk_dist_tests -tc='nccl:*'` runs them on a group of one. Compiled empty
// without BRISK_WITH_NCCL. Not here: the MPI cases (tests/dist/test_dist.cpp).
#ifdef BRISK_WITH_NCCL

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "engine/backend.h"
#include "engine/functions.h"
#include "kernels/cuda/cuda.h"
#include "tests/dist/values.h"
#include "tests/test_util.h"

using namespace brisk;
using brisk::test::error_text;
using brisk::test::rank_tensor;
using brisk::test::reduced_value;

namespace {

// One GPU per rank, else the case is skipped.
bool no_gpu_per_rank() {
  brisk::Backend* b = find_backend(DeviceType::CUDA);
  if (b && b->device_count() >= dist::world()->size()) return false;
  MESSAGE("skipped: the NCCL cases need one CUDA device per rank");
  return true;
}

Device my_device() {
  const int count = find_backend(DeviceType::CUDA)->device_count();
  return Device::cuda(dist::world()->rank() % count);
}

dist::ProcessGroupPtr make_group(const char* name, bool debug = false) {
  dist::GroupOptions options;
  options.name = name;
  options.debug = debug;
  return dist::init_process_group(dist::Backend::Nccl, my_device(), options);
}

// The group most cases share (made by the first case that needs it, on every rank).
dist::ProcessGroupPtr nccl() {
  static dist::ProcessGroupPtr g = make_group("nccl");
  return g;
}

}  // namespace

TEST_CASE("nccl: without a GPU, an NCCL group is a clear error") {
  CHECK(dist::is_nccl_available());  // brisk::dist_nccl registered itself (Note [Backend libraries])
  brisk::Backend* b = find_backend(DeviceType::CUDA);
  if (b && b->device_count() > 0) return;  // the other cases cover machines with GPUs
  CHECK(error_text([] {
          dist::init_process_group(dist::Backend::Nccl, Device::cuda(0));
        }).find("cuda:0: no such device (0 CUDA devices present)") != std::string::npos);
  CHECK(error_text([] { dist::init_process_group(dist::Backend::Nccl); }).find("NCCL needs a CUDA device") !=
        std::string::npos);
}

TEST_CASE("nccl: a group on one GPU per rank has the world's ranks, and calls after shutdown are errors") {
  if (no_gpu_per_rank()) return;
  dist::ProcessGroupPtr g = make_group("nccl.first");
  CHECK(std::string(g->backend()) == "nccl");
  CHECK(g->rank() == dist::world()->rank());
  CHECK(g->size() == dist::world()->size());
  Tensor t = ones({16}, DType::F32, my_device());
  dist::WorkPtr w = g->allreduce(t);
  CHECK(w->wait());
  CHECK(w->is_completed());
  CHECK(t.to_vector<double>() == std::vector<double>(16, double(g->size())));
  g->shutdown();
  g->shutdown();  // idempotent
  CHECK(error_text([&] { g->allreduce(t); }).find("the group 'nccl.first' was destroyed") != std::string::npos);
}

TEST_CASE("nccl: allreduce of every op and dtype equals the arithmetic") {
  if (no_gpu_per_rank()) return;
  const int me = nccl()->rank(), n = nccl()->size();
  for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Min, dist::ReduceOp::Max,
                              dist::ReduceOp::Product}) {
      if (op == dist::ReduceOp::Avg && !is_floating(dt)) continue;
      CAPTURE(dt);
      CAPTURE(dist::reduce_op_name(op));
      Tensor t = rank_tensor(dt, 1000, me, my_device());
      dist::WorkPtr w = nccl()->allreduce(t, op);
      CHECK(w->wait());
      CHECK(w->is_completed());
      const std::vector<double> got = t.to_vector<double>();
      for (int64_t i = 0; i < 1000; ++i) REQUIRE(got[size_t(i)] == reduced_value(op, i, n));
    }
  }
}

TEST_CASE("nccl: broadcast, allgather, reduce_scatter, barrier, send and recv") {
  if (no_gpu_per_rank()) return;
  const int me = nccl()->rank(), n = nccl()->size();
  const Device d = my_device();
  Tensor b = rank_tensor(DType::F32, 7, me, my_device());
  nccl()->broadcast(b, 1)->wait();
  CHECK(b.to_vector<double>() == rank_tensor(DType::F32, 7, 1, my_device()).to_vector<double>());

  std::vector<Tensor> list;
  for (int r = 0; r < n; ++r) list.push_back(zeros({3}, DType::I64, d));
  nccl()->allgather(list, rank_tensor(DType::I64, 3, me, my_device()))->wait();
  for (int r = 0; r < n; ++r)
    CHECK(list[size_t(r)].to_vector<double>() == rank_tensor(DType::I64, 3, r, my_device()).to_vector<double>());
  Tensor all = zeros({n, 3}, DType::BF16, d);
  nccl()->allgather_into_tensor(all, rank_tensor(DType::BF16, 3, me, my_device()))->wait();
  std::vector<double> expect;
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < 3; ++i) expect.push_back(brisk::test::rank_value(r, i));
  CHECK(all.to_vector<double>() == expect);

  for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Max}) {
    CAPTURE(dist::reduce_op_name(op));
    Tensor out = zeros({4}, DType::F64, d);
    nccl()->reduce_scatter(out, rank_tensor(DType::F64, 4 * n, me, my_device()), op)->wait();
    const std::vector<double> got = out.to_vector<double>();
    for (int64_t i = 0; i < 4; ++i) CHECK(got[size_t(i)] == reduced_value(op, 4 * me + i, n));
  }

  CHECK(nccl()->barrier()->wait());

  // NCCL's send holds its stream until the peer receives: one rank sends, the other receives.
  if (n < 2) return;
  Tensor mine = rank_tensor(DType::F32, 100000, me, my_device()), theirs = zeros({100000}, DType::F32, d);
  if (me == 0) nccl()->send(mine, 1)->wait();
  if (me == 1) {
    nccl()->recv(theirs, 0)->wait();
    CHECK(theirs.to_vector<double>() == rank_tensor(DType::F32, 100000, 0, my_device()).to_vector<double>());
  }
}

TEST_CASE("nccl: calls are ordered after the compute stream's kernels and before those after wait") {
  if (no_gpu_per_rank()) return;
  const int me = nccl()->rank(), n = nccl()->size();
  const int64_t count = int64_t(1) << 22;
  Tensor x = ones({count}, DType::F32, my_device());
  x.mul_(double(me + 1));  // queued on the compute stream just before the allreduce reads x
  dist::WorkPtr w = nccl()->allreduce(x);
  CHECK(w->wait());
  x.add_(1.0);  // queued after wait(): sees the sum
  const double expect = double(n * (n + 1) / 2) + 1;
  const std::vector<double> got = x.to_vector<double>();
  CHECK(std::all_of(got.begin(), got.end(), [&](double v) { return v == expect; }));
}

TEST_CASE("nccl: a tensor dropped before wait is held until its call completes") {
  if (no_gpu_per_rank()) return;
  const Device d = my_device();
  nccl()->barrier()->wait();
  const size_t before = cuda::memory_stats(d.index).allocated;
  const size_t bytes = size_t(1) << 24;
  dist::WorkPtr w;
  {
    Tensor t = ones({int64_t(bytes / 4)}, DType::F32, d);
    w = nccl()->allreduce(t);
  }
  CHECK(cuda::memory_stats(d.index).allocated >= before + bytes);  // held by the call in flight
  CHECK(w->wait());
  w.reset();
  nccl()->barrier()->wait();  // prunes the completed calls
  CHECK(cuda::memory_stats(d.index).allocated < before + bytes);
}

TEST_CASE("nccl: the debug check passes matching calls") {
  if (no_gpu_per_rank()) return;
  dist::ProcessGroupPtr g = make_group("nccl.debug", /*debug=*/true);
  CHECK(g->options().debug);
  Tensor t = rank_tensor(DType::F32, 5, g->rank(), my_device());
  g->allreduce(t, dist::ReduceOp::Max)->wait();
  CHECK(t.to_vector<double>() == rank_tensor(DType::F32, 5, g->size() - 1, my_device()).to_vector<double>());
  CHECK(g->barrier()->wait());
}

TEST_CASE("nccl: bad tensors and arguments are clear errors") {
  if (no_gpu_per_rank()) return;
  const Device d = my_device();
  const std::string n = std::to_string(nccl()->size());
  Tensor cpu = zeros({4});
  CHECK(error_text([&] { nccl()->allreduce(cpu); }).find("(nccl) takes CUDA tensors") != std::string::npos);
  Tensor strided = slice(zeros({8}, DType::F32, d), 0, 0, 8, 2);
  CHECK(error_text([&] { nccl()->allreduce(strided); }).find("is not contiguous") != std::string::npos);
  Tensor u8 = zeros({4}, DType::U8, d);
  CHECK(error_text([&] { nccl()->allreduce(u8); }).find("the NCCL backend has no dtype U8") != std::string::npos);
  Tensor i32 = zeros({4}, DType::I32, d);
  CHECK(error_text([&] { nccl()->allreduce(i32, dist::ReduceOp::Avg); }).find("avg needs a floating dtype") !=
        std::string::npos);
  Tensor f = zeros({4}, DType::F32, d);
  CHECK(error_text([&] { nccl()->broadcast(f, 5); }).find("root rank 5 is outside the group 'nccl' of " + n) !=
        std::string::npos);
  Tensor wrong = zeros({3}, DType::F32, d);
  CHECK(error_text([&] { nccl()->reduce_scatter(wrong, f); }).find("needs " + n + " x 3 elements") !=
        std::string::npos);
  CHECK(error_text([&] { nccl()->send(f, nccl()->rank()); }).find("cannot send to itself") != std::string::npos);
  // The group still works after the errors: none of them reached NCCL.
  CHECK(nccl()->barrier()->wait());
}

#endif  // BRISK_WITH_NCCL

#ifndef BRISK_WITH_NCCL
#include <doctest/doctest.h>

#include <string>

#include "dist/process_group.h"

TEST_CASE("nccl: a program without brisk::dist_nccl says so when asked for NCCL") {
  using namespace brisk;
  CHECK_FALSE(dist::is_nccl_available());
  std::string text;
  try {
    dist::init_process_group(dist::Backend::Nccl, Device::cuda(0));
  } catch (const Error& e) {
    text = e.what();
  }
  CHECK(text.find("needs brisk::dist_nccl linked") != std::string::npos);
}
#endif
