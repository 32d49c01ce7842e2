// dist/pipeline.cpp: dist::Pipeline: the stage split and its checks, the two schedules over
// micro-batches, the header that goes before every tensor between stages, and the abort
// protocol that turns a failure in a stage into an error on every rank (Note [Pipeline abort]).
// Not here: the transport (dist/mpi_group.cpp), the schedules' reasoning and measurements
// (docs/PIPELINE.md).
#include "dist/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <sstream>

#include "engine/functions.h"
#include "engine/grad_mode.h"

namespace brisk::dist {

// Note [Pipeline messages]
// Every tensor between stages travels as two messages on the same tag: a header of 16 I64
// words (magic, kind, step, micro-batch, dtype, dims, sizes, and for an abort the text's length
// and the failing stage), then the data, received into a tensor the header describes. So the
// receiver needs no prior knowledge of the shapes (a stage may change them, the batch may
// change between steps), a truncated or mismatched receive cannot happen, and a peer out of
// step (another step count, micro-batch or message kind) is named instead of mis-read.
// Activations go downstream on kActTag, gradients upstream on kGradTag; messages between two
// ranks on one tag arrive in order (MPI's non-overtaking rule), which the schedules and the
// abort protocol rely on. Sends are asynchronous (their tensors stay alive inside the Work) and
// waited for at the end of the step, so a stage never blocks on a send; receives are waited
// for one at a time, in the order of the schedule.
//
// Note [Pipeline abort]
// A stage that fails must not leave its peers blocked until the group's timeout, nor leave
// unmatched messages behind (a pending send past its deadline breaks the MPI group). Failures
// in the first micro-batch's forward (the place where a stage meets a shape it cannot take, a
// batch that does not divide, a bad target or loss) end the step on every rank cleanly:
//   the failing stage f sends an Abort (with its message) downstream on kActTag and upstream on
//   kGradTag, then, unless it is the first stage, receives and drops activations from f - 1
//   until an AbortAck;
//   a stage that receives the Abort from upstream (it was waiting for its first activation)
//   passes it downstream;
//   a stage that receives it from downstream (in place of its first gradient) sends an AbortAck
//   downstream, then acts as f does upstream: Abort to s - 1, drop activations until AbortAck.
// Every stage then waits for its sends (each now has a receiver) and throws f's message. Only
// one stage can fail this way in a step (the stages after it never ran the micro-batch), so
// the exchanges pair up. A failure later in the step (or a dead peer) is not handled so: the
// peers' receives fail at the group's timeout, which breaks the group (Note [Faults] in
// dist/mpi_group.cpp).

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kActTag = 31001;
constexpr int kGradTag = 31002;
constexpr int64_t kMagic = 0x62726b70697065;  // "brkpipe"
constexpr int kHeaderWords = 16;
enum Word { kWMagic, kWKind, kWStep, kWMicro, kWDType, kWDims, kWSizes, kWTextLen = kWSizes + kMaxDims, kWOrigin };
static_assert(kWOrigin + 1 == kHeaderWords);
enum Kind : int64_t { kActivation = 1, kGradient = 2, kAbort = 3, kAbortAck = 4 };

const char* kind_name(int64_t k) {
  switch (k) {
    case kActivation: return "an activation";
    case kGradient: return "a gradient";
    case kAbort: return "an abort";
    case kAbortAck: return "an abort acknowledgement";
    default: return "an unknown message";
  }
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A peer's Abort arrived in place of the expected message.
struct PeerAbort {
  std::string message;
};

uint64_t fnv(const std::vector<int64_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t x : v) {
    for (int b = 0; b < 8; ++b) {
      h ^= uint64_t(x >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

std::string join(const std::vector<int64_t>& v) {
  std::ostringstream s;
  s << "{";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "}";
  return s.str();
}

}  // namespace

const char* schedule_name(Schedule s) { return s == Schedule::GPipe ? "gpipe" : "1f1b"; }

double bubble_theory(int stages, int64_t micro_batches) {
  BRISK_CHECK(stages >= 1 && micro_batches >= 1, "bubble_theory: needs stages >= 1 and micro_batches >= 1, got ",
              stages, " and ", micro_batches);
  return double(stages - 1) / double(micro_batches + stages - 1);
}

// ---- balancing: a contiguous partition minimizing the largest part (dynamic programming over
// prefix sums, O(stages * n^2); n is a model's layer count).
std::vector<int64_t> balance(const std::vector<double>& costs, int stages) {
  const int64_t n = int64_t(costs.size());
  BRISK_CHECK(stages >= 1, "pipeline balance: stages must be >= 1, got ", stages);
  BRISK_CHECK(n >= stages, "pipeline balance: ", n, " layers cannot make ", stages, " non-empty stages");
  std::vector<double> prefix(size_t(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    BRISK_CHECK(costs[size_t(i)] >= 0, "pipeline balance: layer ", i, " has a negative cost ", costs[size_t(i)]);
    prefix[size_t(i) + 1] = prefix[size_t(i)] + costs[size_t(i)];
  }
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][j]: the smallest largest part when the first j layers make k + 1 stages; from[k][j]
  // where the last of those stages begins.
  std::vector<std::vector<double>> best(size_t(stages), std::vector<double>(size_t(n) + 1, inf));
  std::vector<std::vector<int64_t>> from(size_t(stages), std::vector<int64_t>(size_t(n) + 1, 0));
  for (int64_t j = 1; j <= n; ++j) best[0][size_t(j)] = prefix[size_t(j)];
  for (int k = 1; k < stages; ++k) {
    for (int64_t j = k + 1; j <= n; ++j) {
      for (int64_t i = k; i < j; ++i) {
        const double c = std::max(best[size_t(k) - 1][size_t(i)], prefix[size_t(j)] - prefix[size_t(i)]);
        if (c < best[size_t(k)][size_t(j)]) {
          best[size_t(k)][size_t(j)] = c;
          from[size_t(k)][size_t(j)] = i;
        }
      }
    }
  }
  std::vector<int64_t> points(size_t(stages) - 1);
  int64_t j = n;
  for (int k = stages - 1; k >= 1; --k) {
    j = from[size_t(k)][size_t(j)];
    points[size_t(k) - 1] = j;
  }
  return points;
}

std::vector<int64_t> balance_by_parameters(const nn::Sequential& model, int stages) {
  std::vector<double> costs;
  for (const auto& [name, layer] : model.named_children()) costs.push_back(double(layer->num_parameters()) + 1);
  return balance(costs, stages);
}

std::vector<int64_t> balance_by_time(nn::Sequential& model, const Tensor& sample, int stages, ProcessGroup& group,
                                     int repeats) {
  BRISK_CHECK(sample.defined(), "pipeline balance_by_time: needs a sample input");
  BRISK_CHECK(repeats >= 1, "pipeline balance_by_time: repeats must be >= 1, got ", repeats);
  // Eval mode: dropout draws no random numbers and batch norm keeps its statistics, so timing
  // leaves no trace in the training run.
  const bool was_training = model.is_training();
  model.eval();
  std::vector<double> costs;
  Tensor x = sample;
  for (const auto& [name, layer] : model.named_children()) {
    Tensor in = x.detach();
    if (is_floating(in.dtype())) in.requires_grad_(true);
    double fastest = std::numeric_limits<double>::infinity();
    Tensor y;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = Clock::now();
      y = (*layer)(in);
      if (y.requires_grad()) y.backward(ones_like(y));
      fastest = std::min(fastest, seconds_since(t0));
    }
    costs.push_back(fastest);
    x = y.detach();
  }
  model.zero_grad();
  model.train(was_training);
  Tensor t = from_vector(costs, {int64_t(costs.size())}, DType::F64, sample.device());
  group.allreduce(t, ReduceOp::Max)->wait();  // max: exact, so every rank gets the same costs
  return balance(t.to(Device::cpu()).to_vector<double>(), stages);
}

// ---- construction: local checks, then every rank compares its configuration with rank 0's
// (an allgather), so a bad option on one rank is an error on all of them, not a hang.
Pipeline::Pipeline(std::shared_ptr<nn::Sequential> model, ProcessGroupPtr group, PipelineOptions options)
    : model_(std::move(model)), group_(std::move(group)), options_(std::move(options)) {
  BRISK_CHECK(model_, "pipeline: the model is null");
  BRISK_CHECK(group_, "pipeline: the process group is null");
  stages_ = group_->size();
  stage_ = group_->rank();
  const int64_t n = int64_t(model_->size());
  std::string problem;
  try {
    BRISK_CHECK(options_.micro_batches >= 1, "pipeline: micro_batches must be >= 1, got ", options_.micro_batches);
    BRISK_CHECK(n >= stages_, "pipeline: a Sequential of ", n, " layers cannot make ", stages_,
                " stages (one per rank of group '", group_->options().name, "')");
    if (options_.split_points.empty()) {
      points_ = balance_by_parameters(*model_, stages_);
    } else {
      points_ = options_.split_points;
      BRISK_CHECK(int64_t(points_.size()) == stages_ - 1, "pipeline: ", points_.size(), " split points ", join(points_),
                  " make ", points_.size() + 1, " stages, but the group '", group_->options().name, "' has ", stages_,
                  " ranks (one stage per rank needs ", stages_ - 1, ")");
      for (size_t i = 0; i < points_.size(); ++i) {
        const int64_t lo = i == 0 ? 1 : points_[i - 1] + 1;
        BRISK_CHECK(points_[i] >= lo && points_[i] <= n - 1, "pipeline: split points ", join(points_),
                    " must increase strictly within [1, ", n - 1, "] for a Sequential of ", n,
                    " layers (every stage non-empty)");
      }
    }
  } catch (const Error& e) {
    problem = e.what();
  }
  std::vector<int64_t> mine = {problem.empty() ? 1 : 0, n, int64_t(options_.schedule), options_.micro_batches,
                               int64_t(fnv(points_))};
  const int64_t words = int64_t(mine.size());
  Tensor local = empty({words}, DType::I64);
  std::memcpy(local.data_ptr(), mine.data(), sizeof(int64_t) * size_t(words));
  local = local.to(options_.device);
  Tensor all = zeros({int64_t(stages_) * words}, DType::I64, options_.device);
  group_->allgather_into_tensor(all, local)->wait();
  if (!problem.empty()) BRISK_FAIL(problem);
  const std::vector<int64_t> got = [&] {
    Tensor c = all.to(Device::cpu());
    const int64_t* p = c.data<int64_t>();
    return std::vector<int64_t>(p, p + c.numel());
  }();
  const char* what[] = {"", "layers", "schedule", "micro_batches", "split points"};
  for (int r = 0; r < stages_; ++r) {
    const int64_t* theirs = got.data() + size_t(r) * size_t(words);
    BRISK_CHECK(theirs[0] == 1, "pipeline: rank ", r, " of group '", group_->options().name,
                "' rejected its options (its own error says why)");
    for (int64_t w = 1; w < words; ++w) {
      BRISK_CHECK(theirs[w] == mine[size_t(w)], "pipeline: rank ", r, " and rank ", stage_, " disagree on ", what[w],
                  " (every rank must build the same model and options; this rank has ", n, " layers, ",
                  schedule_name(options_.schedule), ", ", options_.micro_batches, " micro-batches, split points ",
                  join(points_), ")");
    }
  }
  begin_ = stage_ == 0 ? 0 : points_[size_t(stage_) - 1];
  end_ = stage_ == stages_ - 1 ? n : points_[size_t(stage_)];
}

nn::NamedTensors Pipeline::named_parameters() const {
  nn::NamedTensors out;
  const auto children = model_->named_children();
  for (int64_t i = begin_; i < end_; ++i) {
    for (const auto& [name, t] : children[size_t(i)].second->named_parameters()) {
      out.emplace_back(children[size_t(i)].first + "." + name, t);
    }
  }
  return out;
}

std::vector<Tensor> Pipeline::parameters() const {
  std::vector<Tensor> out;
  for (const auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

Tensor Pipeline::run_layers(const Tensor& x) {
  Tensor h = x;
  for (int64_t i = begin_; i < end_; ++i) h = (*(*model_)[size_t(i)])(h);
  return h;
}

// ---- one train_step
struct Pipeline::Step {
  Pipeline& p;
  const Tensor& input;
  const Tensor& target;
  const LossFn& loss_fn;
  int64_t m = 0;
  int64_t step = 0;               // in every header (Note [Pipeline messages])
  int64_t rows = 0;               // per micro-batch (first and last stage)
  std::vector<Tensor> inputs{};   // per micro-batch: this stage's input (a leaf needing grad after stage 0)
  std::vector<Tensor> outputs{};  // this stage's output, or on the last stage the loss / m
  std::vector<WorkPtr> sends{};
  double loss_sum = 0;
  int64_t in_flight = 0;
  bool first_forward_done = false;

  ProcessGroup& g() { return *p.group_; }
  std::string who() const {
    return detail::cat("pipeline: stage ", p.stage_, " of ", p.stages_, " (rank ", p.stage_, ")");
  }

  // ---- messages (Note [Pipeline messages])
  Tensor header(int64_t kind, int64_t micro, const Tensor& t) {
    int64_t h[kHeaderWords] = {};
    h[kWMagic] = kMagic;
    h[kWKind] = kind;
    h[kWStep] = step;
    h[kWMicro] = micro;
    h[kWOrigin] = p.stage_;
    if (t.defined()) {
      h[kWDType] = int64_t(t.dtype());
      h[kWDims] = t.dim();
      for (int d = 0; d < t.dim(); ++d) h[kWSizes + d] = t.sizes()[d];
    }
    Tensor cpu = empty({kHeaderWords}, DType::I64);
    std::memcpy(cpu.data_ptr(), h, sizeof(h));
    return cpu.to(p.options_.device);
  }

  void post_send(const Tensor& t, int dst, int tag) {
    sends.push_back(g().send(t, dst, tag));
    // Drop the finished ones (errors surface at the final wait or the group's next call).
    std::erase_if(sends, [](const WorkPtr& w) { return w->is_completed() && w->wait(Duration(0)); });
  }

  void send_tensor(int64_t kind, int64_t micro, const Tensor& t, int dst, int tag) {
    Tensor data = t.detach().contiguous();
    post_send(header(kind, micro, data), dst, tag);
    post_send(data, dst, tag);
  }

  void send_abort(const std::string& message, int dst, int tag) {
    const int64_t words = int64_t(message.size() + 7) / 8 + 1;
    Tensor text = zeros({words}, DType::I64);
    std::memcpy(text.data_ptr(), message.data(), message.size());
    Tensor h = header(kAbort, 0, Tensor());
    {
      Tensor c = h.to(Device::cpu());
      c.data<int64_t>()[kWTextLen] = int64_t(message.size());
      h = c.to(p.options_.device);
    }
    post_send(h, dst, tag);
    post_send(text.to(p.options_.device), dst, tag);
  }

  void wait(const WorkPtr& w, const char* what, int peer) {
    const auto t0 = Clock::now();
    try {
      w->wait();
    } catch (const Error& e) {
      if (peer < 0) BRISK_FAIL(who(), " waiting for ", what, ": ", e.what());
      BRISK_FAIL(who(), " waiting for ", what, " from stage ", peer, ": ", e.what());
    }
    p.stats_.wait_s += seconds_since(t0);
  }

  // The next message from `src` on `tag`: its header (kind, micro-batch and data). An Abort
  // throws PeerAbort; `expect` (kActivation or kGradient) or kAbortAck otherwise.
  struct Message {
    int64_t kind = 0;
    Tensor data;
  };
  Message receive(int64_t expect, int64_t micro, int src, int tag, bool ack_ok = false) {
    const char* what = kind_name(expect);
    Tensor h = empty({kHeaderWords}, DType::I64, p.options_.device);
    wait(g().recv(h, src, tag), what, src);
    const Tensor c = h.to(Device::cpu());
    const int64_t* w = c.data<int64_t>();
    BRISK_CHECK(w[kWMagic] == kMagic, who(), ": a message from stage ", src,
                " is not a pipeline header (another program shares the group's tags?)");
    if (w[kWKind] == kAbort) {
      const int64_t len = w[kWTextLen];
      BRISK_CHECK(len >= 0 && len <= (int64_t(1) << 20), who(), ": a corrupt abort header from stage ", src,
                  " (message length ", len, ")");
      Tensor text = empty({(len + 7) / 8 + 1}, DType::I64, p.options_.device);
      wait(g().recv(text, src, tag), "an abort's message", src);
      const Tensor t = text.to(Device::cpu());
      throw PeerAbort{std::string(static_cast<const char*>(t.data_ptr()), size_t(len))};
    }
    if (w[kWKind] == kAbortAck && ack_ok) return {kAbortAck, Tensor()};
    BRISK_CHECK(w[kWKind] == expect && w[kWStep] == step && (micro < 0 || w[kWMicro] == micro), who(), " expected ",
                what, " of micro-batch ", micro, " in step ", step, " from stage ", src, ", got ", kind_name(w[kWKind]),
                " of micro-batch ", w[kWMicro], " in step ", w[kWStep],
                " (the ranks run different schedules or step counts)");
    BRISK_CHECK(w[kWDType] >= 0 && w[kWDType] < kNumDTypes && w[kWDims] >= 0 && w[kWDims] <= kMaxDims, who(),
                ": a corrupt header from stage ", src);
    Shape s;
    for (int64_t d = 0; d < w[kWDims]; ++d) s.push_back(w[kWSizes + d]);
    Tensor data = empty(s, static_cast<DType>(w[kWDType]), p.options_.device);
    wait(g().recv(data, src, tag), what, src);
    return {w[kWKind], data};
  }

  // ---- the two halves of a micro-batch
  void forward(int64_t i) {
    Tensor x;
    if (p.is_first()) {
      if (i == 0) {
        BRISK_CHECK(input.defined() && input.dim() >= 1, who(), ": the first stage needs an input with a batch dim");
        BRISK_CHECK(input.size(0) % m == 0 && input.size(0) >= m, who(), ": the batch of ", input.size(0),
                    " rows does not split into ", m, " equal micro-batches");
        rows = input.size(0) / m;
      }
      x = narrow(input, 0, i * rows, rows).to(p.options_.device);
    } else {
      x = receive(kActivation, i, p.stage_ - 1, kActTag).data;
      BRISK_CHECK(is_floating(x.dtype()), who(), ": received a ", x.dtype(), " activation ", x.sizes(), " from stage ",
                  p.stage_ - 1, "; activations between stages must be floating (gradients flow back)");
      x.requires_grad_(true);
    }
    if (p.is_last() && i == 0) {
      BRISK_CHECK(loss_fn, who(), ": the loss function is empty");
      BRISK_CHECK(target.defined() && target.dim() >= 1, who(), ": the last stage needs a target with a batch dim");
      BRISK_CHECK(target.size(0) % m == 0 && target.size(0) >= m, who(), ": the target's batch of ", target.size(0),
                  " rows does not split into ", m, " equal micro-batches");
    }
    const auto t0 = Clock::now();
    Tensor y;
    try {
      y = p.run_layers(x);
      if (p.is_last()) {
        const int64_t trows = target.size(0) / m;
        Tensor loss = loss_fn(y, narrow(target, 0, i * trows, trows).to(p.options_.device));
        BRISK_CHECK(loss.defined() && loss.numel() == 1, "the loss function returned ",
                    loss.defined() ? loss.str() : std::string("an undefined tensor"), ", not a scalar");
        loss_sum += loss.item<double>();
        y = loss * (1.0 / double(m));
      }
    } catch (const std::exception& e) {
      BRISK_FAIL(who(), " failed in the forward of micro-batch ", i, " on its input ", x.dtype(), " ", x.sizes(), ": ",
                 e.what());
    }
    p.stats_.compute_s += seconds_since(t0);
    if (!p.is_last()) send_tensor(kActivation, i, y, p.stage_ + 1, kActTag);
    inputs[size_t(i)] = x;
    outputs[size_t(i)] = y;
    p.stats_.max_in_flight = std::max(p.stats_.max_in_flight, ++in_flight);
    if (i == 0) first_forward_done = true;
  }

  void backward(int64_t i) {
    Tensor& y = outputs[size_t(i)];
    Tensor grad;
    if (!p.is_last()) {
      grad = receive(kGradient, i, p.stage_ + 1, kGradTag).data;
      BRISK_CHECK(grad.sizes() == y.sizes() && grad.dtype() == y.dtype(), who(), ": the gradient of micro-batch ", i,
                  " from stage ", p.stage_ + 1, " is ", grad.dtype(), " ", grad.sizes(), ", the activation was ",
                  y.dtype(), " ", y.sizes());
    }
    const auto t0 = Clock::now();
    if (y.requires_grad()) y.backward(grad);
    p.stats_.compute_s += seconds_since(t0);
    if (!p.is_first()) {
      const Tensor& x = inputs[size_t(i)];
      Tensor gx = x.grad().defined() ? x.grad() : zeros_like(x);
      send_tensor(kGradient, i, gx, p.stage_ - 1, kGradTag);
    }
    inputs[size_t(i)] = Tensor();
    y = Tensor();
    --in_flight;
  }

  void run() {
    if (p.options_.schedule == Schedule::GPipe) {
      for (int64_t i = 0; i < m; ++i) forward(i);
      for (int64_t i = 0; i < m; ++i) backward(i);
      return;
    }
    // 1F1B: warm up with the forwards that fill the pipeline below this stage, then one
    // forward and one backward at a time, then the remaining backwards.
    const int64_t warmup = std::min<int64_t>(m, p.stages_ - p.stage_ - 1);
    for (int64_t i = 0; i < warmup; ++i) forward(i);
    for (int64_t i = warmup; i < m; ++i) {
      forward(i);
      backward(i - warmup);
    }
    for (int64_t i = m - warmup; i < m; ++i) backward(i);
  }

  // Activations from upstream until its AbortAck (Note [Pipeline abort]).
  void drain_upstream() {
    while (receive(kActivation, -1, p.stage_ - 1, kActTag, /*ack_ok=*/true).kind != kAbortAck) {
    }
  }

  void wait_sends() {
    for (const WorkPtr& w : sends) wait(w, "the end of a send", -1);
    sends.clear();
  }

  // This stage failed before finishing micro-batch 0's forward.
  [[noreturn]] void abort_own(const std::string& message) {
    try {
      if (!p.is_last()) send_abort(message, p.stage_ + 1, kActTag);
      if (!p.is_first()) {
        send_abort(message, p.stage_ - 1, kGradTag);
        drain_upstream();
      }
      wait_sends();
    } catch (...) {  // the group itself failed: the first error is the one to report
    }
    BRISK_FAIL(message);
  }

  // A peer's abort arrived from upstream (`from_downstream` false) or downstream.
  [[noreturn]] void abort_peer(const std::string& message, bool from_downstream) {
    try {
      if (from_downstream) {
        post_send(header(kAbortAck, 0, Tensor()), p.stage_ + 1, kActTag);
        if (!p.is_first()) {
          send_abort(message, p.stage_ - 1, kGradTag);
          drain_upstream();
        }
      } else if (!p.is_last()) {
        send_abort(message, p.stage_ + 1, kActTag);
      }
      wait_sends();
    } catch (...) {
    }
    BRISK_FAIL(message, " [the step stopped on stage ", p.stage_, " too]");
  }
};

Tensor Pipeline::train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn) {
  const auto t0 = Clock::now();
  stats_ = {};
  Step s{*this, input, target, loss_fn};
  s.m = options_.micro_batches;
  s.inputs.resize(size_t(s.m));
  s.outputs.resize(size_t(s.m));
  s.step = steps_++;  // a failed step counts too: every rank fails it
  try {
    s.run();
  } catch (const PeerAbort& a) {
    // Abort from upstream arrives while waiting for the first activation; from downstream,
    // in place of a gradient (the first activation was done by then).
    s.abort_peer(a.message, s.first_forward_done);
  } catch (const std::exception& e) {
    if (!s.first_forward_done) s.abort_own(e.what());
    throw;
  }
  s.wait_sends();
  Tensor loss = from_vector({s.loss_sum / double(s.m)}, {1}, DType::F64, options_.device);
  const auto tb = Clock::now();
  group_->broadcast(loss, stages_ - 1)->wait();
  stats_.wait_s += seconds_since(tb);
  stats_.step_s = seconds_since(t0);
  return loss.to(Device::cpu()).reshape({});
}

}  // namespace brisk::dist
