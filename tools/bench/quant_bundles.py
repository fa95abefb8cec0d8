"""fp32 / int8 / int4 MiniLM bundles for the native-runtime benchmarks (memory.py, native_quant.py).

The fp32 bundle is what ``edgenlp export MODEL --format pte`` writes. Each
quantized variant is that bundle with ``model.pte`` replaced by the same model
lowered through runtime/tests/quant_programs.py (same buckets, same method
names), and its manifest's files/sizes refreshed:

* ``int8``: int8 dynamic-activation x per-channel int8 linears (PT2E, XNNPACK) + per-row int8 word embeddings;
* ``int4``: int8 dynamic-activation x int4 groupwise (32) linears (torchao, XNNPACK) + per-row int4 word embeddings.

These stand in for ``edgenlp quantize`` bundles until that exists; only the
runtime's cost is measured with them, not accuracy. Bundles already present
in ``--bundles-dir`` are reused.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edgenlp.utils import isa_flags  # noqa: E402,F401  (re-exported for memory.py and native_quant.py)
from tools.bench.harness import fresh_process  # noqa: E402

log = logging.getLogger("bench.quant_bundles")

VARIANTS = {
    "fp32": {},
    "int8": {"linears": "int8", "embeddings": 8},
    "int4": {"linears": "int4", "embeddings": 4},
}


def _export_fp32(model: str, task: str, buckets: str, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "edgenlp.cli", "export", model, "--task", task, "--format", "pte",
           "--seq-len", buckets.split(",")[-1], "--buckets", buckets, "--out", str(out)]
    log.info("%s", " ".join(cmd))
    subprocess.run(cmd, check=True, env=env, cwd=REPO)


def _derive(fp32: Path, out: Path, model: str, *, linears: str, embeddings: int) -> None:
    """Lower the quantized variant in a fresh process (tools/bench/workers.py ``derive_bundle``)."""
    fresh_process("derive_bundle", {"fp32": str(fp32), "out": str(out), "model": model, "linears": linears,
                                    "embeddings": embeddings}, env={"HF_HUB_OFFLINE": "1"})


def build_bundles(root: Path, *, model: str = "minilm-l6", task: str = "sst2", buckets: str = "16,32,64,128",
                  variants=tuple(VARIANTS)) -> dict[str, Path]:
    """``{variant: bundle dir}`` under ``root``, building what is missing."""
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    fp32 = root / "fp32"
    if not (fp32 / "manifest.json").is_file():
        _export_fp32(model, task, buckets, fp32)
    for name in variants:
        path = root / name
        if name != "fp32" and not (path / "manifest.json").is_file():
            log.info("lowering %s", name)
            _derive(fp32, path, model, **VARIANTS[name])
        out[name] = path
    return out


def native_run(arch: str = "x86_64") -> Path:
    run = REPO / "runtime" / "build" / arch / "edgenlp-run"
    if not run.is_file():
        raise SystemExit(f"{run} missing: run `bash runtime/build.sh`")
    return run
