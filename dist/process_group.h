// dist/process_group.h: collective communication between processes. A ProcessGroup is the
// ranks of one job (started by `mpirun -np N`, or by `brisk-run` / any launcher that sets
// torchrun's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; on one machine or several); every call
// is asynchronous and returns a Work to wait on. Backends: MPI for CPU tensors
// (dist/mpi_group.cpp), Gloo for CPU tensors without MPI (dist/gloo_group.cpp, builds with
// libgloo-dev), NCCL for CUDA tensors (dist/nccl_group.cpp, CUDA builds). Every
// collective has a timeout, so a dead peer ends in a brisk::Error, not a hang (Note [Faults]
// in dist/mpi_group.cpp). Not here: DistributedDataParallel (dist/ddp.h), ZeRO-1/2
// (dist/zero.h), ZeRO-3 / FSDP (dist/fsdp.h), the sampler that shards a dataset (data/sampler.h, DistributedSampler).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace brisk::dist {

enum class ReduceOp { Sum, Avg, Min, Max, Product };
const char* reduce_op_name(ReduceOp op);

// A process in which a group broke (a collective timed out, a peer died, MPI or NCCL failed)
// exits with this status however main() ends, so that mpirun and scripts see the failure
// (docs/distributed.md, "When a rank dies"). exit() and a return from main() both lead there.
inline constexpr int kBrokenGroupExitStatus = 3;

using Duration = std::chrono::milliseconds;
inline constexpr Duration kDefaultTimeout = std::chrono::minutes(10);

// One pending call. wait() returns true once the call has completed, false when `timeout`
// (default: the group's) passes first; a failed call (its own timeout, a dead peer, a broken
// group) throws brisk::Error naming the collective, the group and the cause.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool wait(Duration timeout) = 0;
  bool wait();  // waits up to the group's timeout; throws if the call did not complete
  virtual bool is_completed() const = 0;
  virtual std::string describe() const = 0;  // "allreduce(sum) of F32 (1024) on group 'world'"

 protected:
  explicit Work(Duration default_timeout) : default_timeout_(default_timeout) {}

 private:
  Duration default_timeout_;
};
using WorkPtr = std::shared_ptr<Work>;

struct GroupOptions {                  // fields in init_process_group's keyword order (name: its group_name)
  Duration timeout = kDefaultTimeout;  // per collective, from the moment the backend issues it
  std::string name = "world";
  // Before every collective, all ranks compare what they are about to call (collective,
  // dtype, sizes, root) and a mismatch names the rank that differs. Also on with the
  // environment variable BRISK_DIST_DEBUG=1. Costs one small allgather per call.
  bool debug = false;
};

// Tensors must be dense (contiguous), on the group's device type, of a dtype the backend has:
// F32, F64, F16, BF16, I32, I64 (Avg needs a floating dtype). Collectives are in place unless
// they have an output argument; every rank must make the same calls in the same order.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "mpi", "gloo", "nccl"
  const GroupOptions& options() const { return options_; }
  void set_timeout(Duration timeout) { options_.timeout = timeout; }

  virtual WorkPtr allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  virtual WorkPtr broadcast(Tensor& t, int root) = 0;
  // out[i] receives rank i's `in` (out: size() tensors shaped like in, allocated by the caller).
  virtual WorkPtr allgather(std::vector<Tensor>& out, const Tensor& in) = 0;
  // out (size() * in.numel() elements, any shape): the ranks' `in` back to back.
  virtual WorkPtr allgather_into_tensor(Tensor& out, const Tensor& in) = 0;
  // in (size() * out.numel() elements): rank i receives the reduction of every rank's i-th chunk.
  virtual WorkPtr reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::Sum) = 0;
  virtual WorkPtr barrier() = 0;
  virtual WorkPtr send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual WorkPtr recv(Tensor& t, int src, int tag = 0) = 0;

  // Finishes the calls in flight and stops the group's thread; later calls are errors.
  // destroy_process_group() (and the exit handler) does this for every group.
  virtual void shutdown() = 0;

 protected:
  explicit ProcessGroup(GroupOptions options) : options_(std::move(options)) {}
  GroupOptions options_;
};
using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

enum class Backend { Auto, Mpi, Nccl, Gloo };

// Rank, size and local rank of this process: from mpirun's environment (and MPI), checked
// against RANK / WORLD_SIZE / LOCAL_RANK where those are set. A process not started by mpirun
// is rank 0 of 1.
struct Launch {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
};

// Starts MPI (once per process) and returns the world group of `backend` (Auto: NCCL when
// `device` is CUDA, else MPI; Gloo: init_from_env's, or under mpirun a Gloo group beside MPI's,
// its rendezvous announced over MPI); CUDA groups use device
// local_rank % device_count unless `device` names one. The first call's group is also world().
ProcessGroupPtr init_process_group(Backend backend = Backend::Auto, Device device = Device::cpu(),
                                   GroupOptions options = {});

// Joins the job described by the environment, torchrun's names (brisk-run sets them):
// MASTER_ADDR and MASTER_PORT (where rank 0 serves the rendezvous store, dist/store.h), RANK,
// WORLD_SIZE, LOCAL_RANK (default: RANK). No MPI is started. Returns the world group of
// `backend`: Auto is Gloo for CPU and NCCL for CUDA (its unique id travels over a Gloo group);
// Mpi is an error (that is init_process_group's). Missing or bad variables, a rendezvous that
// does not complete within options.timeout, and mixing with init_process_group's MPI are
// errors naming the variable, the address or the call. The first group is also world().
ProcessGroupPtr init_from_env(Backend backend = Backend::Auto, Device device = Device::cpu(),
                              GroupOptions options = {});
// Whether this build has the Gloo backend (brisk built with libgloo-dev found).
bool is_gloo_available();
ProcessGroupPtr world();  // the group init_process_group made (an error before it)
bool is_initialized();
// Whether this program has the NCCL backend: brisk::dist_nccl linked (a CUDA build with NCCL).
bool is_nccl_available();
Launch launch_info();

// A group of some of the world's ranks (sub-groups: data x pipeline parallelism, and the like),
// of world()'s backend: MPI (MPI_Comm_split), Gloo (a full mesh of its own through the
// rendezvous store) or NCCL (ncclCommSplit of the world's communicator, with a CPU sub-group
// beside it for the debug check). Collective over the world: every rank calls it, in the same order, with the same
// `ranks` (distinct world ranks; the group's rank i is ranks[i]); it first waits for a barrier on
// world(), so no call may be pending there. A sub-group has its own communicator and thread: its
// calls never wait for ranks outside it. On a rank outside `ranks` the result's rank() is -1 and
// each of its calls is an error naming this rank, the group and its ranks. options.name defaults
// to "group(0,2)" for ranks {0, 2}.
ProcessGroupPtr new_group(const std::vector<int>& ranks, GroupOptions options = {});

// A 2-D mesh of the world's ranks, row-major: rank r sits at (r / cols, r % cols). For data x
// pipeline parallelism with rows = replicas and cols = stages, row_group is a replica's pipeline
// (its stages in order) and col_group the replicas of one stage (where gradients are averaged).
struct DeviceMesh {
  int rows = 1, cols = 1;
  int row = 0, col = 0;         // this rank's coordinates
  ProcessGroupPtr row_group{};  // the cols ranks of this rank's row, in column order
  ProcessGroupPtr col_group{};  // the rows ranks of this rank's column, in row order
};
// Collective over the world (new_group for every row and every column); rows * cols must be
// the world's size. Groups are named "<name>.row<i>" and "<name>.col<j>" (name: "mesh" unless
// options.name is set).
DeviceMesh init_device_mesh(int rows, int cols, GroupOptions options = {});
// Stops the groups' threads and finalizes MPI (also done at exit). Later calls fail clearly.
void destroy_process_group();

}  // namespace brisk::dist
