#!/bin/bash
# Every speed and memory target of issues #25 and #29, ours beside llama.cpp, on this CPU's AVX-512
# path and on the AVX2 path (numba target haswell beside an AVX2-only llama.cpp). Run it on a quiet
# machine: the llama bench and HTTP rows are wall clocks on two threads. Not run in CI.
#
#   REF512=/work/ref/avx512 REF2=/work/ref/avx2 BIN512=/work/ref/build512/bin BIN2=/work/ref/build2/bin \
#   BENCH=$HOME/.cache/llamacli-bench scripts/bench_targets.sh [avx512|avx2|both]
#
# REF*: llama-cpp-python builds (PYTHONPATH) for the engine rows; BIN*: llama-server builds
# (scripts/build_llama_server.sh) for the HTTP rows; BENCH: the 8B-shaped and MoE files
# (scripts/make_8b_model.py, scripts/make_moe_model.py). A missing file or build skips its rows.
set -uo pipefail
cd "$(dirname "$0")/.."
which=${1:-both}
BENCH=${BENCH:-$HOME/.cache/llamacli-bench}
HASWELL=(NUMBA_CPU_NAME=haswell "NUMBA_CPU_FEATURES=+avx,+avx2,+fma,+f16c,+sse4.2,+popcnt,+bmi,+bmi2")

run_path() {  # $1: label, $2: llama-cpp-python dir, $3: llama-server bin dir, rest: env for ours
  local label=$1 ref=$2 bin=$3; shift 3
  echo "=== $label ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo "--- demo, llama bench -t 2 (pp512, tg128, parallel1, parallel16)"
  env "$@" PYTHONPATH="$ref" python -m llamacli bench -t 2 --parallel 1,16 | grep '│'
  local f
  for f in llama3-8b-q4km; do
    [ -f "$BENCH/$f.gguf" ] || continue
    echo "--- $f, llama bench -t 2 (pp32, tg16)"
    env "$@" PYTHONPATH="$ref" python -m llamacli bench -t 2 -m "$BENCH/$f.gguf" -p 32 -n 16 --parallel 1 -r 2 | grep '│'
  done
  for f in llama3-8b-q4km llama3-8b-iq2_xxs llama3-8b-mxfp4; do
    [ -f "$BENCH/$f.gguf" ] || continue
    echo "--- $f, one thread, CPU time"
    env "$@" PYTHONPATH="$ref" python scripts/bench_cpu_time.py -m "$BENCH/$f.gguf" -n 8 -p 32 --reps 2 | tail -4
  done
  f=qwen3moe-30b-a3b-l12-q4km
  if [ -f "$BENCH/$f.gguf" ]; then
    echo "--- $f, one thread, CPU time"
    env "$@" PYTHONPATH="$ref" python scripts/bench_cpu_time.py -m "$BENCH/$f.gguf" -n 16 -p 128 --reps 2 | tail -4
  fi
  if [ -x "$bin/llama-server" ]; then
    echo "--- HTTP, llama serve vs llama-server, -t 2"
    env "$@" python scripts/bench_http.py --bin "$bin" --clients 1,4,16 --requests 3 -t 2 | tail -4
    env "$@" python scripts/bench_http.py --bin "$bin" --memory | tail -2
  fi
}

if [ "$which" != avx2 ]; then
  run_path "AVX-512 path" "${REF512:-/work/ref/avx512}" "${BIN512:-/work/ref/build512/bin}"
fi
if [ "$which" != avx512 ]; then
  run_path "AVX2 path (numba target haswell)" "${REF2:-/work/ref/avx2}" "${BIN2:-/work/ref/build2/bin}" "${HASWELL[@]}"
fi
