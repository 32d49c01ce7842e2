#!/usr/bin/env python3
# tests/check_layers.py: every #include of the library's sources points down the layers of
# docs/DESIGN.md (Layers), never up or sideways to a layer not listed below it. Run by ctest as
# `include_layers`; exits 1 listing each include against the direction as file:line: include
# (from layer -> to layer). Prints the layer graph it found with --graph.
# Not here: tests/ and examples/ (they sit on top and may include anything), the order inside
# one layer (engine's core and its tools are checked as two layers).
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# engine's tools: they read the core, the core never includes them (it calls them through the
# hooks of engine/hooks.h). kernel_override.h is the API of dispatch's own override table: core.
ENGINE_TOOLS = {"profiler", "explain", "gradcheck", "env", "serialize", "nonfinite", "trace"}

# What each layer may include besides itself (the arrows of docs/DESIGN.md, written out).
ALLOWED = {
    "engine": set(),
    "engine_tools": {"engine"},
    "kernels": {"engine", "engine_tools"},
    "cuda": {"engine", "engine_tools", "kernels"},
    "nn": {"engine", "engine_tools"},
    "optim": {"engine", "engine_tools"},
    "data": {"engine", "engine_tools"},
    "text": {"engine", "engine_tools", "data"},  # text datasets are datasets
    "compress": {"engine", "engine_tools", "nn", "optim", "data"},
    "train": {"engine", "engine_tools", "nn", "optim", "data", "text"},
    "search": {"engine", "engine_tools", "nn", "optim", "data", "train"},
    "interop": {"engine", "engine_tools", "nn", "compress"},
    # The conformance table checks ops; the fused optimizer steps' references are the
    # optimizers' own tensor-op steps (opcheck/specs_optim.cpp).
    "opcheck": {"engine", "engine_tools", "kernels", "optim"},
    "dist": {"engine", "engine_tools", "kernels", "cuda", "nn", "optim", "data", "train"},
    "top": None,  # brisk.h: the whole library
}


# Known includes against the direction, each with its reason; any other fails, and so does an
# entry here that no longer occurs (so the list only shrinks). Empty: dispatch and the autograd
# engine reach the tools through engine/hooks.h, which the tools fill in.
KNOWN = set()


def layer_of(path):
    parts = path.split("/")
    top = parts[0]
    if top == "engine":
        stem = os.path.splitext(parts[-1])[0]
        return "engine_tools" if len(parts) == 2 and stem in ENGINE_TOOLS else "engine"
    if top == "kernels":
        return "cuda" if len(parts) > 2 and parts[1] == "cuda" else "kernels"
    if top in ALLOWED:
        return top
    if path == "brisk.h":
        return "top"
    return None


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SKIP = {".git", "third_party", "tests", "examples", "docs", "cmake", "__pycache__"}


def main():
    bad, graph, seen = [], {}, set()
    for d, dirs, files in os.walk(ROOT):
        rel_dir = os.path.relpath(d, ROOT)
        if rel_dir != "." and (rel_dir.split("/")[0] in SKIP or rel_dir.startswith("build")):
            dirs[:] = []
            continue
        for f in sorted(files):
            if not f.endswith((".h", ".cpp", ".cu", ".cuh", ".def")):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, f))
            src = layer_of(rel)
            if src is None:
                continue
            with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    dst = layer_of(m.group(1))
                    if dst is None or dst == src:
                        continue
                    graph.setdefault(src, set()).add(dst)
                    allowed = ALLOWED[src]
                    if allowed is not None and dst not in allowed:
                        if (rel, m.group(1)) in KNOWN:
                            seen.add((rel, m.group(1)))
                        else:
                            bad.append(f"{rel}:{n}: {m.group(1)} ({src} -> {dst})")
    for rel, inc in sorted(KNOWN - seen):
        bad.append(f"{rel}: {inc}: listed in KNOWN but no longer included (remove the entry)")
    if "--graph" in sys.argv:
        for src in sorted(graph):
            print(f"{src:13} -> {', '.join(sorted(graph[src]))}")
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} include(s) against the layers of docs/DESIGN.md")
        return 1
    print(f"check_layers: {sum(len(v) for v in graph.values())} layer edges, all pointing down"
          + (f" but {len(KNOWN)} known includes" if KNOWN else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
