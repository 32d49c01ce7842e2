// train/checkpoint.h: training checkpoints: everything a run needs to continue bit for bit
// (model, optimizer, LR schedule, plateau/early-stopping counters, the default generator's seed
// and offset, the data loader's position, epoch/step counters, user strings) in ONE safetensors
// file, written atomically. It sits above nn, optim and data because it spans all three.
// Loading is parse, validate every part, then load every part: a corrupt or incompatible file is
// a brisk::Error naming the file and the first offending key, and changes nothing. Not here:
// weights-only files (nn/serialize_module.h), the training loop, or building the objects (build
// the same model, optimizer and schedulers first, then load).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "train/early_stopping.h"

namespace brisk::data {
class DataLoader;
}

namespace brisk::training {

// Bumped when the layout below changes incompatibly; older/newer versions are refused.
inline constexpr int64_t kCheckpointVersion = 1;
// The safetensors "__metadata__" key holding the checkpoint's JSON description.
inline constexpr const char* kCheckpointMetadataKey = "brisk.checkpoint";

// What a checkpoint saves and restores. Every pointer but `model` may be null (not saved /
// not restored). File layout:
//   tensors  "model.<state_dict name>"       the model's parameters and persistent buffers
//            "optimizer.<state_dict key>"    the optimizer's buffers (state.<param>.exp_avg, ...)
//   metadata "brisk.checkpoint": JSON {format, version, epoch, step, optimizer {name, scalars},
//            scheduler, plateau, early_stopping, scaler (scalars), rng {seed, offset},
//            loader {epoch, batch}, user {string: string}, crc32 {tensor name: CRC-32 of
//            its bytes}} (safetensors has no checksum: this catches flipped data bytes)
// Scalars are JSON numbers (written so they read back bit-exactly; non-finite ones as the
// strings "inf", "-inf", "nan"); 64-bit seeds and offsets are exact JSON integers.
struct TrainingState {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  optim::ReduceLROnPlateau* plateau = nullptr;
  optim::EarlyStopping* early_stopping = nullptr;
  optim::GradScaler* scaler = nullptr;  // mixed precision's loss scale and its counters
  data::DataLoader* loader = nullptr;
  bool rng = true;    // save / restore default_generator()'s seed and offset
  int64_t epoch = 0;  // the caller's counters, restored as saved
  int64_t step = 0;
  std::map<std::string, std::string> user_metadata{};
};

// Writes `state` to `path`, replacing any previous file atomically (temp file, fsync, rename):
// a crash at any moment leaves either the old checkpoint or the new one, never a torn file.
void save_checkpoint(const std::string& path, const TrainingState& state);

// Restores every non-null object of `state` (and epoch, step, user_metadata, the generator)
// from `path`. Validated first, each part against its live object: the format and version;
// every tensor's CRC-32; every model key present with the model's shape and no extra model
// keys; the optimizer of the same kind, and its state as Optimizer::check_state_dict accepts
// it; the scheduler / plateau / early-stopping state with the same keys as the objects given
// and accepted by their check_state_dict; a position DataLoader::check_state accepts. Any
// failure throws brisk::Error ("load_checkpoint: <path>: ... '<key>' ...") and leaves every
// object as it was.
void load_checkpoint(const std::string& path, TrainingState& state);

}  // namespace brisk::training
