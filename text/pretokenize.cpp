// text/pretokenize.cpp: GPT-2's pre-tokenization pattern, matched by hand, and strict UTF-8.
// Not here: BPE (text/bpe.cpp).
//
// Note [A matcher for one pattern]
// The pattern is fixed, so a hand-written matcher replaces a regex engine: no dependency (ICU or
// PCRE2 would be one), no backtracking, one pass over the bytes, and ASCII classified by a
// 128-entry table. Each alternative at a position i, in the pattern's order:
//   1. 's 't 'm 'd 're 've 'll: exact ASCII, tried first even when letters follow ("'sup").
//   2-4. an optional U+0020 then a run of one class (letters, numbers, or "other": neither
//      whitespace, letter nor number); the space is taken only when that run follows it.
//   5. \s+(?!\S): a whitespace run that ends the text is taken whole; one followed by a
//      non-space gives back its last character (which then starts the next piece, so " b"
//      keeps its space: "a   b" -> "a", "  ", " b").
//   6. \s+: a single whitespace character before a non-space.
// Every character is in exactly one class and some alternative always matches, so the pieces
// cover the text. The classes are Oniguruma's as HF's `tokenizers` uses them, read from it by
// text/gen_unicode_tables.py: \s is 9-13, U+0085 and Zs/Zl/Zp (U+00A0, U+2028, U+3000, ...; not
// U+001C-U+001F, which Python's str.isspace() counts), \p{L} and \p{N} the general categories.
#include "text/pretokenize.h"

#include <algorithm>
#include <cstdio>

#include "engine/error.h"
#include "text/unicode_tables.h"

namespace brisk::text {

namespace detail {

uint8_t char_class(uint32_t cp) {
  if (cp < 0x80) {
    return kAsciiClass[cp];
  }
  const ClassRange* begin = kClassRanges;
  const ClassRange* end = kClassRanges + std::size(kClassRanges);
  const ClassRange* it = std::upper_bound(begin, end, cp, [](uint32_t c, const ClassRange& r) { return c < r.first; });
  if (it == begin) {
    return kOther;
  }
  --it;
  return cp <= it->last ? it->cls : uint8_t{kOther};
}

}  // namespace detail

namespace {

using detail::kSpace;

// The length of the UTF-8 sequence at s[i] and its code point, or 0 when it is not valid
// (Unicode's well-formed table: no overlong forms, surrogates or code points past U+10FFFF).
inline int decode_utf8(const unsigned char* s, size_t n, size_t i, uint32_t& cp) {
  const unsigned b0 = s[i];
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  auto cont = [&](size_t k, unsigned lo, unsigned hi) { return i + k < n && s[i + k] >= lo && s[i + k] <= hi; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(1, 0x80, 0xBF)) return 0;
    cp = ((b0 & 0x1F) << 6) | (s[i + 1] & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned hi = b0 == 0xED ? 0x9F : 0xBF;
    if (!cont(1, lo, hi) || !cont(2, 0x80, 0xBF)) return 0;
    cp = ((b0 & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80;
    const unsigned hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (!cont(1, lo, hi) || !cont(2, 0x80, 0xBF) || !cont(3, 0x80, 0xBF)) return 0;
    cp = ((b0 & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
    return 4;
  }
  return 0;
}

[[noreturn]] void invalid_utf8(const unsigned char* s, size_t at, size_t base) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", s[at]);
  BRISK_FAIL("tokenizer: invalid UTF-8 at byte offset ", base + at, " (byte ", hex, ")");
}

// The matcher over one text; see Note [A matcher for one pattern].
struct Matcher {
  const unsigned char* s;
  size_t n;
  size_t base;

  // The class and length of the character at i (throws on invalid UTF-8).
  inline uint8_t at(size_t i, int& len) const {
    if (s[i] < 0x80) {
      len = 1;
      return detail::kAsciiClass[s[i]];
    }
    uint32_t cp = 0;
    len = decode_utf8(s, n, i, cp);
    if (len == 0) invalid_utf8(s, i, base);
    return detail::char_class(cp);
  }

  // The end of the run of class k that starts at i.
  inline size_t run(size_t i, uint8_t k) const {
    while (i < n) {
      int len = 0;
      if (at(i, len) != k) break;
      i += len;
    }
    return i;
  }

  // The end of the piece that starts at i.
  size_t piece(size_t i) const {
    if (s[i] == '\'' && i + 1 < n) {
      const unsigned char b1 = s[i + 1];
      if (b1 == 's' || b1 == 't' || b1 == 'm' || b1 == 'd') return i + 2;
      if (i + 2 < n) {
        const unsigned char b2 = s[i + 2];
        if ((b1 == 'r' && b2 == 'e') || (b1 == 'v' && b2 == 'e') || (b1 == 'l' && b2 == 'l')) {
          return i + 3;
        }
      }
    }
    int len0 = 0;
    const uint8_t k0 = at(i, len0);
    const size_t j = i + len0;
    if (s[i] == ' ' && j < n) {
      int len1 = 0;
      const uint8_t k1 = at(j, len1);
      if (k1 != kSpace) return run(j + len1, k1);
    }
    if (k0 != kSpace) return run(j, k0);
    // A whitespace run: whole at the end of the text, else all but its last character
    // (when it has more than one).
    size_t last = i;
    size_t e = j;
    while (e < n) {
      int len = 0;
      if (at(e, len) != kSpace) break;
      last = e;
      e += len;
    }
    return (e == n || last == i) ? e : last;
  }
};

}  // namespace

void pretokenize_gpt2(std::string_view text, std::vector<std::string_view>& pieces, size_t base) {
  const Matcher m{reinterpret_cast<const unsigned char*>(text.data()), text.size(), base};
  size_t i = 0;
  while (i < m.n) {
    const size_t e = m.piece(i);
    pieces.push_back(text.substr(i, e - i));
    i = e;
  }
}

std::vector<std::string> pretokenize_gpt2(std::string_view text) {
  std::vector<std::string_view> views;
  pretokenize_gpt2(text, views);
  return {views.begin(), views.end()};
}

size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const int len = decode_utf8(s, n, i, cp);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace brisk::text
