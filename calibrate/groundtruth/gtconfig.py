"""gtconfig.py - configurations, CSV columns and the measurement grid of the
ground-truth harness (issue 7). Pure standard library: no PyTorch, so the
driver, the generator, the comparison and the tests import it anywhere.

A configuration is a dict whose keys are the CSV's configuration columns.
Every model and training parameter is named as in workload.ini (see
`vsim keys`); the few harness-only choices (`name`, `model`, `amp`,
`optimizer_impl`, `steps`) say how the PyTorch run was made and have no vsim
key. `normalize()` fills defaults and derives the workload keys that follow
from the harness's choices:

  amp = none      fp32 weights, grads, optimizer states and activations
                  -> precision = fp32, master_weights = false
  amp = autocast  torch.autocast(bf16 | fp16) over fp32 weights (the
                  standard PyTorch recipe; fp16 adds a GradScaler)
                  -> precision = bf16 | fp16 in the CSV, vsim's precision =
                     amp_bf16 | amp_fp16 (vsim_precision()), master_weights
                     = false, grad_dtype = precision: fp32 weights,
                     gradients and moments (4+4+8 bytes/param) and
                     autocast's bf16 | fp16 copy of every weight, which vsim
                     models itself (cached from its first use in forward,
                     saved for backward by each matmul until that layer's
                     backward)
  amp = master    Megatron/DeepSpeed style: bf16 | fp16 weights and
                  activations, a persistent fp32 master copy and fp32 main
                  gradients inside the optimizer (fp16 adds dynamic loss
                  scaling) -> precision = bf16 | fp16, master_weights = true,
                     grad_dtype = fp32 (2+4+12 bytes/param)
"""
from __future__ import annotations

import csv
import io
import os
import tempfile

# ---------------------------------------------------------------------------
# Columns
# ---------------------------------------------------------------------------

# (section, key) of workload.ini, in the order the CSV and the generated INI
# list them. parallel.* is fixed (one GPU) and not a column.
WORKLOAD_KEYS = [
    ("model", "arch"), ("model", "layers"), ("model", "hidden"),
    ("model", "heads"), ("model", "kv_heads"), ("model", "ffn_hidden"),
    ("model", "vocab"), ("model", "seq_len"), ("model", "tied_embeddings"),
    ("model", "dropout"),
    ("training", "micro_batch"), ("training", "global_batch"),
    ("training", "precision"), ("training", "master_weights"),
    ("training", "grad_dtype"), ("training", "optimizer"),
    ("training", "checkpointing"), ("training", "attention"),
    ("runtime", "allocator"), ("runtime", "expandable_segments"),
]
WORKLOAD_COLUMNS = [k for _, k in WORKLOAD_KEYS]

# How the harness ran it (no vsim key).
HARNESS_COLUMNS = ["amp", "optimizer_impl", "steps"]
CONFIG_COLUMNS = ["name", "model"] + WORKLOAD_COLUMNS + HARNESS_COLUMNS

# What a run measured (bytes as integers, times in seconds; empty = not
# measured). `max_*` are torch.cuda.max_memory_allocated()/reserved() over
# the whole process; `steady_max_*` over steps 2..steps only (after a
# reset_peak_memory_stats() that follows the first step).
MEASURED_COLUMNS = [
    "outcome",                      # ok | oom | error | timeout | skipped | not_run
    "oom_phase",                    # where the OOM hit: model, step N forward|backward|optimizer
    "oom_request_bytes",            # "Tried to allocate" of the OOM message
    "error",                        # first line of the error, if any
    "params",                       # parameters of the built model
    "context_bytes",                # NVML used after CUDA init - before (empty without NVML)
    "device_used_after_init_bytes", # mem_get_info total - free right after CUDA init
    "allocated_after_model_bytes",  # memory_allocated() once the model (and masters) exist
    "allocated_after_first_step_bytes",
    "first_step_max_allocated_bytes",
    "first_step_max_reserved_bytes",
    "steady_max_allocated_bytes",
    "steady_max_reserved_bytes",
    "max_allocated_bytes",          # torch.cuda.max_memory_allocated() (whole run)
    "max_reserved_bytes",           # torch.cuda.max_memory_reserved() (whole run)
    "reserved_end_bytes",           # memory_reserved() at the end
    "device_used_end_bytes",        # mem_get_info total - free at the end
    "nvml_used_end_bytes",          # NVML used at the end
    "non_allocator_bytes",          # NVML process use at the end - reserved (context, lazily loaded kernels, library handles)
    "device_total_bytes",           # mem_get_info total
    "alloc_retries",                # memory_stats num_alloc_retries
    "step_time_s",                  # median of steps 2..steps (CUDA events)
    "first_step_time_s",
    "step_times_s",                 # every step, ';'-separated
    "skipped_steps",                # fp16 steps skipped for inf/nan gradients
    "loss",                         # last loss (sanity)
    "sdpa_backend",                 # flash | efficient | eager
    "gqa_expand",                   # K/V expanded to every head before attention
    "optimizer_impl_used",          # fused | foreach | forloop
    "alloc_conf",                   # PYTORCH_(CUDA_)ALLOC_CONF of the run
    "expandable_seen",              # the snapshot's segments are expandable (empty: unknown)
    "torch_version", "cuda_version", "cudnn_version", "gpu_name",
    "driver_version",
    "wall_s",                       # seconds the configuration took, process start to exit
]
ALL_COLUMNS = CONFIG_COLUMNS + MEASURED_COLUMNS

ENUMS = {
    "arch": ("gpt", "llama"),
    "precision": ("bf16", "fp16", "fp32"),
    "grad_dtype": ("precision", "fp32"),
    "optimizer": ("adamw", "adam", "sgd", "momentum"),
    "checkpointing": ("none", "full"),
    "attention": ("flash", "eager"),
    "allocator": ("caching",),
    "amp": ("none", "autocast", "master"),
    "optimizer_impl": ("fused", "foreach", "forloop"),
}
COUNT_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab",
              "seq_len", "micro_batch", "global_batch", "steps")
BOOL_KEYS = ("tied_embeddings", "master_weights", "expandable_segments")
OUTCOMES = ("ok", "oom", "error", "timeout", "skipped", "not_run")


class ConfigError(ValueError):
    """A configuration value that is missing or not allowed."""


# ---------------------------------------------------------------------------
# Models (random weights; shapes of well-known checkpoints)
# ---------------------------------------------------------------------------

GPT_VOCAB = 50304     # GPT-2's 50257 padded to a multiple of 64 (nanoGPT)
LLAMA_VOCAB = 32000

MODELS = {
    # GPT-3 paper shapes (Brown et al. 2020, Table 2.1); 1.3B uses 16 heads of 128.
    "gpt-125m": dict(arch="gpt", layers=12, hidden=768, heads=12),
    "gpt-350m": dict(arch="gpt", layers=24, hidden=1024, heads=16),
    "gpt-760m": dict(arch="gpt", layers=24, hidden=1536, heads=16),
    "gpt-1.3b": dict(arch="gpt", layers=24, hidden=2048, heads=16),
    "gpt-2.7b": dict(arch="gpt", layers=32, hidden=2560, heads=32),
    "gpt-6.7b": dict(arch="gpt", layers=32, hidden=4096, heads=32),
    # Llama family: a small GQA model, TinyLlama-1.1B, OpenLLaMA-3B,
    # Llama-2-7B and a Mistral-7B-shaped GQA model.
    "llama-160m": dict(arch="llama", layers=12, hidden=768, heads=12,
                       kv_heads=4, ffn_hidden=2048),
    "llama-1.1b": dict(arch="llama", layers=22, hidden=2048, heads=32,
                       kv_heads=4, ffn_hidden=5632),
    "llama-3b": dict(arch="llama", layers=26, hidden=3200, heads=32,
                     ffn_hidden=8640),
    "llama-7b": dict(arch="llama", layers=32, hidden=4096, heads=32,
                     ffn_hidden=11008),
    "mistral-7b": dict(arch="llama", layers=32, hidden=4096, heads=32,
                       kv_heads=8, ffn_hidden=14336),
}


def _bool(value, key):
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("true", "yes", "on", "1"):
        return True
    if s in ("false", "no", "off", "0"):
        return False
    raise ConfigError(f"{key} = {value!r}: expected true or false")


def _count(value, key):
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key} = {value!r}: expected a positive integer") from None
    if n < 1:
        raise ConfigError(f"{key} = {value!r}: expected a positive integer")
    return n


def _real(value, key):
    try:
        x = float(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key} = {value!r}: expected a number in [0, 1)") from None
    if not 0.0 <= x < 1.0:
        raise ConfigError(f"{key} = {value!r}: expected a number in [0, 1)")
    return x


def config_name(c):
    """A short unique name: model, sequence, batch and what differs from the
    baseline (bf16 autocast, fused AdamW, no checkpointing, flash)."""
    parts = [c["model"], f"s{c['seq_len']}", f"b{c['micro_batch']}", c["precision"]]
    if c["amp"] == "master":
        parts.append("master")
    parts.append(c["optimizer"])
    if c["optimizer_impl"] != "fused":
        parts.append(c["optimizer_impl"])
    if c["checkpointing"] != "none":
        parts.append("ckpt")
    if c["attention"] == "eager":
        parts.append("eager")
    if c["expandable_segments"]:
        parts.append("exp")
    return "-".join(parts)


def normalize(cfg):
    """Returns a complete, validated configuration (a new dict) from a partial
    one: a `model` preset and/or explicit workload keys, plus harness
    choices. Raises ConfigError naming the key on a bad value."""
    c = {}
    model = cfg.get("model", "")
    if model and model != "custom":
        if model not in MODELS:
            raise ConfigError(f"model = {model!r}: expected one of {', '.join(MODELS)}")
        c.update(MODELS[model])
    c.update({k: v for k, v in cfg.items() if v is not None and v != ""})
    c.setdefault("model", "custom")
    for k in ("arch", "layers", "hidden", "heads", "seq_len"):
        if k not in c:
            raise ConfigError(f"{k} is required")
    arch = str(c["arch"])
    if arch not in ENUMS["arch"]:
        raise ConfigError(f"arch = {arch!r}: expected gpt or llama")
    gpt = arch == "gpt"
    c.setdefault("kv_heads", c["heads"])
    c.setdefault("ffn_hidden", 4 * int(c["hidden"]))
    c.setdefault("vocab", GPT_VOCAB if gpt else LLAMA_VOCAB)
    c.setdefault("tied_embeddings", gpt)
    c.setdefault("dropout", 0.1 if gpt else 0.0)
    c.setdefault("micro_batch", 1)
    c.setdefault("global_batch", c["micro_batch"])
    c.setdefault("precision", "bf16")
    c.setdefault("amp", "none" if c["precision"] == "fp32" else "autocast")
    c.setdefault("optimizer", "adamw")
    c.setdefault("optimizer_impl", "fused")
    c.setdefault("checkpointing", "none")
    c.setdefault("attention", "flash")
    c.setdefault("allocator", "caching")
    c.setdefault("expandable_segments", False)
    c.setdefault("steps", 5)

    for k in COUNT_KEYS:
        c[k] = _count(c[k], k)
    for k in ("tied_embeddings", "expandable_segments"):
        c[k] = _bool(c[k], k)
    c["dropout"] = _real(c["dropout"], "dropout")
    for k, allowed in ENUMS.items():
        if k in c and k != "grad_dtype" and str(c[k]) not in allowed:
            raise ConfigError(f"{k} = {c[k]!r}: expected one of {', '.join(allowed)}")

    # Derived from the mixed-precision recipe (module docstring).
    if c["precision"] == "fp32":
        if c["amp"] != "none":
            raise ConfigError(f"amp = {c['amp']!r} with precision = fp32: expected amp = none")
        want_master, want_grad = False, "precision"
    else:
        if c["amp"] == "none":
            raise ConfigError(f"precision = {c['precision']} needs amp = autocast or master")
        # master: fp32 master and main grads; autocast: fp32 weights
        want_master, want_grad = ((True, "fp32") if c["amp"] == "master"
                                  else (False, "precision"))
    for k, want in (("master_weights", want_master), ("grad_dtype", want_grad)):
        if k in c and (_bool(c[k], k) if k == "master_weights" else c[k]) != want:
            raise ConfigError(f"{k} = {c[k]!r} does not follow from precision = "
                              f"{c['precision']}, amp = {c['amp']} (expected {want})")
        c[k] = want

    if c["hidden"] % c["heads"]:
        raise ConfigError(f"hidden = {c['hidden']} is not divisible by heads = {c['heads']}")
    if c["heads"] % c["kv_heads"]:
        raise ConfigError(f"heads = {c['heads']} is not divisible by kv_heads = {c['kv_heads']}")
    if c["global_batch"] != c["micro_batch"]:
        raise ConfigError("global_batch must equal micro_batch (one micro-batch per step)")
    c.setdefault("name", config_name(c))
    return {k: c[k] for k in CONFIG_COLUMNS}


# ---------------------------------------------------------------------------
# Sizes (the formulas of sim/model/model.c, so tests can hold them against vsim)
# ---------------------------------------------------------------------------

def param_count(c):
    """Parameters of the model, as vsim's whole_model_params() counts them."""
    h, f, v, s = c["hidden"], c["ffn_hidden"], c["vocab"], c["seq_len"]
    kvd = c["kv_heads"] * (h // c["heads"])
    if c["arch"] == "llama":
        layer = 2 * h * h + 2 * h * kvd + 3 * h * f + 2 * h
        embed, head = v * h, h
    else:
        layer = (h * (h + 2 * kvd) + (h + 2 * kvd) + h * h + h + 2 * h * f + f + h
                 + 4 * h)
        embed, head = v * h + s * h, 2 * h
    if not c["tied_embeddings"]:
        head += v * h
    return c["layers"] * layer + embed + head


def model_state_bytes(c):
    """Bytes the model states take in the harness's run (not vsim's): weights,
    gradients, optimizer moments and master copies, plus autocast's cached
    half-precision weight copies. Used only to skip what cannot fit."""
    per = {"adamw": 8, "adam": 8, "momentum": 4, "sgd": 0}[c["optimizer"]]
    if c["amp"] == "none":
        per += 4 + 4
    elif c["amp"] == "autocast":
        per += 4 + 4 + 2
    else:
        per += 2 + 4 + 4
    return per * param_count(c)


# ---------------------------------------------------------------------------
# The grid
# ---------------------------------------------------------------------------

def _g(model, seq, mb, **kw):
    return dict(model=model, seq_len=seq, micro_batch=mb, **kw)


GRID = [
    # Model size, bf16 autocast, fused AdamW, flash, no checkpointing.
    _g("gpt-125m", 1024, 8), _g("gpt-350m", 1024, 8), _g("gpt-760m", 2048, 4),
    _g("gpt-1.3b", 2048, 4), _g("gpt-2.7b", 2048, 2), _g("gpt-6.7b", 2048, 1),
    _g("llama-160m", 2048, 8), _g("llama-1.1b", 2048, 4), _g("llama-3b", 2048, 2),
    _g("llama-7b", 2048, 1), _g("mistral-7b", 2048, 1, checkpointing="full"),
    # Micro-batch.
    _g("gpt-350m", 1024, 1), _g("gpt-350m", 1024, 2), _g("gpt-350m", 1024, 16),
    _g("llama-1.1b", 2048, 1), _g("llama-1.1b", 2048, 16),
    # Sequence length.
    _g("llama-1.1b", 512, 1), _g("llama-1.1b", 4096, 1), _g("llama-1.1b", 8192, 1),
    _g("gpt-760m", 512, 4), _g("gpt-760m", 8192, 1),
    # Precision and mixed-precision recipe.
    _g("gpt-760m", 2048, 4, precision="fp32"),
    _g("gpt-760m", 2048, 4, precision="fp16"),
    _g("gpt-760m", 2048, 4, amp="master"),
    _g("llama-1.1b", 2048, 4, precision="fp32"),
    _g("llama-1.1b", 2048, 4, precision="fp16"),
    _g("llama-1.1b", 2048, 4, amp="master"),
    _g("llama-1.1b", 2048, 4, precision="fp16", amp="master"),
    # Optimizer (and PyTorch's default foreach implementation).
    _g("gpt-760m", 2048, 4, optimizer="momentum"),
    _g("llama-1.1b", 2048, 4, optimizer="momentum"),
    _g("llama-7b", 2048, 1, optimizer="momentum"),
    _g("gpt-1.3b", 2048, 4, optimizer_impl="foreach"),
    # Full activation checkpointing.
    _g("gpt-760m", 2048, 4, checkpointing="full"),
    _g("llama-1.1b", 2048, 4, checkpointing="full"),
    _g("llama-3b", 4096, 2, checkpointing="full"),
    _g("llama-7b", 4096, 1, checkpointing="full"),
    _g("llama-7b", 2048, 1, amp="master", checkpointing="full"),
    # Eager (materialised) attention.
    _g("gpt-125m", 1024, 8, attention="eager"),
    _g("gpt-760m", 2048, 4, attention="eager"),
    _g("llama-1.1b", 2048, 4, attention="eager"),
    _g("llama-160m", 4096, 2, attention="eager"),
    _g("gpt-350m", 1024, 4, precision="fp32", attention="eager"),
    # expandable_segments on, next to the same run without.
    _g("gpt-760m", 2048, 4, expandable_segments=True),
    _g("llama-1.1b", 2048, 4, expandable_segments=True),
    _g("llama-1.1b", 8192, 1, expandable_segments=True),
    _g("gpt-350m", 1024, 16, expandable_segments=True),
    _g("llama-7b", 2048, 1, expandable_segments=True),
    _g("gpt-6.7b", 2048, 2, checkpointing="full", expandable_segments=True),
    # Near or past the capacity (vsim's verdict is on trial).
    _g("gpt-6.7b", 2048, 2, precision="fp32"),
    _g("llama-160m", 8192, 4, attention="eager"),
    _g("llama-7b", 4096, 4),
    _g("llama-160m", 8192, 8, attention="eager"),
]


def grid():
    """Every configuration of the measurement grid, normalized, in run order."""
    return [normalize(g) for g in GRID]


# ---------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------

def vsim_precision(c):
    """vsim's [training] precision for configuration c: amp_bf16 or
    amp_fp16 for autocast, else the precision column."""
    return f"amp_{c['precision']}" if c["amp"] == "autocast" else c["precision"]


def csv_value(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def read_csv(path):
    """Rows of a ground-truth CSV as dicts; lines starting with '#' (comments,
    e.g. a fixture's 'synthetic, not a measurement' note) are skipped."""
    with open(path, newline="") as f:
        lines = [ln for ln in f if not ln.lstrip().startswith("#")]
    return list(csv.DictReader(io.StringIO("".join(lines))))


def write_csv_atomic(path, rows, columns=None, comment=None):
    """Writes rows (dicts) to path through a temporary file in the same
    folder, fsynced and renamed into place."""
    columns = columns or ALL_COLUMNS
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            if comment:
                for line in comment.splitlines():
                    f.write("# " + line + "\n")
            w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore",
                               lineterminator="\n")
            w.writeheader()
            for r in rows:
                w.writerow({k: csv_value(r.get(k)) for k in columns})
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m
