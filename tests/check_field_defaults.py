#!/usr/bin/env python3
# tests/check_field_defaults.py: every data member of a struct in the public headers (engine,
# nn, optim, data, train, dist) has a default member initializer, so user code that fills an
# options struct with designated initializers (`LoaderOptions{.batch_size = 64}`) compiles
# without -Wextra's missing-field-initializers warning. Run by ctest as `field_defaults`; exits
# 1 listing each member as file:line. Internal structs (kernel plumbing, tensor internals, the
# autograd graph, a context holding references) are listed in INTERNAL.
# Not here: classes (their members are private) and kernels/ (not user API).
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ("engine", "nn", "optim", "data", "train", "dist")
INTERNAL = {
    "engine/op.h": {"TensorSpec", "BackwardCtx"},
    "engine/tensor.h": {"TensorImpl"},
    "engine/storage.h": {"StorageImpl"},
    "engine/random.h": {"Philox4"},
    "engine/dtype.h": {"DTypeInfo"},
    "engine/autograd.h": {"Edge", "AutogradMeta"},
    "optim/multi_tensor.h": {"Chunk"},
    "optim/optimizer.h": {"Slot"},
    "optim/lr_scheduler.h": {"Phase"},
    "optim/option.h": {"DefaultValue"},
    "data/transforms.h": {"Transform"},
    "nn/module.h": {"Derived"},  # private to Module
}
STRUCT = re.compile(r"\s*struct\s+(\w+)\s*(?::[^{]*)?\{\s*$")
MEMBER = re.compile(r"^[\w:<>,\s*&()]+\s+\w+(\[\w*\])?(\s*,\s*\w+)*;$")


def members_without_default(rel, text):
    found = []
    depth, name, open_depth = 0, None, None
    for number, line in enumerate(text.split("\n"), 1):
        code = line.split("//")[0]
        start = STRUCT.match(code)
        if start and name is None:
            name, open_depth = start.group(1), depth
        elif name is not None and depth == open_depth + 1:
            s = code.strip()
            method = re.search(r"\)\s*(const)?\s*(override)?;$", s) is not None
            if MEMBER.match(s) and not method and not s.startswith(("using ", "friend ", "return ", "typedef ")):
                if name not in INTERNAL.get(rel, ()):
                    found.append(f"{rel}:{number}: {name}: {s}")
        depth += code.count("{") - code.count("}")
        if name is not None and depth <= open_depth:
            name = None
    return found


def main():
    bad = []
    for top in DIRS:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if f.endswith(".h"):
                    path = os.path.join(folder, f)
                    rel = os.path.relpath(path, ROOT)
                    with open(path, encoding="utf-8") as fh:
                        bad += members_without_default(rel, fh.read())
    if bad:
        print("struct members without a default initializer (add `{}` or `= value`):")
        print("\n".join(bad))
        return 1
    print("field_defaults: every public struct member has a default")
    return 0


if __name__ == "__main__":
    sys.exit(main())
