#!/usr/bin/env bash
# GPU check: real sweeps of the built-in reference trainer on CUDA at emulated card sizes.
#
#   scripts/gpu_check.sh             on a machine with an NVIDIA GPU and PyTorch (no network needed)
#   scripts/gpu_check.sh --dry-run   anywhere: checks the plan and the Python environment only
#
# Options after those go to scripts/gpu_check.py (--sizes 24,48 --steps 20 --max-trials 7).
# Results, reports and a summary go to $OUT when it is set (else a temporary folder).
# Installs nothing from the network: wheels carried in ./.whl are installed into /tmp/site first.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# The whole check must end within 6 minutes; leave the script a margin to print its summary.
exec timeout --signal=INT --kill-after=15 345 "$PY" scripts/gpu_check.py "$@"
