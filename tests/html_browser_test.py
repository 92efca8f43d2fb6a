#!/usr/bin/env python3
"""`vsim run --html` opened in a real browser (Debian's chromium, headless).

Usage: html_browser_test.py VSIM

1. The page loads without console messages or script errors: chromium's
   console log (--enable-logging=stderr) has no CONSOLE line, the page's
   window.onerror hook left #js-error hidden, and the chart's script wrote
   "rendered N points" into #render-status once it had drawn.
2. The rendered DOM shows the peak line the terminal printed, in #peak.
3. Zoom and hover work: a copy of the page with a probe script appended
   hovers the middle of the plot (the tooltip names an op, its micro-batch
   and the bytes), zooms with the wheel, drags a range and resets, and
   writes what #range and #tip said into the DOM.
4. The checks can fail: a copy with a script that throws is caught.

Exit 0 passed, 1 failed, 3 skipped (no chromium: scripts/setup.sh
--with-browser installs it)."""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "tests", "data", "gpt-small.ini")

# Appended before </body> of a copy: drives the chart with synthetic mouse
# events and writes what it saw into <pre id="probe">.
PROBE = """<script>
(function () {
  var c = document.getElementById('chart'), r = c.getBoundingClientRect();
  var y = r.top + r.height / 2, out = {};
  function at(type, x, extra) {
    var o = {clientX: r.left + x, clientY: y, bubbles: true, cancelable: true};
    for (var k in (extra || {})) o[k] = extra[k];
    (type === 'wheel' ? c : (type === 'mouseup' ? window : c)).dispatchEvent(
      type === 'wheel' ? new WheelEvent(type, o) : new MouseEvent(type, o));
  }
  var mid = r.width / 2;
  out.range0 = document.getElementById('range').textContent;
  at('mousemove', mid);
  out.tip = document.getElementById('tip').hidden ? '' :
    document.getElementById('tip').textContent;
  at('wheel', mid, {deltaY: -100});
  out.wheel = document.getElementById('range').textContent;
  document.getElementById('reset').click();
  out.reset = document.getElementById('range').textContent;
  at('mousedown', mid - 100); at('mousemove', mid + 50); at('mouseup', mid + 50);
  out.drag = document.getElementById('range').textContent;
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def browser():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def load(chromium, page, tmp):
    """(DOM after the scripts ran, console lines) of page in chromium."""
    profile = tempfile.mkdtemp(dir=tmp)
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-quic", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync",
           "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=5000", "--dump-dom", "file://" + page]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
    return p.stdout, console


def page_ok(dom, console):
    """Whether the page rendered without an error, and why not."""
    status = re.search(r'<p id="render-status">([^<]*)</p>', dom)
    if console:
        return False, "console: " + console[0]
    if 'data-js-error="1"' in dom or '<p id="js-error" hidden=""></p>' not in dom:
        return False, "the page's window.onerror fired"
    if not status or not status.group(1).startswith("rendered "):
        return False, "no 'rendered' in #render-status"
    return True, status.group(1)


def run_vsim(vsim, out):
    p = subprocess.run([vsim, "run", WORKLOAD, "--html", out],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"vsim run --html exits 0 ({p.returncode}: {p.stderr.strip()})")
    m = re.search(r"^(peak of rank .*)$", p.stdout, re.M)
    check(m is not None, "the terminal prints a peak line")
    return m.group(1) if m else None


def check_probe(chromium, text, tmp):
    probe = os.path.join(tmp, "probe.html")
    with open(probe, "w", encoding="utf-8") as f:
        f.write(text.replace("</body>", PROBE + "</body>"))
    dom, console = load(chromium, probe, tmp)
    ok, why = page_ok(dom, console)
    check(ok, f"the page with the probe renders without errors ({why})")
    m = re.search(r'<pre id="probe">([^<]*)</pre>', dom)
    check(m is not None, "the probe ran")
    if not m:
        return
    seen = json.loads(html.unescape(m.group(1)))
    print("     probe saw:", seen)
    check("micro-batch" in seen["tip"] and "allocated: " in seen["tip"]
          and "activations: " in seen["tip"],
          "hovering shows the op, its micro-batch and the bytes")
    check(seen["wheel"] != seen["range0"], "the mouse wheel zooms in")
    check(seen["reset"] == seen["range0"], "Reset shows the whole step again")
    check(seen["drag"] != seen["range0"], "a dragged range zooms into it")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    chromium = browser()
    if not chromium:
        print("skipped: chromium is not installed; scripts/setup.sh "
              "--with-browser installs it (Debian's chromium)")
        return 3
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "report.html")
        peak = run_vsim(sys.argv[1], page)
        if peak is None:
            return 1
        dom, console = load(chromium, page, tmp)
        ok, why = page_ok(dom, console)
        check(ok, f"the page renders without console or script errors ({why})")
        check(f'<p id="peak">{html.escape(peak, quote=False)}</p>' in dom,
              f"the rendered page shows the terminal's '{peak}'")
        with open(page, encoding="utf-8") as f:
            text = f.read()
        check_probe(chromium, text, tmp)
        bad = os.path.join(tmp, "bad.html")
        with open(bad, "w", encoding="utf-8") as f:
            f.write(text.replace("</body>", "<script>null.x;</script></body>"))
        ok, why = page_ok(*load(chromium, bad, tmp))
        check(not ok, f"a page whose script throws is caught ({why})")
    print(f"{len(failures)} failed ({time.monotonic() - started:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
