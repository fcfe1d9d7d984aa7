#!/usr/bin/env bash
# txl on aarch64 Linux (Raspberry Pi-class boards), emulated: cross-builds for
# aarch64-unknown-linux-gnu and runs under QEMU user mode
#   1. txl-core's tests (the NEON kernels against the portable ones, whole sessions), on QEMU's
#      default CPU (NEON and the dot-product extension: SDOT) and on a Cortex-A53 (NEON without
#      it: SMULL), so both int8 paths of the run-time choice run;
#   2. the core's scoring (`core/examples/score.rs`, what `txl score` computes) of the bundled
#      demo model in f32, f16, int8 and int4, and f32 with `--fast-f32`, in segments and
#      streaming, whose digests must be the x86-64 host's (and, but for `--fast-f32`, the
#      firmware's): those in `scripts/aarch64-digests.txt`, which `tools/tests/demo_digests.rs`
#      checks on the host with `txl score`. The images are converted on the host by `txl`
#      (TXL_BIN, or the workspace's build in the test profile).
# Installs what it needs first (the Rust target; Debian's gcc-aarch64-linux-gnu and qemu-user).
# Fails on any test failure or digest mismatch. A few minutes, most of it the cross build. The
# tests' skips (SDOT on the Cortex-A53) go to the file $TXL_SKIPS names, as scripts/test.sh sets it.
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu

echo "== setup: Rust target $target, cross linker and QEMU user mode"
if ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target"
fi
packages=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || packages+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null 2>&1 || packages+=(qemu-user)
if [ ${#packages[@]} -gt 0 ]; then
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${packages[@]}"
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $sysroot"

echo "== txl-core's tests on aarch64, QEMU's default CPU (NEON, SDOT)"
cargo test -p txl-core --features std --target "$target" --locked
echo "== txl-core's tests on aarch64, Cortex-A53 (NEON without the dot-product extension)"
QEMU_CPU=cortex-a53 cargo test -p txl-core --features std --target "$target" --locked

echo "== the core's scoring on aarch64: the demo model's digests"
cargo build --release -p txl-core --features std --example score --target "$target" --locked
if [[ -n "${TXL_BIN:-}" ]]; then
  txl=$TXL_BIN
else
  # the test profile's build: the one `cargo test` made already
  cargo build --locked --profile test -p txl-tools --bin txl
  txl=target/debug/txl
fi
dir=target/aarch64-check
mkdir -p "$dir"
"$txl" convert tests/fixtures/demo -o "$dir/demo.txl" >/dev/null 2>&1
"$txl" convert tests/fixtures/demo -o "$dir/demo-f16.txl" --dtype f16 >/dev/null 2>&1
"$txl" quantize "$dir/demo.txl" -o "$dir/demo-int8.txl" --smooth off >/dev/null 2>&1
"$txl" quantize "$dir/demo.txl" -o "$dir/demo-int4.txl" --dtype int4 --smooth off >/dev/null 2>&1
head -c 256 tests/fixtures/demo/heldout.txt > "$dir/tokens.bin"

failed=0
check() { # check EXPECTED CPU MODEL [FLAGS...]
  local expected=$1 cpu=$2 model=$3
  shift 3
  local got
  got=$(QEMU_CPU=$cpu qemu-aarch64 -L "$sysroot" "target/$target/release/examples/score" \
    "$dir/$model" "$dir/tokens.bin" "$@" | sed -n 's/^digest \(0x[0-9a-f]*\) .*/\1/p')
  if [ "$got" = "$expected" ]; then
    echo "ok   $model $* (QEMU CPU $cpu): $got"
  else
    echo "FAIL $model $* (QEMU CPU $cpu): digest $got, expected $expected (the x86-64 host's)"
    failed=1
  fi
}
# the expected digests, the x86-64 host's (tools/tests/demo_digests.rs checks them there)
expected=()
while read -r line; do
  case $line in '' | '#'*) continue ;; esac
  expected+=("$line")
done < scripts/aarch64-digests.txt
if [ ${#expected[@]} -eq 0 ]; then
  echo "aarch64: no digests in scripts/aarch64-digests.txt" >&2
  exit 1
fi
for cpu in max cortex-a53; do
  for streaming in "" "--tgt-len 1"; do
    for line in "${expected[@]}"; do
      # shellcheck disable=SC2086 # the fields and flags are words
      set -- $line # NAME DIGEST MODEL [FLAGS...]
      digest=$2 model=$3
      shift 3
      # shellcheck disable=SC2086
      check "$digest" "$cpu" "$model" "$@" $streaming
    done
  done
done
if [ "$failed" -ne 0 ]; then
  echo "aarch64: digest mismatch" >&2
  exit 1
fi
echo "aarch64: every digest is the host's"
