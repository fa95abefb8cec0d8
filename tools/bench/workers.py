"""Bodies of the benchmarks' fresh processes, run as ``python -m tools.bench.workers WORKER '<json args>'``.

A fresh process is what a cold start is, and what a runtime whose thread pool
must be sized before anything loads needs. :func:`tools.bench.harness.fresh_process`
starts one; the worker prints its result as one JSON line. Runners come from
the library's registry (:func:`edgenlp.run.base.get_runner`), buckets from
:func:`edgenlp.bundle.pick_bucket`, timing from :mod:`edgenlp.profile.timing`.

Workers:

* ``latency``: one runtime on one bundle at one (seq_len, threads): model-only
  and/or end-to-end times, the two alternating call by call;
* ``cold_start``: open a bundle and get the first result through a runner;
* ``programs``: several ExecuTorch methods / ONNX models timed in interleaved
  rounds in one process (one thread-pool size for all);
* ``derive_bundle``: a quantized benchmark bundle from an fp32 one (quant_bundles.py).
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODES = ("model", "e2e")


def latency(args: dict) -> dict:
    """``{"tokens", "model_ms", "e2e_ms", "peak_rss_kb"}`` for ``args["runtime"]`` on ``args["bundle"]``.

    model only: the program on ids already tokenized, padded into the bucket
    (ExecuTorch: ``pick_bucket``/``pad_to_bucket``; ONNX Runtime: the dynamic
    length) and masked, timed around execute/run; the native runtime by its
    ETDump ``Method::execute`` events (its C API takes text). End to end: text
    in, label out through ``Runner.predict``. ``args["modes"]`` picks them
    (default both); with both, the two alternate call by call.
    """
    from edgenlp.bundle import pad_to_bucket, pick_bucket
    from edgenlp.models.tokenizer import pad_batch
    from edgenlp.profile.native import text_of_length
    from edgenlp.profile.timing import interleave
    from edgenlp.run.base import get_runner

    runtime, bundle, threads = args["runtime"], args["bundle"], int(args["threads"])
    iters, warmup = int(args["iters"]), int(args.get("warmup", 3))
    modes = tuple(args.get("modes", MODES))
    text = text_of_length(int(args["seq_len"]))
    runner = get_runner(bundle, runtime=runtime, threads=threads)
    ids = runner.token_ids([text])[0]
    traced = None
    if runtime == "native":
        from edgenlp.run.native import NativeHandle

        traced = NativeHandle(bundle)
        traced.enable_etdump()
        model = lambda: traced.logits([text])  # noqa: E731  timed by its ETDump Method::execute events
    elif runtime == "executorch":
        m = pick_bucket(runner.methods, len(ids))
        x, mask = pad_to_bucket(ids, m, pad_id=runner.pad_id)
        method = runner._method(m.name)
        model = lambda: method.execute([x, mask])  # noqa: E731
    else:
        x, mask = pad_batch([ids], pad_id=runner.pad_id)
        model = lambda: runner.run_batch(x, mask)  # noqa: E731
    calls = {"model": model, "e2e": lambda: runner.predict([text])}
    t = interleave({m: calls[m] for m in modes}, rounds=iters, warmup=warmup, alternate=False)
    out = {"tokens": len(ids), **{f"{m}_ms": t.values(m) for m in modes}}
    if traced is not None and "model" in modes:
        from edgenlp.profile._et_worker import read_etdump

        with tempfile.TemporaryDirectory() as tmp:
            traced.write_etdump(Path(tmp) / "run.etdp")
            _, method_ms = read_etdump(Path(tmp) / "run.etdp")
        out["model_ms"] = method_ms[-iters:]
    runner.close()
    out["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


def cold_start(args: dict) -> dict:
    """Open ``args["bundle"]`` (no sha256 verification) with the ``args["runtime"]`` runner and classify one text.

    ``import_ms``: the runtime's and the library's imports; ``cold_start_ms``:
    from then to the first result (bundle open, tokenizer, program load, one
    ``predict_logits``); ``peak_rss_kb`` of this process.
    """
    import importlib

    t0 = time.perf_counter()
    runtime = args["runtime"]
    if runtime == "executorch":
        import executorch.runtime  # noqa: F401
        from executorch.extension.pybindings import portable_lib  # noqa: F401
    elif runtime == "onnx":
        import onnxruntime  # noqa: F401
    importlib.import_module(f"edgenlp.run.{runtime}")  # the runner's module: an import, not part of opening
    from edgenlp.bundle import Bundle
    from edgenlp.profile.native import text_of_length
    from edgenlp.run.base import get_runner

    t_import = time.perf_counter()
    runner = get_runner(Bundle.open(args["bundle"], verify=False), runtime=runtime, threads=int(args.get("threads", 1)))
    runner.predict_logits([text_of_length(int(args["seq_len"]))])
    t_first = time.perf_counter()
    runner.close()
    return {"cold_start_ms": (t_first - t_import) * 1e3, "import_ms": (t_import - t0) * 1e3,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def programs(args: dict) -> dict:
    """``{"ms": [[...] per program]}``: every program once per round, ``runs`` rounds after ``warmup``.

    A program is ``{"runtime": "executorch", "path": pte, "method": name, "vocab_size": n}``
    or ``{"runtime": "onnx", "path": onnx, "vocab_size": n}``; inputs are
    :func:`edgenlp.export.graph.example_inputs` at ``seq_len``. The thread
    pools are sized before anything loads.
    """
    from edgenlp.run.executorch import load_program, set_threads

    threads = int(args["threads"])
    set_threads(threads)  # before any load_program (resetting later can crash)
    from edgenlp.export.graph import example_inputs
    from edgenlp.profile.timing import interleave
    from edgenlp.run.onnx import make_session

    seq = int(args["seq_len"])
    calls = {}
    for i, prog in enumerate(args["programs"]):
        ids, mask = example_inputs(seq, batch=1, vocab_size=int(prog["vocab_size"]))
        if prog["runtime"] == "executorch":
            method = load_program(Path(prog["path"])).load_method(prog["method"])
            calls[str(i)] = lambda m=method, x=[ids, mask]: m.execute(x)
        else:
            sess = make_session(Path(prog["path"]), threads=threads)
            names = [x.name for x in sess.get_inputs()]
            feed = dict(zip(names, (ids.numpy(), mask.numpy())))
            calls[str(i)] = lambda s=sess, f=feed: s.run(None, f)
    t = interleave(calls, rounds=int(args["runs"]), warmup=int(args["warmup"]))
    return {"ms": [t.values(name) for name in calls]}


def derive_bundle(args: dict) -> dict:
    """Lower ``args["model"]`` as the quantized variant of the fp32 bundle ``args["fp32"]`` into ``args["out"]``.

    ``runtime/tests/quant_programs.py`` lowers it (same buckets and method
    names); the bundle is the fp32 one with ``model.pte`` replaced and its
    manifest refreshed, written beside ``out`` and renamed into place.
    """
    import shutil

    import torch

    sys.path.insert(0, str(REPO / "runtime" / "tests"))
    from quant_programs import lower, quantize_embedding

    from edgenlp.bundle import Bundle, finalize_manifest
    from edgenlp.export.graph import example_inputs, prepare
    from edgenlp.models.registry import load_model

    fp32, out = Path(args["fp32"]), Path(args["out"])
    linears, embeddings = args["linears"], int(args["embeddings"])
    src = Bundle.open(fp32)
    m, _ = load_model(args["model"], labels=src.labels, seed=0)
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
    return {"bundle": str(out)}


WORKERS = {"latency": latency, "cold_start": cold_start, "programs": programs, "derive_bundle": derive_bundle}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in WORKERS:
        print(f"usage: python -m tools.bench.workers {{{','.join(WORKERS)}}} '<json args>'", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(WORKERS[argv[0]](json.loads(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
