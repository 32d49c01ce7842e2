// tests/test_tokenizer.cpp: text::ByteLevelBPE and train_bpe against Hugging Face `tokenizers`
// (reference data in tests/data/tokenizer, made by tests/make_tokenizer_reference.py): the
// pre-tokenizer's pieces, ids of test strings, random strings and a 1 MB input (also under
// tokenizer.json variants: prefix space, no regex, ignore_merges, added tokens with lstrip /
// rstrip, templates, transformers' fields), decode, merges learned from the same text, files
// written byte for byte as HF writes them, encode_large's cuts, tokenize_files' token file,
// and refusals of invalid UTF-8 and malformed files with messages naming offset, file, field.
// Not here: the throughput comparison (examples/bench/bench_tokenizer.cpp).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "test_util.h"
#include "tests/paths.h"
#include "text/bpe.h"
#include "text/bpe_detail.h"
#include "text/pretokenize.h"
#include "text/token_file.h"
#include "text/tokenize_files.h"

using namespace brisk;
using namespace brisk::text;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

fs::path ref_dir() { return test::data_dir() / "tokenizer"; }

json read_json(const std::string& name) { return json::parse(test::read_bytes(ref_dir() / name)); }

const ByteLevelBPE& hf_files() {
  static const ByteLevelBPE t = [] {
    ByteLevelBPE b = ByteLevelBPE::from_files((ref_dir() / "vocab.json").string(), (ref_dir() / "merges.txt").string());
    b.add_special_tokens({"<|endoftext|>", "<pad>"});
    return b;
  }();
  return t;
}

const ByteLevelBPE& hf_json() {
  static const ByteLevelBPE t = ByteLevelBPE::from_tokenizer_json((ref_dir() / "tokenizer.json").string());
  return t;
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

uint64_t fnv1a(const std::vector<int32_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids) {
    const auto u = static_cast<uint32_t>(id);
    for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xFF)) * 0x100000001B3ull;
  }
  return h;
}

std::vector<std::string> merge_lines(const ByteLevelBPE& t) {
  std::vector<std::string> out;
  for (const auto& m : t.merges()) out.push_back(m.first + " " + m.second);
  return out;
}

}  // namespace

TEST_CASE("tokenizer: pre-tokenization splits as HF's ByteLevel pre-tokenizer") {
  const json cases = read_json("pretokenize.json");
  REQUIRE(cases.size() > 50);
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    std::vector<std::string> got;
    for (const std::string& p : pretokenize_gpt2(text)) got.push_back(text::detail::to_byte_chars(p));
    CAPTURE(text);
    CHECK(got == c["pieces"].get<std::vector<std::string>>());
  }
  // Whitespace runs give back their last character to the word that follows.
  CHECK(pretokenize_gpt2("a   b") == std::vector<std::string>{"a", "  ", " b"});
  CHECK(pretokenize_gpt2("a\r\n\r\nb  ") == std::vector<std::string>{"a", "\r\n\r", "\n", "b", "  "});
  CHECK(pretokenize_gpt2("it's") == std::vector<std::string>{"it", "'s"});
}

TEST_CASE("tokenizer: the character classes are Oniguruma's") {
  CHECK(text::detail::char_class(0x00A0) == 3);  // no-break space is \s
  CHECK(text::detail::char_class(0x2028) == 3);
  CHECK(text::detail::char_class(0x3000) == 3);
  CHECK(text::detail::char_class(0x001C) == 0);  // Python's isspace() says yes; Oniguruma no
  CHECK(text::detail::char_class(0x200B) == 0);  // zero width space is Cf
  CHECK(text::detail::char_class(U'é') == 1);
  CHECK(text::detail::char_class(U'日') == 1);
  CHECK(text::detail::char_class(U'½') == 2);
  CHECK(text::detail::char_class(0x1F600) == 0);  // emoji
  CHECK(text::detail::char_class(0x10FFFF) == 0);
}

TEST_CASE("tokenizer: ids match HF's on the test strings, from both file formats") {
  const json ref = read_json("encode.json");
  const json& cases = ref["cases"];
  REQUIRE(cases.size() > 70);
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> want = ids_of(c["ids"]);
    CAPTURE(text);
    CHECK(hf_files().encode(text) == want);
    CHECK(hf_json().encode(text) == want);
  }
  CHECK(hf_json().vocab_size() == 1000);
  CHECK(hf_json().token_to_id("<|endoftext|>") == 0);
  CHECK(hf_json().token_to_id("Ġthe") == hf_files().token_to_id("Ġthe"));
  CHECK(hf_json().token_to_id("no such token") == -1);
  CHECK(hf_json().id_to_token(hf_json().token_to_id("Ġthe")) == "Ġthe");
}

TEST_CASE("tokenizer: random strings and random id sequences give HF's ids and text") {
  const json ref = read_json("encode.json");
  REQUIRE(ref["random"].size() == 400);
  for (const json& c : ref["random"]) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    CHECK(hf_json().encode(text) == ids_of(c["ids"]));
  }
  REQUIRE(ref["random_decode"].size() == 200);
  for (const json& c : ref["random_decode"]) {
    CAPTURE(c["ids"].dump());
    CHECK(hf_json().decode(ids_of(c["ids"])) == c["text"].get<std::string>());
  }
}

TEST_CASE("tokenizer: tokenizer.json options give HF's ids (prefix space, no regex, added tokens, template)") {
  const json ref = read_json("encode.json");
  const json base = json::parse(test::read_bytes(ref_dir() / "tokenizer.json"));
  test::TempDir dir{"brisk-tok"};
  for (const json& v : ref["variants"]) {
    json j = base;
    for (auto it = v["set"].begin(); it != v["set"].end(); ++it) j[json::json_pointer(it.key())] = it.value();
    const ByteLevelBPE t = ByteLevelBPE::from_tokenizer_json(dir.file("t.json", j.dump()));
    REQUIRE(v["ids"].size() == ref["cases"].size());
    // What save_tokenizer_json writes loads back to the same tokenizer.
    const std::string saved = (dir.path / "saved.json").string();
    t.save_tokenizer_json(saved);
    const ByteLevelBPE back = ByteLevelBPE::from_tokenizer_json(saved);
    for (size_t i = 0; i < v["ids"].size(); ++i) {
      const std::string text = ref["cases"][i]["text"].get<std::string>();
      CAPTURE(v["name"].get<std::string>());
      CAPTURE(text);
      CHECK(t.encode(text) == ids_of(v["ids"][i]));
      CHECK(back.encode(text) == ids_of(v["ids"][i]));
    }
  }
}

TEST_CASE("tokenizer: a 1 MB input gives HF's ids; encode_batch gives encode's") {
  const json ref = read_json("encode.json");
  const json& big = ref["big"];
  const std::string train = test::read_bytes(ref_dir() / "train.txt");
  std::string text;
  for (int i = 0; i < big["copies"].get<int>(); ++i) text += train;
  REQUIRE(text.size() == big["bytes"].get<size_t>());
  const std::vector<int32_t> ids = hf_json().encode(text);
  REQUIRE(ids.size() == big["count"].get<size_t>());
  CHECK(std::vector<int32_t>(ids.begin(), ids.begin() + 16) == ids_of(big["first"]));
  CHECK(std::vector<int32_t>(ids.end() - 16, ids.end()) == ids_of(big["last"]));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(ids)));
  CHECK(std::string(hex) == big["fnv1a"].get<std::string>());
  // Empty input, and a batch (threads, each with its own cache) equal to one-by-one calls.
  CHECK(hf_json().encode("").empty());
  std::vector<std::string> batch;
  for (const json& c : ref["cases"]) batch.push_back(c["text"]);
  batch.push_back(text.substr(0, 100000));
  const auto out = hf_json().encode_batch(batch);
  REQUIRE(out.size() == batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    CAPTURE(i);
    CHECK(out[i] == hf_json().encode(batch[i]));
  }
}

TEST_CASE("tokenizer: decode gives HF's text and inverts encode") {
  const json ref = read_json("encode.json");
  for (const json& c : ref["decode"]) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    CHECK(hf_json().decode(ids_of(c["ids"])) == text);
  }
  for (const json& c : ref["cases"]) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    CHECK(hf_files().decode(hf_files().encode(text)) == text);
  }
  const ByteLevelBPE& t = hf_json();
  CHECK(t.decode(t.encode("Hello<|endoftext|> world"), true) == "Hello world");
  // A token that ends inside a UTF-8 sequence decodes to U+FFFD, as from_utf8_lossy.
  const std::vector<int32_t> e = t.encode("\u01C5");
  REQUIRE(e.size() == 2);  // U+01C5 (not in the training text) is two byte tokens
  CHECK(t.decode({e[0]}) == "\xEF\xBF\xBD");
  CHECK(t.decode({e[0], t.token_to_id("a")}) ==
        "\xEF\xBF\xBD"
        "a");
  CHECK(test::error_text([&] { t.decode({1000}); }).find("id 1000 is not in the vocabulary") != std::string::npos);
  CHECK_THROWS_AS(t.decode({-1}), Error);
}

TEST_CASE("tokenizer: train_bpe learns HF's merges and vocabulary from the same text") {
  const std::string train_txt = (ref_dir() / "train.txt").string();
  const ByteLevelBPE t = train_bpe(
      {train_txt},
      BpeTrainerOptions{.vocab_size = 1000, .min_frequency = 2, .special_tokens = {"<|endoftext|>", "<pad>"}});
  CHECK(merge_lines(t) == merge_lines(hf_files()));
  CHECK(t.merges().size() == hf_files().merges().size());
  CHECK(t.vocab_size() == 1000);
  for (int32_t id = 0; id < 1000; ++id) {
    CAPTURE(id);
    CHECK(t.id_to_token(id) == hf_json().id_to_token(id));
  }
  for (const json& c : read_json("train_cases.json")) {
    BpeTrainerOptions o{.vocab_size = c["vocab_size"].get<int64_t>(),
                        .min_frequency = c["min_frequency"].get<int64_t>(),
                        .special_tokens = c["special_tokens"].get<std::vector<std::string>>()};
    const ByteLevelBPE got = c["texts"].is_null() ? train_bpe({train_txt}, o)
                                                  : train_bpe_from_texts(c["texts"].get<std::vector<std::string>>(), o);
    CAPTURE(c["name"].get<std::string>());
    CHECK(merge_lines(got) == c["merges"].get<std::vector<std::string>>());
    CHECK(got.vocab_size() == c["vocab_size_out"].get<int64_t>());
  }
}

TEST_CASE("tokenizer: save writes what HF wrote, and what it saves loads back") {
  test::TempDir dir{"brisk-tok"};
  const auto vocab = (dir.path / "vocab.json").string();
  const auto merges = (dir.path / "merges.txt").string();
  const auto tj = (dir.path / "tokenizer.json").string();
  hf_json().save(vocab, merges);
  hf_json().save_tokenizer_json(tj);
  CHECK(test::read_bytes(vocab) == test::read_bytes(ref_dir() / "vocab.json"));
  CHECK(test::read_bytes(merges) == test::read_bytes(ref_dir() / "merges.txt"));
  CHECK(test::read_bytes(tj) == test::read_bytes(ref_dir() / "tokenizer.json"));
  const ByteLevelBPE back = ByteLevelBPE::from_tokenizer_json(tj);
  CHECK(back.encode("Hello <|endoftext|> world, 日本語") == hf_json().encode("Hello <|endoftext|> world, 日本語"));
  CHECK(fs::directory_iterator(dir.path) != fs::directory_iterator());
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
  CHECK(files == 3);  // no temporary files left behind
}

TEST_CASE("tokenizer: added tokens are split off first and take HF's ids") {
  ByteLevelBPE t = ByteLevelBPE::from_files((ref_dir() / "vocab.json").string(), (ref_dir() / "merges.txt").string());
  CHECK(t.encode("<pad>").size() > 1);  // not yet an added token
  CHECK(t.add_special_tokens({"<pad>", "<new>"}) == 1);
  CHECK(t.token_to_id("<pad>") == 1);
  CHECK(t.token_to_id("<new>") == 1000);
  CHECK(t.vocab_size() == 1001);
  CHECK(t.encode("a<new>b<pad>") == std::vector<int32_t>{t.token_to_id("a"), 1000, t.token_to_id("b"), 1});
  CHECK(t.decode(t.encode("a<new>b"), true) == "ab");
  CHECK(t.add_tokens({"<new>", "xyz"}) == 1);
  CHECK(t.token_to_id("xyz") == 1001);
  // An empty tokenizer knows no byte: nothing but its added tokens.
  ByteLevelBPE empty;
  CHECK(empty.vocab_size() == 0);
  CHECK(empty.encode("abc").empty());
  CHECK(empty.add_special_tokens({"<s>"}) == 1);
  CHECK(empty.encode("a<s>b") == std::vector<int32_t>{0});
}

TEST_CASE("tokenizer: invalid UTF-8 is refused with its byte offset") {
  const ByteLevelBPE& t = hf_json();
  const struct {
    std::string text;
    size_t offset;
  } cases[] = {{"ab\xff"
                "cd",
                2},
               {"\x80", 0},
               {"abc\xC3", 3},
               {"x\xC0\xAF", 1},
               {"xx\xE0\x80\x80", 2},
               {"\xED\xA0\x80", 0},
               {"ok \xF4\x90\x80\x80", 3},
               {"é\xE2\x82", 2},
               {"<pad>\xFE", 5}};
  for (const auto& c : cases) {
    const std::string msg = test::error_text([&] { t.encode(c.text); });
    CAPTURE(msg);
    CHECK(msg.find("invalid UTF-8 at byte offset " + std::to_string(c.offset)) != std::string::npos);
  }
  CHECK(find_invalid_utf8("plain ascii, é, 日本, 😀") == std::string::npos);
  test::TempDir dir{"brisk-tok"};
  const std::string bad = dir.file("bad.txt", "good line\nbad \xFF line\n");
  CHECK(test::error_text([&] { train_bpe({bad}, {}); }).find("invalid UTF-8 at byte offset 14") != std::string::npos);
}

TEST_CASE("tokenizer: malformed files are refused naming the file and the field or line") {
  test::TempDir dir{"brisk-tok"};
  const std::string vocab = test::read_bytes(ref_dir() / "vocab.json");
  const std::string merges = test::read_bytes(ref_dir() / "merges.txt");
  const std::string good_vocab = dir.file("vocab.json", vocab);
  const std::string good_merges = dir.file("merges.txt", merges);
  auto files_error = [&](const std::string& v, const std::string& m) {
    return test::error_text([&] { ByteLevelBPE::from_files(v, m); });
  };
  const struct {
    const char* vocab;
    const char* merges;
    const char* want;
  } file_cases[] = {
      {"{\"a\": 0, \"b\": 0}", "#version: 0.2\n", "duplicate id 0"},
      {"{\"a\": -1}", "", "has id -1"},
      {"{\"a\": \"x\"}", "", "has id \"x\""},
      {"[1, 2]", "", "must be a JSON object"},
      {"{\"a\": 0", "", "is not valid JSON"},
      {"{\"a\": 0, \"b\": 1, \"ab\": 2}", "#version: 0.2\na b c\n", "line 2: a merge is two tokens"},
      {"{\"a\": 0, \"b\": 1, \"ab\": 2}", "a b\nab\n", "line 2: a merge is two tokens"},
      {"{\"a\": 0, \"b\": 1, \"ab\": 2}", "a b\nb c\n", "line 2: merge part \"c\""},
      {"{\"a\": 0, \"b\": 1}", "a b\n", "line 1: the merge of \"a\" and \"b\" (\"ab\")"},
  };
  for (const auto& c : file_cases) {
    const std::string msg = files_error(dir.file("v.json", c.vocab), dir.file("m.txt", c.merges));
    CAPTURE(msg);
    CHECK(msg.find(c.want) != std::string::npos);
    CHECK(msg.find(dir.path.string()) != std::string::npos);
  }
  CHECK(files_error((dir.path / "missing.json").string(), good_merges).find("cannot open") != std::string::npos);
  CHECK(files_error(good_vocab, dir.file("m.txt", "a b\n\xFF\n")).find("not valid UTF-8") != std::string::npos);

  // tokenizer.json: HF's file with one field broken at a time.
  const json base = json::parse(test::read_bytes(ref_dir() / "tokenizer.json"));
  auto json_error = [&](const json& j) {
    const std::string path = dir.file("t.json", j.dump());
    return test::error_text([&] { ByteLevelBPE::from_tokenizer_json(path); });
  };
  CHECK(json_error(base) == "");
  const struct {
    const char* pointer;
    json value;
    const char* want;
  } json_cases[] = {
      {"/model/type", "WordPiece", "model.type is \"WordPiece\", not \"BPE\""},
      {"/model/dropout", 0.1, "model.dropout 0.1 is not supported"},
      {"/model/byte_fallback", true, "model.byte_fallback"},
      {"/model/merges/3", json::array({"Ġ", "zzz"}), "model.merges[3]: merge part \"zzz\""},
      {"/model/merges/4", 7, "model.merges[4] 7 is not a pair of strings"},
      {"/model/merges", "x", "model.merges must be an array"},
      {"/model/vocab/a", "x", "model.vocab: token \"a\" has id \"x\""},
      {"/model/vocab/b", 5, "model.vocab: duplicate id 5"},
      {"/model/unk_token", "<unk>", "model.unk_token \"<unk>\" is not in the vocabulary"},
      {"/normalizer", json{{"type", "NFC"}}, "\"normalizer\" is not supported"},
      {"/pre_tokenizer/type", "Whitespace", "pre_tokenizer \"Whitespace\" is not supported"},
      {"/decoder/type", "WordPiece", "decoder \"WordPiece\" is not supported"},
      {"/post_processor/type", "RobertaProcessing", "post_processor \"RobertaProcessing\" is not supported"},
      {"/post_processor",
       json{{"type", "TemplateProcessing"},
            {"single", json::array({json{{"SpecialToken", {{"id", "<s>"}}}}, json{{"Sequence", {{"id", "A"}}}}})},
            {"special_tokens", json::object()}},
       "post_processor.single[0]: special token \"<s>\" is not in post_processor.special_tokens"},
      {"/post_processor",
       json{{"type", "TemplateProcessing"}, {"single", json::array()}, {"special_tokens", json::object()}},
       "post_processor.single has no Sequence"},
      {"/added_tokens/0/single_word", true, "added_tokens[0].single_word = true is not supported"},
      {"/added_tokens/1/id", -3, "added_tokens[1].id -3"},
      {"/added_tokens/1/content", "", "added_tokens[1].content must be a non-empty string"},
      {"/model/fuse_unk", "yes", "type must be boolean"},
  };
  for (const auto& c : json_cases) {
    json j = base;
    j[json::json_pointer(c.pointer)] = c.value;
    const std::string msg = json_error(j);
    CAPTURE(c.pointer);
    CAPTURE(msg);
    CHECK(msg.find(c.want) != std::string::npos);
    CHECK(msg.find("t.json") != std::string::npos);
  }
  json no_vocab = base;
  no_vocab["model"].erase("vocab");
  CHECK(json_error(no_vocab).find("missing field \"model.vocab\"") != std::string::npos);
  json no_model = base;
  no_model.erase("model");
  CHECK(json_error(no_model).find("missing field \"model\"") != std::string::npos);
  CHECK(test::error_text([&] {
          ByteLevelBPE::from_tokenizer_json(dir.file("x.json", "not json"));
        }).find("is not valid JSON") != std::string::npos);
}

TEST_CASE("tokenizer: encode_large cuts only where the ids cannot change") {
  const std::string train = test::read_bytes(ref_dir() / "train.txt");
  std::string text;
  for (int i = 0; i < 4; ++i) text += train;
  const std::vector<int32_t> whole = hf_json().encode(text);
  for (int64_t chunk : {int64_t{1}, int64_t{1000}, int64_t{65536}, int64_t{1} << 30}) {
    CAPTURE(chunk);
    CHECK(hf_json().encode_large(text, chunk) == whole);
  }
  // Whitespace kinds around the newlines: a cut after "\n" before " ", "\t" or U+00A0 would
  // change the pieces, so none is made there.
  const std::string tricky = "a\n b\n\tc\n\u00a0d\n\ne\n'sf\n\n\n g\r\nh\n日\n";
  std::string many;
  for (int i = 0; i < 200; ++i) many += tricky;
  // A vocabulary with whitespace-run tokens ("\n\n", "\n\t", ...) sees a wrong cut in its ids.
  const ByteLevelBPE ws = train_bpe_from_texts({many, train}, {.vocab_size = 600});
  REQUIRE(ws.token_to_id("ĊĊ") >= 0);
  for (int64_t chunk : {1, 3, 7, 50}) {
    CAPTURE(chunk);
    CHECK(hf_json().encode_large(many, chunk) == hf_json().encode(many));
    CHECK(ws.encode_large(many, chunk) == ws.encode(many));
  }
  // An error names the offset in the whole text, not in a chunk.
  const std::string msg = test::error_text([&] { hf_json().encode_large(text + "\xff", 1000); });
  CHECK(msg.find("invalid UTF-8 at byte offset " + std::to_string(text.size())) != std::string::npos);
}

TEST_CASE("tokenizer: tokenize_files writes llm.c's token file of the files' ids") {
  test::TempDir dir{"brisk-tok"};
  const std::string train = test::read_bytes(ref_dir() / "train.txt");
  const std::string a = dir.file("a.txt", train);
  const std::string b = dir.file("b.txt", "Café 日本語 😀\nsecond line\n");
  const std::string out = (dir.path / "train.bin").string();
  const TokenizeFilesResult r =
      tokenize_files(hf_json(), {a, b}, out, {.separator = "<|endoftext|>", .chunk_bytes = 5000});
  std::vector<int64_t> want{0};
  for (int32_t id : hf_json().encode(train)) want.push_back(id);
  want.push_back(0);
  for (int32_t id : hf_json().encode("Café 日本語 😀\nsecond line\n")) want.push_back(id);
  CHECK(r.tokens == static_cast<int64_t>(want.size()));
  CHECK(r.bytes == static_cast<int64_t>(train.size() + std::string("Café 日本語 😀\nsecond line\n").size()));
  CHECK(r.dtype == TokenDType::U16);
  for (TokenDType d : {TokenDType::U16, TokenDType::U32}) {
    tokenize_files(hf_json(), {a, b}, out, {.dtype = d, .separator = "<|endoftext|>"});
    const auto f = TokenFile::open(out);
    CHECK(f->dtype() == d);
    REQUIRE(f->size() == static_cast<int64_t>(want.size()));
    bool same = true;
    for (int64_t i = 0; i < f->size(); ++i) same = same && f->at(i) == want[static_cast<size_t>(i)];
    CHECK(same);
  }
  // Errors name what is wrong.
  auto error = [&](const std::vector<std::string>& in, const TokenizeFilesOptions& o) {
    return test::error_text([&] { tokenize_files(hf_json(), in, out, o); });
  };
  CHECK(
      error({a, (dir.path / "missing.txt").string()}, {}).find("cannot open " + (dir.path / "missing.txt").string()) !=
      std::string::npos);
  CHECK(error({a}, {.separator = "<nope>"}).find("separator \"<nope>\" is not a token") != std::string::npos);
  const std::string bad = dir.file("bad.txt", "ok\n\xC3(");
  const std::string msg = error({bad}, {});
  CHECK(msg.find(bad) != std::string::npos);
  CHECK(msg.find("invalid UTF-8 at byte offset 3") != std::string::npos);
  std::unordered_map<std::string, int32_t> big_vocab;
  for (int byte = 0; byte < 256; ++byte) {
    big_vocab[text::detail::to_byte_chars(std::string(1, static_cast<char>(byte)))] = byte;
  }
  big_vocab["far"] = 70000;
  const ByteLevelBPE big = ByteLevelBPE::from_vocab_merges(big_vocab, {});
  CHECK(test::error_text([&] {
          tokenize_files(big, {a}, out, {.dtype = TokenDType::U16});
        }).find("uint16 cannot hold the vocabulary's ids (vocab_size 70001)") != std::string::npos);
  CHECK(tokenize_files(big, {b}, out).dtype == TokenDType::U32);
}
