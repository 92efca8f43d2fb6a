#!/usr/bin/env python3
"""saved_activations.py - what autograd really keeps for backward, next to
vsim's activation accounting. Runs on the CPU with any PyTorch (Debian's
python3-torch 1.13 will do); no GPU.

  tests/validation/saved_activations.py [--vsim build/vsim] [--check]

For each configuration it builds the ground-truth harness's model
(calibrate/groundtruth/gtmodels.py) with 2 and with 4 layers, runs one
forward pass under torch.autograd.graph.saved_tensors_hooks and adds up
the distinct storages autograd saved (a view saved twice, or q, k and v
sliced from one qkv output, count once). Weights and buffers are left out
(vsim counts them as params), and so are the fp32 log-probabilities of the
loss (vsim counts the logits and the loss as temp) and 0-dimensional
tensors (wrapped Python scalars, host memory on a GPU). It runs vsim on the
same workload (generate.py) and adds up the activations vsim allocates in
the forward pass (timeline.csv, every activations delta before the first
release). Both are split the same way: per layer = (4-layer total -
2-layer total) / 2, and the rest (embedding, input batch, final norm, head
input) = total - layers x per layer. Differencing cancels whatever both
count once per model.

Autocast (amp = autocast, vsim's precision = amp_bf16) runs the forward
pass under CPU autocast with bf16. Its op lists differ from CUDA's where
the model needs it only in the eager softmax, which the harness's model
runs in fp32 as CUDA's list does (gtmodels.attention); layer_norm, not
forced to fp32 on the CPU, gets the fp32 residual stream anyway. The
16-bit weight copies each matmul saves count on both sides.

Saved tensors do not depend on the device, with one exception handled
here: on the CPU, PyTorch 1.13's F.dropout multiplies by a mask of the
input's dtype, where CUDA runs the fused native_dropout and saves a 1-byte
mask; the script routes dropout through torch.native_dropout, as on a GPU.
SDPA (attention = flash) is compared only where this PyTorch has it.

LoRA (LORA_CONFIGS): every weight frozen and rank-r adapters (A, B in the
model's dtype, as torchtune keeps them) on the targets, in PEFT's form
base(x) + B(A(x)) x alpha / r, against vsim's [finetune] method = lora.
Only the per-layer figure is checked there: with a frozen embedding
nothing before the first adapter needs a gradient, so autograd keeps
nothing for layer 0's norm and vsim does (the rest differs by that).
A partial fine-tune (only the last layer trains) keeps nothing in the
frozen layers before it, in autograd and in vsim.

--check exits 1 when vsim counts more than autograd saves, or less by
more than the norms' per-row statistics vsim does not count (LayerNorm
saves an fp32 mean and 1/std per token, RMSNorm an fp32 1/rms: 8 or 4
bytes per token per norm; two norms per layer, one in the rest) and,
under GQA with eager attention, repeat_interleave's int64 index.
Exit 3 without PyTorch.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "calibrate", "groundtruth"))

import compare_groundtruth  # noqa: E402 (beside this file: runs vsim on a row)
import generate  # noqa: E402
import gtconfig  # noqa: E402

EXIT_NO_TORCH = 3
SMALL = dict(hidden=256, heads=4, seq_len=256, micro_batch=2, vocab=1000)
CONFIGS = [
    dict(SMALL, arch="gpt", precision="bf16", amp="master"),
    dict(SMALL, arch="gpt", precision="fp32", amp="none"),
    dict(SMALL, arch="llama", kv_heads=2, ffn_hidden=512, precision="bf16", amp="master"),
    dict(SMALL, arch="llama", kv_heads=2, ffn_hidden=512, precision="fp32", amp="none"),
    dict(SMALL, arch="gpt", precision="bf16", amp="autocast"),
    dict(SMALL, arch="llama", kv_heads=2, ffn_hidden=512, precision="bf16", amp="autocast"),
]
LLAMA_AUTOCAST = CONFIGS[-1]
# (configuration, LoRA rank, targets): PEFT's default targets for Llama,
# and all seven linears
LLAMA_BF16 = dict(SMALL, arch="llama", kv_heads=2, ffn_hidden=512, precision="bf16",
                  amp="master")
LORA_CONFIGS = [
    (LLAMA_BF16, 8, ("q", "v")),
    (LLAMA_BF16, 8, ("q", "k", "v", "o", "gate", "up", "down")),
]


def storage_of(t):
    """(address, bytes) of the memory a tensor keeps alive."""
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr(), s.nbytes()


def add_lora(model, torch, rank, targets, dtype):
    """Freezes model and puts a rank-`rank` adapter on each target linear
    of every layer, as PEFT's lora.Linear computes it."""
    nn = torch.nn

    class LoRALinear(nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base
            self.A = nn.Linear(base.in_features, rank, bias=False, dtype=dtype)
            self.B = nn.Linear(rank, base.out_features, bias=False, dtype=dtype)
            self.scaling = 8.0 / rank  # lora_alpha / r: no memory effect

        def forward(self, x):
            return self.base(x) + self.B(self.A(x)) * self.scaling

    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.layers:
        for name in targets:
            setattr(layer, name, LoRALinear(getattr(layer, name)))


def freeze_prefix(model, trainable_layers):
    """Freezes the embedding and all layers but the last trainable_layers."""
    for p in model.embed.parameters():
        p.requires_grad_(False)
    for layer in model.layers[: len(model.layers) - trainable_layers]:
        for p in layer.parameters():
            p.requires_grad_(False)


def checkpoint_every(model, torch, every):
    """Wraps each layer whose 1-based index is a multiple of `every` in
    torch.utils.checkpoint (reentrant: it saves the block input with
    save_for_backward, where the hooks see it; inside, nothing is saved)."""
    from torch.utils.checkpoint import checkpoint
    for i, layer in enumerate(model.layers):
        if (i + 1) % every == 0:
            inner = layer.forward
            layer.forward = lambda x, inner=inner: checkpoint(inner, x, use_reentrant=True)


def torch_saved(c, torch, gtm, lora=None, trainable_layers=0, every=0):
    """Bytes of distinct storages autograd saves in one forward pass of c,
    without weights, buffers and the logits and log-probabilities (a
    vocabulary-wide row per token: an autocast copy of the output weight,
    [hidden, vocab] once transposed, counts); lora:
    (rank, targets) to fine-tune with adapters instead; trainable_layers:
    train only the last this many layers; every: checkpoint every N-th
    layer."""
    dtype = gtm.DTYPES[c["precision"]] if c["amp"] == "master" else torch.float32
    model = gtm.Decoder(c, "cpu", dtype)
    if lora:
        add_lora(model, torch, lora[0], lora[1], dtype)
    if trainable_layers:
        freeze_prefix(model, trainable_layers)
    if every:
        checkpoint_every(model, torch, every)
    model.train()
    fixed = {storage_of(t)[0] for t in list(model.parameters()) + list(model.buffers())}
    saved = {}

    logits = c["micro_batch"] * c["seq_len"] * c["vocab"]

    def pack(t):
        # 0-dim tensors are wrapped Python scalars: host memory on a GPU.
        if t.dim() and t.numel() and not (t.shape[-1] == c["vocab"] and
                                          t.numel() == logits):
            ptr, nbytes = storage_of(t)
            if ptr not in fixed:
                saved[ptr] = max(saved.get(ptr, 0), nbytes)
        return t

    torch.manual_seed(0)
    ids = torch.randint(c["vocab"], (c["micro_batch"], c["seq_len"]))
    labels = torch.randint(c["vocab"], (c["micro_batch"], c["seq_len"]))
    amp = (torch.autocast("cpu", dtype=gtm.DTYPES[c["precision"]])
           if c["amp"] == "autocast" else contextlib.nullcontext())
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), amp:
        loss = model(ids, labels)
    del loss
    return sum(saved.values())


def lora_ini(lora):
    """The [finetune] section of an adapter fine-tune (None: none)."""
    if not lora:
        return ""
    return (f"[finetune]\nmethod = lora\nlora_rank = {lora[0]}\n"
            f"lora_targets = {','.join(lora[1])}\nadapter_dtype = bf16\n")


def vsim_forward_activations(c, vsim, lora=None, trainable_layers=0, every=0):
    """vsim's activation bytes allocated in the forward pass of c."""
    extra = lora_ini(lora)
    if trainable_layers:
        extra += (f"[finetune]\nmethod = frozen\n"
                  f"trainable_layers = {trainable_layers}\n")
    if every:
        c = dict(c, checkpointing="full")
        extra += f"[training]\ncheckpoint_every = {every}\n"
    with tempfile.TemporaryDirectory() as d:
        ini = os.path.join(d, "w.ini")
        # tensor bytes, not the blocks the caching allocator hands out:
        # its rounding depends on what else it holds (the parameters,
        # allocated tensor by tensor), not on what autograd saves
        text = generate.row_to_ini(c).replace("allocator = caching",
                                              "allocator = exact")
        assert "allocator = exact" in text
        with open(ini, "w") as f:
            f.write(text + extra)
        pred, why = compare_groundtruth.run_vsim(vsim, ini, generate.TOPOLOGY,
                                                 os.path.join(d, "out"))
        if pred is None or pred["fits"] != "true":
            raise RuntimeError(f"vsim failed on {c['name']}: {why or 'does not fit'}")
        total = 0
        with open(os.path.join(d, "out", "timeline.csv"), newline="") as f:
            for row in csv.DictReader(f):
                if row["category"] != "activations":
                    continue
                delta = int(row["delta_bytes"])
                if delta < 0:
                    break
                total += delta
        return total


def prec_label(c):
    """The precision as vsim names it (amp_bf16 for autocast)."""
    return gtconfig.vsim_precision(c)


def split(total2, total4):
    per_layer = (total4 - total2) / 2
    return per_layer, total2 - 2 * per_layer


def norm_stat_bytes(c):
    """Bytes of one norm's fp32 per-row statistics, which vsim does not
    count: LayerNorm's mean and 1/std (8 bytes per token; PyTorch 1.13 on
    the CPU keeps them in bf16 for bf16 input, 4), RMSNorm's 1/rms (4)."""
    return c["micro_batch"] * c["seq_len"] * (8 if c["arch"] == "gpt" else 4)



def gqa_repeat_bytes(c):
    """Under GQA, eager attention expands K and V with repeat_interleave,
    which saves the int64 index of the expansion (one per query head) for
    its backward."""
    if c["attention"] != "eager" or c["kv_heads"] == c["heads"]:
        return 0
    return 2 * 8 * c["heads"]


def compare_lora(base, lora, vsim, torch, gtm):
    """One LoRA row of the table (eager attention: PyTorch 1.13's CPU has no
    fused kernel); the per-layer figure checked as for full training."""
    c2 = gtconfig.normalize(dict(base, layers=2, attention="eager"))
    c4 = gtconfig.normalize(dict(base, layers=4, attention="eager"))
    t_layer, t_rest = split(torch_saved(c2, torch, gtm, lora), torch_saved(c4, torch, gtm, lora))
    v_layer, v_rest = split(vsim_forward_activations(c2, vsim, lora),
                            vsim_forward_activations(c4, vsim, lora))
    name = f"{c2['arch']} LoRA r={lora[0]} on {','.join(lora[1])}"
    print(f"| {name} | {t_layer / 2 ** 10:.1f} KiB | {v_layer / 2 ** 10:.1f} KiB "
          f"| {100 * (v_layer - t_layer) / t_layer:+.2f}% | {t_rest / 2 ** 10:.1f} KiB "
          f"| {v_rest / 2 ** 10:.1f} KiB | (not checked) |")
    if not 0 <= t_layer - v_layer <= 2 * norm_stat_bytes(c2) + gqa_repeat_bytes(c2):
        return [f"{name}: per layer {t_layer:.0f} B saved, vsim {v_layer:.0f} B"]
    return []


def compare_frozen_prefix(base, vsim, torch, gtm):
    """Only the last layer trains: with 2 and 4 layers the difference is
    two frozen layers before every trainable weight, where autograd keeps
    nothing; vsim must keep nothing there either (per layer: 0)."""
    c2 = gtconfig.normalize(dict(base, layers=2, attention="eager"))
    c4 = gtconfig.normalize(dict(base, layers=4, attention="eager"))
    t_layer, _ = split(torch_saved(c2, torch, gtm, trainable_layers=1),
                       torch_saved(c4, torch, gtm, trainable_layers=1))
    v_layer, _ = split(vsim_forward_activations(c2, vsim, trainable_layers=1),
                       vsim_forward_activations(c4, vsim, trainable_layers=1))
    name = f"{c2['arch']} last layer trains (a frozen layer before it)"
    print(f"| {name} | {t_layer / 2 ** 10:.1f} KiB | {v_layer / 2 ** 10:.1f} KiB "
          f"| | | | (rest not checked) |")
    if t_layer != 0 or v_layer != 0:
        return [f"{name}: per frozen layer {t_layer:.0f} B saved, vsim {v_layer:.0f} B"]
    return []


def compare_checkpointing(base, every, vsim, torch, gtm):
    """Full checkpointing of every `every`-th layer (1: all of them, as
    Megatron's full recompute; 2: torchtitan's default integer option)
    against torch.utils.checkpoint on the same layers: per layer, a
    checkpointed layer keeps its input alone, the others everything."""
    c2 = gtconfig.normalize(dict(base, layers=2, attention="eager"))
    c4 = gtconfig.normalize(dict(base, layers=4, attention="eager"))
    t_layer, _ = split(torch_saved(c2, torch, gtm, every=every),
                       torch_saved(c4, torch, gtm, every=every))
    v_layer, _ = split(vsim_forward_activations(c2, vsim, every=every),
                       vsim_forward_activations(c4, vsim, every=every))
    name = (f"{c2['arch']} {prec_label(c2)} checkpoint every {every} "
            f"layer{'s' if every > 1 else ''}")
    print(f"| {name} | {t_layer / 2 ** 10:.1f} KiB | {v_layer / 2 ** 10:.1f} KiB "
          f"| {100 * (v_layer - t_layer) / t_layer:+.2f}% | | | (rest not checked) |")
    # the uncheckpointed layers' norms keep statistics vsim does not count
    if not 0 <= t_layer - v_layer <= 2 * norm_stat_bytes(c2) + gqa_repeat_bytes(c2):
        return [f"{name}: per layer {t_layer:.0f} B saved, vsim {v_layer:.0f} B"]
    return []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vsim", default=os.path.join(ROOT, "build", "vsim"))
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless vsim matches within the documented gaps")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"saved_activations.py: PyTorch is not installed ({e}); skipped",
              file=sys.stderr)
        return EXIT_NO_TORCH
    import torch.nn.functional as F
    import gtmodels as gtm

    # CUDA's fused dropout: a 1-byte mask (module docstring).
    F.dropout = lambda x, p, training=True, inplace=False: (
        torch.native_dropout(x, p, training)[0] if training and p > 0 else x)
    attentions = ["eager"] + (["flash"] if hasattr(F, "scaled_dot_product_attention") else [])

    print(f"torch {torch.__version__} on the CPU; activations saved in one forward pass")
    print("| configuration | per layer: torch | vsim | diff | rest: torch | vsim | diff |")
    print("|---|---|---|---|---|---|---|")
    failures = []
    for base in CONFIGS:
        for attention in attentions:
            c2 = gtconfig.normalize(dict(base, layers=2, attention=attention))
            c4 = gtconfig.normalize(dict(base, layers=4, attention=attention))
            t_layer, t_rest = split(torch_saved(c2, torch, gtm), torch_saved(c4, torch, gtm))
            v_layer, v_rest = split(vsim_forward_activations(c2, args.vsim),
                                    vsim_forward_activations(c4, args.vsim))
            name = f"{c2['arch']} kv_heads={c2['kv_heads']} {prec_label(c2)} {attention}"
            print(f"| {name} | {t_layer / 2 ** 10:.1f} KiB | {v_layer / 2 ** 10:.1f} KiB "
                  f"| {100 * (v_layer - t_layer) / t_layer:+.2f}% | {t_rest / 2 ** 10:.1f} KiB "
                  f"| {v_rest / 2 ** 10:.1f} KiB | {100 * (v_rest - t_rest) / t_rest:+.2f}% |")
            # Two norms per layer, the final norm in the rest; vsim may only
            # be short of autograd, never over.
            gap = norm_stat_bytes(c2)
            if not 0 <= t_layer - v_layer <= 2 * gap + gqa_repeat_bytes(c2):
                failures.append(f"{name}: per layer {t_layer:.0f} B saved, vsim {v_layer:.0f} B")
            if not 0 <= t_rest - v_rest <= gap:
                failures.append(f"{name}: rest {t_rest:.0f} B saved, vsim {v_rest:.0f} B")
    for base, rank, targets in LORA_CONFIGS:
        failures += compare_lora(base, (rank, targets), args.vsim, torch, gtm)
    failures += compare_frozen_prefix(LLAMA_BF16, args.vsim, torch, gtm)
    for base in (CONFIGS[0], LLAMA_BF16):
        for every in (1, 2):
            failures += compare_checkpointing(base, every, args.vsim, torch, gtm)
    failures += compare_checkpointing(LLAMA_AUTOCAST, 2, args.vsim, torch, gtm)
    import torch.utils.checkpoint as tuc
    if not hasattr(tuc, "create_selective_checkpoint_contexts"):
        print(f"checkpointing = ops not checked: PyTorch {torch.__version__} has no "
              "torch.utils.checkpoint.create_selective_checkpoint_contexts")
    for f in failures:
        print(f"MISMATCH {f}")
    return 1 if args.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
