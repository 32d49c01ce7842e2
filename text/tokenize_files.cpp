// text/tokenize_files.cpp: tokenize_files (see the header).
// Not here: the file format (text/token_file.cpp), the tokenizer (text/bpe.cpp).
#include "text/tokenize_files.h"

#include <fstream>
#include <sstream>

#include "engine/error.h"

namespace brisk::text {

TokenizeFilesResult tokenize_files(const ByteLevelBPE& tokenizer, const std::vector<std::string>& inputs,
                                   const std::string& output, const TokenizeFilesOptions& options) {
  const std::string who = "tokenize_files(" + output + "): ";
  const bool fits16 = tokenizer.vocab_size() <= 65536;
  const TokenDType dtype = options.dtype.value_or(fits16 ? TokenDType::U16 : TokenDType::U32);
  BRISK_CHECK(dtype == TokenDType::U32 || fits16, who, "uint16 cannot hold the vocabulary's ids (vocab_size ",
              tokenizer.vocab_size(), ")");
  int32_t separator = -1;
  if (!options.separator.empty()) {
    separator = tokenizer.token_to_id(options.separator);
    BRISK_CHECK(separator >= 0, who, "the separator \"", options.separator, "\" is not a token of the vocabulary");
  }
  std::vector<int64_t> ids;
  TokenizeFilesResult result;
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    BRISK_CHECK(in.good(), who, "cannot open ", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    BRISK_CHECK(!in.bad(), who, "cannot read ", path);
    const std::string text = ss.str();
    std::vector<int32_t> part;
    try {
      part = tokenizer.encode_large(text, options.chunk_bytes);
    } catch (const Error& e) {
      BRISK_FAIL(who, path, ": ", e.what());
    }
    if (separator >= 0) ids.push_back(separator);
    ids.insert(ids.end(), part.begin(), part.end());
    result.bytes += static_cast<int64_t>(text.size());
  }
  write_token_file(output, ids, dtype);
  result.tokens = static_cast<int64_t>(ids.size());
  result.dtype = dtype;
  return result;
}

}  // namespace brisk::text
