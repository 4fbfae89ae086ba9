#!/bin/sh
# `make gpu-check`: gpumon against the real GPUs of this machine and the reference workloads
# (bench/gpu_check/__main__.py says what it does; at most ~5 minutes on one GPU).
# Results go to $GPU_CHECK_OUT, else $OUT, else bench/results/: gpu-check.md and gpu-check/.
# GPU_CHECK_CPU=1 runs the whole script without a GPU (workloads on the CPU under --sim).
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# A Python that has torch and pynvml: $PYTHON, else the venv, else the system one.
pick() {
    for cand in "$@"; do
        [ -n "$cand" ] || continue
        command -v "$cand" >/dev/null 2>&1 || [ -x "$cand" ] || continue
        if "$cand" -c "import torch, pynvml, psutil, numpy" >/dev/null 2>&1; then
            echo "$cand"; return 0
        fi
    done
    return 1
}
PY=$(pick "${PYTHON:-}" "$ROOT/.venv/bin/python" python3 python) || {
    PY=${PYTHON:-python3}
    [ -x "$ROOT/.venv/bin/python" ] && PY="$ROOT/.venv/bin/python"
    echo "gpu-check: no Python with torch, pynvml, psutil and numpy found; using $PY (workload steps will fail)" >&2
}
export GPU_CHECK_PYTHON="$PY"
exec "$PY" -m bench.gpu_check "$@"
