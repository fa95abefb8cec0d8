"""``edgenlp demo``: fine-tune, export, evaluate through every runtime (no compression).

``edgenlp demo`` fine-tunes ``minilm-l6`` on
SST-2 for a bounded number of steps, exports a bundle to ExecuTorch and ONNX,
evaluates it on the full dev set through ExecuTorch, ONNX Runtime, eager
PyTorch (and the native runtime when it is built), and writes ``summary.json``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

log = logging.getLogger(__name__)


def run_demo(
    *,
    model: str = "minilm-l6",
    task: str = "sst2",
    out: str | Path = "out/demo",
    steps: int = 250,
    train_limit: int = 8000,
    max_seq_len: int = 64,
    seed: int = 0,
    threads: int | None = None,
    data_dir: str | None = None,
    device: str = "auto",
    progress: bool = True,
) -> dict:
    from edgenlp.data.tasks import load_task
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.finetune import FinetuneConfig, finetune
    from edgenlp.models.registry import load_model
    from edgenlp.run.base import get_runner
    from edgenlp.run.evaluate import evaluate_split
    from edgenlp.run.eager import EagerRunner
    from edgenlp.run.native import native_available
    from edgenlp.utils import atomic_write_json, environment

    from edgenlp.errors import EdgeNLPError

    out = Path(out)
    timings: dict[str, float] = {}
    try:  # every option checked before any work
        # The library's defaults (DEFAULT_LR["full"], the head's rate from the budget, best-dev weights kept), one bounded pass.
        config = FinetuneConfig(method="full", epochs=1, max_steps=steps, train_limit=train_limit, batch_size=32,
                                seed=seed, max_seq_len=max_seq_len, threads=threads)
        export_config = ExportConfig(max_seq_len=128)
    except ValueError as exc:
        raise EdgeNLPError(f"invalid option: {exc}") from None
    data = load_task(task, data_dir=data_dir)
    m, info = load_model(model, labels=data.labels, seed=seed)

    t0 = time.perf_counter()
    result = finetune(m, info, data, config, device=device, show_progress=progress)
    model_dir = result.save(out / "model", info)
    timings["finetune_s"] = time.perf_counter() - t0
    ft_model, ft_info = load_model(model_dir, labels=data.labels)

    t0 = time.perf_counter()
    bundle = export_bundle(ft_model, ft_info, out / "bundle", task=data, config=export_config)
    timings["export_s"] = time.perf_counter() - t0

    results = {}
    runners = [("eager", lambda: EagerRunner(ft_model, info=ft_info, threads=threads, max_seq_len=128)),
               ("executorch", lambda: get_runner(bundle.path, runtime="executorch", threads=threads)),
               ("onnx", lambda: get_runner(bundle.path, runtime="onnx", threads=threads))]
    if native_available():
        runners.append(("native", lambda: get_runner(bundle.path, runtime="native", threads=threads)))
    for name, make in runners:
        with make() as runner:
            results[name] = evaluate_split(runner, data.dev)
        log.info("%s: accuracy %.4f", name, results[name]["accuracy"])
    summary = {
        "model": model,
        "task": data.name,
        "finetune": {k: result.report.get(k) for k in ("method", "steps", "lr", "trainable_params", "dev", "examples_per_s", "device")
                     if k in result.report},
        "bundle": str(bundle.path),
        "sizes_mb": {k: round(v / 1e6, 2) for k, v in bundle.manifest["sizes"].items()},
        "parity": bundle.manifest["parity"],
        "eval": results,
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "environment": environment(),
    }
    atomic_write_json(out / "summary.json", summary)
    return summary
