// train/checkpoint.cpp: save_checkpoint / load_checkpoint over engine/serialize.h (the atomic
// safetensors writer and the validating reader) and nlohmann-json for the metadata. Loading is
// three steps (Note [Parse, validate, load]). Not here: the safetensors format itself, or what
// any object's state holds and which states it accepts (each object's check_state_dict).
#include "train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "data/dataloader.h"
#include "engine/error.h"
#include "engine/grad_mode.h"
#include "engine/random.h"
#include "engine/serialize.h"

namespace brisk::training {

namespace {

using Json = nlohmann::json;
using optim::OptimizerState;
using optim::Scalars;

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

// Reads typed values out of the metadata; every failure names the file and the key.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& what) const { BRISK_FAIL("load_checkpoint: ", path_, ": ", what); }

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

  // Numbers, or "nan" / "inf" / "-inf". Whether a value suits its key (a whole-number counter,
  // say) is for the owning object's check_state_dict to say.
  Scalars scalars(const Json& obj, const std::string& where) const {
    if (!obj.is_object()) fail("metadata key '" + where + "' is not a JSON object");
    Scalars out;
    for (const auto& [k, v] : obj.items()) {
      if (v.is_number()) {
        out[k] = v.get<double>();
      } else if (v.is_string() && (v == "nan" || v == "inf" || v == "-inf")) {
        const std::string s = v.get<std::string>();
        out[k] = s == "nan"   ? std::numeric_limits<double>::quiet_NaN()
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

  // Runs an object's own check of its saved state; its refusal becomes this file's error.
  template <class Check>
  void check_part(const char* part, Check&& check) const {
    try {
      check();
    } catch (const Error& e) {
      fail(std::string(part) + ": " + e.what());
    }
  }

 private:
  std::string path_;
};

// Note [Parse, validate, load]
// load_checkpoint reads the file into a Saved (parse: JSON types, format, version, checksums,
// which tensor belongs to whom), checks every part against the object it is meant for
// (validate: the model's keys and shapes here, everything else through the object's own
// check_state_dict / check_state, none of which changes anything), and only then loads every
// part. Each load_state_dict runs its own check again first, and its check has already
// passed, so no part is half-applied because a later part is bad.
struct Saved {
  int64_t epoch = 0;
  int64_t step = 0;
  NamedTensors model;
  Json optimizer_name;
  OptimizerState optimizer;
  Scalars scheduler, plateau, early_stopping, scaler;
  uint64_t rng_seed = 0, rng_offset = 0;
  data::LoaderState loader;
  std::map<std::string, std::string> user;
};

// The checkpoint's JSON, of this format and version.
Json parse_metadata(const Reader& L, const SafetensorsFile& file) {
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
  if (format != kCheckpointMetadataKey)
    L.fail("metadata key 'format' is " + format.dump() + ", not \"brisk.checkpoint\"");
  int64_t version = L.integer(meta, "version", "");
  if (version != kCheckpointVersion)
    L.fail("checkpoint format version " + std::to_string(version) + " is not supported (this build reads version " +
           std::to_string(kCheckpointVersion) + ")");
  return meta;
}

// Every tensor intact, and none added or lost since it was written.
void check_crcs(const Reader& L, const Json& meta, const NamedTensors& tensors) {
  const Json& crcs = L.member(meta, "crc32", "");
  if (!crcs.is_object()) L.fail("metadata key 'crc32' is not a JSON object");
  for (const auto& [key, t] : tensors) {
    auto it = crcs.find(key);
    if (it == crcs.end()) L.fail("tensor '" + key + "' has no checksum in the metadata");
    if (!it->is_number_unsigned() || it->get<uint64_t>() != tensor_crc(t))
      L.fail("tensor '" + key + "' fails its CRC-32 check: the file is corrupt");
  }
  if (crcs.size() == tensors.size()) return;
  for (const auto& [key, v] : crcs.items()) {
    bool found = false;
    for (const auto& [k, t] : tensors) found |= k == key;
    if (!found) L.fail("tensor '" + key + "' is missing from the file");
  }
}

// The tensors by owner; the optimizer's are dropped when no optimizer is loaded (the model
// part of a full checkpoint is still usable on its own).
void split_tensors(const Reader& L, NamedTensors& tensors, bool with_optimizer, Saved& saved) {
  for (auto& [key, t] : tensors) {
    if (starts_with(key, kModelPrefix)) {
      saved.model.emplace_back(key.substr(6), std::move(t));
    } else if (starts_with(key, kOptimizerPrefix)) {
      if (with_optimizer) saved.optimizer.tensors.emplace_back(key.substr(10), std::move(t));
    } else {
      L.fail("unexpected tensor '" + key + "' (neither model.* nor optimizer.*)");
    }
  }
}

// The saved parts that `state` asks for, each read with its JSON types checked.
void parse_parts(const Reader& L, const Json& meta, const TrainingState& state, Saved& saved) {
  if (state.optimizer) {
    const Json& o = L.member(meta, "optimizer", "");
    saved.optimizer_name = L.member(o, "name", "optimizer");
    saved.optimizer.scalars = L.scalars(L.member(o, "scalars", "optimizer"), "optimizer.scalars");
  }
  if (state.scheduler) saved.scheduler = L.scalars(L.member(meta, "scheduler", ""), "scheduler");
  if (state.plateau) saved.plateau = L.scalars(L.member(meta, "plateau", ""), "plateau");
  if (state.early_stopping) saved.early_stopping = L.scalars(L.member(meta, "early_stopping", ""), "early_stopping");
  if (state.scaler) saved.scaler = L.scalars(L.member(meta, "scaler", ""), "scaler");
  if (state.rng) {
    const Json& r = L.member(meta, "rng", "");
    saved.rng_seed = L.unsigned_integer(r, "seed", "rng");
    saved.rng_offset = L.unsigned_integer(r, "offset", "rng");
  }
  if (state.loader) {
    const Json& l = L.member(meta, "loader", "");
    saved.loader.epoch = L.integer(l, "epoch", "loader");
    saved.loader.batch = L.integer(l, "batch", "loader");
  }
  if (auto it = meta.find("user"); it != meta.end()) {
    if (!it->is_object()) L.fail("metadata key 'user' is not a JSON object");
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string()) L.fail("metadata key 'user." + k + "' is not a string");
      saved.user[k] = v.get<std::string>();
    }
  }
}

Saved parse(const Reader& L, SafetensorsFile& file, const TrainingState& state) {
  Saved saved;
  const Json meta = parse_metadata(L, file);
  saved.epoch = L.integer(meta, "epoch", "");
  saved.step = L.integer(meta, "step", "");
  check_crcs(L, meta, file.tensors);
  split_tensors(L, file.tensors, state.optimizer != nullptr, saved);
  parse_parts(L, meta, state, saved);
  return saved;
}

// Model: every key present with the same shape, nothing extra.
void validate_model(const Reader& L, const NamedTensors& saved, const nn::Module& model) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : saved) by_name[name] = &t;
  std::set<std::string> live_names;
  for (const auto& [name, t] : model.state_dict()) {
    live_names.insert(name);
    auto it = by_name.find(name);
    if (it == by_name.end()) L.fail("model key 'model." + name + "' is missing (a different model?)");
    if (it->second->sizes() != t.sizes())
      L.fail(detail::cat("model key 'model.", name, "' has shape ", it->second->sizes(), " but the model has ",
                         t.sizes()));
  }
  for (const auto& [name, t] : saved) {
    if (!live_names.count(name)) L.fail("model key 'model." + name + "' is unexpected (a different model?)");
  }
}

// Every part against the object it is for; changes nothing.
void validate(const Reader& L, const Saved& saved, const TrainingState& state) {
  validate_model(L, saved.model, *state.model);
  if (state.optimizer) {
    const optim::Optimizer& opt = *state.optimizer;
    if (!saved.optimizer_name.is_string() || saved.optimizer_name.get<std::string>() != opt.name())
      L.fail("optimizer is " + saved.optimizer_name.dump() + " in the checkpoint but " + opt.name() + " here");
    L.check_part("optimizer state", [&] { opt.check_state_dict(saved.optimizer); });
  }
  if (state.scheduler) {
    L.check_same_keys(saved.scheduler, state.scheduler->state_dict(), "scheduler");
    L.check_part("scheduler state", [&] { state.scheduler->check_state_dict(saved.scheduler); });
  }
  if (state.plateau) {
    L.check_same_keys(saved.plateau, state.plateau->state_dict(), "plateau");
    L.check_part("plateau state", [&] { state.plateau->check_state_dict(saved.plateau); });
  }
  if (state.early_stopping) {
    L.check_same_keys(saved.early_stopping, state.early_stopping->state_dict(), "early_stopping");
    L.check_part("early_stopping state", [&] { state.early_stopping->check_state_dict(saved.early_stopping); });
  }
  if (state.scaler) {
    L.check_same_keys(saved.scaler, state.scaler->state_dict(), "scaler");
    L.check_part("scaler state", [&] { state.scaler->check_state_dict(saved.scaler); });
  }
  if (state.loader) L.check_part("loader position", [&] { state.loader->check_state(saved.loader); });
}

// Every part, in place; validate has run every check these loads make.
void load_parts(Saved& saved, TrainingState& state) {
  if (state.optimizer) state.optimizer->load_state_dict(saved.optimizer);
  state.model->load_state_dict(saved.model, /*strict=*/true);
  if (state.scheduler) state.scheduler->load_state_dict(saved.scheduler);
  if (state.plateau) state.plateau->load_state_dict(saved.plateau);
  if (state.early_stopping) state.early_stopping->load_state_dict(saved.early_stopping);
  if (state.scaler) state.scaler->load_state_dict(saved.scaler);
  if (state.rng) {
    default_generator().manual_seed(saved.rng_seed);
    default_generator().set_offset(saved.rng_offset);
  }
  if (state.loader) state.loader->load_state(saved.loader);
  state.epoch = saved.epoch;
  state.step = saved.step;
  state.user_metadata = std::move(saved.user);
}

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
  if (state.scaler) meta["scaler"] = scalars_to_json(state.scaler->state_dict());
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

// See Note [Parse, validate, load].
void load_checkpoint(const std::string& path, TrainingState& state) {
  Reader L(path);
  if (state.model == nullptr) L.fail("TrainingState.model is null");
  SafetensorsFile file = load_safetensors(path);  // checks the header, every entry and every size
  Saved saved = parse(L, file, state);
  validate(L, saved, state);
  load_parts(saved, state);
}

}  // namespace brisk::training
