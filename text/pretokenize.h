// text/pretokenize.h: GPT-2's pre-tokenization, the split of text into words before BPE:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with Hugging Face's semantics (its ByteLevel pre-tokenizer, use_regex = true, Oniguruma's
// classes), and strict UTF-8 decoding. See Note [A matcher for one pattern] in pretokenize.cpp.
// Not here: the byte-to-character map and the merges (text/bpe.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace brisk::text {

// Appends the pieces of `text` to `pieces` (views into text; together they are text). Invalid
// UTF-8 is a brisk::Error naming the byte offset, counted from `base` (the piece's place in a
// larger input).
void pretokenize_gpt2(std::string_view text, std::vector<std::string_view>& pieces, size_t base = 0);

// The pieces as strings (tests, tools).
std::vector<std::string> pretokenize_gpt2(std::string_view text);

// The offset of the first invalid UTF-8 sequence (overlong forms, surrogates and code points
// above U+10FFFF included, as Rust's str refuses them), or npos when `text` is valid.
size_t find_invalid_utf8(std::string_view text);

namespace detail {
// The class of a code point in the pattern: 0 other, 1 letter, 2 number, 3 whitespace.
uint8_t char_class(uint32_t cp);
}  // namespace detail

}  // namespace brisk::text
