#!/usr/bin/env python3
# tests/check_paths.py: every repository path named in a comment of the project's sources
# (C++, CUDA, CMake, shell, Python) and in its Markdown docs must exist, so comments that cite
# a file ("see kernels/cpu/conv.cpp") do not rot when files move. Run by ctest as
# `source_paths`; exits 1 listing each stale reference as file:line: path.
# Not here: paths in string literals (tests build those at run time) or in ../shared.
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = r"(?:engine|kernels|opcheck|nn|optim|data|text|train|compress|search|interop|dist|tests|examples|docs|cmake|\.ci)"
EXT = r"(?:h|cpp|cu|cuh|def|md|sh|py|json|txt|cmake)"
PATH = re.compile(r"(?<![\w./-])(" + TOP + r"/[\w./*-]*\." + EXT + r")(?![\w])")
# A bare file name ("conv.cu", "check.h") must name some file of the repository.
BARE = re.compile(r"(?<![\w./*-])([A-Za-z_][\w-]*\.(?:h|cpp|cu|cuh|def|py|sh))(?![\w/]|\.\S)")
SOURCES = (".h", ".cpp", ".cu", ".cuh", ".def", ".sh", ".py", ".cmake", "CMakeLists.txt", ".md")
SKIP_DIRS = {".git", "third_party", "__pycache__"}


def comment_part(line, name):
    """The comment text of one line ("" when the line has none)."""
    if name.endswith(".md"):
        return line
    markers = ["//"] if name.endswith((".h", ".cpp", ".cu", ".cuh", ".def")) else ["#"]
    for m in markers:
        at = line.find(m)
        if at >= 0:
            return line[at + len(m):]
    stripped = line.lstrip()
    if name.endswith((".h", ".cpp", ".cu", ".cuh")) and stripped.startswith("*"):
        return stripped  # inside a /* ... */ block
    return ""


def exists(path):
    if "*" in path:
        import glob

        return bool(glob.glob(os.path.join(ROOT, path)))
    return os.path.exists(os.path.join(ROOT, path))


# Files that comments name but that live outside the repository (system and library headers).
KNOWN_ELSEWHERE = {"stb_image.h", "cudnn.h", "cudnn_cnn.h", "cudnn_ops.h", "cudnn_graph.h", "nccl.h", "zlib.h",
                   "cublasLt.h", "cublas_v2.h", "cuda_runtime.h", "derivatives.yaml", "mpi.h", "json.hpp",
                   "doctest.h", "cuda_fp16.h", "cuda_bf16.h", "cublas_api.h", "cblas.h",
                   "Conv_v7.cpp"}  # the last: PyTorch's cuDNN convolution source


def all_files():
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
        for n in names:
            yield os.path.join(d, n)


def files():
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
        for n in names:
            if n.endswith(SOURCES):
                yield os.path.join(d, n)


def main():
    stale = []
    basenames = {os.path.basename(f) for f in all_files()}
    for f in files():
        rel = os.path.relpath(f, ROOT)
        with open(f, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                for path in PATH.findall(comment_part(line, rel)):
                    path = path.rstrip(".")
                    if not exists(path):
                        stale.append(f"{rel}:{lineno}: {path}")
                for name in BARE.findall(comment_part(line, rel)):
                    if name not in basenames and name not in KNOWN_ELSEWHERE:
                        stale.append(f"{rel}:{lineno}: {name}")
    for s in stale:
        print(s)
    print(f"check_paths: {len(stale)} stale path(s) in comments" if stale else "check_paths: every cited path exists")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
