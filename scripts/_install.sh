# Sourced by demo.sh and test.sh: install torch first (unless a usable one is there), then us.
set -euo pipefail
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch, sys; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(v < (2, 4))' 2>/dev/null; then
    # Pinned: on this project's machines the registry serves 2.13.0 as a CPU build; an
    # unpinned torch would pull several GB of CUDA wheels. Keep your own CUDA torch elsewhere.
    "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[$1]"
