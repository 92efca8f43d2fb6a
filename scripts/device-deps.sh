#!/usr/bin/env bash
# Prepares .devdeps/ for scripts/device-run.sh, here, on the development
# machine: the GPU machine has nvcc, CMake and PyTorch but no package
# registry, so vsim's libraries travel with the tree (run's `carry`).
#   .devdeps/*.deb    GSL, libcsv, inih and jansson (runtime and headers), unpacked
#                     there with dpkg -x; used to rebuild there if needed
#   .devdeps/build/   vsim and vsim-calibrate built here with CUDA for
#                     Hopper (sm_90), which device-run.sh tries first
# Usage: scripts/device-deps.sh        (needs apt-get and nvcc here)
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .devdeps
mkdir -p .devdeps
(cd .devdeps && apt-get download -q libgsl27 libgslcblas0 libgsl-dev \
  libcsv3 libcsv-dev libinih1 libinih-dev libjansson4 libjansson-dev)
cmake -S . -B .devdeps/cmake -DVSIM_WITH_CUDA=ON -DVSIM_BUILD_TESTS=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build .devdeps/cmake -j"$(nproc)" --target vsim_cli vsim_calibrate >/dev/null
mkdir -p .devdeps/build
cp .devdeps/cmake/vsim .devdeps/cmake/vsim-calibrate .devdeps/build/
rm -rf .devdeps/cmake
du -sh .devdeps
