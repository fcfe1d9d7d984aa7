#!/usr/bin/env bash
# Exports the bundled demo model with `txl export`, builds the standalone firmware in
# examples/export-demo/ (txl-core and the exported module, nothing else), runs it in QEMU
# (mps2-an386, Cortex-M4F) and checks that it prints `txl score --json`'s digest for the same
# image, tokens and options. Fails loudly on any difference.
#
#   scripts/export-example.sh [SESSION FLAGS...]
#
# SESSION FLAGS go to both `txl export` and `txl score` (e.g. --tgt-len 1 --mem-len 64
# --mem-dtype int8 --position-keys folded). The firmware is built with the txl-core features of
# that weight precision and memory dtype alone, and the script prints its `.text` bytes (txl's
# code in flash with the example's few lines; CARGO_PROFILE_RELEASE_OPT_LEVEL=s builds it for
# size). Variables: TXL_DTYPE=f32|f16|int8|int4 (default int8),
# TXL_TOKENS=N bytes of held-out text to score (default 256), TXL_BIN=path of a built `txl`
# (default: build it here, release).
# Needs the thumbv7em-none-eabihf target and qemu-system-arm (scripts/test.sh installs them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dtype=${TXL_DTYPE:-int8}
tokens=${TXL_TOKENS:-256}
work="$root/target/export-example"
example="$root/examples/export-demo"
mkdir -p "$work" "$example/exported"

if [[ -n "${TXL_BIN:-}" ]]; then
  txl="$TXL_BIN"
else
  cargo build --release --locked -p txl-tools --bin txl
  txl="$root/target/release/txl"
fi

"$txl" convert tests/fixtures/demo -o "$work/demo.txl"
model="$work/demo.txl"
if [[ "$dtype" != f32 ]]; then
  "$txl" quantize "$work/demo.txl" -o "$work/demo-$dtype.txl" --dtype "$dtype" 2>/dev/null
  model="$work/demo-$dtype.txl"
fi
head -c "$tokens" tests/fixtures/demo/heldout.txt > "$example/exported/tokens.bin"
"$txl" export "$model" --rust "$example/exported" "$@"
expected=$("$txl" score "$model" --bytes "$example/exported/tokens.bin" --json "$@" |
  sed -n 's/.*"digest":"\(0x[0-9a-f]*\)".*/\1/p')
if [[ -z "$expected" ]]; then
  echo "error: txl score printed no digest" >&2
  exit 1
fi

# The example's own .cargo/config.toml sets the target and the QEMU runner; a RUSTFLAGS from
# outside would replace its link arguments, so it is removed.
mem_dtype=f32
previous=""
for arg in "$@"; do
  [[ "$previous" == --mem-dtype ]] && mem_dtype=$arg
  [[ "$arg" == --mem-dtype=* ]] && mem_dtype=${arg#--mem-dtype=}
  previous=$arg
done
features="weights-$dtype memory-$mem_dtype"
# an int4 image keeps its embedding table (the tied output layer) in int8
[[ "$dtype" == int4 ]] && features="$features weights-int8"
output=$(cd "$example" && env -u RUSTFLAGS -u CARGO_BUILD_TARGET \
  cargo run --release --locked --no-default-features --features "$features")
echo "$output"
line=$(grep '^score ' <<<"$output" || true)
got=$(sed -n 's/.*digest=\(0x[0-9a-f]*\).*/\1/p' <<<"$line")
if [[ "$got" != "$expected" ]]; then
  echo "error: the exported example printed digest '${got:-none}', txl score --json printed $expected" >&2
  exit 1
fi
elf="$example/target/thumbv7em-none-eabihf/release/txl-export-demo"
text=$(arm-none-eabi-size -A "$elf" | awk '$1 == ".text" { print $2 }')
echo "export example: digest $got, the same as txl score --json ($dtype, $tokens tokens${*:+, $*})"
echo "export example: .text $text bytes (features $features)"
