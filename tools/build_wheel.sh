#!/usr/bin/env bash
# Build the distributable wheel: dist/edgenlp-<version>-py3-none-linux_<arch>.whl, with libedgenlp,
# the ExecuTorch libraries it needs and edgenlp-run inside (edgenlp/_native/), built by the
# scikit-build-core backend from the [tool.scikit-build] settings of pyproject.toml.
#
#   bash tools/build_wheel.sh          # prints the wheel's path last
#
# The ExecuTorch headers and libraries come from the executorch wheel installed beside $PYTHON
# (default .venv/bin/python), so the backend runs in that environment (no build isolation, as
# `pip wheel --no-build-isolation` would): nothing is downloaded except scikit-build-core itself
# when that environment lacks it. The editable development install (tools/setup.sh) is unchanged.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
if ! "$python" -c 'import scikit_build_core' 2>/dev/null; then
  echo "build_wheel.sh: installing scikit-build-core into $("$python" -c 'import sys; print(sys.prefix)')" >&2
  "$python" -m pip install -q 'scikit-build-core>=0.10,<2'
fi
et_root="$("$python" -c 'import executorch, os; print(list(executorch.__path__)[0])')"
mkdir -p dist
# PEP 517 build_wheel hook of the backend, in this environment; the wheel lands in dist/ whole.
"$python" - "$et_root" <<'PY'
import os
import sys
import tempfile
from pathlib import Path

from scikit_build_core.build import build_wheel

settings = {"cmake.define.EXECUTORCH_ROOT": sys.argv[1], "logging.level": "WARNING"}
with tempfile.TemporaryDirectory(dir="dist") as tmp:
    name = build_wheel(tmp, config_settings=settings)
    os.replace(Path(tmp) / name, Path("dist") / name)
print(Path("dist", name).resolve())
PY
