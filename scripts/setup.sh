#!/usr/bin/env bash
# Installs the Debian packages vsim needs, only those that are missing.
# Usage: scripts/setup.sh [--with-torch] [--with-browser] [--with-mpi]
#                          (as root, or with sudo available; any may be given)
#   --with-torch    also Debian's CPU build of PyTorch (python3-torch, about
#                   1 GB), so that the ground-truth harness's CPU checks run
#                   (groundtruth_selftest, saved_activations_test) instead of
#                   reporting themselves skipped. vsim itself never needs it.
#   --with-browser  also Debian's chromium, so that html_browser_test opens
#                   `vsim run --html`'s page headless instead of reporting
#                   itself skipped.
#   --with-mpi      also Debian's Open MPI (libopenmpi-dev, openmpi-bin), for
#                   a -DVSIM_MPI=ON build whose plan and sweep run under
#                   mpirun (README "Searches across machines (MPI)").
set -euo pipefail
# python3-nbclient, -ipykernel, -matplotlib and -pandas execute and draw the
# notebooks (notebooks/, run by the test suite).
packages=(build-essential cmake pkg-config libgsl-dev libcsv-dev libinih-dev libjansson-dev libcmocka-dev python3
          python3-nbclient python3-ipykernel python3-matplotlib python3-pandas)
for opt in "$@"; do
  case "$opt" in
    --with-torch) packages+=(python3-torch) ;;
    --with-browser) packages+=(chromium) ;;
    --with-mpi) packages+=(libopenmpi-dev openmpi-bin) ;;
    *) echo "setup: unknown option $opt (usage: scripts/setup.sh [--with-torch]" \
            "[--with-browser] [--with-mpi])" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all dependencies present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
