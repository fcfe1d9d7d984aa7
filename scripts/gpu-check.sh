#!/usr/bin/env bash
# The CUDA checks of txl-host-gpu, on a machine with an NVIDIA GPU (under 5 minutes on an H200,
# most of it the build). Results go to target/gpu-check/results.txt:
#   - the CUDA tests, the ignored ones included: the kernels compile with NVRTC, CUDA f32 matches
#     the Hugging Face float64 fixtures and the CPU f64 reference (<= 1e-4), batches included,
#     also with blocks and output chunks shrunk so that every chunked path runs;
#     and the calibration statistics (ranges, Gram matrices) against the CPU f64 reference's;
#   - the CPU backends against the fixtures (f64 <= 1e-9, f32 <= 1e-4);
#   - the benchmark (host-gpu/examples/gpu_bench.rs): CUDA f32 vs CPU f64 on the same models
#     (max |Δ ln p|, which fails the check above its bound), tokens per second on a
#     WT103-shaped random model, and its calibration statistics timed against the CPU f32
#     backend's;
#   - `txl quantize --calib-backend cuda` on the bundled model beside `--calib-backend cpu32`.
#
#   scripts/gpu-check.sh          build, then run (needs cargo and the crates already fetched:
#                                 it builds --offline; run `cargo fetch` where there is a network)
#   scripts/gpu-check.sh build    only build: the binaries go to target/gpu-check/bin
#   scripts/gpu-check.sh run      only run what `build` left there (e.g. built on another machine
#                                 of the same OS, for a GPU machine without cargo)
#
# Needs the NVIDIA driver and CUDA 13's libcublas and libnvrtc, found in $CUDA_HOME/lib64
# (default /usr/local/cuda), in Python's nvidia-* wheels, or already on LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=target/gpu-check
bin=$out/bin
results=$out/results.txt
mode=${1:-all}

build() {
  echo "== build (release, offline)"
  mkdir -p "$bin"
  cargo build --release --offline --locked -p txl-host-gpu --example gpu_bench
  cp target/release/examples/gpu_bench "$bin/"
  cargo build --release --offline --locked -p txl-tools --bin txl
  cp target/release/txl "$bin/"
  local listing path
  listing=$(cargo test --release --offline --locked -p txl-host-gpu -p txl-tests --no-run 2>&1) || {
    printf '%s\n' "$listing"
    exit 1
  }
  for name in reference_cuda reference_vs_hf cuda_limits; do
    path=$(printf '%s\n' "$listing" | sed -n "s|.*Executable tests/$name.rs (\(.*\))|\1|p")
    if [ -z "$path" ]; then
      echo "no test binary for tests/$name.rs in the cargo output"
      exit 1
    fi
    cp "$path" "$bin/$name"
  done
  if command -v strip >/dev/null; then strip --strip-debug "$bin"/*; fi
  commit_line >"$bin/commit"
  ls -l "$bin"
}

# The commit checked out here, and whether the tree differs from it.
commit_line() {
  echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' + local changes')"
}

# Folders that may hold CUDA 13's libraries, toolkit first.
cuda_library_path() {
  local dirs=() dir wheels
  for dir in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 \
    /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$dir" ] && dirs+=("$dir")
  done
  wheels=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
  if [ -n "$wheels" ]; then
    for dir in "$wheels"/cu13/lib "$wheels"/cublas/lib "$wheels"/cuda_nvrtc/lib; do
      [ -d "$dir" ] && dirs+=("$dir")
    done
  fi
  [ -d "$root/target/nvrtc/nvidia/cu13/lib" ] && dirs+=("$root/target/nvrtc/nvidia/cu13/lib")
  local IFS=:
  echo "${dirs[*]}"
}

section() {
  printf '\n== %s\n' "$1" | tee -a "$results"
}

run() {
  mkdir -p "$out"
  local libs status=0
  libs=$(cuda_library_path)
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TXL_FIXTURES="$root/tests/fixtures"
  {
    echo "# txl-host-gpu GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# binaries built at: $(cat "$bin/commit" 2>/dev/null || echo unknown)"
    echo "# tree here: $(commit_line)"
    echo "# GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"
    echo "# LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  } | tee "$results"

  section "CUDA tests, ignored ones included (tests/tests/reference_cuda.rs)"
  if ! timeout 180 "$bin/reference_cuda" --include-ignored --nocapture --test-threads 1 2>&1 | tee -a "$results"; then
    status=1
  fi
  section "CUDA with small blocks and output chunks vs CPU f64 (host-gpu/tests/cuda_limits.rs)"
  if ! timeout 120 "$bin/cuda_limits" --include-ignored --nocapture --test-threads 1 2>&1 | tee -a "$results"; then
    status=1
  fi
  section "CPU backends vs Hugging Face (tests/tests/reference_vs_hf.rs)"
  if ! timeout 60 "$bin/reference_vs_hf" --nocapture 2>&1 | grep -v 'max |Δ ln p| =' | tee -a "$results"; then
    status=1
  fi
  section "benchmark (examples/gpu_bench.rs)"
  if ! timeout 240 "$bin/gpu_bench" --out "$out/bench.txt" 2>&1 | tee -a "$results"; then
    status=1
  fi
  section "txl quantize --method compensated on the bundled model, statistics on cuda and cpu32"
  local demo=$out/demo
  mkdir -p "$demo"
  if "$bin/txl" convert tests/fixtures/demo -o "$demo/demo.txl" 2>&1 | tee -a "$results"; then
    for backend in cuda cpu32; do
      echo "-- --calib-backend $backend" | tee -a "$results"
      timeout 120 "$bin/txl" quantize "$demo/demo.txl" -o "$demo/$backend.txl" --method compensated \
        --calib-bytes tests/fixtures/demo/calib.txt --calib-limit 4096 --calib-backend "$backend" \
        >"$demo/$backend.log" 2>&1 || status=1
      grep -E 'collected on|bits/token|^error' "$demo/$backend.log" | tee -a "$results"
    done
    grep -q 'collected on cuda' "$demo/cuda.log" || status=1
  else
    status=1
  fi
  section "$([ $status = 0 ] && echo PASSED || echo FAILED)"
  echo "results: $results"
  return $status
}

case "$mode" in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *)
    echo "usage: scripts/gpu-check.sh [build|run]" >&2
    exit 2
    ;;
esac
