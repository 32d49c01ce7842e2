#!/usr/bin/env python3
# tests/check_field_defaults.py: every data member of a struct in the public headers (engine,
# nn, optim, data, text, train, interop, dist) has a default member initializer, so user code that fills an
# options struct with designated initializers (`LoaderOptions{.batch_size = 64}`) compiles
# without -Wextra's missing-field-initializers warning. Run by ctest as `field_defaults`; exits
# 1 listing each member as file:line. Internal structs (kernel plumbing, tensor internals, the
# autograd graph, a context holding references) are listed in INTERNAL.
#
# It also checks the field order of option structs (Note [Option field order] in
# docs/DESIGN.md): designated initializers must follow declaration order, so a struct that has a
# PyTorch counterpart declares the fields it shares with it in PyTorch's keyword order (ORDER,
# in brisk's names), and every struct named *Options or *Config is either in ORDER or listed in
# OWN as brisk's own (no PyTorch counterpart), so a new one cannot skip the rule.
# Not here: classes (their members are private) and kernels/ (not user API).
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ("engine", "nn", "optim", "data", "text", "train", "compress", "search", "interop", "dist")
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
    "text/bpe.h": {"AddedMatcher"},  # ByteLevelBPE's internals
    "text/bpe_detail.h": {"ByteChars"},
    "text/unicode_tables.h": {"ClassRange"},  # generated tables, aggregate-initialized
    "interop/onnx_ops.h": {"OpContext", "OpEntry"},  # the importer's op table
}
# (file, struct) -> the shared fields, in the PyTorch counterpart's keyword order.
ORDER = {
    # torch.autograd.gradcheck(eps, atol, rtol, raise_exception)
    ("engine/gradcheck.h", "GradcheckOptions"): ["eps", "atol", "rtol", "raise"],
    ("engine/profiler.h", "ProfilerOptions"): ["record_shapes"],  # torch.profiler.profile
    # nn.RNN(num_layers, nonlinearity, bias, batch_first, dropout, bidirectional); LSTM's proj_size
    ("nn/recurrent.h", "RNNOptions"): ["num_layers", "nonlinearity", "bias", "batch_first", "dropout",
                                       "bidirectional", "proj_size"],
    ("nn/layers.h", "ConvOptions"): ["stride", "padding", "dilation", "groups", "bias"],  # nn.Conv2d
    ("nn/layers_resize.h", "ConvTransposeOptions"): ["stride", "padding", "output_padding", "groups", "bias",
                                                     "dilation"],  # nn.ConvTranspose2d
    ("engine/functions.h", "InterpolateOptions"): ["size", "scale_factor", "mode", "align_corners",
                                                "recompute_scale_factor"],  # F.interpolate
    # PerChannelMinMaxObserver (MinMaxObserver: the same without ch_axis)
    ("compress/quantize.h", "ObserverOptions"): ["ch_axis", "dtype", "qscheme", "reduce_range", "quant_min", "quant_max",
                                           "eps"],
    ("compress/quantize.h", "QConfig"): ["activation", "weight"],  # torch.ao.quantization.QConfig
    ("compress/prune_channels.h", "ChannelOptions"): ["amount", "norm"],  # prune.ln_structured(amount, n)
    # nn.TransformerEncoderLayer
    ("nn/transformer.h", "TransformerOptions"): ["dim_feedforward", "dropout", "activation", "layer_norm_eps",
                                                 "batch_first", "norm_first", "bias"],
    # transformers.GPT2Config (dropout: resid_pdrop and the others; layer_norm_epsilon)
    ("nn/models/gpt2.h", "GPT2Config"): ["vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "dropout",
                                         "layer_norm_eps"],
    ("optim/sgd.h", "SGDOptions"): ["lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "fused"],
    ("optim/adam.h", "AdamOptions"): ["lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize", "fused"],
    ("optim/adam.h", "AdamWOptions"): ["lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize",
                                       "fused"],
    ("optim/radam.h", "RAdamOptions"): ["lr", "beta1", "beta2", "eps", "weight_decay", "decoupled_weight_decay",
                                        "maximize"],
    ("optim/nadam.h", "NAdamOptions"): ["lr", "beta1", "beta2", "eps", "weight_decay", "momentum_decay",
                                        "decoupled_weight_decay", "maximize"],
    ("optim/rmsprop.h", "RMSpropOptions"): ["lr", "alpha", "eps", "weight_decay", "momentum", "centered",
                                            "maximize", "fused"],
    ("optim/adamax.h", "AdamaxOptions"): ["lr", "beta1", "beta2", "eps", "weight_decay", "maximize"],
    ("optim/adagrad.h", "AdagradOptions"): ["lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps",
                                            "maximize", "fused"],
    ("optim/lr_scheduler.h", "CyclicLROptions"): ["base_lr", "max_lr", "step_size_up", "step_size_down", "mode",
                                                  "gamma", "scale_fn", "scale_mode", "cycle_momentum",
                                                  "base_momentum", "max_momentum"],
    ("optim/lr_scheduler.h", "OneCycleLROptions"): ["max_lr", "total_steps", "epochs", "steps_per_epoch",
                                                    "pct_start", "anneal_strategy", "cycle_momentum",
                                                    "base_momentum", "max_momentum", "div_factor",
                                                    "final_div_factor", "three_phase"],
    ("optim/lr_scheduler.h", "ReduceLROnPlateauOptions"): ["mode", "factor", "patience", "threshold",
                                                           "threshold_mode", "cooldown", "min_lr", "eps"],
    ("optim/grad_scaler.h", "GradScalerOptions"): ["init_scale", "growth_factor", "backoff_factor",
                                                   "growth_interval", "enabled"],
    # DataLoader (collate: collate_fn, timeout_s: timeout, seed: generator, device: pin_memory_device)
    ("data/dataloader.h", "LoaderOptions"): ["batch_size", "shuffle", "sampler", "num_workers", "collate",
                                             "pin_memory", "drop_last", "timeout_s", "seed", "prefetch_factor",
                                             "persistent_workers", "device"],
    # transformers.GenerationConfig (stop_tokens: eos_token_id; seed is brisk's)
    ("nn/generate.h", "GenerationOptions"): ["max_new_tokens", "do_sample", "use_cache", "temperature", "top_k",
                                             "top_p", "repetition_penalty", "pad_token_id", "stop_tokens"],
    # tokenizers.trainers.BpeTrainer
    ("text/bpe.h", "BpeTrainerOptions"): ["vocab_size", "min_frequency", "special_tokens"],
    # torch.onnx.export
    ("interop/onnx_export.h", "ExportOptions"): ["input_names", "output_names", "opset_version", "dynamic_axes"],
    ("dist/ddp.h", "DDPOptions"): ["broadcast_buffers", "bucket_cap_mb", "find_unused_parameters"],
    ("dist/process_group.h", "GroupOptions"): ["timeout", "name"],  # init_process_group(timeout, group_name)
}
# brisk's own option structs: no PyTorch counterpart to follow.
OWN = {
    ("engine/env.h", "EnvOptions"),
    ("compress/distill.h", "DistillOptions"),
    ("nn/features.h", "FeatureOptions"),
    ("compress/quantize.h", "QuantizeOptions"),
    ("train/early_stopping.h", "EarlyStoppingOptions"),
    ("data/readers.h", "CsvOptions"),
    ("search/tune.h", "TpeOptions"),
    ("search/tune.h", "EvolutionOptions"),
    ("search/tune.h", "AshaOptions"),
    ("search/tune.h", "MedianOptions"),
    ("search/tune.h", "Options"),
    ("search/nas.h", "EvolutionOptions"),
    ("search/nas.h", "ReinforceOptions"),
    ("dist/pipeline.h", "PipelineOptions"),
    ("dist/zero.h", "ZeroOptions"),  # stage: DeepSpeed's idea; PyTorch's ZeroRedundancyOptimizer has no such keyword
    ("dist/fsdp.h", "FSDPOptions"),  # units ~ auto_wrap_policy, prefetch ~ backward_ and forward_prefetch (that order)
    ("text/tokenize_files.h", "TokenizeFilesOptions"),
    ("interop/onnx_import.h", "LoadOptions"),
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


def struct_fields(text):
    """{struct name: [data member names in declaration order]} for the structs of a header."""
    out = {}
    lines = [line.split("//")[0] for line in text.split("\n")]
    depth, name, open_depth, stmt = 0, None, None, ""
    for code in lines:
        start = STRUCT.match(code)
        if start and name is None:
            name, open_depth, stmt = start.group(1), depth, ""
            out.setdefault(name, [])
            depth += code.count("{") - code.count("}")
            continue
        for ch in code + " ":
            if name is not None and depth == open_depth + 1 and ch not in "{};":
                stmt += ch
            if ch == "{":
                if name is not None and depth == open_depth + 1:
                    stmt += "{}"
                depth += 1
            elif ch == "}":
                depth -= 1
                if name is not None and depth == open_depth + 1:
                    stmt = "" if not declared_names(stmt) else stmt  # a method's body ended
                if name is not None and depth <= open_depth:
                    name, stmt = None, ""
            elif ch == ";" and name is not None and depth == open_depth + 1:
                out[name] += declared_names(stmt)
                stmt = ""
    return out


def declared_names(stmt):
    s = re.sub(r"\{\}", "", " ".join(stmt.split()))
    if not s or s.split()[0] in ("using", "friend", "typedef", "static", "enum", "template", "return"):
        return []
    head = s.split("=")[0]
    while re.search(r"<[^<>]*>", head):
        head = re.sub(r"<[^<>]*>", "", head)  # template arguments may hold a function type
    if "(" in head:  # a method or a constructor
        return []
    pieces, level, cur = [], 0, ""
    for ch in s:  # split at commas outside <...> and (...)
        level += ch in "<(" and 1 or 0
        level -= ch in ">)" and 1 or 0
        if ch == "," and level == 0:
            pieces.append(cur)
            cur = ""
        else:
            cur += ch
    pieces.append(cur)
    names = []
    for piece in pieces:
        m = re.search(r"(\w+)\s*(\[\w*\])?\s*$", piece.split("=")[0])
        if m:
            names.append(m.group(1))
    return names


def order_problems(rel, text):
    found = []
    fields = struct_fields(text)
    for name in fields:
        if not re.search(r"(Options|Config)$", name):
            continue
        if (rel, name) in OWN:
            continue
        want = ORDER.get((rel, name))
        if want is None:
            found.append(f"{rel}: {name}: not in ORDER (PyTorch's keyword order) nor OWN (brisk's own)")
            continue
        missing = [f for f in want if f not in fields[name]]
        if missing:
            found.append(f"{rel}: {name}: ORDER names fields it does not declare: {missing}")
            continue
        got = [f for f in fields[name] if f in want]
        if got != want:
            found.append(f"{rel}: {name}: fields {got} are not in PyTorch's order {want}")
    return found


def main():
    bad = []
    order_bad = []
    seen = set()
    for top in DIRS:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if f.endswith(".h"):
                    path = os.path.join(folder, f)
                    rel = os.path.relpath(path, ROOT)
                    with open(path, encoding="utf-8") as fh:
                        text = fh.read()
                    bad += members_without_default(rel, text)
                    order_bad += order_problems(rel, text)
                    seen |= {(rel, n) for n in struct_fields(text)}
    order_bad += [f"{rel}: {name}: listed in ORDER/OWN but not found" for rel, name in sorted(set(ORDER) | OWN)
                  if (rel, name) not in seen]
    if order_bad:
        print("option structs out of PyTorch's keyword order (Note [Option field order] in docs/DESIGN.md):")
        print("\n".join(order_bad))
        return 1
    if bad:
        print("struct members without a default initializer (add `{}` or `= value`):")
        print("\n".join(bad))
        return 1
    print(f"field_defaults: every public struct member has a default; {len(ORDER)} option structs follow "
          f"PyTorch's keyword order, {len(OWN)} are brisk's own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
