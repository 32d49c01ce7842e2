// text/tokenize_files.h: tokenize_files, text files to one token file for language-model
// training: each file encoded (in parallel chunks, ByteLevelBPE::encode_large), optionally
// after a separator token, all ids written in llm.c's token file format (text/token_file.h:
// a 256-int32 header with magic, version and count, then uint16 or uint32 ids), atomically.
//   text::tokenize_files(tok, {"a.txt", "b.txt"}, "train.bin", {.separator = "<|endoftext|>"});
//   auto ds = std::make_shared<text::TokenDataset>(text::TokenFile::open("train.bin"), 256);
// Not here: the reading side and the dataset (text/token_file.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/bpe.h"
#include "text/token_file.h"

namespace brisk::text {

struct TokenizeFilesOptions {
  // uint16 when every id of the vocabulary fits (vocab_size() <= 65536), else uint32; U16 for
  // a larger vocabulary is an error (a token file's dtype must hold every id it could get).
  std::optional<TokenDType> dtype = {};
  // A token put before each file's ids, by its text ("<|endoftext|>", as llm.c's GPT-2 data
  // scripts put it before each document); it must be a single token. "" for none.
  std::string separator = {};
  int64_t chunk_bytes = int64_t{1} << 22;  // encode_large's chunks
};

struct TokenizeFilesResult {
  int64_t tokens = 0;  // ids written
  int64_t bytes = 0;   // text read
  TokenDType dtype = TokenDType::U16;
};

// Errors name the file: one that cannot be read, invalid UTF-8 (with its byte offset), an
// unknown separator, a dtype too small for the vocabulary.
TokenizeFilesResult tokenize_files(const ByteLevelBPE& tokenizer, const std::vector<std::string>& inputs,
                                   const std::string& output, const TokenizeFilesOptions& options = {});

}  // namespace brisk::text
