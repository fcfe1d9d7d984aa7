#!/usr/bin/env bash
# Regenerate tests/fixtures/tf: checkpoints of the original Transformer-XL TensorFlow code,
# written by TensorFlow, with log-probabilities from Hugging Face's TransfoXL reading them back
# (see make_tf_fixtures.py). Uses its own virtual environment (TensorFlow beside the
# reference's pins), created and filled here if missing.
#
#   VENV=/path/to/venv tools/reference/regenerate_tf.sh
#
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/txl-reference-tf-venv}"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating virtual environment in $venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
"$venv/bin/python" -m pip install --quiet -r "$here/requirements-tf.txt"

TF_CPP_MIN_LOG_LEVEL=2 exec "$venv/bin/python" "$here/make_tf_fixtures.py"
