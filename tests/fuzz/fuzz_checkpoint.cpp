// tests/fuzz/fuzz_checkpoint.cpp: libFuzzer target for training::load_checkpoint
// (train/checkpoint.h): the input is the whole checkpoint file, loaded into a fresh small run
// (checkpoint_run.h: model, Adam, StepLR, plateau, early stopping, loader) every time so one
// input's outcome never depends on the one before. A load that succeeds is followed by one
// training step on the restored state. Not a test of save_checkpoint (tests/test_checkpoint.cpp).
#include <cstddef>
#include <cstdint>

#include "engine/random.h"
#include "tests/fuzz/checkpoint_run.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static brisk::fuzz::ScratchFile file("checkpoint", ".safetensors");
  brisk::fuzz::write_file(file.path, data, size);
  brisk::manual_seed(0);
  brisk::fuzz::CheckpointRun run;
  brisk::training::TrainingState state = run.state();
  brisk::fuzz::expect_brisk_errors_only([&] {
    brisk::training::load_checkpoint(file.path, state);
    run.train(1);
  });
  return 0;
}
