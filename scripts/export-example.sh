#!/usr/bin/env bash
# Exports the bundled demo model with `txl export`, builds the standalone firmware in
# examples/export-demo/ (txl-core and the exported module, nothing else), runs it in QEMU
# (mps2-an386, Cortex-M4F) and checks that it prints `txl score --json`'s digest for the same
# image, tokens and options. Fails loudly on any difference.
#
#   scripts/export-example.sh [SESSION FLAGS...]
#   scripts/export-example.sh --code-table [FILE]
#
# SESSION FLAGS go to both `txl export` and `txl score` (e.g. --tgt-len 1 --mem-len 64
# --mem-dtype int8 --position-keys folded). The firmware is built with the txl-core features of
# that weight precision and memory dtype alone, and the script prints its `.text` bytes: txl's
# code in flash with the example's few lines, built for size (the example's profile;
# CARGO_PROFILE_RELEASE_OPT_LEVEL=3 in front builds it for speed). Variables:
# TXL_DTYPE=f32|f16|int8|int4 (default int8), TXL_TOKENS=N bytes of held-out text to score
# (default 256), TXL_BIN=path of a built `txl` (default: build it here, release).
#
# --code-table builds the example for each precision on each Arm instruction set it builds for
# (Armv7E-M with the DSP extension: Cortex-M4F, M7; Armv7-M: Cortex-M3; Armv6-M: Cortex-M0+),
# runs nothing, and writes the `.text` bytes as the table `txl fit` embeds
# (tools/src/cli/fit/code.tsv, or FILE).
#
# Needs the thumbv7em-none-eabihf target (and thumbv7m-none-eabi, thumbv6m-none-eabi for
# --code-table), qemu-system-arm and arm-none-eabi-size (scripts/test.sh installs them).
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

# The demo model in precision $1, written to $work; prints its path.
model_of() {
  "$txl" convert tests/fixtures/demo -o "$work/demo.txl" >/dev/null
  if [[ "$1" == f32 ]]; then
    echo "$work/demo.txl"
  else
    "$txl" quantize "$work/demo.txl" -o "$work/demo-$1.txl" --dtype "$1" >/dev/null 2>&1
    echo "$work/demo-$1.txl"
  fi
}

# The example's txl-core features for weights $1 and memory dtype $2.
features_of() {
  local features="weights-$1 memory-$2"
  # an int4 image keeps its embedding table (the tied output layer) in int8
  [[ "$1" == int4 ]] && features="$features weights-int8"
  echo "$features"
}

# .text bytes of the ELF $1.
text_of() {
  arm-none-eabi-size -A "$1" | awk '$1 == ".text" { print $2 }'
}

# The example's own .cargo/config.toml sets the target and the QEMU runner; a RUSTFLAGS from
# outside would replace its link arguments, so it is removed.
build() {
  (cd "$example" && env -u RUSTFLAGS -u CARGO_BUILD_TARGET cargo "$@")
}

if [[ "${1:-}" == --code-table ]]; then
  out=${2:-tools/src/cli/fit/code.tsv}
  head -c "$tokens" tests/fixtures/demo/heldout.txt > "$example/exported/tokens.bin"
  rows=""
  for weights in int8 int4 f16 f32; do
    "$txl" export "$(model_of "$weights")" --rust "$example/exported" >/dev/null
    for target in thumbv7em-none-eabihf thumbv7m-none-eabi thumbv6m-none-eabi; do
      features=$(features_of "$weights" f32)
      [[ "$target" == thumbv7em-none-eabihf ]] && features="dsp $features"
      build build --release --locked --target "$target" --no-default-features --features "$features" 2>/dev/null
      text=$(text_of "$example/target/$target/release/txl-export-demo")
      echo "$target $weights: .text $text bytes (features $features)"
      rows+="$target"$'\t'"$weights"$'\t'"$text"$'\n'
    done
  done
  {
    echo "# txl's code in flash for one weight precision: the .text bytes of examples/export-demo (the"
    echo "# demo model scored in segments, f32 memory, built for size with the txl-core features of that"
    echo "# precision alone, the DSP kernels on Armv7E-M), written by scripts/export-example.sh --code-table."
    echo "# target	weights	text_bytes"
    printf '%s' "$rows"
  } > "$out"
  echo "wrote $out"
  exit 0
fi

model=$(model_of "$dtype")
head -c "$tokens" tests/fixtures/demo/heldout.txt > "$example/exported/tokens.bin"
"$txl" export "$model" --rust "$example/exported" "$@"
expected=$("$txl" score "$model" --bytes "$example/exported/tokens.bin" --json "$@" |
  sed -n 's/.*"digest":"\(0x[0-9a-f]*\)".*/\1/p')
if [[ -z "$expected" ]]; then
  echo "error: txl score printed no digest" >&2
  exit 1
fi

mem_dtype=f32
previous=""
for arg in "$@"; do
  [[ "$previous" == --mem-dtype ]] && mem_dtype=$arg
  [[ "$arg" == --mem-dtype=* ]] && mem_dtype=${arg#--mem-dtype=}
  previous=$arg
done
features="dsp $(features_of "$dtype" "$mem_dtype")"
output=$(build run --release --locked --no-default-features --features "$features")
echo "$output"
line=$(grep '^score ' <<<"$output" || true)
got=$(sed -n 's/.*digest=\(0x[0-9a-f]*\).*/\1/p' <<<"$line")
if [[ "$got" != "$expected" ]]; then
  echo "error: the exported example printed digest '${got:-none}', txl score --json printed $expected" >&2
  exit 1
fi
text=$(text_of "$example/target/thumbv7em-none-eabihf/release/txl-export-demo")
echo "export example: digest $got, the same as txl score --json ($dtype, $tokens tokens${*:+, $*})"
echo "export example: .text $text bytes (features $features)"
