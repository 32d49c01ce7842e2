// text/bpe.h: ByteLevelBPE, GPT-2's byte-level BPE tokenizer, and train_bpe, its trainer.
// Reads and writes Hugging Face's formats (vocab.json + merges.txt, GPT-2's; and tokenizer.json
// with a BPE model) and gives the ids `tokenizers` gives: special tokens split off first, then
// GPT-2's pre-tokenization pattern (text/pretokenize.h), each piece's bytes mapped to GPT-2's
// byte characters and merged by rank. The trainer learns the merges HF's BpeTrainer learns with
// the ByteLevel pre-tokenizer (Note [BPE trainer ties] in text/bpe_trainer.cpp).
//   auto tok = text::ByteLevelBPE::from_tokenizer_json("gpt2/tokenizer.json");
//   std::vector<int32_t> ids = tok.encode("Hello world<|endoftext|>");
//   std::string back = tok.decode(ids);
//   auto mine = text::train_bpe({"corpus.txt"}, {.vocab_size = 8192, .special_tokens = {"<|endoftext|>"}});
//   mine.save_tokenizer_json("tokenizer.json");  // HF's Tokenizer.from_file reads it
// Not here: normalizers, other pre-tokenizers and post-processors (a tokenizer.json that
// needs them is refused by name), offsets, truncation and padding, pair encodings.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace brisk::text {

namespace detail {
class WordCache;
}

// A token matched in the raw text before pre-tokenization, as HF's AddedToken. Special tokens
// are skipped by decode(ids, skip_special_tokens = true). `normalized` tokens are matched after
// the non-normalized ones (HF's two passes; with no normalizer that is the only difference).
// lstrip / rstrip: the match takes the whitespace on its left / right with it (RoBERTa's
// "<mask>"). HF's single_word is not supported.
struct AddedToken {
  std::string content = {};
  int32_t id = -1;
  bool special = true;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
};

class ByteLevelBPE {
 public:
  ByteLevelBPE();
  ~ByteLevelBPE();
  ByteLevelBPE(ByteLevelBPE&&) noexcept;
  ByteLevelBPE& operator=(ByteLevelBPE&&) noexcept;

  // GPT-2's pair of files as HF's save_model() writes them. Errors name the file and the line
  // or field: malformed JSON, duplicate ids, a merge line that is not two tokens, a merge whose
  // parts or result are not in the vocabulary.
  static ByteLevelBPE from_files(const std::string& vocab_json, const std::string& merges_txt);
  // HF's tokenizer.json (Tokenizer.save(), transformers' save_pretrained()): model "BPE" with
  // the ByteLevel pre-tokenizer (or none), no normalizer, decoder ByteLevel or none,
  // post-processor ByteLevel, TemplateProcessing (its single template's special tokens go
  // around every encoding, as HF's encode adds them) or a Sequence of those; added_tokens
  // become added tokens.
  static ByteLevelBPE from_tokenizer_json(const std::string& path);
  // From memory: vocab (token -> id) and merges in rank order, as HF's BPE(vocab, merges).
  static ByteLevelBPE from_vocab_merges(std::unordered_map<std::string, int32_t> vocab,
                                        std::vector<std::pair<std::string, std::string>> merges);

  // Adds tokens matched before pre-tokenization; a token already in the vocabulary keeps its
  // id, a new one gets the next id after the vocabulary and earlier added tokens (as HF).
  // Returns how many were new.
  int add_special_tokens(const std::vector<std::string>& tokens);
  int add_tokens(const std::vector<std::string>& tokens);

  // Token ids of UTF-8 text (with a template's special tokens around them); invalid UTF-8 is a
  // brisk::Error naming the byte offset.
  std::vector<int32_t> encode(std::string_view text) const;
  // encode() of a long text, with threads: the text is cut into chunks of about chunk_bytes
  // where a cut cannot change the ids (after a "\n" between two ASCII non-spaces: no piece of
  // the pattern crosses there), and the chunks are encoded in parallel. The ids are
  // encode(text)'s; tokenizers whose pieces could cross such a cut (add_prefix_space, no
  // regex, an added token with a "\n") encode the text whole.
  std::vector<int32_t> encode_large(std::string_view text, int64_t chunk_bytes = int64_t{1} << 22) const;
  // Each text encoded on its own; threads over the batch (OpenMP), each with its own cache.
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts) const;
  // The text of the ids: byte characters back to bytes, invalid UTF-8 replaced by U+FFFD as
  // HF's from_utf8_lossy does. An id outside the vocabulary is a brisk::Error.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // -1 when absent.
  int32_t token_to_id(std::string_view token) const;
  // The token string (byte characters, as in vocab.json); an unknown id is a brisk::Error.
  const std::string& id_to_token(int32_t id) const;
  // One more than the largest id, added tokens included: the embedding size a model needs.
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  // vocab.json + merges.txt as HF writes them (vocab in id order, "#version: 0.2" header),
  // each file atomically. Added tokens that are not in the model's vocabulary are not saved
  // there (as HF); tokenizer.json keeps them.
  void save(const std::string& vocab_json, const std::string& merges_txt) const;
  // tokenizer.json as HF's Tokenizer.save() writes it for a ByteLevelBPETokenizer; atomically.
  void save_tokenizer_json(const std::string& path) const;

 private:
  struct MergeTable;
  static ByteLevelBPE from_tokenizer_json_(const std::string& path);
  void build_();  // merge table, byte ids, added-token matcher from vocab_/merges_/added_
  int add_(const std::vector<std::string>& tokens, bool special);
  void encode_piece_(std::string_view piece, detail::WordCache& cache, std::vector<int32_t>& out) const;
  void encode_segment_(std::string_view text, size_t base, detail::WordCache& cache, std::vector<int32_t>& out) const;
  void encode_(std::string_view text, detail::WordCache& cache, std::vector<int32_t>& out) const;
  void encode_text_(std::string_view text, detail::WordCache& cache, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;  // the model's vocabulary (byte characters)
  std::vector<std::string> id_to_token_;            // model and added tokens; "" for gaps
  std::vector<uint8_t> is_special_;                 // by id
  std::vector<uint8_t> has_id_;                     // by id: false for gaps
  std::vector<std::pair<std::string, std::string>> merges_;
  std::vector<AddedToken> added_;
  struct AddedMatcher {
    std::vector<size_t> tokens;  // indices into added_, longest first
    bool first[256] = {};        // the first bytes of tokens
  };
  AddedMatcher matchers_[2];  // non-normalized, normalized (see encode_)
  std::unique_ptr<MergeTable> table_;
  int32_t byte_id_[256];  // id of each byte's character; -1 when the vocabulary lacks it
  int32_t unk_id_ = -1;   // the model's unk_token, when it has one
  std::string unk_token_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  bool add_prefix_space_ = false;
  bool use_regex_ = true;
  // A TemplateProcessing post-processor's special tokens before and after every encoding.
  std::vector<int32_t> prefix_ids_;
  std::vector<int32_t> suffix_ids_;
  // tokenizer.json's decoder and post_processor as loaded, written back by
  // save_tokenizer_json ("" for ByteLevelBPETokenizer's, "null" for none).
  std::string decoder_json_;
  std::string post_processor_json_;
  // The cache of encode(): words seen before and their ids. Taken with try_lock, so
  // concurrent encode() calls stay correct (a busy cache means a fresh one for that call).
  std::unique_ptr<detail::WordCache> cache_;
  std::unique_ptr<std::mutex> cache_mutex_;
};

// Options of train_bpe, in HF BpeTrainer's keyword order (vocab_size, min_frequency,
// special_tokens, ...). The initial alphabet is always the 256 byte characters
// (ByteLevelBPETokenizer.train's initial_alphabet=ByteLevel.alphabet()).
struct BpeTrainerOptions {
  int64_t vocab_size = 30000;  // special tokens and the 256 byte characters included
  int64_t min_frequency = 2;   // ByteLevelBPETokenizer.train's default (BpeTrainer's is 0)
  std::vector<std::string> special_tokens = {};
};

// Learns merges from text as ByteLevelBPETokenizer.train(files, ...) does: each file read line
// by line (each line with its "\n" is one sequence), special tokens first in the vocabulary,
// then the byte characters in code point order, then merges. Invalid UTF-8 is a brisk::Error
// naming the file and byte offset. The result has the special tokens as added tokens.
ByteLevelBPE train_bpe(const std::vector<std::string>& files, const BpeTrainerOptions& options);
// The same over strings, each one sequence (train_from_iterator).
ByteLevelBPE train_bpe_from_texts(const std::vector<std::string>& texts, const BpeTrainerOptions& options);

}  // namespace brisk::text
