#!/usr/bin/env python3
"""harness.py - measures real PyTorch training memory and step time on one
GPU, configuration by configuration, for vsim's ground truth (issue 7).

  harness.py                       run the whole grid (gtconfig.GRID), one
                                   fresh process per configuration, and write
                                   tests/data/groundtruth/h200.csv
  harness.py --only 0,5,llama-7b-s2048-b1-bf16-adamw --out X.csv
  harness.py --limit 3 --out X.csv quick check on the first configurations
  harness.py --resume              keep the rows already measured in --out,
                                   run the others (after a timeout)
  harness.py --list                print the grid (no PyTorch needed)
  harness.py --selftest            check the models on the CPU (needs PyTorch)
  harness.py --one '<json>'        measure one configuration in this process
                                   and print one 'GTRESULT {json}' line
                                   (what the driver runs in each child)

The driver never imports PyTorch or makes a CUDA context, so nothing of
its own skews the children's numbers (it holds NVML open, which takes no
device memory, so the GPU stays initialised between children). --budget is
a hard limit on the whole run. Each child sets
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True|False before importing
torch (the allocator reads it at CUDA initialisation), builds the model with
random weights, runs `steps` training steps and reports. An OOM is a
recorded outcome. The CSV is rewritten atomically after every configuration,
so an interrupted run keeps what it measured (and --resume continues it).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import gtconfig  # noqa: E402

PROG = "harness.py"
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "groundtruth", "h200.csv")
RESULT_TAG = "GTRESULT "
EXIT_NO_TORCH = 3
EXIT_NO_GPU = 4
DONE = ("ok", "oom", "skipped")   # outcomes --resume keeps


class SetupError(Exception):
    """Measurement impossible here (no PyTorch, no GPU): message, exit code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------
# NVML through ctypes (no pynvml needed)
# ---------------------------------------------------------------------------

class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class Nvml:
    """The device's used memory, SM clock, power draw and the driver
    version (microbench.py reads them too), or None when libnvidia-ml
    cannot be loaded. The NVML index is the first entry of
    CUDA_VISIBLE_DEVICES when that is a number, else 0."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit failed")
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        self.handle = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(
                ctypes.c_uint(int(vis) if vis.isdigit() else 0),
                ctypes.byref(self.handle)) != 0:
            raise OSError("nvmlDeviceGetHandleByIndex failed")

    @staticmethod
    def open():
        try:
            return Nvml()
        except (OSError, AttributeError, ValueError):
            return None

    def used(self):
        mem = _NvmlMemory()
        if self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(mem)) != 0:
            return None
        return int(mem.used)

    def sm_clock_mhz(self):
        clk = ctypes.c_uint()
        if self.lib.nvmlDeviceGetClockInfo(self.handle, 1,  # NVML_CLOCK_SM
                                           ctypes.byref(clk)) != 0:
            return None
        return int(clk.value)

    def power_w(self):
        mw = ctypes.c_uint()
        if self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(mw)) != 0:
            return None
        return mw.value / 1e3

    def driver(self):
        buf = ctypes.create_string_buffer(96)
        if self.lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) != 0:
            return ""
        return buf.value.decode(errors="replace")


# ---------------------------------------------------------------------------
# Child side: one configuration in this process
# ---------------------------------------------------------------------------

def import_torch():
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        raise SetupError(f"{PROG}: PyTorch is not installed (import torch failed: {e}): "
                         "run this on a GPU machine with PyTorch", EXIT_NO_TORCH) from None
    return torch


def require_gpu(torch):
    """A CUDA GPU, and a PyTorch with what the measurements use: SDPA
    (attention = flash, torch >= 2.0) and post-accumulate gradient hooks
    (amp = master, torch >= 2.1)."""
    if not (hasattr(torch.nn.functional, "scaled_dot_product_attention")
            and hasattr(torch.Tensor, "register_post_accumulate_grad_hook")):
        raise SetupError(f"{PROG}: PyTorch {torch.__version__} is too old: the measurements "
                         "need torch >= 2.1 (scaled_dot_product_attention, "
                         "register_post_accumulate_grad_hook)", EXIT_NO_TORCH)
    if not torch.cuda.is_available():
        raise SetupError(f"{PROG}: no CUDA GPU is visible to PyTorch "
                         f"(torch {torch.__version__}, torch.cuda.is_available() is False): "
                         "run this on a GPU machine", EXIT_NO_GPU)


def versions(torch, nvml):
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return dict(torch_version=torch.__version__, cuda_version=torch.version.cuda or "",
                cudnn_version=cudnn or "", gpu_name=torch.cuda.get_device_name(0),
                driver_version=nvml.driver() if nvml else "")


def is_oom(torch, e):
    """The caching allocator's OutOfMemoryError, a CUDA 'out of memory'
    error, or a library that could not get its workspace (cuBLAS, cuDNN)."""
    oom = getattr(torch.cuda, "OutOfMemoryError", None)   # torch >= 1.13
    text = str(e)
    return (oom is not None and isinstance(e, oom)) or (
        isinstance(e, RuntimeError) and ("out of memory" in text or "ALLOC_FAILED" in text))


def oom_request(message):
    m = re.search(r"Tried to allocate ([0-9.]+) (GiB|MiB|KiB|B)", message)
    if not m:
        return None
    scale = {"GiB": 2 ** 30, "MiB": 2 ** 20, "KiB": 2 ** 10, "B": 1}[m.group(2)]
    return int(float(m.group(1)) * scale)


def first_line(message, limit=300):
    line = " ".join(str(message).split())
    return line[:limit]


def choose_attention(torch, gtm, c, device):
    """(sdpa backend, gqa_native) for the configuration, checked on a tiny
    problem of the same head size, dtype and dropout. Flash has no fp32
    kernel: fp32 uses the memory-efficient backend, and so does a half-
    precision configuration that flash cannot run (both keep no s^2
    tensor; the row's sdpa_backend says which ran)."""
    if c["attention"] == "eager":
        return "eager", False
    heads, kv = c["heads"], c["kv_heads"]
    d = c["hidden"] // heads
    dt = gtm.DTYPES[c["precision"]]
    p = float(c["dropout"])

    def trial(backend, native):
        h = min(heads, 4) if kv == heads else 2 * min(kv, 2)
        kh = h if kv == heads else h // 2
        q = torch.randn(1, h, 128, d, device=device, dtype=dt, requires_grad=True)
        k = torch.randn(1, kh, 128, d, device=device, dtype=dt, requires_grad=True)
        v = torch.randn(1, kh, 128, d, device=device, dtype=dt, requires_grad=True)
        shared = dict(dropout=p, eager=False, backend=backend, gqa_native=native)
        gtm.attention(q, k, v, shared, True).sum().backward()

    backends = ["efficient"] if c["precision"] == "fp32" else ["flash", "efficient"]
    for i, backend in enumerate(backends):
        if kv != heads:
            try:
                trial(backend, True)
                return backend, True
            except (TypeError, RuntimeError):
                pass
        try:
            trial(backend, False)
            return backend, False
        except RuntimeError:
            if i == len(backends) - 1:
                raise   # no backend can run this configuration: an error row
    raise AssertionError("unreachable")


def train(r, c, torch, gtm, dev, state):
    """Builds the model and runs the steps, filling r; state["phase"] and
    state["first_max"] say how far it got (for the OOM report)."""
    cuda = torch.cuda
    backend, native = choose_attention(torch, gtm, c, dev)
    r["sdpa_backend"] = backend
    r["gqa_expand"] = c["kv_heads"] != c["heads"] and not native
    cuda.synchronize()
    cuda.empty_cache()
    cuda.reset_peak_memory_stats()
    state["phase"] = "model"
    state["trainer"] = tr = gtm.Trainer(c, dev, None if backend == "eager" else backend, native)
    r["params"] = sum(p.numel() for p in tr.model.parameters())
    r["optimizer_impl_used"] = tr.optimizer_impl
    r["allocated_after_model_bytes"] = cuda.memory_allocated()
    start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    times, skipped = [], 0
    b, s, v = c["micro_batch"], c["seq_len"], c["vocab"]
    for i in range(c["steps"]):
        state["phase"] = f"step {i + 1}"
        ids = torch.randint(v, (b, s), device=dev)
        labels = torch.randint(v, (b, s), device=dev)
        cuda.synchronize()
        start.record()
        loss, was_skipped = tr.step(ids, labels)
        end.record()
        cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
        skipped += int(was_skipped)
        del ids, labels
        if i == 0:
            r["allocated_after_first_step_bytes"] = cuda.memory_allocated()
            state["first_max"] = (cuda.max_memory_allocated(), cuda.max_memory_reserved())
            r["first_step_max_allocated_bytes"], r["first_step_max_reserved_bytes"] = \
                state["first_max"]
            cuda.reset_peak_memory_stats()
    r["loss"] = float(loss)
    r["skipped_steps"] = skipped
    r["first_step_time_s"] = times[0]
    r["step_times_s"] = ";".join(f"{t:.6f}" for t in times)
    r["step_time_s"] = statistics.median(times[1:] if len(times) > 1 else times)
    if len(times) > 1:
        r["steady_max_allocated_bytes"] = cuda.max_memory_allocated()
        r["steady_max_reserved_bytes"] = cuda.max_memory_reserved()


def expandable_seen(cuda):
    """Whether the allocator's segments are expandable, as the snapshot
    says (True/False), so a row shows the setting took; None when there is
    no segment or the snapshot does not tell (older PyTorch)."""
    try:
        segments = cuda.memory_snapshot()
    except Exception:  # noqa: BLE001 - a sticky CUDA error, an old torch
        return None
    flags = {s["is_expandable"] for s in segments if "is_expandable" in s}
    return flags.pop() if len(flags) == 1 else None


def measure(c):
    """Measures configuration c (normalized) in this process; returns the
    measured columns. Raises SetupError without PyTorch or a GPU."""
    # Both names: torch >= 2.6 reads PYTORCH_ALLOC_CONF first, older ones
    # only PYTORCH_CUDA_ALLOC_CONF; the configuration decides either way.
    conf = "expandable_segments:" + ("True" if c["expandable_segments"] else "False")
    os.environ["PYTORCH_ALLOC_CONF"] = conf
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    t_start = time.time()
    nvml = Nvml.open()
    before = nvml.used() if nvml else None
    torch = import_torch()
    require_gpu(torch)
    import gtmodels as gtm

    torch.backends.cuda.matmul.allow_tf32 = False   # PyTorch's default: fp32 is fp32
    r = dict(alloc_conf=os.environ["PYTORCH_CUDA_ALLOC_CONF"], outcome="ok")
    dev = torch.device("cuda", 0)
    cuda = torch.cuda
    cuda.set_device(dev)
    cuda.synchronize()                          # creates the primary context
    free, total = cuda.mem_get_info()
    r["device_used_after_init_bytes"] = total - free
    r["device_total_bytes"] = total
    if nvml and before is not None:
        after = nvml.used()
        r["context_bytes"] = after - before if after is not None else None
    r.update(versions(torch, nvml))
    state = dict(phase="setup", first_max=(0, 0), trainer=None)
    try:
        train(r, c, torch, gtm, dev, state)
    except Exception as e:  # noqa: BLE001 - every failure is a recorded outcome
        if is_oom(torch, e):
            r["outcome"] = "oom"
            r["oom_request_bytes"] = oom_request(str(e))
            tr = state["trainer"]
            sub = tr.phase if tr is not None and state["phase"].startswith("step") else ""
            r["oom_phase"] = f"{state['phase']} {sub}".strip()
        else:
            r["outcome"] = "error"
            traceback.print_exc()   # the driver shows the child's stderr tail
        r["error"] = first_line(f"{type(e).__name__}: {e}")
    first_max = state["first_max"]
    # The allocator's counters are host-side and always readable; the
    # device queries fail after a sticky CUDA error (an illegal address, a
    # launch failure): the row then keeps what was read, and its error.
    r["max_allocated_bytes"] = max(first_max[0], cuda.max_memory_allocated())
    r["max_reserved_bytes"] = max(first_max[1], cuda.max_memory_reserved())
    r["reserved_end_bytes"] = cuda.memory_reserved()
    r["alloc_retries"] = cuda.memory_stats().get("num_alloc_retries", 0)
    r["expandable_seen"] = expandable_seen(cuda)
    try:
        free, total = cuda.mem_get_info()
        r["device_used_end_bytes"] = total - free
    except Exception as e:  # noqa: BLE001
        r["error"] = first_line(f"{r.get('error') or ''} (then mem_get_info: {e})")
    if nvml:
        used = nvml.used()
        r["nvml_used_end_bytes"] = used
        if used is not None and before is not None:
            r["non_allocator_bytes"] = used - before - r["reserved_end_bytes"]
    r["wall_s"] = round(time.time() - t_start, 3)
    return r


def child_one(text):
    try:
        c = gtconfig.normalize(json.loads(text))
    except (ValueError, gtconfig.ConfigError) as e:
        print(f"{PROG}: bad --one configuration: {e}", file=sys.stderr)
        return 2
    try:
        r = measure(c)
    except SetupError as e:
        print(str(e), file=sys.stderr)
        return e.code
    print(RESULT_TAG + json.dumps(r), flush=True)
    return 0


def child_probe():
    """Checks PyTorch and the GPU; prints versions and the device memory."""
    nvml = Nvml.open()
    try:
        torch = import_torch()
        require_gpu(torch)
    except SetupError as e:
        print(str(e), file=sys.stderr)
        return e.code
    free, total = torch.cuda.mem_get_info()
    r = versions(torch, nvml)
    r["device_total_bytes"] = total
    print(RESULT_TAG + json.dumps(r), flush=True)
    return 0


# ---------------------------------------------------------------------------
# Self-test on the CPU (needs PyTorch, not a GPU)
# ---------------------------------------------------------------------------

def selftest():
    try:
        torch = import_torch()
    except SetupError as e:
        print(str(e), file=sys.stderr)
        return e.code
    import gtmodels as gtm
    torch.manual_seed(0)
    failures = []

    def check(ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            failures.append(what)

    x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    check(torch.autograd.gradcheck(lambda a, b: gtm._RMSNormFn.apply(a, b, 1e-5), (x, w),
                                   raise_exception=False),
          "RMSNorm backward matches finite differences")
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    check(torch.allclose(gtm._RMSNormFn.apply(x, w, 1e-5), ref), "RMSNorm forward")

    # The measurements need PyTorch >= 2.1; the self-test also runs on an
    # older CPU build (Debian's 1.13), skipping what that build lacks.
    has_sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    has_hook = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
    if not has_sdpa:
        print(f"skip  SDPA attention (torch {torch.__version__} has no "
              "scaled_dot_product_attention)", flush=True)

    tiny = [dict(arch="gpt", layers=2, hidden=64, heads=4, seq_len=32, vocab=97),
            dict(arch="gpt", layers=2, hidden=64, heads=4, kv_heads=2, seq_len=32, vocab=97),
            dict(arch="llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn_hidden=96,
                 seq_len=32, vocab=97),
            dict(arch="llama", layers=2, hidden=64, heads=4, ffn_hidden=96, seq_len=32,
                 vocab=97)]
    for t in tiny:
        c = gtconfig.normalize(dict(t, precision="fp32", dropout=0.0,
                                    optimizer_impl="forloop"))
        m = gtm.Decoder(c, "cpu", torch.float32)
        tag = f"{c['arch']} kv_heads={c['kv_heads']}"
        check(sum(p.numel() for p in m.parameters()) == gtconfig.param_count(c),
              f"{tag}: parameters = vsim's count {gtconfig.param_count(c)}")
        ids = torch.randint(c["vocab"], (2, c["seq_len"]))
        labels = torch.randint(c["vocab"], (2, c["seq_len"]))
        losses, grads = {}, {}
        m.shared["mask"] = torch.ones(c["seq_len"], c["seq_len"], dtype=torch.bool).triu(1)
        for mode in ("flash", "eager", "ckpt"):
            m.shared["eager"] = mode == "eager" or not has_sdpa
            m.shared["checkpointing"] = mode == "ckpt"
            m.zero_grad(set_to_none=True)
            loss = m(ids, labels)
            loss.backward()
            losses[mode] = loss.item()
            grads[mode] = torch.cat([p.grad.flatten() for p in m.parameters()])
        if has_sdpa:
            check(abs(losses["flash"] - losses["eager"]) < 1e-4,
                  f"{tag}: SDPA and eager attention agree ({losses['flash']:.5f})")
        check(torch.allclose(grads["flash"], grads["ckpt"], atol=1e-5),
              f"{tag}: checkpointing leaves the gradients unchanged")
    for amp, prec, opt in (("none", "fp32", "adamw"), ("none", "fp32", "momentum"),
                           ("autocast", "bf16", "adamw"), ("master", "bf16", "adamw")):
        if amp == "master" and not has_hook:
            print(f"skip  {amp} {prec} {opt}: needs Tensor.register_post_accumulate_grad_hook "
                  "(torch >= 2.1)", flush=True)
            continue
        c = gtconfig.normalize(dict(tiny[2], precision=prec, amp=amp, optimizer=opt,
                                    optimizer_impl="forloop",
                                    attention="flash" if has_sdpa else "eager"))
        tr = gtm.Trainer(c, "cpu", lr=1e-2 if opt == "adamw" else 1e-1)
        ids = torch.randint(c["vocab"], (2, c["seq_len"]))
        l0, _ = tr.step(ids, ids)
        for _ in range(3):
            l1, _ = tr.step(ids, ids)
        check(float(l1) < float(l0), f"{amp} {prec} {opt}: loss falls on a repeated batch "
                                     f"({float(l0):.4f} -> {float(l1):.4f})")
    print(f"{PROG} --selftest: {len(failures)} failure(s)")
    return 1 if failures else 0


# ---------------------------------------------------------------------------
# Driver side: the grid, one child per configuration
# ---------------------------------------------------------------------------

def select(configs, only, limit):
    if only:
        chosen = []
        for item in only.split(","):
            item = item.strip()
            if item.isdigit() and int(item) < len(configs):
                chosen.append(configs[int(item)])
                continue
            match = [c for c in configs if c["name"] == item]
            if not match:
                raise gtconfig.ConfigError(f"--only {item}: no such configuration "
                                           f"(an index below {len(configs)} or a name from --list)")
            chosen.extend(match)
        configs = chosen
    return configs[:limit] if limit else configs


# Configurations whose model states need more than this run after all the
# others: they take the longest (the 7B rows), so a run cut short by its
# budget still has the many small ones (the CSV keeps the grid's order).
HEAVY_STATES = 60 * 2 ** 30


def run_order(configs):
    """configs in the order they are run: the light ones first, each group
    in grid order."""
    return sorted(configs, key=lambda c: gtconfig.model_state_bytes(c) > HEAVY_STATES)


def run_child(cmd, args, timeout):
    """Runs the child; returns (result dict or None, returncode, stderr);
    returncode None when it was killed at the timeout."""
    try:
        p = subprocess.run(cmd + args, capture_output=True, text=True, errors="replace",
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, None, err
    result = None
    for line in p.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            try:
                result = json.loads(line[len(RESULT_TAG):])
            except ValueError:
                result = None
    return result, p.returncode, p.stderr


def last_line(text):
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def gib(n):
    return f"{n / 2 ** 30:.2f} GiB" if isinstance(n, (int, float)) else "-"


PROBE_FLOOR_S = 10.0


def drive(args, configs, out):
    """Runs every configuration in a child. --budget is a hard deadline
    from the start (the probe included): no child runs past it, one still
    running then is killed (outcome timeout) and the rest are not_run."""
    t0 = time.time()
    deadline = t0 + args.budget
    cmd = shlex.split(args.child_cmd) if args.child_cmd else [sys.executable, os.path.abspath(__file__)]
    # Holding NVML open keeps the GPU initialised between children where the
    # persistence daemon is off (else each child pays the driver's start-up);
    # NVML takes no device memory and makes no CUDA context.
    keep_open = Nvml.open()  # noqa: F841
    # The probe gets at least PROBE_FLOOR_S even from a smaller budget: a
    # child starting Python (and PyTorch) takes seconds on a loaded host,
    # and a probe cut short measures nothing at all.
    probe, rc, err = run_child(cmd, ["--probe"], max(PROBE_FLOOR_S, min(120.0, args.budget)))
    if probe is None:
        msg = last_line(err) or f"{PROG}: the probe child failed (exit {rc})"
        print(msg, file=sys.stderr)
        print(f"{PROG}: nothing measured; {out} left as it was", file=sys.stderr)
        return 1
    total = probe.get("device_total_bytes") or 0
    print(f"{PROG}: {probe.get('gpu_name')} ({gib(total)}), torch {probe.get('torch_version')}, "
          f"CUDA {probe.get('cuda_version')}; {len(configs)} configuration(s) -> {out}", flush=True)
    if "H200" not in str(probe.get("gpu_name", "")) and os.path.basename(out) == "h200.csv":
        print(f"{PROG}: warning: the GPU is not an H200 but the output is h200.csv", file=sys.stderr)

    rows, others = {}, []
    if args.resume and os.path.exists(out):
        selected = {c["name"] for c in configs}
        for row in gtconfig.read_csv(out):
            if row.get("name") not in selected:
                others.append(row)        # not run now: kept as it was
            elif row.get("outcome") in DONE:
                rows[row["name"]] = row
    order = [c["name"] for c in configs]
    for i, c in enumerate(run_order(configs)):
        tag = f"[{i + 1}/{len(configs)}] {c['name']}"
        if c["name"] in rows:
            print(f"{tag}: kept ({rows[c['name']]['outcome']})", flush=True)
            continue
        row = dict(c)
        left = deadline - time.time()
        states = gtconfig.model_state_bytes(c)
        if left <= 0:
            row.update(outcome="not_run", error=f"time budget of {args.budget:.0f} s spent")
        elif total and states > total:
            row.update(outcome="skipped",
                       error=f"model states alone ({gib(states)}) exceed the device ({gib(total)})")
        else:
            t = time.time()
            limit = min(args.timeout, left)
            res, rc, err = run_child(cmd, ["--one", json.dumps(c)], limit)
            if res is not None:
                row.update(res)
            elif rc is None:
                why = "--timeout" if limit == args.timeout else "the time budget ran out"
                row.update(outcome="timeout",
                           error=f"no result after {time.time() - t:.0f} s ({why})")
            else:
                row.update(outcome="error", error=first_line(last_line(err) or f"child exit {rc}"))
            if row["outcome"] == "error" and err:
                tail = "\n".join(err.strip().splitlines()[-15:])
                print(f"{tag}: child stderr (last lines):\n{tail}", file=sys.stderr, flush=True)
            row.setdefault("wall_s", round(time.time() - t, 3))
        rows[c["name"]] = row
        gtconfig.write_csv_atomic(out, [rows[n] for n in order if n in rows] + others)
        print(f"{tag}: {row['outcome']}"
              + (f", max allocated {gib(row.get('max_allocated_bytes'))}, reserved "
                 f"{gib(row.get('max_reserved_bytes'))}, step {float(row.get('step_time_s') or 0):.4f} s"
                 if row["outcome"] == "ok" else f" ({row.get('oom_phase') or row.get('error', '')})")
              + f" [{time.time() - t0:.0f} s]", flush=True)
    counts = {}
    for n in order:
        counts[rows[n]["outcome"]] = counts.get(rows[n]["outcome"], 0) + 1
    print(f"{PROG}: wrote {out}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
          + f" in {time.time() - t0:.0f} s", flush=True)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help=f"CSV to write (default {os.path.relpath(DEFAULT_OUT, ROOT)} "
                                  "for the whole grid; required with --only/--limit)")
    ap.add_argument("--only", help="comma-separated indices or names of configurations")
    ap.add_argument("--limit", type=int, default=0, help="run at most N configurations")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds per configuration (default 120)")
    ap.add_argument("--budget", type=float, default=500.0,
                    help="hard limit in seconds on the whole run, the probe included (default "
                         "500): a configuration still running then is killed (timeout), the "
                         "rest are recorded as not_run")
    ap.add_argument("--steps", type=int, default=0, help="training steps per configuration "
                                                         "(default: the grid's, 5)")
    ap.add_argument("--resume", action="store_true",
                    help="keep rows of --out already ok/oom/skipped; run the rest")
    ap.add_argument("--list", action="store_true", help="print the grid and exit")
    ap.add_argument("--selftest", action="store_true", help="check the models on the CPU")
    ap.add_argument("--one", metavar="JSON", help=argparse.SUPPRESS)
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-cmd", help=argparse.SUPPRESS)   # tests: a fake child
    args = ap.parse_args(argv)

    if args.one is not None:
        code = child_one(args.one)
        # Skip the interpreter's teardown of a process holding up to the
        # whole GPU (a second or so per configuration); the result is out.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if args.probe:
        return child_probe()
    if args.selftest:
        return selftest()
    configs = gtconfig.grid()
    try:
        configs = select(configs, args.only, args.limit)
    except gtconfig.ConfigError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    if args.steps:
        configs = [dict(c, steps=args.steps) for c in configs]
    if args.list:
        index = {c["name"]: i for i, c in enumerate(gtconfig.grid())}
        print(f"{'#':>3}  {'name':46} {'params':>8} {'states':>10}")
        for c in configs:
            print(f"{index[c['name']]:>3}  {c['name']:46} {gtconfig.param_count(c) / 1e9:7.3f}B "
                  f"{gib(gtconfig.model_state_bytes(c)):>10}")
        print(f"{len(configs)} configuration(s)")
        return 0
    out = args.out
    if not out:
        if args.only or args.limit:
            print(f"{PROG}: --only/--limit need --out (the default {DEFAULT_OUT} is for the "
                  "whole grid)", file=sys.stderr)
            return 2
        out = DEFAULT_OUT
    return drive(args, configs, out)


if __name__ == "__main__":
    sys.exit(main())
