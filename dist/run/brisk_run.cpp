// dist/run/brisk_run.cpp: brisk-run, the launcher of jobs without mpirun (torchrun's pattern):
//
//   brisk-run --nproc-per-node N [--nnodes M --node-rank R] [--master-addr A --master-port P]
//             [--max-restarts K [--min-ranks M]] [--grace-s S] [--] program args...
//
// starts N processes of `program` on this host with torchrun's environment (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT; BRISK_RESTART_COUNT), each
// in a process group of its own; forwards SIGINT, SIGTERM and SIGHUP to them; when one exits
// with a non-zero status or a signal, stops the others and exits with that rank's status
// (128 + signal for a signal). Stopping gives the others the grace time (--grace-s, 5 s) to
// end by themselves (a survivor's collective fails at once or within its timeout, and it exits
// with its error and dist::kBrokenGroupExitStatus), then sends SIGTERM, and SIGKILL one grace
// time later. With --max-restarts K (one
// node), it then starts every rank again, up to K times: the program resumes from its last
// checkpoint. With --min-ranks M (below N), a restart leaves out the ranks that were lost (those
// that failed on their own, not the survivors that exited with dist::kBrokenGroupExitStatus),
// down to M ranks: the job continues at a smaller WORLD_SIZE (it must re-split its data). The ranks find each other
// through dist::init_from_env; this program knows nothing of brisk or MPI. Not here: the rendezvous store
// (dist/store.h, served by rank 0).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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
  std::vector<std::string> command;
};

constexpr const char* kUsage =
    "usage: brisk-run --nproc-per-node N [--nnodes M --node-rank R] [--master-addr A --master-port P]\n"
    "                 [--max-restarts K [--min-ranks M]] [--grace-s S] [--] program args...\n";

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
  if (o.max_restarts > 0 && o.nnodes > 1) {
    usage_error("--max-restarts needs --nnodes 1 (restarting across hosts needs an agent on each; not built)");
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
int run_once(const Options& o, int restart, const sigset_t& mask, const sigset_t& old_mask, int& forwarded,
             int& failed_rank, int& lost) {
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
  if (stopping) stop_others();
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
        // The cause, not its echo: a rank that left with dist::kBrokenGroupExitStatus saw a peer
        // fail, so a peer's own failure in the same window names the job's status.
        if (first_failure == 0 || (is_broken_group(first_failure) && !is_broken_group(status))) {
          first_failure = status;
          failed_rank = r.rank;
        }
        if (!stopping) stop_others();
      }
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

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  sigset_t mask, old_mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, &old_mask);
  Options now = o;  // this attempt's: its nproc shrinks with --min-ranks
  for (int restart = 0;; ++restart) {
    int forwarded = 0, failed_rank = -1, lost = 0;
    const int status = run_once(now, restart, mask, old_mask, forwarded, failed_rank, lost);
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
