#!/bin/sh
# install_test.sh BUILD_DIR - `cmake --install` puts vsim, vsim-calibrate,
# the topologies, the workloads and the model configs they name, the
# README, DESIGN.md and the licence under a prefix; the installed vsim runs
# an installed workload on an installed topology, and loads every
# installed workload (issue 18, item 4: a repository that stands alone).
set -eu
build=$1
prefix=$(mktemp -d "${TMPDIR:-/tmp}/vsim-install.XXXXXX")
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/vsim bin/vsim-calibrate share/vsim/topologies/h100-sxm-8x.ini \
         share/vsim/topologies/a100-sxm-80g-8x.ini \
         share/vsim/topologies/b200-sxm-8x.ini \
         share/vsim/workloads/llama2-7b.ini \
         share/vsim/workloads/validation/korthikanti-22b.ini \
         share/doc/vsim/README.md share/doc/vsim/DESIGN.md \
         share/doc/vsim/LICENSE; do
  [ -f "$prefix/$f" ] || { echo "install_test: $f not installed" >&2; exit 1; }
done
cd "$prefix"
out=$(bin/vsim run share/vsim/workloads/llama2-7b.ini --gpus 8 \
        --topology share/vsim/topologies/a100-sxm-80g-8x.ini)
case $out in
  *"verdict: FITS on 8 x A100-SXM4-80GB"*) ;;
  *) echo "install_test: the installed vsim did not run: $out" >&2; exit 1 ;;
esac
# every installed workload loads, with what it names (models/*.json)
for w in share/vsim/workloads/*.ini share/vsim/workloads/*/*.ini; do
  bin/vsim show "$w" >/dev/null 2>"$prefix/show.err" || {
    echo "install_test: the installed $w does not load:" \
         "$(cat "$prefix/show.err")" >&2
    exit 1
  }
done
bin/vsim-calibrate --help >/dev/null
echo "install_test: installed and ran under $prefix"
