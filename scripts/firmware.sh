#!/usr/bin/env bash
# Builds the firmware for one board, runs it in QEMU and prints its log; see --help.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The firmware's build reads TXL_MODEL and TXL_TOKENS from firmware/: a relative path that
# names a file here is made absolute first, so it means what it says where the script was run.
for var in TXL_MODEL TXL_TOKENS; do
  value=${!var:-}
  if [[ -n "$value" && "$value" != /* && -e "$value" ]]; then
    export "$var=$PWD/$value"
  fi
done
runner="$root/firmware/host/qemu-run"

usage() {
  cat <<'EOF'
usage: scripts/firmware.sh BOARD [-- ARGS...]
       scripts/firmware.sh --table [BOARD...]
       scripts/firmware.sh --boards

Builds txl-firmware for BOARD (release, with the build variables of firmware/README.md:
TXL_MODEL, TXL_DTYPE, TXL_TOKENS, TXL_TGT_LEN, TXL_MEM_LEN, TXL_CLAMP_LEN, TXL_SAME_LENGTH,
TXL_MEM_INIT, TXL_MEM_DTYPE, TXL_POSITION_KEYS), runs it in the board's QEMU machine and prints
the firmware's log. ARGS are the firmware's own (default `score`, which ends with
`score tokens=N bits_per_token=X digest=0x... instructions_per_token=Y`, and on the boards
without an FPU `soft_float_calls=S soft_float_calls_per_token=Z`); the exit code is the
firmware's.

BOARD is one of:
  mps2-an386      Cortex-M4F  (Arm MPS2 AN386, the default board of `cargo run` in firmware/)
  mps2-an500      Cortex-M7   (Arm MPS2 AN500)
  mps2-an505      Cortex-M33  (Arm MPS2 AN505)
  mps3-an547      Cortex-M55  (Arm MPS3 AN547)
  mps2-an385      Cortex-M3   (Arm MPS2 AN385; no DSP extension, no FPU)
  mps2-an385-v6m  Armv6-M     (the AN385's Cortex-M3 running a thumbv6m build: Cortex-M0/M0+ code)
  riscv32-virt    RV32IMAC    (QEMU's RISC-V virt machine)
  stm32f405       Cortex-M4F  (QEMU's netduinoplus2: an STM32F405RG, 1 MiB flash, 128 KiB of its SRAM)

--table [BOARD...]  builds the bundled demo model in int8, int4, f16 and f32, and as an integer
                    image (int8 weights, `txl convert --integer` calibrated on calib.txt, int8
                    memory), for each board (all by default), scores the default tokens and prints
                    docs/MICROCONTROLLERS.md's tables, one per board: image bytes, arena bytes,
                    instructions per token and per MAC (and on the boards without an FPU the calls
                    into software floating point per token). On the stm32f405 (128 KiB of RAM):
                    tests/fixtures/second in int4, streaming (tgt_len 1, mem_len 64, int8 memory,
                    folded position keys), on its first 256 held-out bytes. Also writes the
                    same figures and each build's code bytes to tools/src/cli/fit/cores.tsv
                    (TXL_TABLE_TSV=FILE: elsewhere), which `txl fit` embeds: the rows of the
                    boards run replace theirs. TXL_TABLE_IMAGES=DIR takes the images from DIR
                    (demo-integer.txl, second-int4.txl: what `txl convert` makes) instead of
                    converting them.
--boards            lists the boards: name, Rust target, core and the firmware features its build
                    turns on (from firmware/src/board.rs).

Examples:
  scripts/firmware.sh mps2-an505
  TXL_DTYPE=f32 scripts/firmware.sh riscv32-virt
  scripts/firmware.sh mps3-an547 -- demo --prompt "And God said"

Needs the board's Rust target and QEMU (scripts/test.sh installs them).
EOF
}

# The board's Rust target, from the runner (which reads firmware/src/board.rs).
target_of() {
  local target
  target=$("$runner" --boards | awk -v board="$1" '$1 == board { print $2 }')
  if [ -z "$target" ]; then
    echo "scripts/firmware.sh: unknown board '$1' (see --help)" >&2
    exit 2
  fi
  echo "$target"
}

# The firmware's cargo features board $1 turns on, as cargo arguments (none for most boards).
features_of() {
  "$runner" --boards | awk -v board="$1" '$1 == board && $4 != "-" { print "--features " $4 }'
}

# Builds and runs the firmware for board $1 with arguments $2...
run_board() {
  local board=$1 target features
  shift
  target=$(target_of "$board")
  features=$(features_of "$board")
  # A RUSTFLAGS variable would replace the firmware's own flags (firmware/.cargo/config.toml).
  cd "$root/firmware"
  env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS -u CARGO_BUILD_RUSTFLAGS -u CARGO_BUILD_TARGET \
    TXL_BOARD="$board" cargo run --quiet --release --locked --target "$target" $features -- "$@"
}

# The flash the code and constants of board $1's last build take (txl-qemu --code-bytes).
code_bytes_of() {
  "$runner" --code-bytes "$root/firmware/target/$(target_of "$1")/release/txl-firmware"
}

# Prints board $1's table: one row per precision of the demo model (on the stm32f405, whose
# 128 KiB of RAM the demo's default arena does not fit, the second model in int4, streaming).
# Adds the machine-readable rows to $tsv_rows.
board_table() {
  local board=$1 core dtype log image arena per_token per_mac
  # The demo model with default options, whatever the caller's environment says.
  unset TXL_MODEL TXL_TOKENS TXL_TGT_LEN TXL_MEM_LEN TXL_CLAMP_LEN TXL_SAME_LENGTH TXL_MEM_INIT \
    TXL_MEM_DTYPE TXL_POSITION_KEYS
  core=$("$runner" --boards | awk -v board="$board" '$1 == board { print $3 }')
  local rows="" soft_float="" calls command dtypes=(int8 int4 f16 f32 integer) tgt_len=64
  [ "$board" != stm32f405 ] || { dtypes=(int4); tgt_len=1; }
  for dtype in "${dtypes[@]}"; do
    if [ "$board" = stm32f405 ]; then
      log=$(TXL_MODEL="$second_image" TXL_TOKENS="$second_tokens" TXL_TGT_LEN=1 TXL_MEM_LEN=64 \
        TXL_MEM_DTYPE=int8 TXL_POSITION_KEYS=folded run_board "$board" score)
      command="TXL_MODEL=second-int4.txl TXL_TOKENS=second-heldout-256.bin TXL_TGT_LEN=1 TXL_MEM_LEN=64 TXL_MEM_DTYPE=int8 TXL_POSITION_KEYS=folded scripts/firmware.sh $board"
    elif [ "$dtype" = integer ]; then
      log=$(TXL_MODEL="$integer_image" run_board "$board" score)
      command="TXL_MODEL=demo-integer.txl scripts/firmware.sh $board"
    else
      log=$(TXL_DTYPE=$dtype run_board "$board" score)
      command="TXL_DTYPE=$dtype scripts/firmware.sh $board"
    fi
    image=$(sed -n 's/.*: image \([0-9]*\) bytes.*/\1/p' <<<"$log")
    arena=$(sed -n 's/^arena bytes \([0-9]*\).*/\1/p' <<<"$log")
    per_token=$(sed -n 's/^score tokens=.*instructions_per_token=\([0-9]*\).*/\1/p' <<<"$log")
    per_mac=$(sed -n 's/^score macs_per_token=.*instructions_per_mac=\([0-9.]*\).*/\1/p' <<<"$log")
    # The boards without an FPU also count the calls into software floating point.
    calls=$(sed -n 's/^score tokens=.*soft_float_calls_per_token=\([0-9]*\).*/\1/p' <<<"$log")
    [ -z "$calls" ] || { soft_float=yes; calls=" $calls |"; }
    rows+="| $dtype | $image | $arena | $per_token | $per_mac |$calls \`$command\` |"$'\n'
    tsv_rows+="$board"$'\t'"$core"$'\t'"$dtype"$'\t'"$tgt_len"$'\t'"$image"$'\t'"$arena"$'\t'"$per_token"$'\t'"$per_mac"$'\t'"$(code_bytes_of "$board")"$'\n'
  done
  echo "#### $board ($core)"
  echo
  if [ -n "$soft_float" ]; then
    echo "| weights | image bytes | arena bytes | instructions / token | instructions / MAC | soft-float calls / token | command |"
    echo "|---|---:|---:|---:|---:|---:|---|"
  else
    echo "| weights | image bytes | arena bytes | instructions / token | instructions / MAC | command |"
    echo "|---|---:|---:|---:|---:|---|"
  fi
  printf '%s\n' "$rows"
}

case "${1:-}" in
  "" | -h | --help)
    usage
    [ -n "${1:-}" ] || exit 2
    ;;
  --boards)
    "$runner" --boards
    ;;
  --table)
    shift
    boards=("$@")
    [ ${#boards[@]} -gt 0 ] || mapfile -t boards < <("$runner" --boards | awk '{ print $1 }')
    # The images the boards need, converted by `txl convert` into target/firmware-table/, or
    # taken from the folder TXL_TABLE_IMAGES names (the same files, converted already): the
    # integer image, as `txl convert --integer` makes it (docs/INTEGER.md), for every board but
    # the stm32f405, and the second model in int4 for the stm32f405.
    images=${TXL_TABLE_IMAGES:-$root/target/firmware-table}
    mkdir -p "$root/target/firmware-table"
    integer_image="$images/demo-integer.txl"
    second_image="$images/second-int4.txl"
    second_tokens="$root/target/firmware-table/second-heldout-256.bin"
    head -c 256 "$root/tests/fixtures/second/heldout.txt" >"$second_tokens"
    convert() {
      [ -z "${TXL_TABLE_IMAGES:-}" ] || return 0
      (cd "$root" && cargo run --quiet --release --locked -p txl-tools --bin txl -- convert "$@" >&2)
    }
    if printf '%s\n' "${boards[@]}" | grep -qvx stm32f405; then
      convert tests/fixtures/demo --dtype int8 --integer --calib-bytes tests/fixtures/demo/calib.txt \
        -o "$integer_image"
    fi
    if printf '%s\n' "${boards[@]}" | grep -qx stm32f405; then
      convert tests/fixtures/second --dtype int4 -o "$second_image"
    fi
    tsv_rows=""
    for board in "${boards[@]}"; do
      board_table "$board"
    done
    # The same figures for `txl fit`, which embeds the file: the rows of the boards run here
    # replace theirs, the others stay.
    tsv=${TXL_TABLE_TSV:-$root/tools/src/cli/fit/cores.tsv}
    {
      [ -f "$tsv" ] && grep '^#' "$tsv" || true
      [ -f "$tsv" ] && grep -v '^#' "$tsv" | awk -F'\t' -v run=" ${boards[*]} " 'index(run, " " $1 " ") == 0' || true
      printf '%s' "$tsv_rows"
    } >"$tsv.new"
    mv "$tsv.new" "$tsv"
    echo "wrote $tsv" >&2
    ;;
  -*)
    echo "scripts/firmware.sh: unknown option '$1' (see --help)" >&2
    exit 2
    ;;
  *)
    board=$1
    shift
    if [ $# -gt 0 ]; then
      [ "$1" = "--" ] || { echo "scripts/firmware.sh: put the firmware's arguments after -- (see --help)" >&2; exit 2; }
      shift
    fi
    run_board "$board" "$@"
    ;;
esac
