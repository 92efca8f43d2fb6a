#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang (build-fuzz/) and
# runs each for SECONDS (default 20) on its corpus in build-fuzz/corpus/
# TARGET/, seeded from the repository's INI and CSV files and kept between
# runs. Skips itself (exit 0) without a clang that links libFuzzer. A crash,
# leak, undefined behaviour, timeout or out-of-memory exits 1 and names the
# reproducer, which libFuzzer leaves in build-fuzz/findings/.
# Usage: tests/fuzz/run.sh [SECONDS_PER_TARGET]
#   VSIM_FUZZ_CC     the compiler (default clang)
#   VSIM_FUZZ_BUILD  the build folder (default build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
cc=${VSIM_FUZZ_CC:-clang}
build=${VSIM_FUZZ_BUILD:-build-fuzz}
targets="fuzz_workload fuzz_set fuzz_calcsv fuzz_hfconfig fuzz_alloc"

case $secs in
  '' | *[!0-9]*) echo "usage: tests/fuzz/run.sh [SECONDS_PER_TARGET]" >&2; exit 2 ;;
esac

# libFuzzer is there when a one-line fuzz target links.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
  'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
  'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
  >"$probe/probe.c"
if ! command -v "$cc" >/dev/null ||
  ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/probe.c" -o "$probe/probe" 2>/dev/null; then
  echo "fuzz: clang with libFuzzer not found; skipped"
  exit 0
fi

cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DVSIM_FUZZ=ON \
  -DVSIM_BUILD_TESTS=OFF -DVSIM_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz

# --- seed corpus ------------------------------------------------------------
corpus=$build/corpus
mkdir -p "$corpus/fuzz_workload" "$corpus/fuzz_set" "$corpus/fuzz_calcsv" \
  "$corpus/fuzz_hfconfig" "$corpus/fuzz_alloc" \
  "$build/findings"
seed() { # seed TARGET NAME < content
  cat >"$corpus/$1/seed-$(printf '%s' "$2" | tr -c 'A-Za-z0-9.-' '_')"
}
# fuzz_workload: each workload alone (built-in topology), each topology
# after an empty workload, and a small workload on each topology with --gpus.
for f in $(git ls-files 'workloads/*.ini' 'tests/data/*.ini'); do
  seed fuzz_workload "$f" <"$f"
done
for f in $(git ls-files 'topologies/*.ini'); do
  printf '%%%%\n' | cat - "$f" | seed fuzz_workload "$f"
  printf '%%%% 8\n' | cat tests/data/gpt-small.ini - "$f" |
    seed fuzz_workload "gpt-small+$f"
done
# fuzz_set: the --set and --vary examples of README.md, then a few more.
{ grep -ohE -- '--(set|vary) [a-z0-9_.]+=[^] `]+' README.md || true; } | sort -u |
  sed -e 's/^--set //' -e 's/^--vary /vary /' | while read -r line; do
  printf '%s\n' "$line" | seed fuzz_set "$line"
done
printf '%s\n' 'parallel.pp=2' 'parallel.schedule=interleaved' \
  'parallel.virtual_stages=2' 'training.global_batch=8' | seed fuzz_set pp-interleaved
printf '%s\n' 'parallel.tp=2' 'parallel.sequence_parallel=true' 'parallel.zero=3' \
  'topology.gpu.memory=40GiB' 'runtime.expandable_segments=true' | seed fuzz_set tp-zero3
printf '%s\n' 'parallel.pp=2' 'parallel.pp_layers=1,3' 'training.checkpointing=full' \
  'topology.network.intra_latency=5us' | seed fuzz_set pp-layers
printf '%s\n' 'vary training.micro_batch=1,2,4..32' 'vary gpus=8,16..64' \
  'vary topology.gpu.memory=40GiB,80GiB' | seed fuzz_set vary
# fuzz_calcsv: the raw samples of tests/data, and every fourth size of the
# large one with three samples each (under -max_len, and few enough sizes
# that the target fits them).
for f in $(git ls-files 'tests/data/calibrate/*.csv'); do
  seed fuzz_calcsv "$f" <"$f"
  awk -F, 'NR == 1 { print; next }
    { if (!(($1, $2) in i)) i[$1, $2] = n[$1]++ }
    i[$1, $2] % 4 == 0 && $3 < 3' "$f" | seed fuzz_calcsv "thin-$f"
done

# fuzz_hfconfig: the shipped model configs.
for f in $(git ls-files 'models/*.json'); do
  seed fuzz_hfconfig "$f" <"$f"
done

# fuzz_alloc (a configuration byte, then 4-byte operations: malloc,
# free, bulk, clone, empty_cache by code % 5): five bulk allocations of
# 2,048 small blocks, each half freed, past the 4,096 blocks of a free
# set's one array, then a clone, frees, mallocs and a cache release; and
# the same with expandable segments and max_split_size.
for config in '\000' '\003' '\004'; do
  printf "$config"'\002\007\377\000\002\007\377\001\002\007\377\002'\
'\002\007\377\003\002\007\377\004\003\000\000\000\001\000\100\000'\
'\000\011\200\000\000\024\000\001\004\000\000\000' |
    seed fuzz_alloc "bulk-$(printf '%s' "$config" | tr -d '\\')"
done

# A dictionary of the INI sections and keys (README.md's key tables).
dict=$build/vsim.dict
{ grep -oE '^\| `\[[a-z_]+\] [a-z0-9_]+`' README.md || true; } |
  sed -E 's/^\| `\[([a-z_]+)\] ([a-z0-9_]+)`/\1 \2/' | sort -u |
  while read -r sec key; do
    printf '"[%s]"\n"%s = "\n"%s.%s="\n' "$sec" "$key" "$sec" "$key"
  done | sort -u >"$dict"

# --- runs -------------------------------------------------------------------
status=0
for t in $targets; do
  echo "fuzz: $t for ${secs} s"
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384
    -print_final_stats=1 -artifact_prefix="$build/findings/$t-")
  case $t in fuzz_workload | fuzz_set) args+=(-dict="$dict") ;; esac
  if ! "$build/tests/fuzz/$t" "${args[@]}" "$corpus/$t" >"$build/$t.log" 2>&1; then
    status=1
    tail -n 40 "$build/$t.log"
    echo "fuzz: $t FAILED; reproducer:" \
      "$(grep -o "$build/findings/$t-[^ ]*" "$build/$t.log" | tail -n 1)"
    echo "fuzz: rerun it with $build/tests/fuzz/$t REPRODUCER"
  fi
  grep -E '^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units' "$build/$t.log" || true
done
exit $status
