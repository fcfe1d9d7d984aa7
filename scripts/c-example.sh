#!/usr/bin/env bash
# Exports MODEL.txl with `txl export --c`, builds the C firmware in examples/c-firmware/ (its
# main.c, the exported model.h and model.c, and the txl static library of capi/ built for
# thumbv7em-none-eabihf) with arm-none-eabi-gcc, runs it in QEMU (mps2-an386, Cortex-M4F) and
# checks that it prints the digest and the bits per token `txl score --json` prints for the bytes
# of TOKENS (one token id per byte) with the same options. Fails loudly on any difference.
#
#   scripts/c-example.sh MODEL.txl TOKENS [SESSION FLAGS...]
#
# SESSION FLAGS go to both `txl export` and `txl score` (e.g. --tgt-len 1 --mem-len 64
# --mem-dtype int8); without them, the model's defaults. Variables: TXL_BIN=path of a built
# `txl` (default: build it here, release).
# Needs the thumbv7em-none-eabihf target, gcc-arm-none-eabi, libnewlib-arm-none-eabi and
# qemu-system-arm (scripts/test.sh installs them).
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 MODEL.txl TOKENS [SESSION FLAGS...]" >&2
  exit 2
fi
model=$(realpath "$1")
tokens=$(realpath "$2")
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
example="$root/examples/c-firmware"
mkdir -p "$example/exported"

if [[ -n "${TXL_BIN:-}" ]]; then
  txl="$TXL_BIN"
else
  cargo build --release --locked -p txl-tools --bin txl
  txl="$root/target/release/txl"
fi

"$txl" export "$model" --c "$example/exported" "$@"
cp "$tokens" "$example/exported/tokens.bin"
expected=$("$txl" score "$model" --bytes "$tokens" --json "$@")
expected_digest=$(sed -n 's/.*"digest":"\(0x[0-9a-f]*\)".*/\1/p' <<<"$expected")
expected_bits=$(sed -n 's/.*"bits_per_token":\([-0-9.e+]*\).*/\1/p' <<<"$expected")
if [[ -z "$expected_digest" || -z "$expected_bits" ]]; then
  echo "error: txl score printed no digest or bits per token: $expected" >&2
  exit 1
fi
expected_bits=$(printf '%.6f' "$expected_bits")

# The static library for the Cortex-M4F (the DSP extension's kernels). A RUSTFLAGS from outside
# would change how it is built, so it is removed.
(cd capi && env -u RUSTFLAGS -u CARGO_BUILD_TARGET -u CARGO_TARGET_DIR \
  cargo build --release --locked --target thumbv7em-none-eabihf --features cortex-m-dsp)
make -s -C "$example" build/firmware.elf
output=$(timeout 600 make -s -C "$example" run)
echo "$output"
line=$(grep '^score ' <<<"$output" || true)
got_digest=$(sed -n 's/.*digest=\(0x[0-9a-f]*\).*/\1/p' <<<"$line")
got_bits=$(sed -n 's/.*bits_per_token=\([0-9.]*\).*/\1/p' <<<"$line")
if [[ "$got_digest" != "$expected_digest" || "$got_bits" != "$expected_bits" ]]; then
  echo "error: the C example printed digest '${got_digest:-none}' and bits per token" \
    "'${got_bits:-none}'; txl score --json printed $expected_digest and $expected_bits" >&2
  exit 1
fi
echo "C example: digest $got_digest, bits per token $got_bits, the same as txl score --json" \
  "($(basename "$model"), $(wc -c <"$tokens") tokens${*:+, $*})"
