#!/bin/bash
# Build llama.cpp's llama-server and llama-bench (and the perplexity/imatrix/quantize tools) from the
# llama-cpp-python 0.3.36 source distribution, for one x86 code path, AMX off: the reference that
# scripts/bench_http.py (--bin) and the perplexity benchmarks run beside ours. Not run in CI
# (~25 minutes on 2 cores).
#
#   scripts/build_llama_server.sh avx512 OUT_DIR   # AVX-512 VNNI/BF16/VBMI (the CPU must have them)
#   scripts/build_llama_server.sh avx2 OUT_DIR     # AVX2 + FMA + F16C, no AVX-512
#
# The source is downloaded once into OUT_DIR/../sd (pip download); the tools land in OUT_DIR/bin.
set -euo pipefail
isa=${1:?avx512 or avx2}
out=$(realpath -m "${2:?output directory}")
sd=$(dirname "$out")/sd
src=$sd/llama_cpp_python-0.3.36/vendor/llama.cpp
if [ ! -d "$src" ]; then
  mkdir -p "$sd"
  python3 -m pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$sd"
  tar xzf "$sd"/llama_cpp_python-0.3.36.tar.gz -C "$sd"
fi
flags=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
       -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF)
case $isa in
  avx512) flags+=(-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON) ;;
  avx2) flags+=(-DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF) ;;
  *) echo "unknown code path: $isa (avx512 or avx2)" >&2; exit 1 ;;
esac
cmake -S "$src" -B "$out" "${flags[@]}"
cmake --build "$out" -j2 --target llama-server llama-bench llama-perplexity llama-imatrix llama-quantize
