// text/bpe_trainer.cpp: train_bpe, the byte-level BPE trainer, merge for merge what Hugging
// Face's BpeTrainer learns (ByteLevelBPETokenizer.train / train_from_iterator).
// Not here: applying merges to new text (text/bpe.cpp).
//
// Note [BPE trainer ties]
// HF's trainer (tokenizers/src/models/bpe/trainer.rs) fixes the result through its id order
// and its queue, so this file follows both exactly:
// - ids: special tokens first (in the order given, duplicates once), then the alphabet, which
//   for byte-level BPE is the 256 byte characters sorted by CODE POINT ("!" .. "~", "¡" ..,
//   then "Ā" (byte 0), ...), not by byte; then each merge's result in the order learned (a
//   result already in the vocabulary keeps its id and the vocabulary does not grow).
// - the next merge is the pair with the highest count; among equal counts the smallest
//   (left id, right id). Counts are kept exactly; the queue holds entries whose counts may be
//   stale (only pairs that gained occurrences are pushed again), and an entry popped with a
//   stale count goes back with the current one, as HF's does. The pop order is therefore the
//   order of (count, pair), whatever the heap, with one exception: two entries of the same
//   pair and count, which only a merge whose result is already in the vocabulary can make
//   ("a"+"bc" after "ab"+"c"), pop in an order that depends on the order they were pushed,
//   which in HF follows a randomly seeded hash map's iteration: HF itself is not
//   deterministic there (their word lists can differ). Not seen on the reference texts.
// - a merge replaces the pair left to right, without overlap, in every word where the pair was
//   counted when its entry was pushed, and changes the neighbouring pairs' counts the way HF's
//   Word::merge does (the merged pair's own count is not reset; it leaves the queue).
// - training stops when the vocabulary reaches vocab_size, the queue empties, or the best
//   count is below min_frequency (or below 1).
// - each file is read line by line, "\n" kept (HF's lines_with_ending), and each line is
//   pre-tokenized on its own; the words are counted over all lines. Special tokens in the
//   text are not split off (the tokenizer being trained has no added tokens yet).
#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "engine/error.h"
#include "text/bpe.h"
#include "text/bpe_detail.h"
#include "text/pretokenize.h"

namespace brisk::text {

namespace {

using Pair = std::pair<int32_t, int32_t>;

struct PairHash {
  size_t operator()(const Pair& p) const {
    const uint64_t k = (static_cast<uint64_t>(static_cast<uint32_t>(p.first)) << 32) | static_cast<uint32_t>(p.second);
    return static_cast<size_t>(k * 0x9E3779B97F4A7C15ull >> 16);
  }
};

struct Queued {
  Pair pair;
  int64_t count;
  std::vector<uint32_t> pos;  // the words the pair was in when pushed
};

// The queue's order: the highest count on top, then the smallest pair.
struct Lower {
  bool operator()(const Queued& a, const Queued& b) const {
    if (a.count != b.count) return a.count < b.count;
    return a.pair > b.pair;
  }
};

using WordCounts = std::unordered_map<std::string, int64_t>;

void count_words(std::string_view sequence, size_t base, const std::string& where, WordCounts& counts,
                 std::vector<std::string_view>& pieces) {
  pieces.clear();
  try {
    pretokenize_gpt2(sequence, pieces, base);
  } catch (const Error& e) {
    BRISK_FAIL("train_bpe: ", where, ": ", e.what());
  }
  for (std::string_view p : pieces) ++counts[std::string(p)];
}

ByteLevelBPE train_from_counts(const WordCounts& word_counts, const BpeTrainerOptions& o) {
  BRISK_CHECK(o.vocab_size >= 0, "train_bpe: vocab_size must be >= 0, got ", o.vocab_size);
  std::unordered_map<std::string, int32_t> word_to_id;
  std::vector<std::string> id_to_word;
  auto add = [&](const std::string& s) {
    if (word_to_id.emplace(s, static_cast<int32_t>(id_to_word.size())).second) {
      id_to_word.push_back(s);
    }
  };
  for (const std::string& s : o.special_tokens) {
    BRISK_CHECK(!s.empty(), "train_bpe: a special token cannot be empty");
    BRISK_CHECK(find_invalid_utf8(s) == std::string::npos, "train_bpe: special token ", id_to_word.size(),
                " is not valid UTF-8");
    add(s);
  }
  // The alphabet: every byte character, in code point order (Note [BPE trainer ties]).
  const detail::ByteChars& bc = detail::byte_chars();
  int byte_order[256];
  for (int b = 0; b < 256; ++b) byte_order[b] = b;
  std::sort(std::begin(byte_order), std::end(byte_order), [&](int a, int b) { return bc.cp[a] < bc.cp[b]; });
  for (int b : byte_order) add(bc.utf8[b]);
  int32_t byte_id[256];
  for (int b = 0; b < 256; ++b) byte_id[b] = word_to_id.at(bc.utf8[b]);

  // Words as symbol ids, with their counts.
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  words.reserve(word_counts.size());
  counts.reserve(word_counts.size());
  for (const auto& [w, c] : word_counts) {
    std::vector<int32_t> syms;
    syms.reserve(w.size());
    for (unsigned char b : w) syms.push_back(byte_id[b]);
    words.push_back(std::move(syms));
    counts.push_back(c);
  }

  std::unordered_map<Pair, int64_t, PairHash> pair_counts;
  std::unordered_map<Pair, std::vector<uint32_t>, PairHash> where;
  for (size_t i = 0; i < words.size(); ++i) {
    const auto& w = words[i];
    for (size_t k = 0; k + 1 < w.size(); ++k) {
      const Pair p{w[k], w[k + 1]};
      pair_counts[p] += counts[i];
      auto& v = where[p];
      if (v.empty() || v.back() != i) v.push_back(static_cast<uint32_t>(i));
    }
  }
  std::vector<Queued> queue;  // a heap under Lower
  auto push = [&](Queued q) {
    queue.push_back(std::move(q));
    std::push_heap(queue.begin(), queue.end(), Lower{});
  };
  auto push_all = [&] {
    for (auto& [p, pos] : where) {
      const int64_t c = pair_counts[p];
      if (c > 0) {
        std::sort(pos.begin(), pos.end());
        pos.erase(std::unique(pos.begin(), pos.end()), pos.end());
        push(Queued{p, c, std::move(pos)});
      }
    }
    where.clear();
  };
  push_all();

  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<int32_t> merged;
  while (static_cast<int64_t>(word_to_id.size()) < o.vocab_size && !queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), Lower{});
    Queued top = std::move(queue.back());
    queue.pop_back();
    const int64_t now = pair_counts[top.pair];
    if (top.count != now) {
      top.count = now;
      push(std::move(top));
      continue;
    }
    if (top.count < 1 || o.min_frequency > top.count) break;

    const int32_t a = top.pair.first;
    const int32_t b = top.pair.second;
    const std::string token = id_to_word[a] + id_to_word[b];
    add(token);
    const int32_t z = word_to_id.at(token);
    merges.emplace_back(id_to_word[a], id_to_word[b]);

    // Replace (a, b) by z in each word, left to right, recording how the neighbouring
    // pairs change (HF's Word::merge).
    for (uint32_t i : top.pos) {
      std::vector<int32_t>& w = words[i];
      const int64_t c = counts[i];
      auto change = [&](Pair p, int64_t delta) {
        pair_counts[p] += delta * c;
        if (delta > 0) where[p].push_back(i);
      };
      merged.clear();
      size_t r = 0;
      while (r < w.size()) {
        if (r + 1 < w.size() && w[r] == a && w[r + 1] == b) {
          if (!merged.empty()) {
            change({merged.back(), a}, -1);
            change({merged.back(), z}, +1);
          }
          if (r + 2 < w.size()) {
            change({b, w[r + 2]}, -1);
            change({z, w[r + 2]}, +1);
          }
          merged.push_back(z);
          r += 2;
        } else {
          merged.push_back(w[r]);
          r += 1;
        }
      }
      w.swap(merged);
    }
    push_all();
  }

  ByteLevelBPE t = ByteLevelBPE::from_vocab_merges(std::move(word_to_id), std::move(merges));
  t.add_special_tokens(o.special_tokens);
  return t;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BRISK_CHECK(in.good(), "train_bpe: cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  BRISK_CHECK(!in.bad(), "train_bpe: cannot read ", path);
  return ss.str();
}

}  // namespace

ByteLevelBPE train_bpe(const std::vector<std::string>& files, const BpeTrainerOptions& options) {
  WordCounts counts;
  std::vector<std::string_view> pieces;
  for (const std::string& path : files) {
    const std::string text = read_file(path);
    // The whole file is checked first, so the error names its offset in the file.
    const size_t bad = find_invalid_utf8(text);
    BRISK_CHECK(bad == std::string::npos, "train_bpe: ", path, ": invalid UTF-8 at byte offset ", bad);
    size_t start = 0;
    while (start < text.size()) {
      const size_t nl = text.find('\n', start);
      const size_t end = nl == std::string::npos ? text.size() : nl + 1;
      count_words(std::string_view(text).substr(start, end - start), start, path, counts, pieces);
      start = end;
    }
  }
  return train_from_counts(counts, options);
}

ByteLevelBPE train_bpe_from_texts(const std::vector<std::string>& texts, const BpeTrainerOptions& options) {
  WordCounts counts;
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < texts.size(); ++i) {
    count_words(texts[i], 0, brisk::detail::cat("text ", i), counts, pieces);
  }
  return train_from_counts(counts, options);
}

}  // namespace brisk::text
