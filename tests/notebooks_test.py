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
# A cell run after a notebook's own, in its kernel: asserts on what its
# figures say (an AssertionError fails the notebook, naming the check).
CHECKS = {
    # "the 12 longest ops" is one bar per phase and op (op_bounds.csv's
    # phase): the 13B sample's mlp_down runs in forward and again in
    # backward, whose two GEMMs (input and weight gradients) take longer
    # than forward's one
    "06-step-bounds.ipynb": """
labels = [t.get_text() for t in ax.get_yticklabels()]
phases = set(ops.phase)
assert all(l.split(" ", 1)[0] in phases for l in labels), labels
assert "forward mlp_down" in labels and "backward mlp_down" in labels, labels
assert top.loc["backward mlp_down"].sum() > top.loc["forward mlp_down"].sum()
""",
}


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
    check = CHECKS.get(os.path.basename(path))
    if check:
        book.cells.append(nbformat.v4.new_code_cell(check))
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
