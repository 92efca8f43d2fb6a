#!/usr/bin/env python3
"""The architecture, checked (docs/DESIGN.md):
- layering: a file under sim/<layer>/ or app/ includes only headers of its
  own layer or of a lower one (base < input < model < recipe < parallel <
  cost < program < engine < run < app); calibrate/ sits above run;
- no include cycles between modules (a module is a .c/.h pair; its
  private <module>_int.h belongs to it);
- no function longer than 80 lines in sim/, app/ and calibrate/.
Prints one line per violation and '<n> passed, <m> failed'; exit 1 on any."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ["base", "input", "model", "recipe", "parallel", "cost", "program", "engine",
          "run", "app", "calibrate"]
MAX_FUNCTION_LINES = 80


def layer_files():
    """{header or source name: (layer, path)} for every .c/.h we own."""
    files = {}
    for layer in LAYERS:
        if layer == "app" or layer == "calibrate":
            d = os.path.join(ROOT, layer)
        else:
            d = os.path.join(ROOT, "sim", layer)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                files[(layer, name)] = os.path.join(d, name)
    return files


def includes(path):
    with open(path, encoding="utf-8") as f:
        return re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read(), re.M)


def module_of(stem):
    """The module a file belongs to: its stem, where a private header
    <module>_int.h (STYLE.md: what two files of a module share) belongs to
    <module>, so that it may include its module's public header."""
    return stem[:-len("_int")] if stem.endswith("_int") else stem


def check_layers(files, failures):
    header_layer = {name: layer for (layer, name) in files if name.endswith(".h")}
    checked = 0
    graph = {}
    for (layer, name), path in files.items():
        module = (layer, module_of(name.rsplit(".", 1)[0]))
        graph.setdefault(module, set())
        for inc in includes(path):
            checked += 1
            if "/" in inc:
                failures.append(f"{path}: includes '{inc}' by path; use the "
                                "layer's include directory")
                continue
            if inc not in header_layer:
                continue  # a generated or test header
            inc_layer = header_layer[inc]
            if LAYERS.index(inc_layer) > LAYERS.index(layer):
                failures.append(f"{path}: layer '{layer}' includes '{inc}' of "
                                f"the higher layer '{inc_layer}'")
            target = (inc_layer, module_of(inc[:-2]))
            if target != module:
                graph[module].add(target)
    return checked, graph


def find_cycle(graph):
    state = {}
    stack = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if state.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if state.get(node) is None:
            found = visit(node)
            if found:
                return found
    return None


def long_functions(path):
    """(name, first line, length) of each function body over the limit: a
    definition starts at a line that is '{' alone after its signature, or a
    signature line ending in '{' at column 0, and ends at '}' at column 0."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    start = None
    for i, line in enumerate(lines):
        if start is None and line == "{":
            j = i - 1
            while j > 0 and lines[j - 1].strip() and not lines[j - 1].startswith(
                    ("}", "/*", " *", "#")) and not lines[j - 1].rstrip().endswith((";", "*/")):
                j -= 1
            start, name = j, lines[j].strip()[:60]
        elif start is not None and line.startswith("}"):
            n = i - start + 1
            if n > MAX_FUNCTION_LINES:
                out.append((name, start + 1, n))
            start = None
    return out


def main():
    files = layer_files()
    layering, cycles, lengths = [], [], []
    checked, graph = check_layers(files, layering)
    cycle = find_cycle(graph)
    if cycle:
        cycles.append("include cycle: " + " -> ".join(
            f"{layer}/{mod}" for layer, mod in cycle))
    if "--no-length" not in sys.argv:
        for (layer, name), path in files.items():
            if name.endswith(".c"):
                for fname, line, n in long_functions(path):
                    lengths.append(f"{path}:{line}: {fname} is {n} lines "
                                   f"(at most {MAX_FUNCTION_LINES})")
    checks = [layering, cycles] + ([] if "--no-length" in sys.argv else [lengths])
    for problems in checks:
        for p in problems:
            print(p)
    failed = sum(1 for problems in checks if problems)
    print(f"structure: {len(files)} files, {checked} includes")
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
