// tests/dist/main.cpp: doctest's main for the 2-rank test binary: starts the world group
// first (MPI under mpirun; Gloo through the environment when BRISK_TEST_BACKEND=gloo, under
// brisk-run), runs the cases on every rank (only rank 0 prints its summary unless a case
// fails), and returns non-zero when any rank failed, so the launcher's exit code is the verdict.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dist/process_group.h"
#include "engine/functions.h"

int main(int argc, char** argv) {
  using namespace brisk;
  const char* backend = std::getenv("BRISK_TEST_BACKEND");
  dist::ProcessGroupPtr world =
      backend && std::string(backend) == "gloo" ? dist::init_from_env(dist::Backend::Gloo) : dist::init_process_group();
  doctest::Context context(argc, argv);
  if (world->rank() != 0) context.setOption("minimal", true);
  int failed = context.run();
  Tensor verdict = from_vector({double(failed != 0)}, {1}, DType::I32);
  world->allreduce(verdict, dist::ReduceOp::Max)->wait();
  const bool any = verdict.item<int>() != 0;
  if (world->rank() == 0)
    std::printf("dist tests on %d ranks (%s): %s\n", world->size(), world->backend(), any ? "FAILED" : "passed");
  world.reset();
  dist::destroy_process_group();
  return any ? 1 : 0;
}
