#!/usr/bin/env bash
# Runs issue 5's calibration and issue 7's ground-truth grid on the lent GPU
# machine, in one call of the device tool, from the repository root there:
#
#   run(command="scripts/device-run.sh all 570", carry=[".devdeps"],
#       timeout_s=600)
#
# (prepare .devdeps here first with scripts/device-deps.sh). What comes back
# under $OUT, to commit here:
#   h200-raw.csv            -> calibrate/data/h200.csv
#   h200-calibrated.ini     -> topologies/h200-calibrated.ini
#   h200-groundtruth.csv    -> tests/data/groundtruth/h200.csv
#   h200-micro.csv          -> calibrate/data/h200-micro.csv (micro)
#   device.txt, calibrate.log, selftest.log, groundtruth.log, micro.log: what ran
# Usage: scripts/device-run.sh calibrate|groundtruth|all|micro [TOTAL_S]
# micro runs calibrate/groundtruth/microbench.py alone (memory outside the
# allocator by first use, host cost per kernel, the settled GEMM rate,
# three profiled ground-truth steps; about
# 60-90 s), bounded by TOTAL_S less 10 s.
# TOTAL_S (default 570) bounds the whole script. The calibration starts no
# new size after 120 s (--time-limit; about 60-150 s in all); at 150 s it
# gets SIGTERM, which makes it stop measuring and fit and write what it has
# (killed at 170 s if it has not). The harness's CPU self-test then runs
# (a few seconds: the SDPA, GQA and master-weight paths the development
# machine's old PyTorch cannot run), and the ground-truth grid gets what is
# left, less 10 s, as its hard --budget (about 330-430 s for all 52
# configurations, the light ones first). Both keep what they finished.
# A rerun: put the earlier h200-groundtruth.csv into .devprev/ here and
# carry it too (carry=[".devdeps", ".devprev"]); the grid then runs only
# the configurations that csv does not have (--resume).
set -uo pipefail
what=${1:-all}
total=${2:-570}
deadline=$((SECONDS + total))
out=${OUT:-/tmp/vsim-device-out}
mkdir -p "$out"
root=/tmp/vsim-devroot
export PYTHONUNBUFFERED=1

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,pcie.link.gen.max,pcie.link.width.max --format=csv 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  nvcc --version 2>&1 | tail -1
} >"$out/device.txt"

# vsim's libraries: unpacked from the carried Debian packages.
mkdir -p "$root"
for deb in .devdeps/*.deb; do dpkg -x "$deb" "$root"; done
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

bin=.devdeps/build
if ! "$bin/vsim-calibrate" --help >/dev/null 2>&1; then
  echo "carried vsim-calibrate does not start here; building" >>"$out/device.txt"
  cmake -S . -B /tmp/vsim-build -DVSIM_WITH_CUDA=ON -DVSIM_BUILD_TESTS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$root/usr" -DPKG_CONFIG_EXECUTABLE=/nonexistent \
    >>"$out/device.txt" 2>&1 &&
    cmake --build /tmp/vsim-build -j16 --target vsim_cli vsim_calibrate \
      >>"$out/device.txt" 2>&1 || { echo "build failed" >>"$out/device.txt"; exit 1; }
  bin=/tmp/vsim-build
fi

status=0
if [ "$what" = calibrate ] || [ "$what" = all ]; then
  timeout -k 20 150 "$bin/vsim-calibrate" --verbose --time-limit 120 \
    --base topologies/h200-sxm-8x.ini \
    --raw "$out/h200-raw.csv" --out "$out/h200-calibrated.ini" \
    >"$out/calibrate.log" 2>&1 || { rc=$?; status=1; echo "vsim-calibrate exit $rc" >>"$out/calibrate.log"; }
fi
if [ "$what" = groundtruth ] || [ "$what" = all ]; then
  timeout 60 python3 calibrate/groundtruth/harness.py --selftest \
    >"$out/selftest.log" 2>&1 || echo "self-test failed (see selftest.log); measuring anyway" >>"$out/device.txt"
  resume=()
  if [ -f .devprev/h200-groundtruth.csv ]; then
    cp .devprev/h200-groundtruth.csv "$out/h200-groundtruth.csv"
    resume=(--resume)
  fi
  budget=$((deadline - SECONDS - 10))
  echo "ground-truth budget ${budget} s ${resume[*]}" >>"$out/device.txt"
  python3 calibrate/groundtruth/harness.py --budget "$budget" "${resume[@]}" \
    --out "$out/h200-groundtruth.csv" >"$out/groundtruth.log" 2>&1 || status=1
fi
if [ "$what" = micro ]; then
  timeout -k 10 $((deadline - SECONDS - 10)) python3 calibrate/groundtruth/microbench.py \
    --out "$out/h200-micro.csv" >"$out/micro.log" 2>&1 || { rc=$?; status=1; echo "microbench exit $rc" >>"$out/micro.log"; }
fi
tail -n 5 "$out"/*.log
exit $status
