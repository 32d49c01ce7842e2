// optim/checkpoint.cpp: save_checkpoint / load_checkpoint over engine/serialize.h (the atomic
// safetensors writer and the validating reader) and nlohmann-json for the metadata. Loading is
// two passes: check everything against the live objects, then apply; the second pass only
// calls load functions whose own checks the first pass has already made. Not here: the
// safetensors format itself or any object's state_dict.
#include "optim/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>
#include <zlib.h>

#include "data/dataloader.h"
#include "engine/error.h"
#include "engine/grad_mode.h"
#include "engine/random.h"
#include "engine/serialize.h"

namespace brisk::optim {

namespace {

using Json = nlohmann::json;

constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";

// Finite doubles as JSON numbers (nlohmann writes the shortest form that reads back exactly);
// non-finite ones as strings, which JSON has no numbers for.
Json scalar_to_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

Json scalars_to_json(const Scalars& s) {
  Json out = Json::object();
  for (const auto& [k, v] : s) out[k] = scalar_to_json(v);
  return out;
}

// CRC-32 of a tensor's bytes as the file holds them (row-major, little-endian host order).
// safetensors has no checksum of its own: without this a flipped data byte would load silently.
uint64_t tensor_crc(const Tensor& t) {
  NoGradGuard no_grad;
  Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const Bytef*>(c.data_ptr());
  size_t n = size_t(c.numel()) * c.element_size();
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    uInt chunk = uInt(std::min<size_t>(n, size_t(1) << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return uint64_t(crc);
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string qualified(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

// Everything load_checkpoint reads, parsed and checked before anything is applied.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& what) const {
    BRISK_FAIL("load_checkpoint: ", path_, ": ", what);
  }

  const Json& member(const Json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object()) fail("'" + where + "' is not a JSON object");
    auto it = obj.find(key);
    if (it == obj.end()) fail("metadata key '" + qualified(where, key) + "' is missing");
    return *it;
  }

  int64_t integer(const Json& obj, const char* key, const std::string& where) const {
    const Json& v = member(obj, key, where);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail("metadata key '" + qualified(where, key) + "' is not a 64-bit integer but " + v.dump());
    return v.get<int64_t>();
  }

  uint64_t unsigned_integer(const Json& obj, const char* key, const std::string& where) const {
    const Json& v = member(obj, key, where);
    if (!v.is_number_unsigned()) fail("metadata key '" + qualified(where, key) + "' is not a non-negative integer");
    return v.get<uint64_t>();
  }

  Scalars scalars(const Json& obj, const std::string& where) const {
    if (!obj.is_object()) fail("metadata key '" + where + "' is not a JSON object");
    Scalars out;
    for (const auto& [k, v] : obj.items()) {
      if (v.is_number()) {
        out[k] = v.get<double>();
        // Checked here, in pass 1, so that no load_state_dict of pass 2 throws (optimizer.h).
        if (is_count_key(k) && !is_count_value(out[k]))
          fail("metadata key '" + qualified(where, k) + "' is " + v.dump() + ", not a whole number");
      } else if (v.is_string() && (v == "nan" || v == "inf" || v == "-inf")) {
        const std::string s = v.get<std::string>();
        out[k] = s == "nan" ? std::numeric_limits<double>::quiet_NaN()
                 : s == "inf" ? std::numeric_limits<double>::infinity()
                              : -std::numeric_limits<double>::infinity();
      } else {
        fail("metadata key '" + qualified(where, k) + "' is not a number");
      }
    }
    return out;
  }

  // The saved scalars of an object must have exactly the keys the live object has (same kind,
  // same configuration); the first difference is named.
  void check_same_keys(const Scalars& saved, const Scalars& live, const std::string& where) const {
    for (const auto& [k, v] : live) {
      if (!saved.count(k)) fail(where + " key '" + k + "' is missing (a different " + where + "?)");
    }
    for (const auto& [k, v] : saved) {
      if (!live.count(k)) fail(where + " key '" + k + "' is unexpected (a different " + where + "?)");
    }
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

void save_checkpoint(const std::string& path, const TrainingState& state) {
  BRISK_CHECK(state.model != nullptr, "save_checkpoint: ", path, ": TrainingState.model is null");
  NamedTensors tensors;
  for (auto& [name, t] : state.model->state_dict()) tensors.emplace_back(kModelPrefix + name, t);

  Json meta = Json::object();
  meta["format"] = kCheckpointMetadataKey;
  meta["version"] = kCheckpointVersion;
  meta["epoch"] = state.epoch;
  meta["step"] = state.step;
  if (state.optimizer) {
    OptimizerState os = state.optimizer->state_dict();
    for (auto& [key, t] : os.tensors) tensors.emplace_back(kOptimizerPrefix + key, t);
    meta["optimizer"] = {{"name", state.optimizer->name()}, {"scalars", scalars_to_json(os.scalars)}};
  }
  if (state.scheduler) meta["scheduler"] = scalars_to_json(state.scheduler->state_dict());
  if (state.plateau) meta["plateau"] = scalars_to_json(state.plateau->state_dict());
  if (state.early_stopping) meta["early_stopping"] = scalars_to_json(state.early_stopping->state_dict());
  if (state.rng) {
    const Generator& g = default_generator();
    meta["rng"] = {{"seed", g.seed()}, {"offset", g.offset()}};
  }
  if (state.loader) {
    data::LoaderState ls = state.loader->state();
    meta["loader"] = {{"epoch", ls.epoch}, {"batch", ls.batch}};
  }
  meta["user"] = state.user_metadata;
  Json crcs = Json::object();
  for (const auto& [key, t] : tensors) crcs[key] = tensor_crc(t);
  meta["crc32"] = std::move(crcs);

  std::string text;
  try {
    text = meta.dump();
  } catch (const Json::exception& e) {  // invalid UTF-8 in a user string
    BRISK_FAIL("save_checkpoint: ", path, ": metadata cannot be written as JSON: ", e.what());
  }
  save_safetensors(path, tensors, {{kCheckpointMetadataKey, text}});
}

void load_checkpoint(const std::string& path, TrainingState& state) {
  Reader L(path);
  if (state.model == nullptr) L.fail("TrainingState.model is null");

  // The safetensors layer checks the header, every entry and every size.
  SafetensorsFile file = load_safetensors(path);

  // ---- pass 1: parse and check everything
  auto mit = file.metadata.find(kCheckpointMetadataKey);
  if (mit == file.metadata.end())
    L.fail(std::string("not a brisk training checkpoint (no \"") + kCheckpointMetadataKey + "\" metadata entry)");
  Json meta;
  try {
    meta = Json::parse(mit->second);
  } catch (const Json::exception& e) {
    L.fail(std::string("metadata \"") + kCheckpointMetadataKey + "\" is not valid JSON: " + e.what());
  }
  if (!meta.is_object()) L.fail(std::string("metadata \"") + kCheckpointMetadataKey + "\" is not a JSON object");
  const Json& format = L.member(meta, "format", "");
  if (format != kCheckpointMetadataKey) L.fail("metadata key 'format' is " + format.dump() + ", not \"brisk.checkpoint\"");
  int64_t version = L.integer(meta, "version", "");
  if (version != kCheckpointVersion)
    L.fail("checkpoint format version " + std::to_string(version) + " is not supported (this build reads version " +
           std::to_string(kCheckpointVersion) + ")");
  const int64_t epoch = L.integer(meta, "epoch", "");
  const int64_t step = L.integer(meta, "step", "");

  // Every tensor intact (and none added or lost since it was written).
  const Json& crcs = L.member(meta, "crc32", "");
  if (!crcs.is_object()) L.fail("metadata key 'crc32' is not a JSON object");
  for (const auto& [key, t] : file.tensors) {
    auto it = crcs.find(key);
    if (it == crcs.end()) L.fail("tensor '" + key + "' has no checksum in the metadata");
    if (!it->is_number_unsigned() || it->get<uint64_t>() != tensor_crc(t))
      L.fail("tensor '" + key + "' fails its CRC-32 check: the file is corrupt");
  }
  if (crcs.size() != file.tensors.size()) {
    for (const auto& [key, v] : crcs.items()) {
      bool found = false;
      for (const auto& [k, t] : file.tensors) found |= k == key;
      if (!found) L.fail("tensor '" + key + "' is missing from the file");
    }
  }

  // Split the tensors by owner.
  NamedTensors model_tensors;
  OptimizerState opt_state;
  std::map<std::string, const Tensor*> model_by_name;
  for (auto& [key, t] : file.tensors) {
    if (starts_with(key, kModelPrefix)) {
      model_tensors.emplace_back(key.substr(6), t);
    } else if (starts_with(key, kOptimizerPrefix)) {
      opt_state.tensors.emplace_back(key.substr(10), t);
    } else {
      L.fail("unexpected tensor '" + key + "' (neither model.* nor optimizer.*)");
    }
  }
  for (auto& [name, t] : model_tensors) model_by_name[name] = &t;

  // Model: every key present with the same shape, nothing extra.
  NamedTensors live_model = state.model->state_dict();
  std::set<std::string> live_names;
  for (const auto& [name, t] : live_model) {
    live_names.insert(name);
    auto it = model_by_name.find(name);
    if (it == model_by_name.end()) L.fail("model key 'model." + name + "' is missing (a different model?)");
    if (it->second->sizes() != t.sizes())
      L.fail(detail::cat("model key 'model.", name, "' has shape ", it->second->sizes(), " but the model has ",
                         t.sizes()));
  }
  for (const auto& [name, t] : model_tensors) {
    if (!live_names.count(name)) L.fail("model key 'model." + name + "' is unexpected (a different model?)");
  }

  // Optimizer: same kind, same groups and parameter names, buffers shaped like their parameters.
  if (state.optimizer) {
    Optimizer& opt = *state.optimizer;
    const Json& o = L.member(meta, "optimizer", "");
    const Json& name = L.member(o, "name", "optimizer");
    if (!name.is_string() || name.get<std::string>() != opt.name())
      L.fail("optimizer is " + name.dump() + " in the checkpoint but " + opt.name() + " here");
    opt_state.scalars = L.scalars(L.member(o, "scalars", "optimizer"), "optimizer.scalars");
    const Scalars& s = opt_state.scalars;
    auto need = [&](const std::string& key) {
      auto it = s.find(key);
      if (it == s.end()) L.fail("optimizer key '" + key + "' is missing");
      return it->second;
    };
    if (need("num_groups") != double(opt.num_groups()))
      L.fail(detail::cat("optimizer key 'num_groups' is ", need("num_groups"), " but the optimizer has ",
                         opt.num_groups(), " groups"));
    std::map<std::string, const Tensor*> params;
    Scalars live = opt.state_dict().scalars;
    for (size_t g = 0; g < opt.num_groups(); ++g) {
      const ParamGroup& group = opt.group(g);
      std::string prefix = "group." + std::to_string(g) + ".";
      if (need(prefix + "num_params") != double(group.params.size()))
        L.fail(detail::cat("optimizer key '", prefix, "num_params' is ", need(prefix + "num_params"),
                           " but the group has ", group.params.size(), " parameters"));
      for (size_t i = 0; i < group.params.size(); ++i) params[group.names[i]] = &group.params[i];
      // Every option of the group (not the schedulers' extras, which the file may or may not have).
      for (auto it = live.lower_bound(prefix); it != live.end() && starts_with(it->first, prefix); ++it) {
        if (group.extras.count(it->first.substr(prefix.size()))) continue;
        need(it->first);
      }
    }
    for (const auto& [key, value] : s) {
      if (key == "num_groups") continue;
      if (starts_with(key, "group.")) {
        size_t dot = key.find('.', 6);
        std::string g = key.substr(6, dot == std::string::npos ? std::string::npos : dot - 6);
        if (dot == std::string::npos || g.empty() || g.size() > 9 || g.find_first_not_of("0123456789") != std::string::npos ||
            std::stoull(g) >= opt.num_groups())
          L.fail("optimizer key '" + key + "' is unexpected");
        continue;
      }
      size_t dot = key.rfind('.');
      if (!starts_with(key, "state.") || dot == std::string::npos || dot <= 6 || key.substr(dot + 1) != "step")
        L.fail("optimizer key '" + key + "' is unexpected");
      if (!params.count(key.substr(6, dot - 6)))
        L.fail("optimizer key '" + key + "' is for a parameter the optimizer does not have");
    }
    for (const auto& [key, t] : opt_state.tensors) {
      size_t dot = key.rfind('.');
      if (!starts_with(key, "state.") || dot == std::string::npos || dot <= 6)
        L.fail("tensor 'optimizer." + key + "' is unexpected");
      auto it = params.find(key.substr(6, dot - 6));
      if (it == params.end())
        L.fail("tensor 'optimizer." + key + "' is for a parameter the optimizer does not have");
      if (t.sizes() != it->second->sizes())
        L.fail(detail::cat("tensor 'optimizer.", key, "' has shape ", t.sizes(), " but the parameter has ",
                           it->second->sizes()));
    }
  } else if (!opt_state.tensors.empty()) {
    // Saved with an optimizer, loaded without one: the model part is still usable; ignore it.
    opt_state.tensors.clear();
  }

  Scalars scheduler_state, plateau_state, stopping_state;
  if (state.scheduler) {
    scheduler_state = L.scalars(L.member(meta, "scheduler", ""), "scheduler");
    L.check_same_keys(scheduler_state, state.scheduler->state_dict(), "scheduler");
  }
  if (state.plateau) {
    plateau_state = L.scalars(L.member(meta, "plateau", ""), "plateau");
    L.check_same_keys(plateau_state, state.plateau->state_dict(), "plateau");
  }
  if (state.early_stopping) {
    stopping_state = L.scalars(L.member(meta, "early_stopping", ""), "early_stopping");
    L.check_same_keys(stopping_state, state.early_stopping->state_dict(), "early_stopping");
  }

  uint64_t rng_seed = 0, rng_offset = 0;
  if (state.rng) {
    const Json& r = L.member(meta, "rng", "");
    rng_seed = L.unsigned_integer(r, "seed", "rng");
    rng_offset = L.unsigned_integer(r, "offset", "rng");
  }

  data::LoaderState loader_state;
  if (state.loader) {
    const Json& l = L.member(meta, "loader", "");
    loader_state.epoch = L.integer(l, "epoch", "loader");
    loader_state.batch = L.integer(l, "batch", "loader");
    if (loader_state.epoch < 0 || loader_state.batch < 0 || loader_state.batch > state.loader->num_batches())
      L.fail(detail::cat("loader position (epoch ", loader_state.epoch, ", batch ", loader_state.batch,
                         ") is invalid for a loader of ", state.loader->num_batches(), " batches per epoch"));
  }

  std::map<std::string, std::string> user;
  if (auto it = meta.find("user"); it != meta.end()) {
    if (!it->is_object()) L.fail("metadata key 'user' is not a JSON object");
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string()) L.fail("metadata key 'user." + k + "' is not a string");
      user[k] = v.get<std::string>();
    }
  }

  // ---- pass 2: apply. Each call below re-checks what pass 1 checked, so none throws for a
  // reason pass 1 missed (the optimizer first: its own checks are the strictest).
  if (state.optimizer) state.optimizer->load_state_dict(opt_state);
  state.model->load_state_dict(model_tensors, /*strict=*/true);
  if (state.scheduler) state.scheduler->load_state_dict(scheduler_state);
  if (state.plateau) state.plateau->load_state_dict(plateau_state);
  if (state.early_stopping) state.early_stopping->load_state_dict(stopping_state);
  if (state.rng) {
    default_generator().manual_seed(rng_seed);
    default_generator().set_offset(rng_offset);
  }
  if (state.loader) state.loader->load_state(loader_state);
  state.epoch = epoch;
  state.step = step;
  state.user_metadata = std::move(user);
}

}  // namespace brisk::optim
