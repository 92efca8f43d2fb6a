# common.sh - what the validation reports share; sourced from the
# repository root (tests/validation/*.sh cd there first).

step_seconds() { # vsim output -> step time in seconds
  python3 -c 'import re,sys; m=re.search(r"step time ([0-9.]+) (s|ms)", sys.stdin.read()); print(float(m.group(1))*(1e-3 if m.group(2)=="ms" else 1))'
}
