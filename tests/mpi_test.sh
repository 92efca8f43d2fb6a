#!/bin/sh
# plan and sweep under mpirun with 2 and 4 processes on this machine write
# the same CSV and print the same report as one process, byte for byte
# (README "Searches across machines (MPI)"). The one difference allowed is
# plan's wall-clock line ("N layouts simulated in X s (...)"), masked.
# Usage: mpi_test.sh VSIM SOURCE_DIR MPI_BUILT(1: built with VSIM_MPI) [MPIEXEC]
# Exit 77 (skipped) when vsim was built without VSIM_MPI or mpirun is
# missing.
set -eu
vsim=$1
src=$2
built=$3
mpiexec=${4:-mpirun}
case "$built" in 1) ;; *)
  echo "mpi_test: vsim built without -DVSIM_MPI=ON; skipped"; exit 77 ;;
esac
if ! command -v "$mpiexec" >/dev/null 2>&1; then
  echo "mpi_test: $mpiexec not found (scripts/setup.sh --with-mpi); skipped"
  exit 77
fi
# root in a container, and 4 ranks on fewer cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
mask() { sed -E 's/simulated in [0-9.]+ s \([0-9]+ layouts\/s/simulated in X s (Y layouts\/s/' "$1"; }

# run NAME NP ARGS...: vsim ARGS with --csv $tmp/NAME.NP.csv under NP
# processes (1: no mpirun), stdout to $tmp/NAME.NP.out, status recorded.
# NP "4all": 4 processes that all simulate, however few the cores (by
# default a host's ranks beyond cores / --jobs wait; README).
run() {
  name=$1 np=$2
  shift 2
  case "$np" in
    1) set -- "$vsim" "$@" ;;
    4all) set -- "$mpiexec" -n 4 -x VSIM_MPI_WORKERS_PER_HOST=4 "$vsim" "$@" ;;
    *) set -- "$mpiexec" -n "$np" "$vsim" "$@" ;;
  esac
  status=0
  "$@" --csv "$tmp/$name.$np.csv" >"$tmp/$name.$np.out" 2>"$tmp/$name.$np.err" || status=$?
  echo "$status" >"$tmp/$name.$np.rc"
}

check() {
  name=$1
  shift
  run "$name" 1 "$@"
  for np in 2 4 4all; do
    run "$name" "$np" "$@"
    # vsim's own messages (mpirun adds its notes on a failed exit)
    grep '^vsim' "$tmp/$name.1.err" >"$tmp/$name.1.msg" || true
    grep '^vsim' "$tmp/$name.$np.err" >"$tmp/$name.$np.msg" || true
    for f in csv rc msg; do
      [ -e "$tmp/$name.1.$f" ] || [ -e "$tmp/$name.$np.$f" ] || continue
      if ! cmp "$tmp/$name.1.$f" "$tmp/$name.$np.$f"; then
        echo "FAIL: $name: the $f of -n $np differs from one process"; fail=1
      fi
    done
    mask "$tmp/$name.1.out" >"$tmp/$name.1.out.m"
    mask "$tmp/$name.$np.out" >"$tmp/$name.$np.out.m"
    if ! cmp "$tmp/$name.1.out.m" "$tmp/$name.$np.out.m"; then
      echo "FAIL: $name: the report of -n $np differs from one process"
      diff "$tmp/$name.1.out" "$tmp/$name.$np.out" | head -20
      cat "$tmp/$name.$np.err"
      fail=1
    fi
  done
  # a run refused before its search (bad input 1, bad usage 2) writes
  # nothing; any other writes its CSV
  case "$(cat "$tmp/$name.1.rc")" in
    1 | 2) ;;
    *) if [ ! -s "$tmp/$name.1.csv" ]; then
         echo "FAIL: $name: one process wrote no CSV"; fail=1
       fi ;;
  esac
  echo "$name: 1, 2 and 4 processes (2 and 4 simulating) agree ($(cat "$tmp/$name.1.csv" 2>/dev/null | wc -l) CSV lines, exit $(cat "$tmp/$name.1.rc"))"
}

# --jobs 1: 2 ranks simulate on 2 cores; sweep's --jobs 2: one per 2 cores
check plan plan "$src/workloads/llama2-7b.ini" --max-gpus 16 --jobs 1
check sweep sweep "$src/workloads/llama2-7b.ini" --gpus 8 --jobs 2 \
  --vary training.micro_batch=1,2,4 --vary parallel.zero=0,1,2,3
# two GPU types: two collective searches in turn
check types plan "$src/workloads/llama2-7b.ini" --max-gpus 8 --jobs 1 \
  --topology "$src/topologies/h100-sxm-8x.ini,$src/topologies/a100-sxm-80g-8x.ini"
# nothing fits without offload: rank 0 decides for all to search the
# offload layouts too (a second collective search)
check offload plan "$src/workloads/llama2-70b.ini" --max-gpus 2 --jobs 1
# nothing fits, not even with offload (exit 3, the CSV still written) and a
# bad --vary key (exit 1 on every rank before any search, nothing
# written): the same status
check oom plan "$src/workloads/llama2-70b.ini" --max-gpus 2 --jobs 1 \
  --set topology.node.host_memory=256GiB
check bad sweep "$src/workloads/llama2-7b.ini" --gpus 8 \
  --vary training.no_such_key=1,2
# a command that does not split runs on rank 0 alone: one report
"$mpiexec" -n 2 "$vsim" show "$src/workloads/llama2-7b.ini" --gpus 8 >"$tmp/show.2" 2>&1
"$vsim" show "$src/workloads/llama2-7b.ini" --gpus 8 >"$tmp/show.1" 2>&1
if ! cmp "$tmp/show.1" "$tmp/show.2"; then
  echo "FAIL: show under mpirun -n 2 differs from one process"; fail=1
fi
# a rank that stops before the search (its input missing, as on a host
# without the file) stops the job with rank 0's message, never a hang
status=0
timeout 120 "$mpiexec" -n 2 sh -c 'w=$1; [ "$OMPI_COMM_WORLD_RANK" = 0 ] || w=$1.missing
  exec "$0" plan "$w" --max-gpus 8 --jobs 1' "$vsim" "$src/workloads/llama2-7b.ini" \
  >"$tmp/stop.out" 2>"$tmp/stop.err" || status=$?
if [ "$status" != 1 ] || ! grep -q "another MPI rank stopped before the search" "$tmp/stop.err"; then
  echo "FAIL: a rank stopping early: exit $status (want 1)"; cat "$tmp/stop.err"; fail=1
fi
# ranks whose workload differs (a host with another file at the same
# path: here rank 1 reads a copy with 6 layers) would each simulate their
# share of another job; the job stops on every rank before the search,
# with one message, and writes nothing
mkdir -p "$tmp/a" "$tmp/b"
cp "$src/tests/data/gpt-small.ini" "$tmp/a/w.ini"
sed 's/^layers = 4$/layers = 6/' "$src/tests/data/gpt-small.ini" >"$tmp/b/w.ini"
status=0
timeout 120 "$mpiexec" -n 2 sh -c 'd=$1; [ "$OMPI_COMM_WORLD_RANK" = 0 ] || d=$2
  exec "$0" sweep "$d/w.ini" --gpus 2 --jobs 1 --vary training.micro_batch=1,2 \
    --csv "$3/differ.csv"' "$vsim" "$tmp/a" "$tmp/b" "$tmp" \
  >"$tmp/differ.out" 2>"$tmp/differ.err" || status=$?
said=$(grep -c 'read different input files' "$tmp/differ.err" || true)
if [ "$status" != 1 ] || [ "$said" != 1 ] || [ -e "$tmp/differ.csv" ]; then
  echo "FAIL: ranks with different inputs: exit $status, $said messages"
  echo "(want exit 1, one message, no CSV)"; cat "$tmp/differ.err"; fail=1
fi
exit $fail
