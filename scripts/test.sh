#!/usr/bin/env bash
# Builds vsim and runs the whole test suite, then the contract check (when
# ../shared has it).
# Usage: scripts/test.sh [BUILD_DIR] [extra cmake arguments...]
#   scripts/test.sh                         # build/ , warnings as errors
#   scripts/test.sh build-asan -DVSIM_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
cmake -S . -B "$build" -DVSIM_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
# The shared folder beside the checkout is not part of the product: its
# contract check runs when it is there.
if [ -f ../shared/contract-check.py ]; then
  python3 ../shared/contract-check.py "$build/vsim"
else
  echo "contract check: ../shared/contract-check.py not present; skipped"
fi
