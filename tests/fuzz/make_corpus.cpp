// tests/fuzz/make_corpus.cpp: writes the seed corpus of every fuzz target into
// <out>/<target>/: a few small valid files and a few near-valid ones (truncated, one field
// wrong) per reader. Run by hand when a reader's format changes (the corpus is committed):
//   build-fuzz/build/tests/fuzz/fuzz_make_corpus tests/fuzz/corpus
// Not a fuzz target and not run by tests/fuzz.sh or CI.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/functions.h"
#include "engine/random.h"
#include "engine/serialize.h"
#include "tests/fuzz/checkpoint_run.h"
#include "train/checkpoint.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

namespace fs = std::filesystem;
using namespace brisk;

namespace {

fs::path out_root;

using Bytes = std::string;

void put(const std::string& target, const std::string& name, const Bytes& bytes) {
  fs::create_directories(out_root / target);
  std::ofstream out(out_root / target / name, std::ios::binary | std::ios::trunc);
  out << bytes;
}

Bytes slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Bytes gzip(const Bytes& raw) {
  fs::path tmp = fs::temp_directory_path() / ("brisk-make-corpus-" + std::to_string(::getpid()) + ".gz");
  gzFile gz = gzopen(tmp.c_str(), "wb9");
  gzwrite(gz, raw.data(), unsigned(raw.size()));
  gzclose(gz);
  Bytes out = slurp(tmp);
  fs::remove(tmp);
  return out;
}

Bytes le64(uint64_t v) {
  Bytes b(8, '\0');
  for (int i = 0; i < 8; ++i) b[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return b;
}

// A safetensors file from a header text and raw data bytes.
Bytes safetensors(const std::string& header, const Bytes& data) { return le64(header.size()) + header + data; }

void safetensors_corpus(const fs::path& testdata) {
  for (const char* name : {"brisk_written.safetensors", "torch_written.safetensors"}) {
    put("safetensors", name, slurp(testdata / "safetensors" / name));
  }
  fs::path tmp = fs::temp_directory_path() / ("brisk-make-corpus-" + std::to_string(::getpid()) + ".safetensors");
  save_safetensors(tmp.string(), {{"w", arange(6, DType::F32).view({2, 3})}, {"b", arange(3, DType::I64)}},
                   {{"format", "pt"}});
  Bytes good = slurp(tmp);
  fs::remove(tmp);
  put("safetensors", "valid_small", good);
  put("safetensors", "truncated_data", good.substr(0, good.size() - 5));
  put("safetensors", "truncated_header", good.substr(0, 20));
  put("safetensors", "empty_header", safetensors("{}", ""));
  put("safetensors", "scalar", safetensors(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})", Bytes(8, '\1')));
  put("safetensors", "zero_size", safetensors(R"({"z":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]}})", ""));
  put("safetensors", "header_too_long", le64(1000) + R"({"a":{}})");
  put("safetensors", "overlap",
      safetensors(
          R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
          Bytes(6, 'x')));
  put("safetensors", "hole",
      safetensors(
          R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
          Bytes(6, 'x')));
  put("safetensors", "shape_mismatch",
      safetensors(R"({"a":{"dtype":"I32","shape":[3],"data_offsets":[0,8]}})", Bytes(8, 'x')));
  put("safetensors", "bad_dtype", safetensors(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", "x"));
  put("safetensors", "big_dims",
      safetensors(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", ""));
  put("safetensors", "metadata_not_string",
      safetensors(R"({"__metadata__":{"k":1},"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", Bytes("\1\2")));
}

void checkpoint_corpus() {
  fs::path tmp = fs::temp_directory_path() / ("brisk-make-corpus-" + std::to_string(::getpid()) + ".ckpt");
  auto save = [&](fuzz::CheckpointRun& run, int64_t epoch, std::map<std::string, std::string> user) {
    training::TrainingState s = run.state();
    s.epoch = epoch;
    s.step = 7;
    s.user_metadata = std::move(user);
    training::save_checkpoint(tmp.string(), s);
    Bytes b = slurp(tmp);
    fs::remove(tmp);
    return b;
  };
  manual_seed(0);
  fuzz::CheckpointRun fresh;
  put("checkpoint", "untrained", save(fresh, 0, {}));
  manual_seed(0);
  fuzz::CheckpointRun trained;
  trained.train(7);  // one epoch (4 batches) and a bit: stepped schedules, Adam state
  Bytes good = save(trained, 1, {{"note", "seed"}});
  put("checkpoint", "trained", good);
  Bytes flipped = good;
  flipped[flipped.size() - 3] = char(flipped[flipped.size() - 3] ^ 0x10);  // a data byte: CRC mismatch
  put("checkpoint", "crc_mismatch", flipped);
  put("checkpoint", "truncated", good.substr(0, good.size() - 16));
  Bytes version = good;
  size_t at = version.find("\\\"version\\\":1");
  if (at != Bytes::npos) version[at + 12] = '2';
  put("checkpoint", "version_2", version);
}

// An IDX file: header, then the data the dims promise plus `extra` bytes (none when !data).
Bytes idx(const std::vector<uint32_t>& dims, uint8_t type = 0x08, size_t extra = 0, bool data = true) {
  Bytes b{'\0', '\0', char(type), char(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(char((d >> s) & 0xff));
    n *= d;
  }
  if (!data) return b;
  for (size_t i = 0; i < n + extra; ++i) b.push_back(char(i * 37 % 251));
  return b;
}

void idx_corpus() {
  const Bytes labels = idx({10}), images = idx({3, 5, 4}), four = idx({2, 1, 3, 2});
  for (const char* target : {"idx", "idx_gz"}) {
    put(target, "labels", labels);
    put(target, "images", images);
    put(target, "four_dims", four);
    put(target, "empty_dim", idx({0, 28, 28}));
    put(target, "truncated", images.substr(0, images.size() - 3));
    put(target, "extra_bytes", idx({4}, 0x08, 2));
    put(target, "type_i32", idx({2}, 0x0c));
    put(target, "five_dims", idx({1, 1, 1, 1, 1}));
    put(target, "large_dims", idx({65536, 65536, 16}, 0x08, 0, false) + "xyz");
  }
  put("idx", "labels.gz", gzip(labels));
  put("idx", "images.gz", gzip(images));
  Bytes gz = gzip(images);
  put("idx", "gz_truncated", gz.substr(0, gz.size() - 6));
  Bytes bad_crc = gz;
  bad_crc[bad_crc.size() - 6] = char(bad_crc[bad_crc.size() - 6] ^ 1);
  put("idx", "gz_bad_crc", bad_crc);
  put("idx", "gz_two_members", gzip(images.substr(0, 10)) + gzip(images.substr(10)));
}

// The first byte is fuzz_csv's options: bit 0 header, bits 1-2 label (none, "label", "0", "y"),
// bits 3-4 delimiter (, ; tab |).
void csv_corpus() {
  auto csv = [](int header, int label, int delim, const std::string& text) {
    return Bytes(1, char(header | label << 1 | delim << 3)) + text;
  };
  put("csv", "header_label", csv(1, 1, 0, "a,b,label\n1,2.5,0\n-3,4e2,1\n0.5,.25,2\n"));
  put("csv", "no_header", csv(0, 0, 0, "1,2,3\n4,5,6\n"));
  put("csv", "index_label", csv(0, 2, 1, "1;2\n3;4\r\n5;6\n"));
  put("csv", "float_label", csv(1, 3, 2, "x\ty\n1\t0.5\n2\t1.5\n"));
  put("csv", "pipe", csv(1, 0, 3, "p|q\n1|2\n\n3|4\n"));
  put("csv", "ragged", csv(1, 1, 0, "a,label\n1,2\n3\n"));
  put("csv", "not_number", csv(1, 1, 0, "a,label\nx,1\n"));
  put("csv", "special_values", csv(1, 1, 0, "a,label\nnan,1\ninf,2\n1e308,-0\n0x1p3,3\n"));
  put("csv", "trailing_delim", csv(0, 0, 0, "1,2,\n3,4,\n"));
  put("csv", "empty", csv(1, 0, 0, ""));
}

void image_corpus() {
  auto write = [](const char* name, auto&& fn) {
    fs::path tmp = fs::temp_directory_path() / ("brisk-make-corpus-" + std::to_string(::getpid()) + ".img");
    fn(tmp.c_str());
    Bytes b = slurp(tmp);
    fs::remove(tmp);
    put("image", name, b);
    return b;
  };
  std::vector<uint8_t> px(6 * 5 * 4);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 29 % 256);
  Bytes png = write("gray.png", [&](const char* p) { stbi_write_png(p, 5, 4, 1, px.data(), 5); });
  write("rgb.png", [&](const char* p) { stbi_write_png(p, 6, 5, 3, px.data(), 18); });
  write("rgba.png", [&](const char* p) { stbi_write_png(p, 3, 4, 4, px.data(), 12); });
  Bytes bmp = write("rgb.bmp", [&](const char* p) { stbi_write_bmp(p, 5, 3, 3, px.data()); });
  write("gray.tga", [&](const char* p) { stbi_write_tga(p, 4, 4, 1, px.data()); });
  Bytes jpg = write("rgb.jpg", [&](const char* p) { stbi_write_jpg(p, 6, 5, 3, px.data(), 80); });
  write("gray.jpg", [&](const char* p) { stbi_write_jpg(p, 8, 8, 1, px.data(), 50); });
  write("rgb.hdr", [&](const char* p) {
    std::vector<float> f(4 * 2 * 3);
    for (size_t i = 0; i < f.size(); ++i) f[i] = float(i) / 8;
    stbi_write_hdr(p, 4, 2, 3, f.data());
  });
  put("image", "gray.pgm", Bytes("P5\n3 2\n255\n") + Bytes("\1\2\3\4\5\6"));
  put("image", "rgb.ppm", Bytes("P6\n2 1\n255\n") + Bytes("\xff\0\0\0\xff\0", 6));
  put("image", "tiny.gif",
      Bytes("GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00\x21\xf9\x04\x01\x00\x00\x00\x00\x2c\x00\x00"
            "\x00\x00\x01\x00\x01\x00\x00\x02\x02\x44\x01\x00\x3b",
            43));
  put("image", "png_truncated", png.substr(0, png.size() / 2));
  put("image", "png_truncated_odd", png.substr(0, png.size() / 2 + 1));
  put("image", "bmp_truncated", bmp.substr(0, bmp.size() - 7));
  put("image", "jpg_truncated", jpg.substr(0, jpg.size() - 40));
  Bytes wide = png;
  wide[16] = '\x7f';  // IHDR width's high byte: a huge image claimed by a small file
  put("image", "png_huge_width", wide);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_corpus OUT_DIR   (run from the repository root)\n";
    return 2;
  }
  out_root = argv[1];
  try {
    safetensors_corpus(fs::path("tests") / "data");
    checkpoint_corpus();
    idx_corpus();
    csv_corpus();
    image_corpus();
  } catch (const std::exception& e) {
    std::cerr << "fuzz_make_corpus: " << e.what() << "\n";
    return 1;
  }
  for (const auto& dir : fs::directory_iterator(out_root)) {
    size_t n = 0, bytes = 0;
    for (const auto& f : fs::directory_iterator(dir)) ++n, bytes += f.file_size();
    std::cout << dir.path().filename().string() << ": " << n << " files, " << bytes << " bytes\n";
  }
  return 0;
}
