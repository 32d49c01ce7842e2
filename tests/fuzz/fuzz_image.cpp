// tests/fuzz/fuzz_image.cpp: libFuzzer target for data::read_image and data::ImageFolder
// (data/readers.h): the input is one image file (read_image checks PNG, JPEG and BMP
// structure and refuses the rest before stb_image decodes; see Note [Image containers]). Even-sized inputs go through
// an ImageFolder (3 channels), odd-sized ones through read_image with 1 channel. stb_image's implementation is compiled
// into this target, so the decoder itself is instrumented (ASan, coverage) instead of the uninstrumented libstb.so; the
// library's calls resolve to this copy. Not a fuzzer of the transforms or the loader.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "data/readers.h"
#include "tests/fuzz/fuzz_common.h"

#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>

namespace {

// Decoding is linear in the pixels the header claims; a small limit keeps each run short
// (the default, 2^27, is for real data sets).
constexpr int64_t kMaxPixels = int64_t(1) << 20;

// root/cls/image.png, made once; ImageFolder lists it once and decodes it on every get().
struct Folder {
  std::filesystem::path root;
  std::string image;
  std::unique_ptr<brisk::data::ImageFolder> folder;
  Folder() : root(brisk::fuzz::scratch_path("image", ".d")) {
    std::filesystem::create_directories(root / "cls");
    image = (root / "cls" / "image.png").string();
    brisk::fuzz::write_file(image, nullptr, 0);
    folder = std::make_unique<brisk::data::ImageFolder>(root.string(), 3, kMaxPixels);
  }
  ~Folder() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Folder folder;
  brisk::fuzz::write_file(folder.image, data, size);
  brisk::fuzz::expect_brisk_errors_only([&] {
    if (size % 2 == 0) {
      brisk::data::Example ex = folder.folder->get(0);
      (void)ex.input.sum().item<double>();
    } else {
      brisk::Tensor t = brisk::data::read_image(folder.image, 1, kMaxPixels);
      (void)t.sum().item<double>();
    }
  });
  return 0;
}
