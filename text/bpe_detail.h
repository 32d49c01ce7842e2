// text/bpe_detail.h: what text/bpe.cpp and text/bpe_trainer.cpp share: GPT-2's byte-to-character
// map (bytes_to_unicode) and the word cache's declaration.
// Not here: the public API (text/bpe.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace brisk::text::detail {

// GPT-2's map of the 256 bytes onto printable characters: cp[b] is byte b's code point, utf8[b]
// its UTF-8, byte_of[c] the byte of code point c (-1 for code points that stand for no byte).
struct ByteChars {
  uint32_t cp[256];
  std::string utf8[256];
  int16_t byte_of[324];  // the characters are all below U+0144
};
const ByteChars& byte_chars();

// The byte characters of raw bytes ("Ġ" for a space): how tokens are spelled in the files.
std::string to_byte_chars(std::string_view bytes);

}  // namespace brisk::text::detail
