#!/usr/bin/env python3
"""Executes every notebook in notebooks/ headless, as a user would run it,
against the built vsim (issue 18: a broken notebook fails the suite).

Usage: notebooks_test.py VSIM [NOTEBOOK.ipynb...]

The notebooks need Debian's python3-nbclient, python3-ipykernel,
python3-matplotlib and python3-pandas, which scripts/setup.sh installs; when
they are missing the test fails and says so (it never skips). Debian's
packages live in /usr/bin/python3's path, so a Python without them (pyenv's)
hands over to that one. Everything the kernels write (CSV files, IPython's
profile, connection files) goes into one temporary folder, removed at the
end. Prints one line per notebook with its time; exit 1 on any failure."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
SYSTEM_PYTHON = "/usr/bin/python3"
TEST_MODULES = ("nbformat", "nbclient", "jupyter_client")
KERNEL_MODULES = ("ipykernel", "matplotlib", "pandas")
CELL_TIMEOUT_S = 120
ANSI_COLOUR = r"\x1b\[[0-9;]*m"  # IPython colours its tracebacks
# Cells run after a notebook's own, in its kernel: code that asserts on
# what its figures say (an AssertionError fails the notebook, naming the
# check), or REPLAY and the start of one of the notebook's code cells, which
# runs that cell again (on the data the cells before it set up).
REPLAY = "#replay "
CHECKS = {
    # the allocated peak is marked where summary.csv's peak_op and
    # peak_time_s put it, the device's (reserved + framework) where the
    # timeline first reaches summary.csv's peak_reserved_bytes +
    # framework_bytes; on 8 GPUs, pp 2, micro-batch 4, ZeRO-1 (export
    # review) stage 1's rank 4 allocates its most at backward
    # cross_entropy, t = 0.375 s (the SVG's "allocated peak 65.7 GiB"),
    # and its cache grows after it: the device's 69.3 GiB come at 0.758 s
    "01-memory-timeline.ipynb": [
        """
texts = [t.get_text() for t in ax.texts]
assert (f"allocated peak {worst.peak_allocated_bytes / GiB:.1f} GiB\\n"
        f"at {worst.peak_op}, t = {worst.peak_time_s:.3f} s") in texts, texts
assert use.max() == worst.device_peak_bytes
""", """
csv = Path(work.name) / "pp2"
vsim("run", ROOT / "workloads/llama2-7b.ini", "--gpus", 8,
     "--set", "parallel.pp=2", "--set", "training.micro_batch=4",
     "--set", "parallel.zero=1", "--set", "training.global_batch=16",
     "--csv", csv)
""", REPLAY + "summary = ", REPLAY + "timeline = ", """
texts = [t.get_text() for t in ax.texts]
assert worst["rank"] == 4, worst
assert ("allocated peak 65.7 GiB\\nat cross_entropy, t = 0.375 s" in texts
        and "device peak 69.3 GiB (reserved + framework)\\nt = 0.758 s"
        in texts), texts
"""],
    # "the 12 longest ops" is one bar per phase and op (op_bounds.csv's
    # phase): the 13B sample's mlp_down runs in forward and again in
    # backward, whose two GEMMs (input and weight gradients) take longer
    # than forward's one
    "06-step-bounds.ipynb": ["""
labels = [t.get_text() for t in ax.get_yticklabels()]
phases = set(ops.phase)
assert all(l.split(" ", 1)[0] in phases for l in labels), labels
assert "forward mlp_down" in labels and "backward mlp_down" in labels, labels
assert top.loc["backward mlp_down"].sum() > top.loc["forward mlp_down"].sum()
"""],
}


def add_checks(book, name):
    """Appends CHECKS[name]'s cells to book."""
    import nbformat
    for check in CHECKS.get(name, []):
        if check.startswith(REPLAY):
            start = check[len(REPLAY):]
            check = next(c.source for c in book.cells
                         if c.cell_type == "code" and c.source.startswith(start))
        book.cells.append(nbformat.v4.new_code_cell(check))


def missing(python, modules):
    """The modules that `python` cannot find (without importing them)."""
    code = ("import importlib.util, sys\n"
            "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))")
    try:
        r = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True,
                           check=False)
    except OSError:
        return list(modules)
    return r.stdout.split() if r.returncode == 0 else list(modules)


def fail_missing(what, python, names):
    print(f"notebooks_test: FAILED: {what} {python} cannot import {', '.join(names)}; "
          "run scripts/setup.sh, which installs Debian's python3-nbclient, "
          "python3-ipykernel, python3-matplotlib and python3-pandas", file=sys.stderr)
    return 1


def kernel_python(manager):
    """The interpreter the python3 kernel runs, from its kernel spec."""
    spec = manager.get_kernel_spec("python3")
    return spec.argv[0] if spec.argv[0] != "python" else sys.executable


def run_one(path):
    import nbclient
    import nbformat
    book = nbformat.read(path, as_version=4)
    add_checks(book, os.path.basename(path))
    client = nbclient.NotebookClient(book, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": NOTEBOOKS}})
    start = time.monotonic()
    try:
        client.execute()
    except Exception as e:  # nbclient's CellExecutionError names the cell and traceback
        print(f"FAIL {os.path.basename(path)}: {re.sub(ANSI_COLOUR, '', str(e))}")
        return False
    images = sum(1 for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])
                 if "image/png" in o.get("data", {}))
    if images == 0:
        print(f"FAIL {os.path.basename(path)}: no figure was drawn")
        return False
    print(f"ok   {os.path.basename(path)} ({time.monotonic() - start:.1f} s, {images} figure(s))")
    return True


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    vsim = os.path.abspath(argv[1])
    gone = missing(sys.executable, TEST_MODULES)
    if gone:
        if os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and \
                os.path.exists(SYSTEM_PYTHON) and not missing(SYSTEM_PYTHON, TEST_MODULES):
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__), *argv[1:]])
        return fail_missing("the test's Python", sys.executable, gone)
    # debugpy, which ipykernel imports, warns about frozen modules without it
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        python = kernel_python(KernelSpecManager())
    except NoSuchKernel:
        return fail_missing("there is no python3 kernel:", sys.executable, ["ipykernel"])
    gone = missing(python, KERNEL_MODULES)
    if gone:
        return fail_missing("the python3 kernel's", python, gone)
    if not os.access(vsim, os.X_OK):
        print(f"notebooks_test: FAILED: {vsim} is not an executable vsim", file=sys.stderr)
        return 1
    paths = [os.path.abspath(p) for p in argv[2:]] or sorted(
        os.path.join(NOTEBOOKS, n) for n in os.listdir(NOTEBOOKS) if n.endswith(".ipynb"))
    scratch = tempfile.mkdtemp(prefix="vsim-notebooks-")
    env = {"VSIM": vsim, "TMPDIR": scratch, "IPYTHONDIR": os.path.join(scratch, "ipython"),
           "JUPYTER_RUNTIME_DIR": os.path.join(scratch, "runtime"),
           "MPLCONFIGDIR": os.path.join(scratch, "matplotlib")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernels inherit it
    try:
        start = time.monotonic()
        failed = [p for p in paths if not run_one(p)]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{len(paths) - len(failed)} passed, {len(failed)} failed "
          f"({time.monotonic() - start:.1f} s)")
    return 1 if failed or not paths else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
