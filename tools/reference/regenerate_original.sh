#!/usr/bin/env bash
# Regenerate tests/fixtures/original: checkpoints in the original Transformer-XL training
# code's layout, made from the Hugging Face fixtures' weights (see make_original_fixtures.py).
# Uses the same virtual environment as regenerate.sh (created and filled here if missing).
#
#   VENV=/path/to/venv tools/reference/regenerate_original.sh
#
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/txl-reference-venv}"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating virtual environment in $venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
"$venv/bin/python" -m pip install --quiet -r "$here/requirements.txt"

exec "$venv/bin/python" "$here/make_original_fixtures.py"
