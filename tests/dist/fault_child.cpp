// tests/dist/fault_child.cpp: the dist failure modes, each a 2-rank job of its own
// (tests/dist/run.sh). `kill`: rank 1 dies by SIGKILL before an allreduce; rank 0, with a
// 3 s timeout, must end with a brisk::Error naming the collective, the group and the timeout,
// within a few seconds of it; a later barrier must fail at once naming itself and that error;
// returning 0 from main, rank 0 must still exit with dist::kBrokenGroupExitStatus. `mismatch`: with the debug check on,
// rank 0 calls allreduce and rank 1 broadcast; both must fail naming rank 1 and both calls. `pipeline_kill`: a 2-stage
// dist::Pipeline whose stage 1 dies by SIGKILL before its second step; stage 0 must end with a
// brisk::Error naming the pipeline stage and the timeout. With BRISK_TEST_BACKEND=gloo the
// same cases run over Gloo (started through the environment, tests/dist/gloo.sh), where a dead
// peer's closed connection may end the call before the timeout. `env_errors` (one process, no
// launcher): init_from_env's errors for a missing or bad variable and a rank that never comes.
// `link_cut` (tests/dist/netns.sh): the link between two "hosts" goes down under a running job;
// each rank's allreduce must fail with the group's timeout.
// Prints "PASS <what>" or "FAIL <what>" on rank 0 and exits 0 on pass.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dist/pipeline.h"
#include "dist/process_group.h"
#include "engine/functions.h"
#include "nn/layers.h"

using namespace brisk;

namespace {

int kill_case(dist::ProcessGroupPtr g) {
  Tensor t = ones({1024});
  g->allreduce(t)->wait();  // both alive
  if (g->rank() == 1) kill(getpid(), SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    g->allreduce(t)->wait();
    std::printf("FAIL kill: the allreduce with a dead peer completed\n");
    return 1;
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string m = e.what();
    const bool gloo = std::string(g->backend()) == "gloo";
    const bool cause = m.find("timed out after 3 s") != std::string::npos ||
                       (gloo && m.find("a peer closed its connection") != std::string::npos);
    const bool ok = m.find("allreduce(sum)") != std::string::npos && m.find("group 'world'") != std::string::npos &&
                    cause && s < 3 + 5;
    std::printf("%s kill: error after %.1f s: %s\n", ok ? "PASS" : "FAIL", s, m.c_str());
    // Later calls fail at once, naming themselves, the broken group and the first error.
    const auto t1 = std::chrono::steady_clock::now();
    try {
      g->barrier()->wait();
    } catch (const Error& later) {
      const std::string b = later.what();
      const double s1 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      const bool ok_later = b.rfind("barrier on group 'world'", 0) == 0 &&
                            b.find("not run, the group is broken since an earlier call failed") != std::string::npos &&
                            b.find(m) != std::string::npos && s1 < 1;
      std::printf("%s kill, later call: %s\n", ok_later ? "PASS" : "FAIL", b.c_str());
      return ok && ok_later ? 0 : 1;
    }
    std::printf("FAIL kill: a later call on the broken group did not fail\n");
    return 1;
  }
}

int mismatch_case(dist::ProcessGroupPtr g) {
  Tensor t = ones({4});
  try {
    if (g->rank() == 0) {
      g->allreduce(t)->wait();
    } else {
      g->broadcast(t, 0)->wait();
    }
  } catch (const Error& e) {
    const std::string m = e.what();
    const bool ok = m.find("collective mismatch on group 'world'") != std::string::npos &&
                    m.find("rank 1 calls broadcast of F32 (4) from root 0") != std::string::npos &&
                    m.find("rank 0 calls allreduce(sum) of F32 (4)") != std::string::npos;
    if (g->rank() == 0 || !ok) std::printf("%s mismatch (rank %d): %s\n", ok ? "PASS" : "FAIL", g->rank(), m.c_str());
    return ok ? 0 : 1;
  }
  std::printf("FAIL mismatch: rank %d's call completed\n", g->rank());
  return 1;
}

int pipeline_kill_case(dist::ProcessGroupPtr g) {
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(8, 2)});
  dist::Pipeline pipe(model, g, {.micro_batches = 2, .split_points = {2}});
  auto loss = [](const Tensor& o, const Tensor& t) { return mse_loss(o, t); };
  Tensor x = ones({4, 4}), y = zeros({4, 2});
  pipe.train_step(x, y, loss);  // both alive
  if (g->rank() == 1) kill(getpid(), SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pipe.train_step(x, y, loss);
    std::printf("FAIL pipeline_kill: the step with a dead stage completed\n");
    return 1;
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string m = e.what();
    const bool gloo = std::string(g->backend()) == "gloo";
    const bool cause = m.find("timed out after 3 s") != std::string::npos ||
                       (gloo && m.find("a peer closed its connection") != std::string::npos);
    // Over Gloo the dead peer's closed connection may first fail a pending send to it.
    const bool where =
        m.find("pipeline: stage 0 of 2 (rank 0) waiting for a gradient from stage 1") != std::string::npos ||
        (gloo && m.find("to rank 1 on group 'world'") != std::string::npos);
    const bool ok = where && cause && s < 3 + 5;
    std::printf("%s pipeline_kill: error after %.1f s: %s\n", ok ? "PASS" : "FAIL", s, m.c_str());
    return ok ? 0 : 1;
  }
}

// A link cut under a live job (tests/dist/netns.sh takes a "host's" veth down after READY):
// nothing closes the connections, so each rank's next allreduce must end with the group's
// timeout, naming the call.
int link_cut_case(dist::ProcessGroupPtr g) {
  Tensor t = ones({1024});
  g->allreduce(t)->wait();
  std::printf("READY link_cut rank %d\n", g->rank());
  std::fflush(stdout);
  for (int i = 0; i < 600; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      g->allreduce(t)->wait();
    } catch (const Error& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string m = e.what();
      const bool ok = m.find("allreduce(sum) of F32 (1024) on group 'world'") != std::string::npos &&
                      m.find("timed out after 3 s") != std::string::npos && s < 3 + 5;
      std::printf("%s link_cut (rank %d): error after %.1f s: %s\n", ok ? "PASS" : "FAIL", g->rank(), s, m.c_str());
      return ok ? 0 : 1;
    }
    usleep(50 * 1000);
  }
  std::printf("FAIL link_cut: 30 s of allreduces without an error (was the link cut?)\n");
  return 1;
}

// init_from_env's errors, in one process: each names what is wrong.
int env_errors_case() {
  auto error_of = [](dist::GroupOptions o) -> std::string {
    try {
      dist::init_from_env(dist::Backend::Gloo, Device::cpu(), o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  dist::GroupOptions o;
  o.timeout = std::chrono::seconds(1);
  int bad = 0;
  auto expect = [&](const std::string& got, const std::string& want) {
    const bool ok = got.find(want) != std::string::npos;
    if (!ok) std::printf("FAIL env_errors: want '%s', got '%s'\n", want.c_str(), got.c_str());
    bad += !ok;
  };
  unsetenv("MASTER_ADDR");
  expect(error_of(o), "environment variable MASTER_ADDR is not set (start the program with brisk-run");
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "http", 1);
  expect(error_of(o), "environment variable MASTER_PORT='http' is not a number in [1, 65535]");
  setenv("MASTER_PORT", "29555", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "2", 1);
  expect(error_of(o), "environment variable RANK='2' is not a number in [0, 1]");
  // Rank 0 of 2 alone: its peer never arrives, and the rendezvous says so after the timeout.
  setenv("RANK", "0", 1);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string alone = error_of(o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect(alone, "timed out after 1");
  expect(alone, "a rank did not arrive");
  if (s > 1 + 5) {
    std::printf("FAIL env_errors: the lone rank's error came after %.1f s\n", s);
    ++bad;
  }
  if (!bad) std::printf("PASS env_errors: %s\n", alone.c_str());
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "env_errors") {
    const int rc = env_errors_case();
    std::fflush(stdout);
    _exit(rc);
  }
  dist::GroupOptions o;
  o.timeout = std::chrono::seconds(3);
  o.debug = what == "mismatch";
  const char* backend = std::getenv("BRISK_TEST_BACKEND");
  dist::ProcessGroupPtr g = backend && std::string(backend) == "gloo"
                                ? dist::init_from_env(dist::Backend::Gloo, Device::cpu(), o)
                                : dist::init_process_group(dist::Backend::Mpi, Device::cpu(), o);
  const int rc = what == "kill"            ? kill_case(g)
                 : what == "mismatch"      ? mismatch_case(g)
                 : what == "pipeline_kill" ? pipeline_kill_case(g)
                 : what == "link_cut"      ? link_cut_case(g)
                                           : 2;
  std::fflush(stdout);
  // `kill` and `link_cut`: return from main as a program would; the broken group makes the process exit with
  // dist::kBrokenGroupExitStatus all the same (tests/dist/run.sh checks mpirun's status). The
  // other cases leave at once: a broken group is not finalized (Note [Faults]).
  if (what == "kill" || what == "link_cut") return rc;
  _exit(rc);
}
