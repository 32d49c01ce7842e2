// examples/bench/bench_tokenizer.cpp: text::ByteLevelBPE against Hugging Face `tokenizers` in
// the same run, one thread each: training (train_bpe vs ByteLevelBPETokenizer.train on the same
// files, merges compared), then encode throughput in MB/s of one long string and of its lines
// (encode_batch), with the ids of both compared by count and checksum.
//   bench_tokenizer [--mb 10] [--vocab 8192]
// The text is fortune(6)'s files (/usr/share/games/fortunes, those that are UTF-8), else
// tests/data/tokenizer/train.txt, repeated to --mb megabytes. The HF side is
// examples/bench/bench_tokenizer.py, run by $TOKENIZERS_PYTHON, else /work/venv/bin/python or
// python3, whichever imports tokenizers, with RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false.
// Not here: correctness tests (tests/test_tokenizer.cpp).
#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "text/bpe.h"
#include "text/pretokenize.h"

namespace fs = std::filesystem;
using brisk::text::ByteLevelBPE;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string python_for_tokenizers() {
  std::vector<std::string> candidates;
  if (const char* py = std::getenv("TOKENIZERS_PYTHON")) candidates.push_back(py);
  candidates.push_back("/work/venv/bin/python");
  candidates.push_back("python3");
  for (const std::string& py : candidates) {
    if (std::system((py + " -c 'import tokenizers, numpy' >/dev/null 2>&1").c_str()) == 0) return py;
  }
  return "";
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// The same sum as bench_tokenizer.py's: sum of (i + 1) * id modulo 2^64.
uint64_t checksum(const std::vector<int32_t>& ids) {
  uint64_t s = 0;
  for (size_t i = 0; i < ids.size(); ++i) s += (i + 1) * static_cast<uint64_t>(ids[i]);
  return s;
}

template <class F>
double best_seconds(F&& fn, int repeats = 3) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = bench::now_s();
    fn();
    best = std::min(best, bench::now_s() - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 10;
  int64_t vocab = 8192;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mb") mb = std::atof(argv[i + 1]);
    if (a == "--vocab") vocab = std::atoll(argv[i + 1]);
  }
  omp_set_num_threads(1);  // one thread, as the HF side

  std::vector<std::string> files;
  const fs::path fortunes = "/usr/share/games/fortunes";
  if (fs::is_directory(fortunes)) {
    for (const auto& e : fs::directory_iterator(fortunes)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || e.is_symlink() || ext == ".dat" || ext == ".u8") continue;
      if (brisk::text::find_invalid_utf8(read_all(e.path())) != std::string::npos) continue;
      files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) files.push_back(std::string(BRISK_SOURCE_DIR) + "/tests/data/tokenizer/train.txt");
  std::string base;
  for (const std::string& f : files) base += read_all(f);
  std::string text;
  while (text.size() < mb * 1e6) text += base;
  const double text_mb = double(text.size()) / 1e6;

  const fs::path dir = fs::temp_directory_path() / ("brisk-bench-tok-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const double t0 = bench::now_s();
  const ByteLevelBPE tok =
      brisk::text::train_bpe(files, {.vocab_size = vocab, .min_frequency = 2, .special_tokens = {"<|endoftext|>"}});
  const double train_s = bench::now_s() - t0;
  tok.save((dir / "vocab.json").string(), (dir / "merges.txt").string());
  tok.save_tokenizer_json((dir / "tokenizer.json").string());
  {
    std::ofstream out(dir / "corpus.txt", std::ios::binary);
    out << text;
  }

  std::vector<std::string> lines;
  for (size_t s = 0; s < text.size();) {
    const size_t nl = text.find('\n', s);
    const size_t e = nl == std::string::npos ? text.size() : nl + 1;
    lines.push_back(text.substr(s, e - s));
    s = e;
  }
  std::vector<int32_t> ids = tok.encode(text);
  const double encode_s = best_seconds([&] { bench::keep(tok.encode(text)); });
  const double batch_s = best_seconds([&] { bench::keep(tok.encode_batch(lines)); });

  std::printf("bench_tokenizer: %zu training files (%.2f MB), vocab %lld; corpus %.2f MB, %zu lines\n", files.size(),
              double(base.size()) / 1e6, static_cast<long long>(vocab), text_mb, lines.size());
  const std::string py = python_for_tokenizers();
  std::string hf;
  if (!py.empty()) {
    std::string cmd = "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false " + py + " " + BRISK_SOURCE_DIR +
                      "/examples/bench/bench_tokenizer.py " + dir.string() + " " + (dir / "corpus.txt").string() + " " +
                      std::to_string(vocab);
    for (const std::string& f : files) cmd += " " + f;
    hf = run(cmd + " 2>&1");
  }
  auto field = [&](const char* key) { return bench::tagged_field(hf, "RESULT", key); };
  const bool have_hf = field("encode_mbps") > 0;
  std::printf("%-34s %12s %12s %8s\n", "", "brisk", "tokenizers", "ratio");
  auto row = [&](const char* what, double mine, double theirs, bool higher_better) {
    if (theirs > 0) {
      std::printf("%-34s %12.2f %12.2f %7.2fx\n", what, mine, theirs, higher_better ? mine / theirs : theirs / mine);
    } else {
      std::printf("%-34s %12.2f %12s\n", what, mine, "-");
    }
  };
  row("train (s, 1 thread)", train_s, field("train_s"), false);
  row("encode one string (MB/s)", text_mb / encode_s, field("encode_mbps"), true);
  row("encode_batch of lines (MB/s)", text_mb / batch_s, field("batch_mbps"), true);
  row("  vs encode_batch_fast (no offsets)", text_mb / batch_s, field("fast_mbps"), true);
  if (have_hf) {
    const bool same_ids = uint64_t(field("count")) == ids.size() &&
                          hf.find("checksum=" + std::to_string(checksum(ids))) != std::string::npos;
    std::printf("merges identical to tokenizers': %s; ids identical (count %zu, checksum): %s\n",
                field("merges_equal") == 1 ? "yes" : "NO", ids.size(), same_ids ? "yes" : "NO");
  } else {
    std::printf("tokenizers: not run (%s)\n%s", py.empty() ? "no Python imports tokenizers and numpy" : "failed",
                hf.c_str());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}
