#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what the tests need, then checks
# formatting, lints, docs, the Cortex-M build of the core, `cargo test`, Miri and
# AddressSanitizer on the core, and a short fuzzing run of every target. Ends with the list of
# the checks this machine skipped (a CPU without a kernel's extension, no GPU): they pass, but
# what they name was not checked here.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step prints the minutes and seconds since the start, so a slow step is easy to find.
step() { printf '== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# Every test that cannot check what it was written for on this machine (a CPU without a kernel's
# extension, no GPU) appends a line `<test>: <reason>` to the file TXL_SKIPS names
# (core/src/test_skips.rs). Exported, so every cargo test below writes to it, the scripts' too.
TXL_SKIPS="$PWD/target/test-skips.txt"
export TXL_SKIPS
mkdir -p target
: >"$TXL_SKIPS"

# skip_summary LEDGER: the last step, what this machine did not check: each skip, sorted, with
# how many times it was recorded. Skips do not fail the run.
skip_summary() {
  local ledger=$1 total=0 distinct=0
  if [ -s "$ledger" ]; then
    total=$(wc -l <"$ledger")
    distinct=$(sort -u "$ledger" | wc -l)
  fi
  if [ "$total" -eq 0 ]; then
    step "skipped checks: no check was skipped on this machine"
    return 0
  fi
  step "skipped checks: $total on this machine ($distinct different): what they name was NOT checked here"
  local rule='!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!'
  echo "$rule"
  sort "$ledger" | uniq -c | while read -r count line; do
    printf '%4d × %s\n' "$count" "$line"
  done
  echo "$rule"
  echo "   (from $ledger; skips pass: run these checks on a machine that has what they need)"
}

step "setup: Rust targets (the firmware's boards: Cortex-M4F/M7, M33/M55, RV32IMAC)"
for target in thumbv7em-none-eabihf thumbv8m.main-none-eabihf riscv32imac-unknown-none-elf thumbv7m-none-eabi thumbv6m-none-eabi; do
  if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
  fi
done
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed | grep -q '^clippy' || rustup component add clippy

step "setup: QEMU for the firmware tests (qemu-system-arm; qemu-system-riscv32 is in qemu-system-misc), arm-none-eabi-gcc, newlib and make for the C example, c++"
packages=()
command -v qemu-system-arm >/dev/null 2>&1 || packages+=(qemu-system-arm)
command -v qemu-system-riscv32 >/dev/null 2>&1 || packages+=(qemu-system-misc)
command -v arm-none-eabi-gcc >/dev/null 2>&1 || packages+=(gcc-arm-none-eabi)
[ -e /usr/lib/arm-none-eabi/lib/librdimon.a ] || packages+=(libnewlib-arm-none-eabi)
command -v c++ >/dev/null 2>&1 || packages+=(g++) # the C API's test links a C++ program
command -v make >/dev/null 2>&1 || packages+=(make)
if [ ${#packages[@]} -gt 0 ]; then
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${packages[@]}"
fi

step "cargo fmt --check"
cargo fmt --all -- --check
(cd fuzz && cargo fmt -- --check)

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

step "txl-core for thumbv7em-none-eabihf (no_std, no alloc)"
cargo build --release -p txl-core --target thumbv7em-none-eabihf --locked
cargo build --release -p txl-core --target thumbv7em-none-eabihf --locked --features fast-math
echo "   one weight precision and memory dtype (the rest left out): builds, lints, and refuses the rest"
cargo build --release -p txl-core --target thumbv7em-none-eabihf --locked --no-default-features --features "weights-int8 memory-f32"
cargo clippy -p txl-core --locked --no-default-features --features "weights-int8 memory-f32" -- -D warnings
cargo test -p txl-core --locked --no-default-features --features "weights-int8 memory-f32 alloc" --test left_out

step "firmware: fmt, clippy (every target, with a board of it), the QEMU runner's tests"
(cd firmware && cargo fmt -- --check && cargo clippy --release --locked -- -D warnings)
(cd firmware && TXL_BOARD=mps3-an547 cargo clippy --release --locked --target thumbv8m.main-none-eabihf --features mve -- -D warnings)
(cd firmware && TXL_BOARD=riscv32-virt cargo clippy --release --locked --target riscv32imac-unknown-none-elf -- -D warnings)
(cd firmware && TXL_BOARD=mps2-an385 cargo clippy --release --locked --target thumbv7m-none-eabi -- -D warnings)
(cd firmware && TXL_BOARD=mps2-an385-v6m cargo clippy --release --locked --target thumbv6m-none-eabi -- -D warnings)
(cd firmware/host && cargo clippy --all-targets --locked -- -D warnings && cargo test --locked)

step "cargo test"
cargo test --workspace --locked

step "aarch64 Linux under QEMU user mode: the core's tests (NEON; SDOT and SMULL) and the demo model's digests"
scripts/aarch64.sh

step "the txl export example: fmt and clippy (its own crate; cargo test above exported the demo"
echo "   model into it with scripts/export-example.sh and ran it in QEMU)"
(cd examples/export-demo && cargo fmt -- --check && cargo clippy --release --locked -- -D warnings)
cargo test -p txl-core --features fast-math --locked
cargo test -p txl-tests --features txl-core/fast-math --locked --test fast_math

step "the C API: fmt and clippy (its own crate; cargo test above built it, ran its C tests under"
echo "   AddressSanitizer and UndefinedBehaviorSanitizer and its example in QEMU with scripts/c-example.sh)"
(cd capi && cargo fmt -- --check && cargo clippy --release --locked --target thumbv7em-none-eabihf --features cortex-m-dsp -- -D warnings)

step "Miri: the core's unsafe code under the interpreter (nightly; catches undefined behaviour)"
if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! rustup component list --toolchain nightly --installed | grep -q '^miri'; then
  rustup component add miri rust-src --toolchain nightly
fi
# The core's `unsafe` is its kernels (and the host's aligned buffer): Miri runs the core's unit
# tests (every kernel against the portable one) and whole sessions (state saved and restored,
# every position-key mode, several positions a pass) with `std`, so the kernels
# are chosen at run time as on a host. On x86-64 the extensions Miri interprets are enabled at
# compile time (it reports those as the CPU's): AVX2, FMA and F16C; the AVX-512 float, VNNI
# panel and AMX kernels need instructions it cannot run, and are recorded as skipped. An `asm!`
# block (the six-row blocks' loop) runs as the same loads and sums in intrinsics under
# `cfg(miri)`. The interpreter runs on one core: built once, the tests run in two halves side by
# side, each half's output shown when both are done.
miri_flags=""
[ "$(uname -m)" = x86_64 ] && miri_flags="-Ctarget-feature=+avx2,+fma,+f16c"
# (isolation off: the skipped checks are appended to the file TXL_SKIPS names)
miri_test() {
  RUSTFLAGS="$miri_flags" MIRIFLAGS="-Zmiri-disable-isolation" \
    cargo +nightly miri test -p txl-core --features std --locked "$@"
}
miri_sessions=(--test session_state --test position_keys --test positions_per_pass)
# Of AVX-512, Miri interprets VPDPBUSD and the lane moves of the tile transpose but not the float
# kernels' masked compares: with AVX-512 VNNI enabled too (in a target directory of its own), the
# tests of those kernels.
miri_vnni() {
  [ "$(uname -m)" = x86_64 ] || return 0
  RUSTFLAGS="$miri_flags,+avx512vnni,+avx512vl" MIRIFLAGS="-Zmiri-disable-isolation" \
    cargo +nightly miri test -p txl-core --features std --locked --target-dir target/miri-vnni \
    --lib "$@" -- kernels::x86_64::vnni:: kernels::x86_64::avx512::tests::the_transpose
}
miri_test --lib "${miri_sessions[@]}" --no-run
miri_vnni --no-run
miri_logs=target/miri-logs
mkdir -p "$miri_logs"
# (the kernels' unit tests beside the whole sessions)
{ miri_test --lib && miri_vnni; } >"$miri_logs/a.log" 2>&1 &
miri_a=$!
miri_test "${miri_sessions[@]}" >"$miri_logs/b.log" 2>&1 &
miri_b=$!
miri_failed=0
wait "$miri_a" || miri_failed=1
wait "$miri_b" || miri_failed=1
cat "$miri_logs/a.log" "$miri_logs/b.log"
[ "$miri_failed" -eq 0 ] || { echo "Miri found a failure (above)" >&2; exit 1; }

if [ "$(uname -m)" = x86_64 ]; then
  step "AddressSanitizer: the core's tests with its AVX2 kernel chosen at run time (nightly)"
  RUSTFLAGS="-Zsanitizer=address" cargo +nightly test -p txl-core --features std --locked \
    --target x86_64-unknown-linux-gnu --target-dir target/asan --lib --tests
fi

step "fuzzing: every cargo-fuzz target for 10 s (image and integer_image 5 s each) from its seeds and regressions (fuzz/README.md)"
scripts/fuzz.sh 10

step "NVRTC for the CUDA kernels' compile test (a PyPI wheel; needs no GPU and no CUDA)"
nvrtc_lib=target/nvrtc/nvidia/cu13/lib
if [ ! -e "$nvrtc_lib/libnvrtc.so.13" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --upgrade --target target/nvrtc nvidia-cuda-nvrtc==13.0.88
fi

step "txl-host-gpu: the CUDA kernels compile with NVRTC"
LD_LIBRARY_PATH="$PWD/$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  cargo test -p txl-tests --locked --test reference_cuda -- --ignored nvrtc_compiles_every_kernel
step "done: every check passed"
skip_summary "$TXL_SKIPS"
