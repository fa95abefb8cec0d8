"""Subprocess body of the ExecuTorch measurer: size the thread pool, time plain runs, then profiled runs.

Invoked as ``python -m edgenlp.profile._et_worker '<json args>'``; writes a JSON
result to ``args["out"]``. Kept apart so the thread pool is sized before any
program is loaded in this process.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path


def run(args: dict) -> dict:
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    _unsafe_reset_threadpool(int(args["threads"]))  # before any load_program

    from executorch.devtools import Inspector
    from executorch.runtime import Runtime

    from edgenlp.export.graph import example_inputs

    ids, mask = example_inputs(int(args["seq_len"]), batch=int(args["batch"]), vocab_size=int(args["vocab_size"]))
    runs, warmup = int(args["runs"]), int(args["warmup"])
    rt = Runtime.get()

    # Plain and profiled runs alternate so both see the same machine load.
    plain_program = rt.load_program(args["pte"])
    plain = plain_program.load_method(args["method"])
    work = Path(args["workdir"])
    program = rt.load_program(args["pte"], enable_etdump=True, debug_buffer_size=0)
    method = program.load_method(args["method"])
    for _ in range(warmup):
        plain.execute([ids, mask])
        method.execute([ids, mask])
    e2e = []
    for _ in range(runs):
        t0 = time.perf_counter()
        plain.execute([ids, mask])
        e2e.append((time.perf_counter() - t0) * 1e3)
        method.execute([ids, mask])
    etdump = work / "etdump.etdp"
    program.write_etdump_result_to_file(str(etdump), str(work / "debug.bin"))
    df = Inspector(etdump_path=str(etdump)).to_dataframe()
    events, method_ms = [], []
    for _, row in df.iterrows():
        if row["event_block_name"] != "Execute":
            continue
        raw = [float(x) for x in row["raw"]]
        if row["event_name"] == "Method::execute":
            method_ms = raw
            continue
        events.append({"name": str(row["event_name"]), "raw_ms": raw})
    return {"end_to_end_ms": e2e, "method_execute_ms": method_ms, "events": events}


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    args = json.loads(sys.argv[1])
    result = run(args)
    Path(args["out"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
