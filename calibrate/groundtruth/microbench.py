#!/usr/bin/env python3
"""microbench.py - the GPU measurements that explain a step's time beyond
vsim-calibrate's: what eager PyTorch costs the host per operator, the GEMM
rate a GPU sustains once it reaches its power limit, and where the
ground-truth configurations' steps spend their time (issue 17).

  microbench.py --out X.csv                  all three
  microbench.py --only dispatch,sustained --out X.csv
  microbench.py --profile-configs NAME,...   ground-truth rows to profile
                                             (default: three, small to 7B)
  microbench.py --list                       what would run (no PyTorch)

Why each one (the H200 ground truth of 2026-12-04, README "Ground truth"):
  * context: device memory outside PyTorch's allocator was 0.73 GiB at
    the end of every run, 0.51 GiB right after CUDA initialisation: the
    rest arrives as libraries and kernels are first used (cuBLAS and
    cuBLASLt handles, lazily loaded kernel images). NVML's process use
    less the allocator's reserved bytes, after each first use in turn.
  * dispatch: small configurations were 3-5 times slower than vsim's
    kernels add up to, and barely slower at 8 times the micro-batch
    (gpt-350m: 49 ms at micro-batch 1, 64 ms at 8): the host issuing
    kernels, not the GPU, sets their pace. Tiny CUDA tensors make each
    program host-bound; the wall time per launched kernel (counted by the
    profiler) is the host's cost per kernel.
  * sustained: the calibration's GEMM sweep saw rates step down 8-14%
    within a shape's 25 samples (512x8192x8192: 789 -> 690 TFLOP/s), as
    the GPU met its power limit. A training step runs GEMMs back to back
    for as long as it lasts: the settled rate is the one it gets.
  * profile: each step's kernel time by kind (GEMM, attention, element-
    wise, reduction, copies and casts, optimizer), the GPU's busy share of
    the step, kernels per step and the host's time to issue the step.

Output: one CSV, a row per figure: bench,item,quantity,value,unit. It is
written atomically at the end; measuring needs PyTorch and a CUDA GPU
(exit 3 without PyTorch, 4 without a GPU, 2 for bad arguments).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import os
import re
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gtconfig  # noqa: E402
import harness  # noqa: E402 - NVML and the attention probe; no PyTorch at import

PROG = "microbench.py"
BENCHES = ("context", "dispatch", "sustained", "profile")
DEFAULT_PROFILE = ("gpt-350m-s1024-b1-bf16-adamw", "llama-1.1b-s2048-b4-bf16-adamw",
                   "llama-7b-s2048-b1-bf16-adamw")
COLUMNS = ("bench", "item", "quantity", "value", "unit")
EXIT_USAGE, EXIT_NO_TORCH, EXIT_NO_GPU = 2, 3, 4

# Kernel kinds by name, first match wins (cuBLAS/CUTLASS GEMMs are named
# gemm, cutlass, xmma or nvjet; FlashAttention and SDPA's kernels flash,
# fmha or attention; PyTorch's fused optimizers multi_tensor_apply or
# fused_adam; its casts and copies copy_ or to_copy).
KINDS = (
    ("gemm", re.compile(r"gemm|cutlass|xmma|nvjet|cublas", re.I)),
    ("attention", re.compile(r"flash|fmha|attention", re.I)),
    ("optimizer", re.compile(r"multi_tensor|adam|sgd", re.I)),
    ("copy_cast", re.compile(r"copy|cast|convert|memcpy|memset", re.I)),
    ("reduction", re.compile(r"reduce|norm|softmax|nll|cross_entropy|sum|mean", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise", re.I)),
)


class Refusal(Exception):
    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def kind_of(kernel_name):
    """The kind a CUDA kernel's name says it is ('other' when none)."""
    for kind, pattern in KINDS:
        if pattern.search(kernel_name):
            return kind
    return "other"


def settled(rates, share=0.5):
    """(first, settled, drop) of a rate series measured in order: the first
    interval's rate, the median of the last `share` of the intervals, and
    1 - settled / first. ValueError on an empty series or a non-positive
    or non-finite rate."""
    if not rates:
        raise ValueError("no intervals measured")
    if any(not (r > 0 and r != float("inf")) for r in rates):
        raise ValueError("a rate is not positive and finite")
    tail = rates[int(len(rates) * (1 - share)):] or rates[-1:]
    s = statistics.median(tail)
    return rates[0], s, 1.0 - s / rates[0]


# ---------------------------------------------------------------------------
# Measuring (needs PyTorch and a GPU)
# ---------------------------------------------------------------------------

def import_torch():
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - ImportError or a broken install
        raise Refusal(f"{PROG}: PyTorch is not installed (import torch failed: {e}): "
                      "run this on a GPU machine with PyTorch", EXIT_NO_TORCH) from None
    if not torch.cuda.is_available():
        raise Refusal(f"{PROG}: no CUDA GPU is visible to PyTorch "
                      f"(torch {torch.__version__}): run this on a GPU machine", EXIT_NO_GPU)
    return torch


def kernels_per_call(torch, fn):
    """CUDA kernels one call of fn launches, counted by the profiler."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA"
               and not e.name.startswith("Memcpy") and not e.name.startswith("Memset"))


def time_host_bound(torch, fn, calls=2000):
    """(wall seconds per call, GPU seconds per call) of fn after warming."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / calls
    return wall, start.elapsed_time(end) / 1e3 / calls


def context(torch, rows):
    """Memory outside the allocator after each first use, in order: CUDA
    initialisation, a bf16 GEMM (cuBLAS), an fp32 GEMM, SDPA's flash
    forward and backward, a fused AdamW step. Must run before any other
    CUDA work of this process."""
    nvml = harness.Nvml.open()
    if nvml is None:
        rows.append(("context", "nvml", "available", 0, "bool"))
        return
    before = nvml.used()
    dev = torch.device("cuda", 0)
    F = torch.nn.functional

    def init():
        torch.cuda.synchronize(dev)

    def gemm_bf16():
        a = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
        torch.matmul(a, a)

    def gemm_fp32():
        a = torch.randn(1024, 1024, device=dev)
        torch.matmul(a, a)

    def sdpa():
        q = torch.randn(1, 8, 512, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()

    def adamw():
        p = torch.nn.Parameter(torch.randn(1024, device=dev))
        p.grad = torch.randn_like(p)
        torch.optim.AdamW([p], fused=True).step()

    for name, fn in (("cuda_init", init), ("gemm_bf16", gemm_bf16), ("gemm_fp32", gemm_fp32),
                     ("sdpa_flash_fwd_bwd", sdpa), ("fused_adamw", adamw)):
        fn()
        torch.cuda.synchronize(dev)
        now = nvml.used()
        rows.append(("context", name, "outside_allocator",
                     now - before - torch.cuda.memory_reserved(dev), "bytes"))


def dispatch(torch, rows):
    """Host cost per kernel of eager programs on tiny tensors."""
    dev = torch.device("cuda", 0)
    x = torch.randn(64, 64, device=dev)
    w = torch.randn(64, 64, device=dev, requires_grad=True)
    xb, wb = x.bfloat16(), w.detach().bfloat16()

    def add():
        return x + 1.0

    def linear():
        return torch.nn.functional.linear(xb, wb)

    def mlp_train():
        h = torch.nn.functional.gelu(torch.nn.functional.linear(x, w))
        torch.nn.functional.linear(h, w).sum().backward()

    def autocast_train():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = torch.nn.functional.linear(x, w)
        h.float().sum().backward()

    for name, fn in (("add", add), ("linear_bf16", linear), ("mlp_fwd_bwd", mlp_train),
                     ("autocast_linear_fwd_bwd", autocast_train)):
        grad = contextlib.nullcontext() if "bwd" in name else torch.no_grad()
        with grad:
            k = kernels_per_call(torch, fn)
            wall, gpu = time_host_bound(torch, fn)
        rows += [("dispatch", name, "kernels_per_call", k, "kernels"),
                 ("dispatch", name, "wall_per_call", wall * 1e6, "us"),
                 ("dispatch", name, "gpu_per_call", gpu * 1e6, "us"),
                 ("dispatch", name, "wall_per_kernel", wall * 1e6 / max(k, 1), "us")]


def sustained(torch, rows, seconds, n=8192, per_interval=20):
    """bf16 n x n x n GEMMs back to back for `seconds`, timed in intervals
    of per_interval launches, with the SM clock and power after each."""
    dev = torch.device("cuda", 0)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    nvml = harness.Nvml.open()
    flops = 2.0 * n * n * n * per_interval
    rates, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(per_interval):
            torch.matmul(a, b, out=c)
        e.record()
        e.synchronize()
        rate = flops / (s.elapsed_time(e) / 1e3) / 1e12
        rates.append(rate)
        i = len(rates) - 1
        rows.append(("sustained", f"interval_{i}", "tflops", rate, "TFLOP/s"))
        if nvml:
            mhz, watts = nvml.sm_clock_mhz(), nvml.power_w()
            if mhz is not None:
                rows.append(("sustained", f"interval_{i}", "sm_clock", mhz, "MHz"))
            if watts is not None:
                rows.append(("sustained", f"interval_{i}", "power", watts, "W"))
    first, steady, drop = settled(rates)
    rows += [("sustained", f"{n}x{n}x{n}", "first_tflops", first, "TFLOP/s"),
             ("sustained", f"{n}x{n}x{n}", "settled_tflops", steady, "TFLOP/s"),
             ("sustained", f"{n}x{n}x{n}", "drop", drop, "fraction"),
             ("sustained", f"{n}x{n}x{n}", "seconds", seconds, "s")]


def profile_config(torch, rows, name):
    """Two profiled steps of ground-truth configuration `name` (after two
    warm ones): kernel time by kind, busy share, kernels and host time."""
    import gtmodels as gtm
    from torch.profiler import ProfilerActivity, profile
    c = next(g for g in gtconfig.grid() if g["name"] == name)
    dev = torch.device("cuda", 0)
    backend, native = harness.choose_attention(torch, gtm, c, dev)   # as measured
    tr = gtm.Trainer(c, dev, None if backend == "eager" else backend, native)
    b, s, v = c["micro_batch"], c["seq_len"], c["vocab"]
    ids = torch.randint(v, (b, s), device=dev)
    labels = torch.randint(v, (b, s), device=dev)
    for _ in range(2):
        tr.step(ids, labels)
    torch.cuda.synchronize()
    host = []
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            h0 = time.perf_counter()
            tr.step(ids, labels)
            host.append(time.perf_counter() - h0)
        torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 2
    by_kind, kernels = {}, 0
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        kernels += 1
        k = kind_of(e.name)
        by_kind[k] = by_kind.get(k, 0.0) + e.time_range.elapsed_us() / 1e6 / 2
    busy = sum(by_kind.values())
    rows += [("profile", name, "step_wall", wall * 1e3, "ms"),
             ("profile", name, "gpu_busy", busy * 1e3, "ms"),
             ("profile", name, "host_issue", statistics.median(host) * 1e3, "ms"),
             ("profile", name, "kernels_per_step", kernels / 2, "kernels")]
    rows += [("profile", name, f"kernel_time_{k}", t * 1e3, "ms")
             for k, t in sorted(by_kind.items())]
    del tr, ids, labels
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def parse(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the CSV to write")
    ap.add_argument("--only", default=",".join(BENCHES),
                    help="comma-separated: " + ", ".join(BENCHES))
    ap.add_argument("--profile-configs", default=",".join(DEFAULT_PROFILE))
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="how long the sustained GEMMs run (default 10)")
    ap.add_argument("--list", action="store_true", help="print what would run and exit")
    args = ap.parse_args(argv)
    args.only = [b.strip() for b in args.only.split(",") if b.strip()]
    bad = [b for b in args.only if b not in BENCHES]
    if bad or not args.only:
        ap.error(f"--only {','.join(bad) or '(empty)'}: allowed are {', '.join(BENCHES)}")
    args.profile_configs = [n.strip() for n in args.profile_configs.split(",") if n.strip()]
    names = {c["name"] for c in gtconfig.grid()}
    unknown = [n for n in args.profile_configs if n not in names]
    if unknown:
        ap.error(f"--profile-configs: {', '.join(unknown)} is not in the ground-truth grid "
                 "(harness.py --list names them)")
    if not (args.seconds > 0 and args.seconds <= 600):
        ap.error(f"--seconds {args.seconds}: allowed is more than 0 and at most 600")
    if not args.list and not args.out:
        ap.error("need --out FILE.csv (or --list)")
    return args


def write_rows(path, rows):
    """Writes the CSV atomically (a temporary file renamed over path)."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".microbench.", suffix=".tmp.csv", dir=d)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            for r in rows:
                w.writerow([f"{x:.6g}" if isinstance(x, float) else x for x in r])
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None):
    args = parse(argv)
    if args.list:
        for b in args.only:
            extra = f": {', '.join(args.profile_configs)}" if b == "profile" else ""
            print(f"{b}{extra}")
        return 0
    try:
        torch = import_torch()
    except Refusal as e:
        print(e, file=sys.stderr)
        return e.code
    import gtmodels  # noqa: F401 - fails early if the models do not import
    rows = []
    if "context" in args.only:      # first: it needs a process without CUDA work
        context(torch, rows)
    rows.insert(0, ("device", torch.cuda.get_device_name(0), "torch", torch.__version__, ""))
    if "dispatch" in args.only:
        dispatch(torch, rows)
    if "sustained" in args.only:
        sustained(torch, rows, args.seconds)
    if "profile" in args.only:
        for name in args.profile_configs:
            profile_config(torch, rows, name)
    write_rows(args.out, rows)
    print(f"{PROG}: wrote {args.out}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
