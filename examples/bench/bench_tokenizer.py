#!/usr/bin/env python3
"""examples/bench/bench_tokenizer.py: the Hugging Face `tokenizers` side of bench_tokenizer.

  bench_tokenizer.py DIR CORPUS VOCAB_SIZE TRAIN_FILE...
trains ByteLevelBPETokenizer on TRAIN_FILE... (min_frequency 2, special token <|endoftext|>),
compares its merges with DIR/merges.txt (brisk's), then loads DIR/tokenizer.json (brisk's) and
encodes CORPUS as one string (encode) and line by line (encode_batch, and encode_batch_fast:
ids without offsets), printing
  RESULT train_s=.. merges_equal=0|1 encode_mbps=.. batch_mbps=.. fast_mbps=.. count=.. checksum=..
The caller sets RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false: one thread, as brisk's.
Not here: brisk's timings (bench_tokenizer.cpp).
"""
import sys
import time

import numpy as np
from tokenizers import ByteLevelBPETokenizer, Tokenizer


def best_seconds(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def checksum(ids):
    # sum over i of (i + 1) * id, modulo 2^64: the same in bench_tokenizer.cpp.
    a = np.asarray(ids, dtype=np.uint64)
    return int((np.arange(1, len(a) + 1, dtype=np.uint64) * a).sum())  # uint64 arithmetic wraps


def main():
    out_dir, corpus, vocab_size, files = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    hf = ByteLevelBPETokenizer()
    t0 = time.perf_counter()
    hf.train(files, vocab_size=vocab_size, min_frequency=2, show_progress=False,
             special_tokens=["<|endoftext|>"])
    train_s = time.perf_counter() - t0
    import json
    hf_merges = [" ".join(m) if isinstance(m, list) else m
                 for m in json.loads(hf._tokenizer.to_str())["model"]["merges"]]
    with open(out_dir + "/merges.txt", encoding="utf-8") as f:
        brisk_merges = [l.rstrip("\n") for l in f if not l.startswith("#version")]
    merges_equal = int(hf_merges == brisk_merges)

    tok = Tokenizer.from_file(out_dir + "/tokenizer.json")
    with open(corpus, encoding="utf-8", newline="") as f:
        text = f.read()
    mb = len(text.encode("utf-8")) / 1e6
    lines = text.splitlines(keepends=True)
    ids = tok.encode(text).ids
    encode_s = best_seconds(lambda: tok.encode(text))
    batch_s = best_seconds(lambda: tok.encode_batch(lines))
    # encode_batch_fast: ids without offsets, HF's quickest path.
    fast_s = best_seconds(lambda: tok.encode_batch_fast(lines))
    print(f"RESULT train_s={train_s:.4f} merges_equal={merges_equal} encode_mbps={mb / encode_s:.3f} "
          f"batch_mbps={mb / batch_s:.3f} fast_mbps={mb / fast_s:.3f} count={len(ids)} checksum={checksum(ids)}")


if __name__ == "__main__":
    main()
