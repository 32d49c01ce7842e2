// dist/run/brisk_run.cpp: brisk-run, the launcher of jobs without mpirun (torchrun's pattern):
//
//   brisk-run --nproc-per-node N [--nnodes M --node-rank R] [--master-addr A --master-port P]
//             [--max-restarts K [--min-ranks M]] [--grace-s S] [--rdzv-timeout-s T] [--] program args...
//
// starts N processes of `program` on this host with torchrun's environment (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT; BRISK_RESTART_COUNT), each
// in a process group of its own; forwards SIGINT, SIGTERM and SIGHUP to them; when one exits
// with a non-zero status or a signal, stops the others and exits with that rank's status
// (128 + signal for a signal). Stopping gives the others the grace time (--grace-s, 5 s) to
// end by themselves (a survivor's collective fails at once or within its timeout, and it exits
// with its error and dist::kBrokenGroupExitStatus), then sends SIGTERM, and SIGKILL one grace
// time later. With --max-restarts K, it then starts every rank again, up to K times: the
// program resumes from its last checkpoint. On several nodes (--nnodes M) each host's brisk-run
// is an agent: they meet on the agents' store and fail, stop and restart together (Note
// [Agents across hosts]). With --min-ranks M (below N; one node), a restart leaves out the ranks
// that were lost (those that failed on their own, not the survivors that exited with
// dist::kBrokenGroupExitStatus), down to M ranks: the job continues at a smaller WORLD_SIZE (it
// must re-split its data). The ranks find each other through dist::init_from_env; this program
// knows nothing of brisk or MPI. Not here: the ranks' rendezvous store (dist/store.h, served by
// rank 0).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/store.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int nproc = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int max_restarts = 0;
  int min_ranks = 0;  // 0: nproc (restarts keep the size)
  double grace_s = 5;
  int rdzv_timeout_s = 600;  // several nodes: how long the agents wait for each other
  std::vector<std::string> command;
};

constexpr const char* kUsage =
    "usage: brisk-run --nproc-per-node N [--nnodes M --node-rank R] [--master-addr A --master-port P]\n"
    "                 [--max-restarts K [--min-ranks M]] [--grace-s S] [--rdzv-timeout-s T] [--] program args...\n";

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "brisk-run: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

int parse_int(const std::string& flag, const char* v, int lo, int hi) {
  if (!v) usage_error(flag + " needs a value");
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno || !end || *end || end == v || x < lo || x > hi) {
    usage_error(flag + " '" + v + "' is not a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return int(x);
}

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.rfind("--", 0) != 0) break;  // the program
    std::string value_inline;
    const size_t eq = a.find('=');
    const bool has_inline = eq != std::string::npos;
    if (has_inline) {
      value_inline = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    for (char& c : a) c = c == '_' ? '-' : c;  // --nproc_per_node as torchrun spells it
    auto value = [&]() -> const char* {
      if (has_inline) return value_inline.c_str();
      return i + 1 < argc ? argv[++i] : nullptr;
    };
    if (a == "--help") {
      std::printf("%s", kUsage);
      std::exit(0);
    } else if (a == "--nproc-per-node") {
      o.nproc = parse_int(a, value(), 1, 4096);
    } else if (a == "--nnodes") {
      o.nnodes = parse_int(a, value(), 1, 1 << 20);
    } else if (a == "--node-rank") {
      o.node_rank = parse_int(a, value(), 0, (1 << 20) - 1);
    } else if (a == "--master-addr") {
      const char* v = value();
      if (!v || !*v) usage_error("--master-addr needs a value");
      o.master_addr = v;
    } else if (a == "--master-port") {
      o.master_port = parse_int(a, value(), 1, 65535);
    } else if (a == "--max-restarts") {
      o.max_restarts = parse_int(a, value(), 0, 1000);
    } else if (a == "--min-ranks") {
      o.min_ranks = parse_int(a, value(), 1, 4096);
    } else if (a == "--grace-s") {
      o.grace_s = parse_int(a, value(), 0, 3600);
    } else if (a == "--rdzv-timeout-s") {
      o.rdzv_timeout_s = parse_int(a, value(), 1, 24 * 3600);
    } else {
      usage_error("unknown option " + a);
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.command.empty()) usage_error("no program to run");
  if (o.node_rank >= o.nnodes) {
    usage_error("--node-rank " + std::to_string(o.node_rank) + " is not below --nnodes " + std::to_string(o.nnodes));
  }
  if (o.min_ranks == 0) o.min_ranks = o.nproc;
  if (o.min_ranks > o.nproc) {
    usage_error("--min-ranks " + std::to_string(o.min_ranks) + " is above --nproc-per-node " + std::to_string(o.nproc));
  }
  if (o.min_ranks < o.nproc && o.nnodes > 1) {
    usage_error("--min-ranks needs --nnodes 1 (a restart across hosts starts every node's ranks again)");
  }
  if (o.nnodes > 1 && o.master_port == 65535) {
    usage_error("--master-port 65535 leaves no port for the agents' store (--master-port + 1) on several nodes");
  }
  return o;
}

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;  // wait status once exited
};

// dist::kBrokenGroupExitStatus: the rank's process group broke because of another rank.
bool is_broken_group(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 3; }

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) +
         ")";
}

// Waits one tick (100 ms) for a signal in `mask`; returns SIGINT, SIGTERM or SIGHUP if one came.
int tick(const sigset_t& mask) {
  timespec t{0, 100 * 1000 * 1000};
  const int sig = sigtimedwait(&mask, nullptr, &t);
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP ? sig : 0;
}

// Note [Agents across hosts]
// With --nnodes M > 1 every host's brisk-run is an agent (torchrun's elastic agent, with a fixed
// set of nodes). Node 0's agent serves a TcpStore (dist/store.h) on --master-port + 1, and every
// agent is its client; the ranks keep MASTER_PORT (--master-port), served by their rank 0 as on
// one node. The job runs in generations 0, 1, ..., and all agents count them alike because a
// generation starts only once every node has joined it:
//  - rendezvous: each agent adds 1 to gen<g>/node<R> (more than 1: the same --node-rank twice)
//    and to gen<g>/joined; the M-th sets gen<g>/go, which the others poll for until
//    --rdzv-timeout-s (600 s); the error names the nodes that never joined. The ranks get
//    BRISK_RESTART_COUNT g.
//  - failure: an agent whose rank fails (a non-zero status or a signal) records it at once as
//    gen<g>/failure<i> ("<exit code> <echo> <text>", i from the counter gen<g>/failures). Every
//    agent reads that counter each 100 ms tick and, when it moves, stops its ranks as after a
//    failure of its own (the grace time, SIGTERM, SIGKILL). A rank that exited with
//    kBrokenGroupExitStatus echoes a peer's failure; the job's status is that of the first
//    failure recorded that is not an echo.
//  - restart: once its own ranks are gone, each agent joins generation g + 1, or, with no
//    restarts left, exits with the job's status and the list of failures. The decision depends
//    only on g, so all agents take the same; the list is the store's once the agent's own
//    ranks are gone, so an echo recorded after that may be missing from an agent's message.
//  - success: an agent whose ranks all exited 0 adds 1 to gen<g>/done and waits until all M
//    have, or until a failure appears (a rank elsewhere failed after these finished: the
//    generation failed, and these ranks run again with it).
//  - a signal (SIGINT, SIGTERM, SIGHUP) to one agent stops the job everywhere: gen<g>/stop, no
//    restart.
// The ranks' store of one generation never meets another's: their rank 0 serves a fresh one on
// MASTER_PORT each generation, and no rank of generation g is alive when g + 1 starts (each
// agent reaps its ranks before it joins the next rendezvous), as between restarts on one node.
// A host that vanishes (a cut link) hangs no one: its peers' collectives time out, their agents
// record the failure, and the next rendezvous ends with an error naming the missing node. Its
// own agent, cut off from the store, gives up when a reply does not come within
// min(--rdzv-timeout-s, 30 s) and stops its ranks. Node 0's agent, which holds the store, waits
// as long at most for the others to leave before it exits.
class Agent {
 public:
  struct Failure {
    int code = 0;       // the exit status it gives the job
    bool echo = false;  // a rank that left with kBrokenGroupExitStatus: a peer failed first
    std::string text;   // "node 1: rank 1 was killed by signal 9 (Killed)"
  };

  Agent(const Options& o, const sigset_t& mask) : o_(o), mask_(mask) {}

  // Serves the agents' store (node 0) or connects to it, retrying until --rdzv-timeout-s (node 0
  // may start later). Returns 0, or 128 + a signal that came meanwhile; throws brisk::Error.
  int connect() {
    const auto deadline = Clock::now() + std::chrono::seconds(o_.rdzv_timeout_s);
    while (!store_) {
      try {
        store_ = std::make_unique<brisk::dist::TcpStore>(o_.master_addr, o_.master_port + 1, o_.node_rank == 0,
                                                         std::chrono::seconds(1));
      } catch (const brisk::Error& e) {
        if (o_.node_rank == 0) throw;
        if (Clock::now() >= deadline) {
          BRISK_FAIL("cannot reach the agents' store at ", where(), " within ", o_.rdzv_timeout_s,
                     " s (is node 0's brisk-run running, with the same --master-addr and --master-port?); last try: ",
                     e.what());
        }
      }
      if (const int sig = store_ ? 0 : tick(mask_)) return 128 + sig;
    }
    store_->set_timeout(reply_timeout());
    return 0;
  }

  std::chrono::milliseconds reply_timeout() const { return std::chrono::seconds(std::min(o_.rdzv_timeout_s, 30)); }
  std::string where() const { return o_.master_addr + ":" + std::to_string(o_.master_port + 1); }

  // Joins generation g and waits for every node. Returns 0, or the exit status when the job
  // was stopped by a signal meanwhile (here or on another node); throws brisk::Error on a timeout.
  int rendezvous(int g) {
    gen_ = g;
    if (store_->add(key("node" + std::to_string(o_.node_rank)), 1) > 1) {
      BRISK_FAIL("two agents joined generation ", g, " as node ", o_.node_rank,
                 " (the same --node-rank twice, or another job on the agents' port ", o_.master_port + 1, "?)");
    }
    const int64_t n = store_->add(key("joined"), 1);
    if (n > o_.nnodes) {
      BRISK_FAIL(n, " agents joined generation ", g, ", more than --nnodes ", o_.nnodes,
                 " (started with different --nnodes, or another job on the agents' port ", o_.master_port + 1, "?)");
    }
    if (n == o_.nnodes) store_->set(key("go"), {});
    const auto deadline = Clock::now() + std::chrono::seconds(o_.rdzv_timeout_s);
    while (!store_->check({key("go")})) {
      if (const int code = stopped()) return code;
      if (const int sig = tick(mask_)) return stop_job(sig);
      if (Clock::now() >= deadline) {
        std::string missing;
        for (int r = 0; r < o_.nnodes; ++r) {
          if (!store_->check({key("node" + std::to_string(r))}))
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        BRISK_FAIL("the rendezvous of generation ", g, " at ", where(), " timed out after ", o_.rdzv_timeout_s,
                   " s: node(s) ", missing, " of ", o_.nnodes,
                   " never joined (host down or cut off, its brisk-run exited, or started with another --nnodes, "
                   "--master-addr or --master-port)");
      }
    }
    return 0;
  }

  // A local rank failed: recorded at once, for every agent to see.
  void record(int rank, int status) {
    record({exit_code(status), is_broken_group(status),
            "node " + std::to_string(o_.node_rank) + ": rank " + std::to_string(rank) + " " + describe(status)});
  }

  // This agent got a signal: the job stops everywhere, without a restart. Returns 128 + sig.
  int stop_job(int sig) {
    record({128 + sig, false,
            "node " + std::to_string(o_.node_rank) + ": brisk-run got signal " + std::to_string(sig) + " (" +
                strsignal(sig) + ")"});
    guarded([&] { store_->set(key("stop"), {}); });
    return 128 + sig;
  }

  // Whether this generation failed (on any node), polled every tick; a lost store counts.
  bool failed() {
    bool any = true;
    guarded([&] { any = store_->add(key("failures"), 0) > 0; });
    return any;
  }

  // The job's exit status when an agent stopped it (a signal), else 0.
  int stopped() {
    bool stop = false;
    guarded([&] { stop = store_->check({key("stop")}); });
    return stop ? job_status() : 0;
  }

  // This node's ranks all exited 0: waits until every node's did (true), or the generation
  // failed after all (false).
  bool finish() {
    if (failed()) return false;
    store_->add(key("done"), 1);
    const auto deadline = Clock::now() + std::chrono::seconds(o_.rdzv_timeout_s);
    while (true) {
      if (failed()) return false;
      const int64_t done = store_->add(key("done"), 0);
      if (done >= o_.nnodes) return true;
      if (const int sig = tick(mask_)) stop_job(sig);
      if (Clock::now() >= deadline) {
        BRISK_FAIL("the ranks here finished generation ", gen_, ", but only ", done, " of ", o_.nnodes,
                   " nodes' ranks did within ", o_.rdzv_timeout_s, " s");
      }
    }
  }

  std::vector<Failure> failures() {
    std::vector<Failure> all;
    guarded([&] {
      const int64_t n = store_->add(key("failures"), 0);
      for (int64_t i = 1; i <= n; ++i) {
        const std::vector<char> v = store_->get(key("failure" + std::to_string(i)));
        Failure f;
        int used = 0;
        const std::string text(v.begin(), v.end());
        int echo = 0;
        if (std::sscanf(text.c_str(), "%d %d %n", &f.code, &echo, &used) >= 2) f.text = text.substr(size_t(used));
        f.echo = echo != 0;
        all.push_back(f);
      }
    });
    return all;
  }

  // The job's status: the first failure that is not an echo, else the first.
  int job_status() {
    const std::vector<Failure> all = failures();
    for (const Failure& f : all) {
      if (!f.echo) return f.code;
    }
    return all.empty() ? 1 : all[0].code;
  }

  std::string describe_failures() {
    std::string s;
    for (const Failure& f : failures()) s += (s.empty() ? "" : "; ") + f.text + (f.echo ? " (a peer failed)" : "");
    return s.empty() ? "no failure recorded" : s;
  }

  const std::string& lost() const { return lost_; }

  // Leaves the job with `code`: node 0 (the store's host) first waits for the agents of this
  // generation to leave, so that none loses the store while it reads the outcome.
  int leave(int code) {
    if (!lost_.empty()) return code;
    try {
      store_->add("left", 1);
      if (o_.node_rank == 0) {
        const int64_t expected = store_->add(key("joined"), 0);
        const auto deadline = Clock::now() + reply_timeout();
        while (store_->add("left", 0) < expected && Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    } catch (const brisk::Error&) {
      // the store is gone: nobody to wait for
    }
    return code;
  }

 private:
  std::string key(const std::string& name) const { return "gen" + std::to_string(gen_) + "/" + name; }

  void record(const Failure& f) {
    guarded([&] {
      const int64_t i = store_->add(key("failures"), 1);
      store_->set(key("failure" + std::to_string(i)), [&] {
        const std::string v = std::to_string(f.code) + " " + (f.echo ? "1 " : "0 ") + f.text;
        return std::vector<char>(v.begin(), v.end());
      }());
    });
  }

  // Runs a store request; an error (the store's host gone or cut off) is remembered in lost_.
  template <class F>
  void guarded(F&& request) {
    if (!lost_.empty()) return;
    try {
      request();
    } catch (const brisk::Error& e) {
      lost_ = e.what();
    }
  }

  Options o_;
  sigset_t mask_{};
  int gen_ = 0;
  std::string lost_;  // why the agents' store was lost, if it was
  std::unique_ptr<brisk::dist::TcpStore> store_;
};

pid_t start(const Options& o, int local, int restart, const sigset_t& old_mask) {
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    std::fprintf(stderr, "brisk-run: fork failed: %s\n", std::strerror(errno));
    return -1;
  }
  if (pid > 0) {
    setpgid(pid, pid);  // also done in the child: whichever runs first
    return pid;
  }
  setpgid(0, 0);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  // Should the launcher itself die (SIGKILL, nothing to forward), its ranks get SIGTERM rather
  // than running on as orphans; a launcher already gone before this line is caught by getppid.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != launcher) _exit(128 + SIGTERM);
  const int world = o.nnodes * o.nproc, rank = o.node_rank * o.nproc + local;
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
  setenv("GROUP_RANK", std::to_string(o.node_rank).c_str(), 1);
  setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(o.master_port).c_str(), 1);
  setenv("BRISK_RESTART_COUNT", std::to_string(restart).c_str(), 1);
  setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(restart).c_str(), 1);
  std::vector<char*> args;
  for (const std::string& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "brisk-run: cannot start '%s': %s\n", args[0], std::strerror(errno));
  _exit(127);
}

void signal_all(std::vector<Rank>& ranks, int sig) {
  for (Rank& r : ranks) {
    if (r.running) kill(-r.pid, sig);  // the rank's process group: its children too
  }
}

// One attempt: starts every local rank and waits for all of them. Returns the wait status of
// the first rank that failed (0 when all exited 0); `forwarded` is the signal the launcher got.
// With an agent (several nodes) it records the local failures, and stops the local ranks when
// another node's fail (Note [Agents across hosts]).
int run_once(const Options& o, int restart, const sigset_t& mask, const sigset_t& old_mask, int& forwarded,
             int& failed_rank, int& lost, Agent* agent) {
  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  int first_failure = 0;
  failed_rank = -1;
  lost = 0;
  bool stopping = false, terminated = false;  // terminated: the launcher sent SIGTERM or SIGKILL
  Clock::time_point kill_at = Clock::time_point::max();
  for (int l = 0; l < o.nproc; ++l) {
    Rank& r = ranks[size_t(l)];
    r.rank = o.node_rank * o.nproc + l;
    r.pid = start(o, l, restart, old_mask);
    if (r.pid < 0) {
      first_failure = 127 << 8;
      failed_rank = r.rank;
      stopping = true;
      kill_at = Clock::now();
      break;
    }
    r.running = true;
  }
  const auto grace = std::chrono::milliseconds(int64_t(o.grace_s * 1000));
  Clock::time_point term_at = Clock::time_point::max();
  auto stop_others = [&] {
    stopping = true;
    term_at = Clock::now() + grace;
    kill_at = term_at + grace;
  };
  if (stopping) {
    if (agent) agent->record(failed_rank, first_failure);
    stop_others();
  }
  while (true) {
    int running = 0;
    for (const Rank& r : ranks) running += r.running;
    if (running == 0) break;
    timespec tick{0, 100 * 1000 * 1000};
    const int sig = sigtimedwait(&mask, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      std::fprintf(stderr, "brisk-run: got signal %d (%s), passing it to the %d running ranks\n", sig, strsignal(sig),
                   running);
      if (!forwarded) forwarded = sig;
      if (agent) agent->stop_job(sig);
      terminated = true;
      signal_all(ranks, sig);
      stopping = true;
      term_at = Clock::time_point::max();
      kill_at = Clock::now() + grace;
    }
    while (true) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      for (Rank& r : ranks) {
        if (r.pid != pid || !r.running) continue;
        r.running = false;
        r.status = status;
        if (status == 0 || terminated) continue;
        std::fprintf(stderr, "brisk-run: rank %d (pid %d) %s%s\n", r.rank, int(pid), describe(status).c_str(),
                     stopping ? "" : "; stopping the other ranks");
        if (!is_broken_group(status)) ++lost;
        if (agent) agent->record(r.rank, status);
        // The cause, not its echo: a rank that left with dist::kBrokenGroupExitStatus saw a peer
        // fail, so a peer's own failure in the same window names the job's status.
        if (first_failure == 0 || (is_broken_group(first_failure) && !is_broken_group(status))) {
          first_failure = status;
          failed_rank = r.rank;
        }
        if (!stopping) stop_others();
      }
    }
    if (agent && !stopping && agent->failed()) {
      std::fprintf(stderr, "brisk-run: node %d: %s; stopping the %d ranks here\n", o.node_rank,
                   agent->lost().empty() ? "a rank on another node failed" : "lost the agents' store", running);
      stop_others();
    }
    if (stopping && Clock::now() >= term_at) {
      terminated = true;
      signal_all(ranks, SIGTERM);
      term_at = Clock::time_point::max();
    }
    if (stopping && Clock::now() >= kill_at) {
      signal_all(ranks, SIGKILL);
      kill_at = Clock::now() + std::chrono::hours(1);
    }
  }
  return first_failure;
}

// Several nodes: this host's agent (Note [Agents across hosts]). Returns the exit status.
int run_agent(const Options& o, const sigset_t& mask, const sigset_t& old_mask) {
  auto say = [&](const std::string& what) {
    std::fprintf(stderr, "brisk-run: node %d: %s\n", o.node_rank, what.c_str());
  };
  auto agent = std::make_unique<Agent>(o, mask);
  try {
    if (const int code = agent->connect()) {
      say("stopped by a signal while waiting for the agents' store");
      return code;
    }
  } catch (const brisk::Error& e) {
    say(e.what());
    return 1;
  }
  for (int gen = 0;; ++gen) {
    int status = 0;
    try {
      if (const int code = agent->rendezvous(gen)) {
        say("the job was stopped by a signal: " + agent->describe_failures());
        return agent->leave(code);
      }
      if (gen > 0) {
        say("generation " + std::to_string(gen) + ": all " + std::to_string(o.nnodes) +
            " nodes joined; restarting the " + std::to_string(o.nproc) + " ranks here (restart " + std::to_string(gen) +
            " of " + std::to_string(o.max_restarts) + ")");
      }
      int forwarded = 0, failed_rank = -1, lost = 0;
      status = run_once(o, gen, mask, old_mask, forwarded, failed_rank, lost, agent.get());
      if (forwarded) return agent->leave(128 + forwarded);
      if (agent->lost().empty() && status == 0 && agent->finish()) return agent->leave(0);
    } catch (const brisk::Error& e) {
      say(e.what());
      return agent->leave(status ? exit_code(status) : 1);
    }
    if (!agent->lost().empty()) {
      say("lost the agents' store at " + agent->where() + ": " + agent->lost() + "; the ranks here were stopped");
      return agent->leave(status ? exit_code(status) : 1);
    }
    const std::string why = agent->describe_failures();
    if (const int code = agent->stopped()) {
      say("the job was stopped by a signal: " + why);
      return agent->leave(code);
    }
    if (gen >= o.max_restarts) {
      say("generation " + std::to_string(gen) + " failed (" + why + "); no restarts left (--max-restarts " +
          std::to_string(o.max_restarts) + ")");
      return agent->leave(agent->job_status());
    }
    say("generation " + std::to_string(gen) + " failed (" + why + "); joining generation " + std::to_string(gen + 1));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  sigset_t mask, old_mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, &old_mask);
  if (o.nnodes > 1) return run_agent(o, mask, old_mask);
  Options now = o;  // this attempt's: its nproc shrinks with --min-ranks
  for (int restart = 0;; ++restart) {
    int forwarded = 0, failed_rank = -1, lost = 0;
    const int status = run_once(now, restart, mask, old_mask, forwarded, failed_rank, lost, nullptr);
    if (forwarded) return 128 + forwarded;
    if (status == 0) return 0;
    if (restart >= o.max_restarts) {
      if (o.max_restarts > 0) std::fprintf(stderr, "brisk-run: no restarts left (%d used)\n", o.max_restarts);
      return exit_code(status);
    }
    if (o.min_ranks < o.nproc) {
      const int left = now.nproc - lost;
      if (left < o.min_ranks) {
        std::fprintf(stderr, "brisk-run: %d of %d ranks lost, %d left: fewer than --min-ranks %d\n", lost, now.nproc,
                     left, o.min_ranks);
        return exit_code(status);
      }
      now.nproc = left;
    }
    std::fprintf(stderr, "brisk-run: restarting all %d ranks (restart %d of %d) after rank %d failed\n", now.nproc,
                 restart + 1, o.max_restarts, failed_rank);
  }
}
