#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers (fuzz/README.md): installs cargo-fuzz and the nightly
# toolchain if missing, builds every target of fuzz/ (AddressSanitizer, debug assertions, so an
# integer overflow panics too), then runs each one for SECONDS (default 20) and fails if any
# crashes, leaks, hangs (an input over 10 s), allocates over 256 MB at once, or grows past
# 2 GB. About 5 minutes on a 2-core machine from a clean fuzz/target (fuzz/README.md).
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

seconds=${1:-20}
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

failed=()
total=0
for target in "${targets[@]}"; do
  run_seconds=$seconds
  if [[ " ${shared[*]} " == *" $target "* ]]; then
    run_seconds=$(((seconds + 1) / 2))
  fi
  total=$((total + run_seconds))
  echo "== fuzz $target for ${run_seconds}s"
  work=fuzz/work/$target
  mkdir -p "$work" "fuzz/corpus/$target"
  corpora=("$work" "fuzz/corpus/$target")
  [ -d "fuzz/regressions/$target" ] && corpora+=("fuzz/regressions/$target")
  if ! cargo +nightly fuzz run "${build_flags[@]}" "$target" "${corpora[@]}" -- -max_total_time="$run_seconds" "${run_flags[@]}"; then
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found crashes in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "== no crashes (${#targets[@]} targets, ${total}s)"
