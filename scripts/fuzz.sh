#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers (fuzz/README.md): installs cargo-fuzz and the nightly
# toolchain if missing, builds every target of fuzz/ (AddressSanitizer, debug assertions, so an
# integer overflow panics too), then runs each one for SECONDS (default 10), as many side by
# side as the machine has cores, and fails if any crashes, leaks, hangs (an input over 10 s),
# allocates over 256 MB at once, or grows past 2 GB. About 2.5 minutes on a 2-core machine from a
# clean fuzz/target (fuzz/README.md).
# When every target runs, `image` and `integer_image` (model images as they come, and integer
# images edited) share one target's time: SECONDS/2 each.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Each target starts from its seeds (fuzz/corpus/<target>/, committed) and the inputs that
# once crashed it (fuzz/regressions/<target>/, committed): a regression that crashes again
# fails the run at once. New inputs go to fuzz/work/<target>/ and crashes to
# fuzz/artifacts/<target>/ (both ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-10}
shift || true
# Flags of the build and of every run (a run with other flags would build again).
build_flags=(--debug-assertions)
run_flags=(
  -rss_limit_mb=2048
  -malloc_limit_mb=256
  -timeout=10
  -print_final_stats=1
)

echo "== setup: nightly toolchain and cargo-fuzz"
if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version 0.13.2
fi

echo "== build"
cargo +nightly fuzz build "${build_flags[@]}"

# The targets that split one target's time between them when every target runs.
shared=(image integer_image)
if [ $# -gt 0 ]; then
  targets=("$@")
  shared=()
else
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

# run_target TARGET SECONDS: one target from its corpora; the exit status is libFuzzer's.
run_target() {
  local target=$1 run_seconds=$2 work=fuzz/work/$1
  mkdir -p "$work" "fuzz/corpus/$target"
  local corpora=("$work" "fuzz/corpus/$target")
  [ -d "fuzz/regressions/$target" ] && corpora+=("fuzz/regressions/$target")
  cargo +nightly fuzz run "${build_flags[@]}" "$target" "${corpora[@]}" -- -max_total_time="$run_seconds" "${run_flags[@]}"
}

# Each run uses one core: the targets run in as many lanes side by side as the machine has cores
# (TXL_FUZZ_LANES to choose), each lane its targets one after another, each run's output in a
# log of its own (fuzz/logs/, ignored by git) shown when every lane is done.
lanes=${TXL_FUZZ_LANES:-$(nproc 2>/dev/null || echo 1)}
[ "$lanes" -ge 1 ] || lanes=1
logs=fuzz/logs
mkdir -p "$logs"
total=0
declare -A seconds_of
for target in "${targets[@]}"; do
  run_seconds=$seconds
  if [[ " ${shared[*]} " == *" $target "* ]]; then
    run_seconds=$(((seconds + 1) / 2))
  fi
  seconds_of[$target]=$run_seconds
  total=$((total + run_seconds))
  rm -f "$logs/$target.log" "$logs/$target.failed"
done
lane_pids=()
for ((lane = 0; lane < lanes; lane++)); do
  (
    for ((i = lane; i < ${#targets[@]}; i += lanes)); do
      target=${targets[$i]}
      echo "== fuzz $target for ${seconds_of[$target]}s (lane $lane)" >"$logs/$target.log"
      run_target "$target" "${seconds_of[$target]}" >>"$logs/$target.log" 2>&1 || : >"$logs/$target.failed"
    done
  ) &
  lane_pids+=($!)
done
wait "${lane_pids[@]}"
failed=()
for target in "${targets[@]}"; do
  cat "$logs/$target.log"
  [ -e "$logs/$target.failed" ] && failed+=("$target")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found crashes in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "== no crashes (${#targets[@]} targets, ${total}s of fuzzing in $lanes lanes)"
