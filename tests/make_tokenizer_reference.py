#!/usr/bin/env python3
"""tests/make_tokenizer_reference.py: the Hugging Face `tokenizers` reference data of
tests/test_tokenizer.cpp, written to tests/data/tokenizer/.

  train.txt          the training text: fortune(6)'s "science" file plus a multilingual block
                     (accents, Greek, Cyrillic, CJK, emoji, numbers, whitespace runs)
  vocab.json, merges.txt, tokenizer.json
                     ByteLevelBPETokenizer().train(train.txt, vocab_size=1000, min_frequency=2,
                     special_tokens=["<|endoftext|>", "<pad>"]), as save_model() and save() write
  encode.json        ids HF gives for a list of test strings, and for the "1 MB" input (train.txt
                     repeated to at least 1,000,000 bytes): its length, first/last ids and an
                     FNV-1a hash of the ids as little-endian int32s; the test strings' ids again
                     under variants of tokenizer.json (add_prefix_space, use_regex false,
                     ignore_merges, a normalized and a special added token that overlap,
                     lstrip / rstrip added tokens, a
                     TemplateProcessing post-processor, the fields transformers' save_pretrained
                     writes); 400 random strings over characters that stress the pattern, and
                     200 random id sequences with HF's decode (broken UTF-8 repaired)
  train_cases.json   merges HF learns in further settings (train_from_iterator over strings: ties,
                     min_frequency, no special tokens), for the trainer's exactness
  pretokenize.json   how HF's ByteLevel pre-tokenizer splits edge cases (whitespace kinds, \r\n, ...)
Not here: the Unicode classes (text/gen_unicode_tables.py).

Run with /work/venv/bin/python (tokenizers 0.23, transformers 5); fortune(6)'s data in /usr/share/games/fortunes.
"""
import json
import os
import random
import struct
import tempfile

from tokenizers import ByteLevelBPETokenizer, Tokenizer, pre_tokenizers
from transformers import GPT2TokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "tokenizer")
FORTUNE = "/usr/share/games/fortunes/science"

MULTILINGUAL = [
    "Café crème brûlée, naïve façade, jalapeño, Ångström, Øresund, Straße, Œuvre.",
    "Ελληνικά: καλημέρα κόσμε. Русский: привет, мир! Українська: ґанок, їжак.",
    "日本語のテキスト、東京は大きい。中文：你好，世界！한국어: 안녕하세요 세계.",
    "Emoji: 😀 😃 👍🏽 👨‍👩‍👧 🇫🇷 ❤️ 🚀🚀🚀 and ✓ ✗ → ← ∞ ≈ ≠.",
    "Numbers: 0 1 12 123 1234 3.14159 1,000,000 ١٢٣ ⅓ ² ½ 10% $5.99 v2.0.1",
    "Whitespace:\t\ttabs  two   three    four\u00a0nbsp\u3000ideo\u2028ls end   ",
    "Contractions: it's I'm you're we've they'll he'd don't 'quoted' O'Neil.",
    "Mixed: a1b2c3 ab--cd __init__ foo.bar(baz) x=y+z; <html>&amp;</html> #tag @user",
]

CASES = [
    "", " ", "  ", "\n", "\n\n", "\r\n", "a", "Hello world", "Hello, world!", " leading space",
    "trailing space ", "a   b", "a\tb", "a \tb", "a\t b", "  two leading", "line\nbreak\n\nagain",
    "windows\r\nline\r\n", "tab\tseparated\tvalues", "it's I'm you're we've they'll he'd",
    "'s 's'S 'LL ''s '", "don't stop", "Café crème brûlée", "naïve façade Ångström",
    "Ελληνικά καλημέρα", "привет, мир!", "日本語のテキスト", "你好，世界！", "안녕하세요",
    "😀 👍🏽 👨‍👩‍👧 🇫🇷 ❤️", "🚀🚀🚀", "∞ ≈ ≠ → ←", "0 1 12 123 1234 12345", "3.14159",
    "1,000,000", "١٢٣ ⅓ ² ½", "$5.99 10%", "a1b2c3", "x\u00a0y", "x\u00a0 y", "x \u00a0y",
    "x\u3000y", "x\u2028y", "x\u2029y", "x\u0085y", "x\u000by\u000cz", "x\u001cy\u001fz",
    "x\u200by", "x\u2000\u2001 y", "end with spaces   ", "end with newline\n",
    "   ", "\t\t\t", " \n \n ", "a\n b", "a \n b", "!!!...???", " !!! ",
    "<|endoftext|>", "Hello<|endoftext|>world", "Hello <|endoftext|> world", "<pad><pad>",
    "<|endoftext|><|endoftext|>", "a<|endoftext", "<|endof<|endoftext|>text|>",
    "supercalifragilisticexpialidocious " * 3, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "ab" * 100, "the " * 50, "\u0000\u0001\u007f", "zero\u200dwidth\u200cjoiners",
    "combining e\u0301 a\u0308", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math 𝟙𝟚𝟛", "Ǆǅǆ ꜰ ﬁ", "\ufeffBOM",
    "a <mask> b", "a\u00a0\t <mask>  b", "<mask>", "x<sep>  \u3000y", " <sep>", "<mask><mask>  <sep> <sep>",
    "tab\t<mask>\n", "é <sep>\u2028\u2029z", "  <mask>", "<sep>   ",
] + MULTILINGUAL
# Added tokens among whitespace kinds (lstrip / rstrip), deterministic.
_rng = random.Random(7)
_PARTS = ["<mask>", "<sep>", "<pad>", "<|endoftext|>", " ", "  ", "\t", "\u00a0", "\u3000", "\n", "a", "é", "1"]
CASES += ["".join(_rng.choice(_PARTS) for _ in range(_rng.randint(1, 10))) for _ in range(40)]

# Settings for further trainer checks (train_from_iterator over these strings).
TIE_TEXT = ["ab ab cd cd ef ef gh gh", "abcd efgh", "xy yx xy yx", "aaaa aaa aa a", "zz zz zz"]
TRAIN_CASES = [
    {"name": "ties", "texts": TIE_TEXT, "vocab_size": 300, "min_frequency": 0, "special_tokens": []},
    {"name": "min_frequency", "texts": None, "vocab_size": 800, "min_frequency": 5,
     "special_tokens": ["<s>", "</s>"]},
    {"name": "multilingual", "texts": MULTILINGUAL * 3, "vocab_size": 400, "min_frequency": 2,
     "special_tokens": ["<|endoftext|>"]},
]


def fnv1a(ids):
    h = 0xCBF29CE484222325
    for b in b"".join(struct.pack("<i", i) for i in ids):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def train(texts, vocab_size, min_frequency, special_tokens, files=None):
    tok = ByteLevelBPETokenizer()
    if files:
        tok.train(files, vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                  special_tokens=special_tokens)
    else:
        tok.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=min_frequency,
                                show_progress=False, special_tokens=special_tokens)
    return tok


def merges_of(tok):
    model = json.loads(tok.to_str())["model"]
    return [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(FORTUNE, encoding="utf-8") as f:
        text = f.read()
    text += "\n".join(MULTILINGUAL * 4) + "\n"
    train_path = os.path.join(OUT, "train.txt")
    with open(train_path, "w", encoding="utf-8", newline="") as f:
        f.write(text)

    tok = ByteLevelBPETokenizer()
    tok.train([train_path], vocab_size=1000, min_frequency=2, show_progress=False,
              special_tokens=["<|endoftext|>", "<pad>"])
    tok.save_model(OUT)
    tok.save(os.path.join(OUT, "tokenizer.json"))

    hf = Tokenizer.from_file(os.path.join(OUT, "tokenizer.json"))
    cases = [{"text": s, "ids": hf.encode(s).ids} for s in CASES]
    copies = -(-1_000_000 // len(text.encode("utf-8")))
    big = text * copies
    big_ids = hf.encode(big).ids
    # Random strings over characters that stress the pattern (every class, the contraction
    # letters, whitespace kinds) and random id sequences (decode's UTF-8 repair).
    rng = random.Random(45)
    alphabet = (list("abcxyzABCXYZ0123456789' ,.!?-_'") + ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S"]
                + list(" \t\n\r\u000b\u000c\u0085\u00a0\u1680\u2000\u2028\u2029\u202f\u3000\u001c\u200b")
                + list("éüßøÅçñЖжΩλ日本語中文한글ア٣๓½²ⅷ𝟙😀👍🏽🇫🇷\u0301\u200d\ufeff\U00031350\U000E0001"))
    random_cases = []
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        random_cases.append({"text": text, "ids": hf.encode(text).ids})
    random_decode = []
    for _ in range(200):
        ids = [rng.randrange(1000) for _ in range(rng.randint(1, 12))]
        random_decode.append({"ids": ids, "text": hf.decode(ids, skip_special_tokens=False)})
    encode = {
        "cases": cases,
        "random": random_cases,
        "random_decode": random_decode,
        "big": {"copies": copies, "bytes": len(big.encode("utf-8")),
                "count": len(big_ids), "first": big_ids[:16], "last": big_ids[-16:],
                "fnv1a": f"{fnv1a(big_ids):016x}"},
        "decode": [{"ids": c["ids"], "text": hf.decode(c["ids"], skip_special_tokens=False)}
                   for c in cases],
    }
    # tokenizer.json with fields changed (JSON pointer -> value): ids of every case under each.
    base = json.loads(hf.to_str())
    added = base["added_tokens"] + [
        {"id": 1000, "content": " world", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": True, "special": False},
        {"id": 1001, "content": "wor", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}]
    strip = base["added_tokens"] + [
        {"id": 1000, "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False,
         "normalized": False, "special": True},
        {"id": 1001, "content": "<sep>", "single_word": False, "lstrip": False, "rstrip": True,
         "normalized": True, "special": False}]
    variants = [
        {"name": "lstrip_rstrip", "set": {"/added_tokens": strip}},
        {"name": "add_prefix_space", "set": {"/pre_tokenizer/add_prefix_space": True}},
        {"name": "no_regex", "set": {"/pre_tokenizer/use_regex": False}},
        {"name": "ignore_merges", "set": {"/model/ignore_merges": True}},
        {"name": "added_tokens", "set": {"/added_tokens": added}},
        {"name": "template", "set": {"/post_processor": {
            "type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                {"type": "TemplateProcessing",
                 "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                            {"Sequence": {"id": "A", "type_id": 0}},
                            {"SpecialToken": {"id": "<pad>", "type_id": 0}}],
                 "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                 "special_tokens": {
                     "<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]},
                     "<pad>": {"id": "<pad>", "ids": [1], "tokens": ["<pad>"]}}}]}}},
    ]
    # What transformers' GPT2TokenizerFast(vocab, merges).save_pretrained() writes, where it
    # differs from Tokenizer.save(): its fields set on tokenizer.json.
    with tempfile.TemporaryDirectory() as tmp:
        vocab = json.load(open(os.path.join(OUT, "vocab.json"), encoding="utf-8"))
        with open(os.path.join(OUT, "merges.txt"), encoding="utf-8") as f:
            merges = [tuple(l.rstrip("\n").split(" ")) for l in f if not l.startswith("#version")]
        GPT2TokenizerFast(vocab=vocab, merges=merges).save_pretrained(tmp)
        tf = json.load(open(os.path.join(tmp, "tokenizer.json"), encoding="utf-8"))
    changed = {}
    for key, value in tf.items():
        if key == "model":
            changed.update({f"/model/{k}": v for k, v in value.items() if v != base["model"].get(k)})
        elif value != base.get(key):
            changed["/" + key] = value
    variants.append({"name": "transformers", "set": changed})
    for v in variants:
        j = json.loads(hf.to_str())
        for pointer, value in v["set"].items():
            *path, key = pointer.strip("/").split("/")
            node = j
            for k in path:
                node = node[k]
            node[key] = value
        t = Tokenizer.from_str(json.dumps(j))
        v["ids"] = [t.encode(s).ids for s in CASES]
    encode["variants"] = variants
    with open(os.path.join(OUT, "encode.json"), "w", encoding="utf-8") as f:
        json.dump(encode, f, ensure_ascii=False, indent=0)

    train_cases = []
    for case in TRAIN_CASES:
        # texts None: train.txt read as a file (line by line, as HF's train() reads files).
        t = train(case["texts"], case["vocab_size"], case["min_frequency"], case["special_tokens"],
                  files=None if case["texts"] is not None else [train_path])
        train_cases.append({**case, "texts": case["texts"], "merges": merges_of(t),
                            "vocab_size_out": t.get_vocab_size()})
    with open(os.path.join(OUT, "train_cases.json"), "w", encoding="utf-8") as f:
        json.dump(train_cases, f, ensure_ascii=False, indent=0)

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    pre = [{"text": s, "pieces": [p for p, _ in byte_level.pre_tokenize_str(s)]} for s in CASES]
    with open(os.path.join(OUT, "pretokenize.json"), "w", encoding="utf-8") as f:
        json.dump(pre, f, ensure_ascii=False, indent=0)


if __name__ == "__main__":
    main()
