"""Subprocess body of the ExecuTorch measurer: size the thread pool, time plain runs, then profiled runs.

Invoked as ``python -m edgenlp.profile._et_worker '<json args>'``; writes a JSON
result to ``args["out"]``. Kept apart so the thread pool is sized before any
program is loaded in this process.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from edgenlp.profile.timing import interleave


def run(args: dict) -> dict:
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    _unsafe_reset_threadpool(int(args["threads"]))  # before any load_program

    from executorch.runtime import Runtime

    from edgenlp.export.graph import example_inputs
    from edgenlp.run.executorch import register_edgenlp_ops, register_quantized_kernels

    register_quantized_kernels()
    register_edgenlp_ops()  # programs of sparse bundles call edgenlp::sparse_linear*

    ids, mask = example_inputs(int(args["seq_len"]), batch=int(args["batch"]), vocab_size=int(args["vocab_size"]))
    runs, warmup = int(args["runs"]), int(args["warmup"])
    rt = Runtime.get()

    # Plain and profiled runs alternate so both see the same machine load.
    plain_program = rt.load_program(args["pte"])
    plain = plain_program.load_method(args["method"])
    work = Path(args["workdir"])
    program = rt.load_program(args["pte"], enable_etdump=True, debug_buffer_size=0)
    method = program.load_method(args["method"])
    t = interleave({"plain": lambda: plain.execute([ids, mask]), "profiled": lambda: method.execute([ids, mask])},
                   rounds=runs, warmup=warmup, alternate=False)
    e2e = t.values("plain")
    etdump = work / "etdump.etdp"
    program.write_etdump_result_to_file(str(etdump), str(work / "debug.bin"))
    events, method_ms = read_etdump(etdump)
    return {"end_to_end_ms": e2e, "method_execute_ms": method_ms, "events": events}


def compare(args: dict) -> dict:
    """Plain runs of several programs, each once per round (order reversed every other round), so all see the same load."""
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    _unsafe_reset_threadpool(int(args["threads"]))  # before any load_program

    from executorch.runtime import Runtime

    from edgenlp.export.graph import example_inputs
    from edgenlp.run.executorch import register_edgenlp_ops, register_quantized_kernels

    register_quantized_kernels()
    register_edgenlp_ops()  # programs of sparse bundles call edgenlp::sparse_linear*
    rt = Runtime.get()
    seq, runs, warmup = int(args["seq_len"]), int(args["runs"]), int(args["warmup"])
    methods, inputs = [], []
    for prog in args["programs"]:
        methods.append(rt.load_program(prog["pte"]).load_method(prog["method"]))
        inputs.append(list(example_inputs(seq, batch=1, vocab_size=int(prog["vocab_size"]))))
    calls = {str(i): (lambda m=m, x=x: m.execute(x)) for i, (m, x) in enumerate(zip(methods, inputs))}
    t = interleave(calls, rounds=runs, warmup=warmup)  # the order flips every round
    times = [t.values(name) for name in calls]
    return {"end_to_end_ms": times}


def read_etdump(path: Path) -> tuple[list[dict], list[float]]:
    """Per-run times (ms) of every event of the ``Execute`` block, and of ``Method::execute`` itself."""
    from executorch.devtools import Inspector

    events, method_ms = [], []
    for _, row in Inspector(etdump_path=str(path)).to_dataframe().iterrows():
        if row["event_block_name"] != "Execute":
            continue
        raw = [float(x) for x in row["raw"]]
        if row["event_name"] == "Method::execute":
            method_ms = raw
        else:
            events.append({"name": str(row["event_name"]), "raw_ms": raw})
    return events, method_ms


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    args = json.loads(sys.argv[1])
    result = compare(args) if args.get("mode") == "compare" else run(args)
    Path(args["out"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
