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

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from edgenlp.utils import isa_flags  # noqa: F401  (re-exported for memory.py and native_quant.py)

REPO = Path(__file__).resolve().parents[2]
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
    """Lower in a child process whose sys.path does not start with tools/bench (its profile.py shadows the stdlib's)."""
    code = ("import importlib.util, sys; sys.path.insert(0, 'runtime/tests'); "
            "spec = importlib.util.spec_from_file_location('quant_bundles', 'tools/bench/quant_bundles.py'); "
            "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); "
            "mod._derive_here(*sys.argv[1:4], linears=sys.argv[4], embeddings=int(sys.argv[5]))")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", code, str(fp32), str(out), model, linears, str(embeddings)],
                   check=True, env=env, cwd=REPO)


def _derive_here(fp32: str, out: str, model: str, *, linears: str, embeddings: int) -> None:
    import torch

    from quant_programs import lower, quantize_embedding

    from edgenlp.bundle import Bundle, finalize_manifest
    from edgenlp.export.graph import example_inputs, prepare
    from edgenlp.models.registry import load_model

    fp32, out = Path(fp32), Path(out)
    src = Bundle.open(fp32)
    m, _ = load_model(model, labels=src.labels, seed=0)
    m = prepare(m)
    quantize_embedding(m, "embeddings.word", bits=embeddings)
    inputs = {pm.name: example_inputs(pm.seq_len, vocab_size=m.shape.vocab_size) for pm in src.pte_methods}
    with torch.no_grad():
        pte = lower(m, inputs, linears=linears)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(fp32, tmp)
    (tmp / "model.pte").write_bytes(pte)
    manifest = json.loads((tmp / "manifest.json").read_text())
    manifest["artifacts"]["pte"]["benchmark_variant"] = {"linears": linears, "embeddings": f"int{embeddings}"}
    manifest.pop("parity", None)  # measured for the fp32 program only
    finalize_manifest(tmp, manifest)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


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
