// text/bpe.cpp: ByteLevelBPE: loading and saving HF's formats, encode (added tokens, GPT-2's
// pre-tokenization, rank-ordered merges with a word cache) and decode.
// Not here: the pattern matcher (text/pretokenize.cpp), the trainer (text/bpe_trainer.cpp).
#include "text/bpe.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/error.h"
#include "engine/serialize.h"
#include "text/bpe_detail.h"
#include "text/pretokenize.h"

namespace brisk::text {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

namespace detail {

const ByteChars& byte_chars() {
  static const ByteChars table = [] {
    ByteChars t{};
    // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68
    // bytes take the code points 256, 257, ... in byte order.
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t.cp[b] = keep ? static_cast<uint32_t>(b) : 0;
    }
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      if (!keep) t.cp[b] = 256 + n++;
    }
    std::fill(std::begin(t.byte_of), std::end(t.byte_of), int16_t{-1});
    for (int b = 0; b < 256; ++b) {
      const uint32_t c = t.cp[b];
      t.byte_of[c] = static_cast<int16_t>(b);
      std::string& s = t.utf8[b];
      if (c < 0x80) {
        s.push_back(static_cast<char>(c));
      } else {
        s.push_back(static_cast<char>(0xC0 | (c >> 6)));
        s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      }
    }
    return t;
  }();
  return table;
}

// The code point of one valid UTF-8 character of `len` bytes.
uint32_t decode_one(std::string_view ch, size_t len) {
  const auto* s = reinterpret_cast<const unsigned char*>(ch.data());
  switch (len) {
    case 1: return s[0];
    case 2: return ((s[0] & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    case 3: return ((s[0] & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    default: return ((s[0] & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
  }
}

std::string to_byte_chars(std::string_view bytes) {
  const ByteChars& t = byte_chars();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += t.utf8[b];
  return out;
}

// A string-keyed cache of word -> ids in one arena (open addressing, linear probing). When it
// holds kMaxEntries it starts over: a bounded memory for any input, as HF's bounded cache.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;  // HF's MAX_LENGTH: longer words are not cached
  static constexpr size_t kMaxEntries = size_t{1} << 18;

  WordCache() { reset_(size_t{1} << 12); }

  static uint64_t hash(std::string_view s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
    return h | 1;  // 0 marks an empty slot
  }

  // Appends the cached ids of `word` to out; false when absent.
  bool find(std::string_view word, uint64_t h, std::vector<int32_t>& out) const {
    size_t i = h & mask_;
    while (slots_[i].hash != 0) {
      const Slot& s = slots_[i];
      if (s.hash == h && s.key_len == word.size() &&
          std::memcmp(keys_.data() + s.key_off, word.data(), word.size()) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
        return true;
      }
      i = (i + 1) & mask_;
    }
    return false;
  }

  void insert(std::string_view word, uint64_t h, const int32_t* ids, size_t n) {
    if (word.size() > kMaxWordBytes) return;
    if (used_ >= kMaxEntries) reset_(slots_.size());
    if ((used_ + 1) * 2 > slots_.size()) grow_();
    size_t i = h & mask_;
    while (slots_[i].hash != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                     static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)};
    keys_.append(word);
    ids_.insert(ids_.end(), ids, ids + n);
    ++used_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0, ids_off = 0, ids_len = 0;
  };

  void reset_(size_t capacity) {
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }

  void grow_() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].hash != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t used_ = 0;
};

}  // namespace detail

using detail::WordCache;

// pair (left id, right id) -> (rank, merged id), open addressing over 64-bit keys.
struct ByteLevelBPE::MergeTable {
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t id = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  std::vector<Entry> slots;
  uint64_t mask = 0;
  int shift = 64;

  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t home(uint64_t k) const { return (k * 0x9E3779B97F4A7C15ull) >> shift; }

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    slots.assign(cap, Entry{});
    mask = cap - 1;
    shift = 64 - __builtin_ctzll(cap);
  }
  // A later duplicate of a pair replaces the earlier one, as HF's HashMap collect does.
  void put(int32_t a, int32_t b, int32_t rank, int32_t id) {
    const uint64_t k = key(a, b);
    size_t i = home(k);
    while (slots[i].key != kEmpty && slots[i].key != k) i = (i + 1) & mask;
    slots[i] = Entry{k, rank, id};
  }
  const Entry* get(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    size_t i = home(k);
    while (slots[i].key != kEmpty) {
      if (slots[i].key == k) return &slots[i];
      i = (i + 1) & mask;
    }
    return nullptr;
  }
};

// An empty tokenizer (no vocabulary) is a usable one: every byte is unknown, so it encodes to
// nothing, as HF's empty BPE does.
ByteLevelBPE::ByteLevelBPE() : cache_mutex_(std::make_unique<std::mutex>()) { build_(); }
ByteLevelBPE::~ByteLevelBPE() = default;
ByteLevelBPE::ByteLevelBPE(ByteLevelBPE&&) noexcept = default;
ByteLevelBPE& ByteLevelBPE::operator=(ByteLevelBPE&&) noexcept = default;

namespace {

std::string read_text_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  BRISK_CHECK(in.good(), what, ": cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  BRISK_CHECK(!in.bad(), what, ": cannot read ", path);
  return ss.str();
}

// A string as JSON would spell it, for error messages (bytes that are not UTF-8 replaced).
std::string quoted(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json parse_json(const std::string& path, const char* what) {
  const std::string text = read_text_file(path, what);
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    BRISK_FAIL(what, ": ", path, " is not valid JSON: ", e.what());
  }
}

// token -> id from a JSON object; ids are non-negative integers, each used once.
std::unordered_map<std::string, int32_t> vocab_from_json(const Json& j, const std::string& where) {
  BRISK_CHECK(j.is_object(), where, ": the vocabulary must be a JSON object (token -> id)");
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<int64_t, std::string> seen;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const Json& v = it.value();
    BRISK_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < INT32_MAX, where, ": token ",
                quoted(it.key()), " has id ", v.dump(), ", not a non-negative integer");
    const int64_t id = v.get<int64_t>();
    auto [pos, fresh] = seen.emplace(id, it.key());
    BRISK_CHECK(fresh, where, ": duplicate id ", id, " (tokens ", quoted(pos->second), " and ", quoted(it.key()), ")");
    vocab.emplace(it.key(), static_cast<int32_t>(id));
  }
  return vocab;
}

}  // namespace

void ByteLevelBPE::build_() {
  int64_t size = 0;
  for (const auto& [tok, id] : vocab_) size = std::max<int64_t>(size, int64_t{id} + 1);
  for (const AddedToken& t : added_) size = std::max<int64_t>(size, int64_t{t.id} + 1);
  id_to_token_.assign(static_cast<size_t>(size), std::string());
  has_id_.assign(static_cast<size_t>(size), 0);
  is_special_.assign(static_cast<size_t>(size), 0);
  for (const auto& [tok, id] : vocab_) {
    id_to_token_[id] = tok;
    has_id_[id] = 1;
  }
  for (const AddedToken& t : added_) {
    id_to_token_[t.id] = t.content;
    has_id_[t.id] = 1;
    is_special_[t.id] = t.special ? 1 : 0;
  }
  const detail::ByteChars& bc = detail::byte_chars();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(bc.utf8[b]);
    byte_id_[b] = it == vocab_.end() ? -1 : it->second;
  }
  // Added tokens by pass (non-normalized first), longest first, so the first that matches at
  // a position is the longest there.
  for (int pass = 0; pass < 2; ++pass) {
    AddedMatcher& m = matchers_[pass];
    m.tokens.clear();
    std::fill(std::begin(m.first), std::end(m.first), false);
    for (size_t i = 0; i < added_.size(); ++i) {
      if (added_[i].normalized == (pass == 1)) m.tokens.push_back(i);
    }
    std::stable_sort(m.tokens.begin(), m.tokens.end(),
                     [&](size_t a, size_t b) { return added_[a].content.size() > added_[b].content.size(); });
    for (size_t i : m.tokens) m.first[static_cast<unsigned char>(added_[i].content[0])] = true;
  }
  table_ = std::make_unique<MergeTable>(merges_.size());
  for (size_t r = 0; r < merges_.size(); ++r) {
    const auto& [a, b] = merges_[r];
    table_->put(vocab_.at(a), vocab_.at(b), static_cast<int32_t>(r), vocab_.at(a + b));
  }
  cache_ = std::make_unique<WordCache>();
}

namespace {

// Checks that every merge's parts and result are in the vocabulary; `where(i)` names merge i.
template <class Where>
void check_merges(const std::unordered_map<std::string, int32_t>& vocab,
                  const std::vector<std::pair<std::string, std::string>>& merges, Where where) {
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& m = merges[i];
    for (const std::string* part : {&m.first, &m.second}) {
      BRISK_CHECK(vocab.count(*part), where(i), ": merge part ", quoted(*part), " is not in the vocabulary");
    }
    BRISK_CHECK(vocab.count(m.first + m.second), where(i), ": the merge of ", quoted(m.first), " and ",
                quoted(m.second), " (", quoted(m.first + m.second), ") is not in the vocabulary");
  }
}

}  // namespace

ByteLevelBPE ByteLevelBPE::from_vocab_merges(std::unordered_map<std::string, int32_t> vocab,
                                             std::vector<std::pair<std::string, std::string>> merges) {
  check_merges(vocab, merges, [](size_t i) { return brisk::detail::cat("ByteLevelBPE: merge ", i); });
  ByteLevelBPE t;
  t.vocab_ = std::move(vocab);
  t.merges_ = std::move(merges);
  t.build_();
  return t;
}

ByteLevelBPE ByteLevelBPE::from_files(const std::string& vocab_json, const std::string& merges_txt) {
  auto vocab =
      vocab_from_json(parse_json(vocab_json, "ByteLevelBPE::from_files"), "ByteLevelBPE::from_files: " + vocab_json);
  const std::string text = read_text_file(merges_txt, "ByteLevelBPE::from_files");
  const size_t bad = find_invalid_utf8(text);
  BRISK_CHECK(bad == std::string::npos, "ByteLevelBPE::from_files: ", merges_txt,
              " is not valid UTF-8 (at byte offset ", bad, ")");
  // As HF's convert_merges_to_hashmap: lines (without "\n" or "\r\n"), "#version" lines
  // skipped, every other line exactly two tokens split by one space.
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<size_t> line_of;
  size_t start = 0;
  size_t line = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    const size_t next = end == std::string::npos ? text.size() : end + 1;
    if (end == std::string::npos) end = text.size();
    std::string_view l(text.data() + start, end - start);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    ++line;
    start = next;
    if (l.substr(0, 8) == "#version") continue;
    const size_t sp = l.find(' ');
    BRISK_CHECK(sp != std::string_view::npos && l.find(' ', sp + 1) == std::string_view::npos,
                "ByteLevelBPE::from_files: ", merges_txt, " line ", line,
                ": a merge is two tokens separated by one space, got ", quoted(l));
    merges.emplace_back(std::string(l.substr(0, sp)), std::string(l.substr(sp + 1)));
    line_of.push_back(line);
  }
  check_merges(vocab, merges, [&](size_t i) {
    return brisk::detail::cat("ByteLevelBPE::from_files: ", merges_txt, " line ", line_of[i]);
  });
  ByteLevelBPE t;
  t.vocab_ = std::move(vocab);
  t.merges_ = std::move(merges);
  t.build_();
  return t;
}

ByteLevelBPE ByteLevelBPE::from_tokenizer_json(const std::string& path) {
  try {
    return from_tokenizer_json_(path);
  } catch (const Json::exception& e) {
    // A field of the wrong JSON type read by value(): nlohmann's message names the type.
    BRISK_FAIL("ByteLevelBPE::from_tokenizer_json: ", path, ": ", e.what());
  }
}

ByteLevelBPE ByteLevelBPE::from_tokenizer_json_(const std::string& path) {
  const std::string what = "ByteLevelBPE::from_tokenizer_json: " + path;
  const Json root = parse_json(path, "ByteLevelBPE::from_tokenizer_json");
  BRISK_CHECK(root.is_object(), what, ": the root must be a JSON object");
  auto field = [&](const Json& obj, const char* key, const std::string& where) -> const Json& {
    auto it = obj.find(key);
    BRISK_CHECK(it != obj.end(), what, ": missing field \"", where, key, "\"");
    return *it;
  };
  auto is_null_or_absent = [](const Json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null();
  };
  auto type_of = [&](const Json& obj, const std::string& name) {
    BRISK_CHECK(obj.is_object(), what, ": \"", name, "\" must be an object or null");
    const Json& t = field(obj, "type", name + ".");
    BRISK_CHECK(t.is_string(), what, ": \"", name, ".type\" must be a string");
    return t.get<std::string>();
  };
  for (const char* key : {"normalizer", "truncation", "padding"}) {
    BRISK_CHECK(is_null_or_absent(root, key), what, ": \"", key,
                "\" is not supported (only null): ", root[key].dump().substr(0, 80));
  }
  ByteLevelBPE t;
  if (!is_null_or_absent(root, "pre_tokenizer")) {
    const Json& p = root["pre_tokenizer"];
    const std::string type = type_of(p, "pre_tokenizer");
    BRISK_CHECK(type == "ByteLevel", what, ": pre_tokenizer \"", type, "\" is not supported (only ByteLevel)");
    t.add_prefix_space_ = p.value("add_prefix_space", false);
    t.use_regex_ = p.value("use_regex", true);
  }
  t.decoder_json_ = "null";
  if (!is_null_or_absent(root, "decoder")) {
    const std::string type = type_of(root["decoder"], "decoder");
    BRISK_CHECK(type == "ByteLevel", what, ": decoder \"", type, "\" is not supported (only ByteLevel or null)");
    t.decoder_json_ = root["decoder"].dump();
  }
  // Post-processors: ByteLevel (offsets only), a TemplateProcessing's single-sequence template
  // (special tokens around every encoding, as HF's encode adds them by default), or a Sequence
  // of those.
  t.post_processor_json_ = "null";
  std::function<void(const Json&, const std::string&)> post = [&](const Json& p, const std::string& name) {
    const std::string type = type_of(p, name);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
      const Json& list = field(p, "processors", name + ".");
      BRISK_CHECK(list.is_array(), what, ": \"", name, ".processors\" must be an array");
      for (size_t i = 0; i < list.size(); ++i) post(list[i], brisk::detail::cat(name, ".processors[", i, "]"));
      return;
    }
    BRISK_CHECK(type == "TemplateProcessing", what, ": ", name, " \"", type,
                "\" is not supported (only ByteLevel, TemplateProcessing, Sequence or null)");
    BRISK_CHECK(t.prefix_ids_.empty() && t.suffix_ids_.empty(), what, ": ", name,
                ": a second TemplateProcessing is not supported");
    const Json& single = field(p, "single", name + ".");
    BRISK_CHECK(single.is_array(), what, ": \"", name, ".single\" must be an array");
    const Json none = Json::object();
    const Json& specials = p.contains("special_tokens") ? p["special_tokens"] : none;
    bool seen = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const Json& item = single[i];
      const std::string where = brisk::detail::cat(what, ": ", name, ".single[", i, "]");
      if (item.is_object() && item.contains("Sequence")) {
        BRISK_CHECK(!seen, where, ": a second Sequence");
        seen = true;
        continue;
      }
      BRISK_CHECK(item.is_object() && item.contains("SpecialToken") && item["SpecialToken"].contains("id"), where,
                  " is neither a Sequence nor a SpecialToken");
      const Json& id = item["SpecialToken"]["id"];
      BRISK_CHECK(id.is_string() && specials.contains(id.get<std::string>()), where, ": special token ", id.dump(),
                  " is not in ", name, ".special_tokens");
      const Json& ids = specials[id.get<std::string>()].value("ids", Json::array());
      for (const Json& x : ids) {
        BRISK_CHECK(x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < INT32_MAX, where,
                    ": special token ", id.dump(), " has id ", x.dump());
        (seen ? t.suffix_ids_ : t.prefix_ids_).push_back(static_cast<int32_t>(x.get<int64_t>()));
      }
    }
    BRISK_CHECK(seen, what, ": ", name, ".single has no Sequence");
  };
  if (!is_null_or_absent(root, "post_processor")) {
    post(root["post_processor"], "post_processor");
    t.post_processor_json_ = root["post_processor"].dump();
  }
  const Json& model = field(root, "model", "");
  BRISK_CHECK(model.is_object(), what, ": \"model\" must be an object");
  const std::string type = model.contains("type") ? type_of(model, "model") : "";
  BRISK_CHECK(type == "BPE", what, ": model.type is \"", type, "\", not \"BPE\"");
  if (!is_null_or_absent(model, "dropout")) {
    BRISK_CHECK(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0, what, ": model.dropout ",
                model["dropout"].dump(), " is not supported (only null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (is_null_or_absent(model, key)) continue;
    BRISK_CHECK(model[key].is_string() && model[key].get<std::string>().empty(), what, ": model.", key, " ",
                model[key].dump(), " is not supported (only null or \"\")");
  }
  BRISK_CHECK(!model.value("byte_fallback", false), what, ": model.byte_fallback = true is not supported");
  t.fuse_unk_ = model.value("fuse_unk", false);
  t.ignore_merges_ = model.value("ignore_merges", false);
  t.vocab_ = vocab_from_json(field(model, "vocab", "model."), what + ": model.vocab");
  const Json& merges = field(model, "merges", "model.");
  BRISK_CHECK(merges.is_array(), what, ": model.merges must be an array");
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    if (m.is_string()) {  // the older "a b" form
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      BRISK_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, what, ": model.merges[", i, "] ",
                  m.dump(), " is not two tokens split by one space");
      t.merges_.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      BRISK_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), what, ": model.merges[", i,
                  "] ", m.dump().substr(0, 80), " is not a pair of strings");
      t.merges_.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  check_merges(t.vocab_, t.merges_, [&](size_t i) { return brisk::detail::cat(what, ": model.merges[", i, "]"); });
  if (!is_null_or_absent(model, "unk_token")) {
    BRISK_CHECK(model["unk_token"].is_string(), what, ": model.unk_token must be a string");
    t.unk_token_ = model["unk_token"].get<std::string>();
    auto it = t.vocab_.find(t.unk_token_);
    BRISK_CHECK(it != t.vocab_.end(), what, ": model.unk_token ", model["unk_token"].dump(),
                " is not in the vocabulary");
    t.unk_id_ = it->second;
  }
  if (!is_null_or_absent(root, "added_tokens")) {
    const Json& added = root["added_tokens"];
    BRISK_CHECK(added.is_array(), what, ": \"added_tokens\" must be an array");
    for (size_t i = 0; i < added.size(); ++i) {
      const Json& a = added[i];
      const std::string where = brisk::detail::cat(what, ": added_tokens[", i, "]");
      BRISK_CHECK(a.is_object(), where, " must be an object");
      const Json& id = field(a, "id", brisk::detail::cat("added_tokens[", i, "]."));
      const Json& content = field(a, "content", brisk::detail::cat("added_tokens[", i, "]."));
      BRISK_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX, where, ".id ",
                  id.dump(), " is not a non-negative integer");
      BRISK_CHECK(content.is_string() && !content.get<std::string>().empty(), where,
                  ".content must be a non-empty string");
      BRISK_CHECK(!a.value("single_word", false), where, ".single_word = true is not supported");
      AddedToken tok{content.get<std::string>(), static_cast<int32_t>(id.get<int64_t>()),
                     a.value("special", false),  a.value("normalized", true),
                     a.value("lstrip", false),   a.value("rstrip", false)};
      BRISK_CHECK(find_invalid_utf8(tok.content) == std::string::npos, where, ".content is not valid UTF-8");
      for (const AddedToken& o : t.added_) {
        BRISK_CHECK(o.content != tok.content, where, ": token ", content.dump(), " is listed twice");
      }
      t.added_.push_back(std::move(tok));
    }
  }
  t.build_();
  for (int32_t id : t.prefix_ids_) {
    BRISK_CHECK(id < t.vocab_size() && t.has_id_[id], what, ": post_processor: special token id ", id,
                " is not in the vocabulary");
  }
  for (int32_t id : t.suffix_ids_) {
    BRISK_CHECK(id < t.vocab_size() && t.has_id_[id], what, ": post_processor: special token id ", id,
                " is not in the vocabulary");
  }
  return t;
}

int ByteLevelBPE::add_special_tokens(const std::vector<std::string>& tokens) { return add_(tokens, true); }
int ByteLevelBPE::add_tokens(const std::vector<std::string>& tokens) { return add_(tokens, false); }

int ByteLevelBPE::add_(const std::vector<std::string>& tokens, bool special) {
  int fresh = 0;
  for (const std::string& content : tokens) {
    BRISK_CHECK(!content.empty(), "ByteLevelBPE::add_tokens: an added token cannot be empty");
    const size_t bad = find_invalid_utf8(content);
    BRISK_CHECK(bad == std::string::npos, "ByteLevelBPE::add_tokens: token ", added_.size(),
                " is not valid UTF-8 (at byte ", bad, ")");
    auto same = std::find_if(added_.begin(), added_.end(), [&](const AddedToken& t) { return t.content == content; });
    if (same != added_.end()) {
      // HF makes an added token special when it is added again as one.
      if (special) same->special = true;
      continue;
    }
    int32_t id = -1;
    if (auto it = vocab_.find(content); it != vocab_.end()) {
      id = it->second;
    } else {
      // The next id after the vocabulary and the earlier added tokens (HF's rule).
      int64_t next = 0;
      for (const auto& [tok, i] : vocab_) next = std::max<int64_t>(next, int64_t{i} + 1);
      for (const AddedToken& t : added_) next = std::max<int64_t>(next, int64_t{t.id} + 1);
      id = static_cast<int32_t>(next);
      ++fresh;
    }
    // HF's add_special_tokens makes them non-normalized; add_tokens normalized.
    added_.push_back(AddedToken{.content = content, .id = id, .special = special, .normalized = !special});
  }
  build_();
  return fresh;
}

int32_t ByteLevelBPE::token_to_id(std::string_view token) const {
  for (const AddedToken& t : added_) {
    if (t.content == token) return t.id;
  }
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

const std::string& ByteLevelBPE::id_to_token(int32_t id) const {
  BRISK_CHECK(id >= 0 && id < vocab_size() && has_id_[id], "ByteLevelBPE::id_to_token: id ", id,
              " is not in the vocabulary (size ", vocab_size(), ")");
  return id_to_token_[id];
}

// One word's ids: its bytes' characters merged by rank as HF's Word::merge_all does (the
// lowest rank first, the leftmost of equal ranks; a queued pair whose symbols have changed
// since is skipped when its merged id no longer matches).
void ByteLevelBPE::encode_piece_(std::string_view piece, WordCache& cache, std::vector<int32_t>& out) const {
  const uint64_t h = WordCache::hash(piece);
  if (cache.find(piece, h, out)) return;
  const size_t start = out.size();
  if (ignore_merges_) {
    if (auto it = vocab_.find(detail::to_byte_chars(piece)); it != vocab_.end()) {
      out.push_back(it->second);
      cache.insert(piece, h, out.data() + start, 1);
      return;
    }
  }
  struct Symbol {
    int32_t c;
    int32_t prev;
    int32_t next;
    int32_t len;  // 0: merged into its left neighbour
  };
  struct Queued {
    int32_t rank;
    int32_t pos;
    int32_t id;
    bool operator>(const Queued& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Queued> queue;
  sym.clear();
  queue.clear();
  bool pending_unk = false;
  for (unsigned char b : piece) {
    int32_t id = byte_id_[b];
    int32_t len = 1;
    if (id < 0) {
      // A byte the vocabulary lacks: the unk token (fused with a preceding one when asked),
      // or nothing, as HF's merge_word without byte_fallback.
      if (unk_id_ < 0) continue;
      if (pending_unk && fuse_unk_) {
        sym.back().len += 1;
        continue;
      }
      id = unk_id_;
      pending_unk = true;
    } else {
      pending_unk = false;
    }
    const int32_t n = static_cast<int32_t>(sym.size());
    if (n > 0) sym.back().next = n;
    sym.push_back(Symbol{id, n - 1, -1, len});
  }
  const MergeTable& table = *table_;
  for (size_t i = 0; i + 1 < sym.size(); ++i) {
    if (const auto* m = table.get(sym[i].c, sym[i + 1].c)) {
      queue.push_back(Queued{m->rank, static_cast<int32_t>(i), m->id});
    }
  }
  std::make_heap(queue.begin(), queue.end(), std::greater<>());
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), std::greater<>());
    const Queued top = queue.back();
    queue.pop_back();
    Symbol& cur = sym[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const Symbol right = sym[cur.next];
    const auto* m = table.get(cur.c, right.c);
    if (m == nullptr || m->id != top.id) continue;  // stale
    cur.c = top.id;
    cur.len += right.len;
    sym[cur.next].len = 0;
    cur.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const auto* p = table.get(sym[cur.prev].c, cur.c)) {
        queue.push_back(Queued{p->rank, cur.prev, p->id});
        std::push_heap(queue.begin(), queue.end(), std::greater<>());
      }
    }
    if (cur.next >= 0) {
      if (const auto* p = table.get(cur.c, sym[cur.next].c)) {
        queue.push_back(Queued{p->rank, top.pos, p->id});
        std::push_heap(queue.begin(), queue.end(), std::greater<>());
      }
    }
  }
  for (const Symbol& s : sym) {
    if (s.len != 0) out.push_back(s.c);
  }
  cache.insert(piece, h, out.data() + start, out.size() - start);
}

// Text with no added tokens in it: pre-tokenized, each piece merged.
void ByteLevelBPE::encode_segment_(std::string_view text, size_t base, WordCache& cache,
                                   std::vector<int32_t>& out) const {
  std::string prefixed;
  if (add_prefix_space_ && (text.empty() || text.front() != ' ')) {
    prefixed = " ";
    prefixed += text;
    text = prefixed;
    // Offsets in error messages count from the caller's text: one less here (an error cannot
    // be at the added space, so the unsigned wrap-around of base 0 comes back).
    base -= 1;
  }
  if (!use_regex_) {
    const size_t bad = find_invalid_utf8(text);
    BRISK_CHECK(bad == std::string_view::npos, "tokenizer: invalid UTF-8 at byte offset ", base + bad);
    if (!text.empty()) encode_piece_(text, cache, out);
    return;
  }
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  pretokenize_gpt2(text, pieces, base);
  for (std::string_view p : pieces) encode_piece_(p, cache, out);
}

namespace {

// The start of the run of whitespace (\s, Unicode White_Space) that ends at `at`, not before
// `floor`. Invalid UTF-8 counts as non-space (encode refuses it later, naming the offset).
size_t whitespace_before(std::string_view text, size_t floor, size_t at) {
  while (at > floor) {
    size_t b = at - 1;
    while (b > floor && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
    const std::string_view ch = text.substr(b, at - b);
    const size_t len = ch.size();
    if (find_invalid_utf8(ch) != std::string_view::npos || detail::char_class(detail::decode_one(ch, len)) != 3) break;
    at = b;
  }
  return at;
}

// The end of the run of whitespace that starts at `at`, not past `limit`.
size_t whitespace_after(std::string_view text, size_t at, size_t limit) {
  while (at < limit) {
    const auto b0 = static_cast<unsigned char>(text[at]);
    const size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    if (at + len > limit) break;
    const std::string_view ch = text.substr(at, len);
    if (find_invalid_utf8(ch) != std::string_view::npos || detail::char_class(detail::decode_one(ch, len)) != 3) break;
    at += len;
  }
  return at;
}

}  // namespace

void ByteLevelBPE::encode_(std::string_view text, WordCache& cache, std::vector<int32_t>& out) const {
  out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  encode_text_(text, cache, out);
  out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
}

void ByteLevelBPE::encode_text_(std::string_view text, WordCache& cache, std::vector<int32_t>& out) const {
  // Most texts hold no added token: one look at each byte's first-byte flag says so.
  bool maybe = false;
  for (const AddedMatcher& m : matchers_) {
    if (m.tokens.empty()) continue;
    for (unsigned char c : text) {
      if (m.first[c]) {
        maybe = true;
        break;
      }
    }
  }
  if (!maybe) {
    if (!text.empty()) encode_segment_(text, 0, cache, out);
    return;
  }
  // Added tokens split the text first (leftmost-longest, as HF's Aho-Corasick matcher): the
  // non-normalized ones, then the normalized ones in what is left (HF's two passes).
  struct Span {
    size_t begin, end;
    int32_t id;  // -1: text still to tokenize
  };
  // Two passes: non-normalized tokens, then normalized ones (build_() made the matchers).
  std::vector<Span> spans{{0, text.size(), -1}};
  for (const AddedMatcher& matcher : matchers_) {
    const auto& toks = matcher.tokens;
    if (toks.empty()) continue;
    const auto& first = matcher.first;
    std::vector<Span> next;
    for (const Span& s : spans) {
      if (s.id >= 0) {
        next.push_back(s);
        continue;
      }
      size_t from = s.begin;
      size_t i = s.begin;
      while (i < s.end) {
        const AddedToken* hit = nullptr;
        if (first[static_cast<unsigned char>(text[i])]) {
          for (size_t k : toks) {
            const AddedToken& t = added_[k];
            if (t.content.size() <= s.end - i && text.compare(i, t.content.size(), t.content) == 0) {
              hit = &t;
              break;
            }
          }
        }
        if (hit == nullptr) {
          ++i;
          continue;
        }
        // lstrip / rstrip widen the match over whitespace (not into the previous match or
        // past the span), as HF's find_matches; the search goes on after the match itself.
        const size_t end = i + hit->content.size();
        const size_t start = hit->lstrip ? whitespace_before(text, from, i) : i;
        const size_t stop = hit->rstrip ? whitespace_after(text, end, s.end) : end;
        if (start > from) next.push_back(Span{from, start, -1});
        next.push_back(Span{start, stop, hit->id});
        i = stop;
        from = stop;
      }
      if (from < s.end) next.push_back(Span{from, s.end, -1});
    }
    spans = std::move(next);
  }
  for (const Span& s : spans) {
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      encode_segment_(text.substr(s.begin, s.end - s.begin), s.begin, cache, out);
    }
  }
}

std::vector<int32_t> ByteLevelBPE::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::unique_lock<std::mutex> lock(*cache_mutex_, std::try_to_lock);
  if (lock.owns_lock()) {
    encode_(text, *cache_, out);
  } else {
    WordCache local;
    encode_(text, local, out);
  }
  return out;
}

namespace {

// body(i, cache) for i < n across OpenMP threads, each thread with a word cache of its own
// (chunks of `chunk` indices, dynamically scheduled). No exception may leave an OpenMP region:
// the first one's message, through describe(i, what), is thrown after the loop.
template <class Body, class Describe>
void parallel_with_caches(int64_t n, int chunk, Body body, Describe describe) {
  std::string error;
#pragma omp parallel if (n > 1)
  {
    WordCache cache;
#pragma omp for schedule(dynamic, chunk)
    for (int64_t i = 0; i < n; ++i) {
      try {
        body(i, cache);
      } catch (const std::exception& e) {
#pragma omp critical(brisk_text_parallel_encode)
        if (error.empty()) error = describe(i, e.what());
      }
    }
  }
  BRISK_CHECK(error.empty(), error);
}

}  // namespace

std::vector<int32_t> ByteLevelBPE::encode_large(std::string_view text, int64_t chunk_bytes) const {
  bool can_cut = use_regex_ && !add_prefix_space_ && chunk_bytes > 0;
  for (const AddedToken& t : added_) can_cut = can_cut && t.content.find('\n') == std::string::npos;
  if (!can_cut || text.size() <= static_cast<uint64_t>(chunk_bytes)) return encode(text);
  // Checked whole first, so that an error names the offset in the whole text.
  const size_t bad = find_invalid_utf8(text);
  BRISK_CHECK(bad == std::string_view::npos, "tokenizer: invalid UTF-8 at byte offset ", bad);
  // A cut goes after a "\n" that ASCII non-spaces surround ("x\ny"): the "\n" is then a piece of
  // its own whether the text goes on or ends there, and the piece after it starts fresh (the
  // pattern looks only forward). A "\n" after whitespace would not do: " \n" ends a text as
  // one piece but gives " ", "\n" before a word.
  auto ascii_word = [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x80 && detail::char_class(u) != 3;
  };
  std::vector<size_t> cuts{0};
  size_t from = static_cast<size_t>(chunk_bytes);
  while (from < text.size()) {
    size_t nl = text.find('\n', std::max<size_t>(from - 1, 1));
    while (nl != std::string_view::npos && nl + 1 < text.size() &&
           !(ascii_word(text[nl - 1]) && ascii_word(text[nl + 1]))) {
      nl = text.find('\n', nl + 1);
    }
    if (nl == std::string_view::npos || nl + 1 >= text.size()) break;
    cuts.push_back(nl + 1);
    from = nl + 1 + static_cast<size_t>(chunk_bytes);
  }
  cuts.push_back(text.size());
  const int64_t chunks = static_cast<int64_t>(cuts.size()) - 1;
  std::vector<std::vector<int32_t>> parts(static_cast<size_t>(chunks));
  parallel_with_caches(
      chunks, 1,
      [&](int64_t c, WordCache& cache) { encode_text_(text.substr(cuts[c], cuts[c + 1] - cuts[c]), cache, parts[c]); },
      [](int64_t, const char* what) { return brisk::detail::cat("encode_large: ", what); });
  size_t total = prefix_ids_.size() + suffix_ids_.size();
  for (const auto& p : parts) total += p.size();
  std::vector<int32_t> out;
  out.reserve(total);
  out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

std::vector<std::vector<int32_t>> ByteLevelBPE::encode_batch(const std::vector<std::string>& texts) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  parallel_with_caches(
      static_cast<int64_t>(texts.size()), 16, [&](int64_t i, WordCache& cache) { encode_(texts[i], cache, out[i]); },
      [](int64_t i, const char* what) { return brisk::detail::cat("encode_batch: text ", i, ": ", what); });
  return out;
}

namespace {

// Appends `bytes` to out with each ill-formed sequence replaced by U+FFFD, one per maximal
// subpart, as Rust's String::from_utf8_lossy (and so HF's decoder) does.
void append_lossy_utf8(std::string_view bytes, std::string& out) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const size_t bad = find_invalid_utf8(bytes.substr(i));
    if (bad == std::string_view::npos) {
      out.append(bytes.substr(i));
      return;
    }
    out.append(bytes.substr(i, bad));
    i += bad;
    // How many bytes of a valid sequence's start are there before it breaks.
    const unsigned b0 = s[i];
    size_t need = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 1;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 2;
      lo = b0 == 0xE0 ? 0xA0 : 0x80;
      hi = b0 == 0xED ? 0x9F : 0xBF;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 3;
      lo = b0 == 0xF0 ? 0x90 : 0x80;
      hi = b0 == 0xF4 ? 0x8F : 0xBF;
    }
    size_t k = 1;
    for (size_t c = 0; c < need && i + k < n; ++c) {
      const unsigned b = s[i + k];
      if (c == 0 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
      ++k;
    }
    out.append("\xEF\xBF\xBD");
    i += k;
  }
}

}  // namespace

std::string ByteLevelBPE::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const detail::ByteChars& bc = detail::byte_chars();
  std::string bytes;
  for (int32_t id : ids) {
    BRISK_CHECK(id >= 0 && id < vocab_size() && has_id_[id], "ByteLevelBPE::decode: id ", id,
                " is not in the vocabulary (size ", vocab_size(), ")");
    if (skip_special_tokens && is_special_[id]) continue;
    const std::string& tok = id_to_token_[id];
    // Each character back to its byte; a token with a character outside the 256 (an added
    // token such as "é") stands for its own UTF-8 bytes, as HF's ByteLevel decoder.
    const size_t mark = bytes.size();
    bool all = true;
    for (size_t i = 0; i < tok.size() && all;) {
      const auto b0 = static_cast<unsigned char>(tok[i]);
      uint32_t cp = b0;
      size_t len = 1;
      if (b0 >= 0xC0 && b0 < 0xE0 && i + 1 < tok.size()) {
        cp = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(tok[i + 1]) & 0x3Fu);
        len = 2;
      } else if (b0 >= 0x80) {
        all = false;
        break;
      }
      if (cp >= std::size(bc.byte_of) || bc.byte_of[cp] < 0) {
        all = false;
        break;
      }
      bytes.push_back(static_cast<char>(bc.byte_of[cp]));
      i += len;
    }
    if (!all) {
      bytes.resize(mark);
      bytes += tok;
    }
  }
  std::string out;
  out.reserve(bytes.size());
  append_lossy_utf8(bytes, out);
  return out;
}

namespace {

// The model's vocabulary in id order, as HF writes it.
OrderedJson ordered_vocab(const std::unordered_map<std::string, int32_t>& vocab) {
  std::vector<std::pair<int32_t, const std::string*>> by_id;
  by_id.reserve(vocab.size());
  for (const auto& [tok, id] : vocab) by_id.emplace_back(id, &tok);
  std::sort(by_id.begin(), by_id.end());
  OrderedJson j = OrderedJson::object();
  // ordered_json's operator[] searches its keys one by one (quadratic for a 50k vocabulary);
  // the keys are distinct, so they go straight into its vector.
  auto& items =
      static_cast<std::vector<std::pair<const std::string, OrderedJson>>&>(j.get_ref<OrderedJson::object_t&>());
  items.reserve(by_id.size());
  for (const auto& [id, tok] : by_id) items.emplace_back(*tok, id);
  return j;
}

}  // namespace

void ByteLevelBPE::save(const std::string& vocab_json, const std::string& merges_txt) const {
  write_file_atomic(vocab_json, ordered_vocab(vocab_).dump());
  std::string m = "#version: 0.2\n";
  for (const auto& [a, b] : merges_) {
    m += a;
    m += ' ';
    m += b;
    m += '\n';
  }
  write_file_atomic(merges_txt, m);
}

void ByteLevelBPE::save_tokenizer_json(const std::string& path) const {
  auto byte_level = [](bool add_prefix_space, bool trim_offsets, bool use_regex) {
    OrderedJson j;
    j["type"] = "ByteLevel";
    j["add_prefix_space"] = add_prefix_space;
    j["trim_offsets"] = trim_offsets;
    j["use_regex"] = use_regex;
    return j;
  };
  OrderedJson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  OrderedJson added = OrderedJson::array();
  std::vector<const AddedToken*> by_id;
  for (const AddedToken& t : added_) by_id.push_back(&t);
  std::stable_sort(by_id.begin(), by_id.end(), [](const AddedToken* a, const AddedToken* b) { return a->id < b->id; });
  for (const AddedToken* t : by_id) {
    OrderedJson a;
    a["id"] = t->id;
    a["content"] = t->content;
    a["single_word"] = false;
    a["lstrip"] = t->lstrip;
    a["rstrip"] = t->rstrip;
    a["normalized"] = t->normalized;
    a["special"] = t->special;
    added.push_back(std::move(a));
  }
  root["added_tokens"] = std::move(added);
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = byte_level(add_prefix_space_, true, use_regex_);
  // What was loaded; for a trained tokenizer, what ByteLevelBPETokenizer writes. A ByteLevel
  // one is written in HF's key order, others as parsed.
  auto processor = [&](const std::string& loaded, bool default_trim) {
    if (loaded.empty()) return byte_level(true, default_trim, true);
    const Json j = Json::parse(loaded);
    if (j.is_object() && j.value("type", "") == "ByteLevel") {
      return byte_level(j.value("add_prefix_space", true), j.value("trim_offsets", true), j.value("use_regex", true));
    }
    return OrderedJson::parse(loaded);
  };
  root["post_processor"] = processor(post_processor_json_, false);
  root["decoder"] = processor(decoder_json_, true);
  OrderedJson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = unk_id_ >= 0 ? OrderedJson(unk_token_) : OrderedJson(nullptr);
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = fuse_unk_;
  model["byte_fallback"] = false;
  model["ignore_merges"] = ignore_merges_;
  model["vocab"] = ordered_vocab(vocab_);
  OrderedJson merges = OrderedJson::array();
  for (const auto& [a, b] : merges_) merges.push_back(OrderedJson::array({a, b}));
  model["merges"] = std::move(merges);
  root["model"] = std::move(model);
  write_file_atomic(path, root.dump(2));
}

}  // namespace brisk::text
