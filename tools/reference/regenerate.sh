#!/usr/bin/env bash
# Regenerate tests/fixtures: create a virtual environment (once), install the
# pinned requirements, run make_fixtures.py, then make_compare_fixture.py
# (tests/fixtures/compare, what `txl compare` must report, from the random
# model adaptive_div2), pytorch_quantization.py (PyTorch's quantization
# baseline on the demo model), make_second_model.py
# --reuse and its baseline (the second trained model, tests/fixtures/second),
# make_word_model.py --reuse (the trained word-level model, tests/fixtures/kjv-words: its
# weights kept, everything else rewritten; without --reuse it trains for about 15 minutes),
# make_vocab_fixtures.py, then make_original_fixtures.py (tests/fixtures/original, from the weights just
# written; regenerate_original.sh runs that step alone).  Extra arguments are
# passed on to make_fixtures.py (e.g. --reuse-demo to skip retraining the demo
# model).
#
#   VENV=/path/to/venv tools/reference/regenerate.sh
#
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/txl-reference-venv}"
python="${PYTHON:-python3}"

# (--only leaves the demo model alone and needs no training text.)
if ! command -v bible >/dev/null 2>&1 && [[ " $* " != *" --corpus "* && " $* " != *" --only "* ]]; then
    echo "error: the 'bible' program (Debian package bible-kjv) provides the training text:" >&2
    echo "       sudo apt-get install bible-kjv" >&2
    exit 1
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating virtual environment in $venv"
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r "$here/requirements.txt"

"$venv/bin/python" "$here/make_fixtures.py" "$@"
"$venv/bin/python" "$here/make_compare_fixture.py"
"$venv/bin/python" "$here/pytorch_quantization.py"
"$venv/bin/python" "$here/make_second_model.py" --reuse
"$venv/bin/python" "$here/pytorch_quantization.py" --model second
# (Its text comes from `bible` too; a run with --corpus or --only may lack it.)
if command -v bible >/dev/null 2>&1; then
    "$venv/bin/python" "$here/make_word_model.py" --reuse
else
    echo "note: make_word_model.py skipped: the 'bible' program (bible-kjv) provides its text" >&2
fi
"$venv/bin/python" "$here/make_vocab_fixtures.py"
exec "$venv/bin/python" "$here/make_original_fixtures.py"
