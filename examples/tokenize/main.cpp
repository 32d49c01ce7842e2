// examples/tokenize/main.cpp: brisk_tokenize, text files to an llm.c-format token file (the
// input of text::TokenDataset, examples/gpt and llm.c's trainers), with a byte-level BPE
// tokenizer read from Hugging Face's files or trained on the same text first.
//
//   brisk_tokenize --tokenizer DIR_OR_JSON --out train.bin [--separator "<|endoftext|>"] FILE...
//   brisk_tokenize --train-vocab 8192 [--special "<|endoftext|>"]... --save-tokenizer DIR \
//                  --out train.bin FILE...
//   options: --dtype u16|u32 (default: u16 when the vocabulary fits), --min-frequency N (2)
// --tokenizer takes tokenizer.json, or a folder holding tokenizer.json or vocab.json + merges.txt.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/error.h"
#include "text/bpe.h"
#include "text/tokenize_files.h"

using namespace brisk;
namespace fs = std::filesystem;

namespace {

text::ByteLevelBPE load_tokenizer(const std::string& path) {
  const fs::path p(path);
  if (fs::is_directory(p)) {
    if (fs::exists(p / "tokenizer.json"))
      return text::ByteLevelBPE::from_tokenizer_json((p / "tokenizer.json").string());
    if (fs::exists(p / "vocab.json") && fs::exists(p / "merges.txt"))
      return text::ByteLevelBPE::from_files((p / "vocab.json").string(), (p / "merges.txt").string());
    throw Error("brisk_tokenize: " + path + " holds neither tokenizer.json nor vocab.json + merges.txt");
  }
  return text::ByteLevelBPE::from_tokenizer_json(path);
}

int usage() {
  std::fprintf(stderr,
               "usage: brisk_tokenize (--tokenizer DIR_OR_JSON | --train-vocab N [--special TOKEN]... "
               "[--save-tokenizer DIR]) --out FILE.bin [--separator TOKEN] [--dtype u16|u32] FILE...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string tokenizer, out, save_dir, separator, dtype;
  int64_t train_vocab = 0, min_frequency = 2;
  std::vector<std::string> specials, inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("brisk_tokenize: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--tokenizer")
      tokenizer = value();
    else if (a == "--train-vocab")
      train_vocab = std::stoll(value());
    else if (a == "--min-frequency")
      min_frequency = std::stoll(value());
    else if (a == "--special")
      specials.push_back(value());
    else if (a == "--save-tokenizer")
      save_dir = value();
    else if (a == "--out")
      out = value();
    else if (a == "--separator")
      separator = value();
    else if (a == "--dtype")
      dtype = value();
    else if (a.starts_with("--"))
      return usage();
    else
      inputs.push_back(a);
  }
  if (out.empty() || inputs.empty() || (tokenizer.empty() == (train_vocab == 0))) return usage();
  if (!dtype.empty() && dtype != "u16" && dtype != "u32") return usage();

  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  text::ByteLevelBPE tok;
  if (!tokenizer.empty()) {
    tok = load_tokenizer(tokenizer);
  } else {
    tok = text::train_bpe(inputs,
                          {.vocab_size = train_vocab, .min_frequency = min_frequency, .special_tokens = specials});
    std::printf("trained a byte-level BPE of %lld tokens on %zu files in %.2f s\n", (long long)tok.vocab_size(),
                inputs.size(), seconds());
  }
  if (!save_dir.empty()) {
    fs::create_directories(save_dir);
    tok.save((fs::path(save_dir) / "vocab.json").string(), (fs::path(save_dir) / "merges.txt").string());
    tok.save_tokenizer_json((fs::path(save_dir) / "tokenizer.json").string());
  }
  const double t1 = seconds();
  text::TokenizeFilesOptions o;
  o.separator = separator;
  if (dtype == "u16") o.dtype = text::TokenDType::U16;
  if (dtype == "u32") o.dtype = text::TokenDType::U32;
  const text::TokenizeFilesResult r = text::tokenize_files(tok, inputs, out, o);
  const double dt = seconds() - t1;
  std::printf("%s: %lld tokens (%s) from %zu files, %.2f MB of text, %.2f bytes per token, %.1f MB/s\n", out.c_str(),
              (long long)r.tokens, r.dtype == text::TokenDType::U16 ? "uint16" : "uint32", inputs.size(),
              double(r.bytes) / 1e6, r.tokens ? double(r.bytes) / double(r.tokens) : 0.0,
              dt > 0 ? double(r.bytes) / 1e6 / dt : 0.0);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
