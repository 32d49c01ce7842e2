// tests/test_checkpoint.cpp: training checkpoints (train/checkpoint.h): a round trip restores
// model, optimizer, scheduler, plateau, early stopping, RNG, loader, counters and user strings,
// and training continues bit for bit; an incompatible model, optimizer or scheduler is refused
// with the offending key named and nothing changed; a part refused by its own check_state_dict
// changes no part (not even those loaded before it); truncated, corrupt or foreign files are
// clear errors; and the kill test: tests/checkpoint_child.cpp SIGKILLed at random moments and
// restarted ends with weights bit-identical to an uninterrupted run.
// Not here: the safetensors format itself (test_serialize.cpp) or each state_dict (test_optim*).
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "brisk.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "engine/serialize.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "test_util.h"
#include "tests/paths.h"
#include "train/checkpoint.h"

extern char** environ;

using namespace brisk;
namespace fs = std::filesystem;

namespace {

struct CkptDir {
  fs::path path;
  CkptDir() {
    std::string tmpl = (fs::temp_directory_path() / "brisk-ckpt-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~CkptDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.numel()) * dtype_size(ca.dtype())) == 0;
}

bool bit_equal(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || !bit_equal(a[i].second, b[i].second)) return false;
  }
  return true;
}

std::shared_ptr<data::TensorDataset> toy_dataset() {
  const int64_t n = 64;
  std::vector<double> xs(static_cast<size_t>(n * 8)), ys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 8; ++j) xs[size_t(i * 8 + j)] = std::cos(0.3 * double(i * 8 + j));
    ys[size_t(i)] = double(i % 4);
  }
  return std::make_shared<data::TensorDataset>(from_vector(xs, {n, 8}), from_vector(ys, {n}, DType::I64));
}

// A model, optimizer, schedule and loader, as a training script builds them.
struct Run {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::StepLR> sched;
  optim::ReduceLROnPlateau* plateau = nullptr;
  std::unique_ptr<optim::ReduceLROnPlateau> plateau_owner;
  optim::EarlyStopping stopping;
  std::unique_ptr<data::DataLoader> loader;

  explicit Run(int64_t hidden = 16) {
    model->push_back(std::make_shared<nn::Linear>(8, hidden));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Dropout>(0.3));
    model->push_back(std::make_shared<nn::Linear>(hidden, 4));
    opt = std::make_unique<optim::Adam>(model->named_parameters(), optim::AdamOptions{.lr = 0.01, .amsgrad = true});
    sched = std::make_unique<optim::StepLR>(*opt, 3, 0.5);
    plateau_owner = std::make_unique<optim::ReduceLROnPlateau>(*opt);
    plateau = plateau_owner.get();
    data::LoaderOptions lo;
    lo.batch_size = 8;
    lo.shuffle = true;
    lo.seed = 5;
    loader = std::make_unique<data::DataLoader>(toy_dataset(), lo);
  }

  training::TrainingState state() {
    training::TrainingState s;
    s.model = model.get();
    s.optimizer = opt.get();
    s.scheduler = sched.get();
    s.plateau = plateau;
    s.early_stopping = &stopping;
    s.loader = loader.get();
    return s;
  }

  // n training steps; the scheduler steps at each epoch's end.
  void train(int n) {
    for (int i = 0; i < n;) {
      auto batch = loader->next();
      if (!batch) {
        sched->step();
        plateau->step(1.0);
        stopping.step(1.0 / double(i + 1));
        continue;
      }
      opt->zero_grad();
      nn::functional::cross_entropy((*model)(batch->input), batch->target).backward();
      opt->step();
      ++i;
    }
  }
};

}  // namespace

TEST_CASE("checkpoint: a round trip restores every state and training continues bit for bit") {
  CkptDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  manual_seed(42);
  Run a;
  a.train(19);  // two epochs and a bit: mid-epoch loader position, stepped schedules
  training::TrainingState sa = a.state();
  sa.epoch = 2;
  sa.step = 19;
  sa.user_metadata = {{"note", "hello \"world\""}, {"run", "7"}};
  training::save_checkpoint(path, sa);
  const uint64_t seed = default_generator().seed(), offset = default_generator().offset();

  // A fresh run built with other random numbers, then loaded.
  manual_seed(999);
  Run b;
  training::TrainingState sb = b.state();
  training::load_checkpoint(path, sb);
  CHECK(sb.epoch == 2);
  CHECK(sb.step == 19);
  CHECK(sb.user_metadata == sa.user_metadata);
  CHECK(default_generator().seed() == seed);
  CHECK(default_generator().offset() == offset);
  CHECK(bit_equal(a.model->state_dict(), b.model->state_dict()));
  optim::OptimizerState oa = a.opt->state_dict(), ob = b.opt->state_dict();
  CHECK(bit_equal(oa.tensors, ob.tensors));
  CHECK(oa.scalars == ob.scalars);
  CHECK(a.sched->state_dict() == b.sched->state_dict());
  CHECK(a.plateau->state_dict() == b.plateau->state_dict());
  CHECK(a.stopping.state_dict() == b.stopping.state_dict());
  CHECK(a.loader->state().epoch == b.loader->state().epoch);
  CHECK(a.loader->state().batch == b.loader->state().batch);

  // Both continue identically (dropout draws, batch order, learning rates, Adam moments).
  a.train(13);
  Generator after_a = default_generator();
  training::load_checkpoint(path, sb);
  b.train(13);
  CHECK(default_generator().offset() == after_a.offset());
  CHECK(bit_equal(a.model->state_dict(), b.model->state_dict()));
  CHECK(bit_equal(a.opt->state_dict().tensors, b.opt->state_dict().tensors));

  // The file is plain safetensors: weights load without brisk's checkpoint code.
  SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata.count(training::kCheckpointMetadataKey) == 1);
  bool has_weight = false, has_moment = false;
  for (auto& [k, t] : f.tensors) {
    has_weight |= k == "model.0.weight";
    has_moment |= k == "optimizer.state.0.weight.exp_avg";
  }
  CHECK(has_weight);
  CHECK(has_moment);
}

TEST_CASE("checkpoint: optional parts are left out and a model-only load ignores the optimizer") {
  CkptDir dir;
  const std::string path = dir.file("c.safetensors");
  manual_seed(1);
  Run a;
  a.train(3);
  training::save_checkpoint(path, a.state());
  Run b;
  training::TrainingState only_model;
  only_model.model = b.model.get();
  only_model.rng = false;
  const uint64_t offset = default_generator().offset();
  training::load_checkpoint(path, only_model);
  CHECK(bit_equal(a.model->state_dict(), b.model->state_dict()));
  CHECK(default_generator().offset() == offset);

  // Non-finite scalars (a plateau's and an early stopper's best before any metric is +inf).
  Run fresh;
  training::save_checkpoint(path, fresh.state());
  Run stepped;
  stepped.plateau->step(0.5);
  stepped.stopping.step(0.5);
  training::TrainingState st = stepped.state();
  training::load_checkpoint(path, st);
  CHECK(std::isinf(stepped.plateau->best()));
  CHECK(stepped.plateau->best() > 0);
  CHECK(stepped.stopping.best() == fresh.stopping.best());
  CHECK(stepped.stopping.best_epoch() == -1);

  // Saved without an optimizer, loaded with one: the optimizer part is missing.
  training::TrainingState save_model_only;
  save_model_only.model = a.model.get();
  training::save_checkpoint(path, save_model_only);
  training::TrainingState sb = b.state();
  std::string msg = test::error_text([&] { training::load_checkpoint(path, sb); });
  CHECK(msg.find("'optimizer' is missing") != std::string::npos);
  CHECK(msg.find(path) != std::string::npos);
}

TEST_CASE("checkpoint: an incompatible model, optimizer or schedule is refused, naming the key") {
  CkptDir dir;
  const std::string path = dir.file("good.safetensors");
  manual_seed(3);
  Run a;
  a.train(5);
  training::save_checkpoint(path, a.state());
  const std::string good_bytes = slurp(path);

  // A wider hidden layer: the first mis-shaped key is named, and nothing is changed.
  Run wide(32);
  NamedTensors before = wide.model->state_dict();
  NamedTensors snapshot;
  for (auto& [k, t] : before) snapshot.emplace_back(k, t.clone());
  optim::OptimizerState opt_before = wide.opt->state_dict();
  optim::Scalars sched_before = wide.sched->state_dict();
  const uint64_t offset_before = default_generator().offset();
  training::TrainingState sw = wide.state();
  std::string msg = test::error_text([&] { training::load_checkpoint(path, sw); });
  CHECK(msg.find("'model.0.weight'") != std::string::npos);
  CHECK(msg.find("(16, 8)") != std::string::npos);
  CHECK(msg.find(path) != std::string::npos);
  CHECK(bit_equal(snapshot, wide.model->state_dict()));
  CHECK(wide.opt->state_dict().scalars == opt_before.scalars);
  CHECK(wide.sched->state_dict() == sched_before);
  CHECK(default_generator().offset() == offset_before);
  CHECK(slurp(path) == good_bytes);  // the good checkpoint is untouched

  // A model with a layer more: the missing key is named.
  Run deeper;
  deeper.model->push_back(std::make_shared<nn::Linear>(4, 4));
  training::TrainingState sd = deeper.state();
  sd.optimizer = nullptr;
  msg = test::error_text([&] { training::load_checkpoint(path, sd); });
  CHECK(msg.find("'model.4.weight' is missing") != std::string::npos);

  // A model with a layer less: the unexpected key is named.
  auto shallow = std::make_shared<nn::Sequential>();
  shallow->push_back(std::make_shared<nn::Linear>(8, 16));
  training::TrainingState ss;
  ss.model = shallow.get();
  msg = test::error_text([&] { training::load_checkpoint(path, ss); });
  CHECK(msg.find("'model.3.weight' is unexpected") != std::string::npos);

  // Another optimizer kind.
  Run other;
  optim::SGD sgd(other.model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  training::TrainingState so;
  so.model = other.model.get();
  so.optimizer = &sgd;
  msg = test::error_text([&] { training::load_checkpoint(path, so); });
  CHECK(msg.find("\"Adam\" in the checkpoint but SGD") != std::string::npos);

  // The same optimizer over differently named parameters.
  auto renamed = std::make_shared<nn::Sequential>();
  renamed->push_back("fc1", std::make_shared<nn::Linear>(8, 16));
  optim::Adam adam2(renamed->named_parameters(), {.lr = 0.01, .amsgrad = true});
  training::TrainingState sr;
  sr.model = other.model.get();
  sr.optimizer = &adam2;
  msg = test::error_text([&] { training::load_checkpoint(path, sr); });
  CHECK(msg.find("'group.0.num_params'") != std::string::npos);

  // Another schedule kind: its keys differ.
  Run sched_run;
  optim::CosineAnnealingWarmRestarts warm(*sched_run.opt, 5);
  training::TrainingState sc = sched_run.state();
  sc.scheduler = &warm;
  msg = test::error_text([&] { training::load_checkpoint(path, sc); });
  CHECK(msg.find("scheduler key 'T_cur' is missing") != std::string::npos);
}

namespace {

// Everything a failed load must leave as it was.
struct Snapshot {
  NamedTensors model, opt_tensors;
  optim::Scalars opt_scalars, sched, plateau, stopping;
  data::LoaderState loader;
  uint64_t seed = 0, offset = 0;

  explicit Snapshot(Run& r) {
    for (auto& [k, t] : r.model->state_dict()) model.emplace_back(k, t.clone());
    optim::OptimizerState os = r.opt->state_dict();
    for (auto& [k, t] : os.tensors) opt_tensors.emplace_back(k, t.clone());
    opt_scalars = os.scalars;
    sched = r.sched->state_dict();
    plateau = r.plateau->state_dict();
    stopping = r.stopping.state_dict();
    loader = r.loader->state();
    seed = default_generator().seed();
    offset = default_generator().offset();
  }
  bool same_as(Run& r) const {
    optim::OptimizerState os = r.opt->state_dict();
    return bit_equal(model, r.model->state_dict()) && bit_equal(opt_tensors, os.tensors) && opt_scalars == os.scalars &&
           sched == r.sched->state_dict() && plateau == r.plateau->state_dict() &&
           stopping == r.stopping.state_dict() && loader.epoch == r.loader->state().epoch &&
           loader.batch == r.loader->state().batch && seed == default_generator().seed() &&
           offset == default_generator().offset();
  }
};

// The metadata with the number at <section>.<key> replaced by `value`.
std::string with_value(std::string meta, const std::string& section, const std::string& key, const std::string& value) {
  const size_t at = meta.find("\"" + section + "\":{");
  REQUIRE(at != std::string::npos);
  const size_t k = meta.find("\"" + key + "\":", at);
  REQUIRE(k != std::string::npos);
  const size_t num = k + key.size() + 3, end = meta.find_first_of(",}", num);
  meta.replace(num, end - num, value);
  return meta;
}

}  // namespace

TEST_CASE("checkpoint: a bad part refused by its own check changes no part, not even the ones loaded first") {
  CkptDir dir;
  const std::string path = dir.file("good.safetensors"), bad = dir.file("bad.safetensors");
  manual_seed(8);
  Run a;
  a.train(21);
  training::save_checkpoint(path, a.state());
  SafetensorsFile f = load_safetensors(path);
  const std::string meta = f.metadata.at(training::kCheckpointMetadataKey);

  manual_seed(9);
  Run b;
  b.train(10);
  training::TrainingState sb = b.state();
  const Snapshot before(b);
  struct Case {
    const char *section, *key, *value, *expect;
  };
  for (const Case& c : {Case{"loader", "batch", "999", "loader position"},
                        Case{"early_stopping", "epoch", "2.5", "early_stopping state"},
                        Case{"plateau", "num_bad_epochs", "1e300", "plateau state"},
                        Case{"scheduler", "last_epoch", "\"nan\"", "scheduler state"}}) {
    CAPTURE(c.section);
    save_safetensors(bad, f.tensors, {{training::kCheckpointMetadataKey, with_value(meta, c.section, c.key, c.value)}});
    const std::string msg = test::error_text([&] { training::load_checkpoint(bad, sb); });
    CHECK(msg.find(c.expect) != std::string::npos);
    CHECK(msg.find(bad) != std::string::npos);
    CHECK(before.same_as(b));  // the optimizer is loaded first, yet nothing changed
  }
  training::load_checkpoint(path, sb);  // and the good file still loads
  CHECK(bit_equal(a.model->state_dict(), b.model->state_dict()));
}

TEST_CASE("checkpoint: each part's check_state_dict changes nothing, and a refused load_state_dict neither") {
  manual_seed(10);
  Run a, b;
  a.train(12);
  b.train(3);
  const Snapshot before(b);
  b.opt->check_state_dict(a.opt->state_dict());
  b.sched->check_state_dict(a.sched->state_dict());
  b.plateau->check_state_dict(a.plateau->state_dict());
  b.stopping.check_state_dict(a.stopping.state_dict());
  b.loader->check_state(a.loader->state());
  CHECK(before.same_as(b));

  // The optimizer's check is strict: an unknown key or a missing option is refused.
  optim::OptimizerState extra = a.opt->state_dict();
  extra.scalars["momentum"] = 0.9;
  CHECK_THROWS_WITH_AS(b.opt->load_state_dict(extra), doctest::Contains("unexpected scalar key 'momentum'"), Error);
  optim::OptimizerState no_lr = a.opt->state_dict();
  no_lr.scalars.erase("group.0.lr");
  CHECK_THROWS_WITH_AS(b.opt->load_state_dict(no_lr), doctest::Contains("key 'group.0.lr' is missing"), Error);
  // A counter that is not whole, after keys that load fine: nothing of it is applied.
  optim::Scalars stop = a.stopping.state_dict();
  stop["num_bad_epochs"] = 2.5;
  CHECK_THROWS_WITH_AS(b.stopping.load_state_dict(stop), doctest::Contains("not a whole number"), Error);
  optim::Scalars plat = a.plateau->state_dict();
  plat["last_epoch"] = 1e300;
  CHECK_THROWS_WITH_AS(b.plateau->load_state_dict(plat), doctest::Contains("not a whole number"), Error);
  CHECK_THROWS_WITH_AS(b.loader->load_state({0, 9}), doctest::Contains("8 batches per epoch"), Error);
  CHECK(before.same_as(b));
}

TEST_CASE("checkpoint: truncated, corrupt and foreign files are clear errors") {
  CkptDir dir;
  const std::string path = dir.file("c.safetensors");
  manual_seed(4);
  Run a;
  a.train(2);
  training::save_checkpoint(path, a.state());
  const std::string bytes = slurp(path);
  const std::string bad = dir.file("bad.safetensors");

  Run b;
  training::TrainingState sb = b.state();
  for (size_t cut : {size_t(0), size_t(5), size_t(8), size_t(20), bytes.size() / 2, bytes.size() - 1}) {
    CAPTURE(cut);
    spit(bad, bytes.substr(0, cut));
    std::string msg = test::error_text([&] { training::load_checkpoint(bad, sb); });
    CHECK(!msg.empty());
    CHECK(msg.find(bad) != std::string::npos);
  }

  // Garbage in the header JSON.
  std::string garbled = bytes;
  garbled[10] = '\x01';
  spit(bad, garbled);
  CHECK(test::error_text([&] { training::load_checkpoint(bad, sb); }).find(bad) != std::string::npos);

  // A flipped bit in the tensor data (the last bytes belong to the last tensor written).
  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 0x10;
  spit(bad, flipped);
  std::string crc_msg = test::error_text([&] { training::load_checkpoint(bad, sb); });
  CHECK(crc_msg.find("fails its CRC-32 check") != std::string::npos);
  CHECK(crc_msg.find("'optimizer.state.") != std::string::npos);

  // A weights-only safetensors file is not a training checkpoint.
  save_safetensors(bad, a.model->state_dict());
  CHECK(test::error_text([&] { training::load_checkpoint(bad, sb); }).find("not a brisk training checkpoint") !=
        std::string::npos);

  // Metadata from another version, or broken JSON, or a missing field.
  SafetensorsFile f = load_safetensors(path);
  std::string meta = f.metadata.at(training::kCheckpointMetadataKey);
  auto with_meta = [&](const std::string& m) {
    save_safetensors(bad, f.tensors, {{training::kCheckpointMetadataKey, m}});
    return test::error_text([&] { training::load_checkpoint(bad, sb); });
  };
  std::string v2 = meta;
  v2.replace(v2.find("\"version\":1"), 11, "\"version\":2");
  CHECK(with_meta(v2).find("version 2 is not supported") != std::string::npos);
  CHECK(with_meta("{not json").find("not valid JSON") != std::string::npos);
  std::string no_rng = meta;
  no_rng.replace(no_rng.find("\"rng\""), 5, "\"gnr\"");
  CHECK(with_meta(no_rng).find("'rng' is missing") != std::string::npos);
  std::string bad_loader = meta;
  size_t at = bad_loader.find("\"batch\":");
  bad_loader.replace(at, 8, "\"batch\":9");
  CHECK(with_meta(bad_loader).find("loader position") != std::string::npos);
  // A saved counter that is not a whole number: casting it to an integer would be undefined.
  for (const char* value : {"1e300", "2.5", "-1e30", "\"nan\""}) {
    CAPTURE(value);
    std::string bad_step = meta;
    const size_t st = bad_step.find(".step\":");
    REQUIRE(st != std::string::npos);
    const size_t num = st + 7, end = bad_step.find_first_of(",}", num);
    bad_step.replace(num, end - num, value);
    CHECK(with_meta(bad_step).find("not a whole number") != std::string::npos);
  }

  // A save that fails (a user string that is not UTF-8) leaves the previous file as it was.
  training::TrainingState sa = a.state();
  sa.user_metadata["bad"] = "\xff";
  CHECK(test::error_text([&] { training::save_checkpoint(path, sa); }).find("cannot be written as JSON") !=
        std::string::npos);

  // None of it touched the good file or the objects' ability to load it.
  CHECK(slurp(path) == bytes);
  training::load_checkpoint(path, sb);
  CHECK(bit_equal(a.model->state_dict(), b.model->state_dict()));
}

namespace {

// Starts the child; returns its pid.
pid_t spawn_child(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string exe = brisk::test::checkpoint_child().string();
  argv.push_back(exe.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ);
  REQUIRE_MESSAGE(rc == 0, "posix_spawn ", exe, ": ", std::strerror(rc));
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

TEST_CASE("checkpoint: a run SIGKILLed at random moments and restarted ends bit-identical") {
  CkptDir dir;
  const std::string steps = "120", every = "7";

  // The uninterrupted reference.
  auto t0 = std::chrono::steady_clock::now();
  int status = wait_child(spawn_child({dir.file("ref.ckpt"), dir.file("ref.out"), "--steps", steps, "--every", every}));
  const double ref_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const std::string ref = slurp(dir.file("ref.out"));
  REQUIRE(!ref.empty());

  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  INFO("kill schedule seed ", seed, ", reference run ", ref_s, " s");
  const std::string ckpt = dir.file("run.ckpt"), out = dir.file("run.out");
  std::vector<std::string> args = {ckpt, out, "--steps", steps, "--every", every};

  // 1) The child kills itself after a random step (right before or after a checkpoint).
  std::vector<std::string> die = args;
  die.push_back("--die-at");
  die.push_back(std::to_string(std::uniform_int_distribution<int>(1, 119)(rng)));
  status = wait_child(spawn_child(die));
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));

  // 2) SIGKILL from outside at random moments (during startup, a step or a checkpoint write);
  //    every checkpoint left behind must load. Then run to completion.
  int kills = 0, attempts = 0;
  while (true) {
    REQUIRE(attempts++ < 40);
    pid_t pid = spawn_child(args);
    if (attempts <= 6) {
      // Most of a run is its checkpoint writes (fsync): most kills land inside one.
      std::this_thread::sleep_for(
          std::chrono::duration<double>(std::uniform_real_distribution<double>(0.0, 0.6)(rng) * ref_s));
      ::kill(pid, SIGKILL);
    }
    status = wait_child(pid);
    if (WIFSIGNALED(status)) {
      REQUIRE(WTERMSIG(status) == SIGKILL);
      ++kills;
      if (fs::exists(ckpt)) CHECK_NOTHROW(load_safetensors(ckpt));  // never a torn file
      continue;
    }
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    break;
  }
  INFO("SIGKILLs from outside: ", kills);
  CHECK(slurp(out) == ref);  // the final weights, bit for bit
}
