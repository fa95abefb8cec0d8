"""Add the measured int4 : int8 and word-table ratios to the shipped reference cost table (``targets/host.costs.json``).

The reference table's grid measured ExecuTorch fp32 and int8 (and ONNX
Runtime) on the reference host; its int4 linears and int8/int4 word tables
were measured end to end on the same kind of machine (same CPU model, ISA
flags and runtime versions as the table's key) by the quantization benchmark,
``tools/bench/results/quantize.json``. This writes those measurements into
the table's ``notes["measured_ratios"]``, naming the file, its date and the
machine: the int4 : int8 end-to-end latency ratio and the word table at
int8 / int4 against fp32 at the same linears, per ``seq/threads`` point.
:meth:`edgenlp.targets.costmodel.CostModel.kernel_penalty` turns the int4
ratio into the penalty of int4 linears, so a device's int4 is never priced as
int8 with half the bytes. No number is typed here: rerun after the benchmark.

    PYTHONPATH=$PWD python tools/targets/reference_ratios.py            # rewrites the notes in targets/host.costs.json
    PYTHONPATH=$PWD python tools/targets/reference_ratios.py --check    # exit 1 if they are out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "tools" / "bench" / "results"
TABLE = REPO / "targets" / "host.costs.json"
SOURCE = "tools/bench/results/quantize.json"
TASK = "sst2"  # the task whose bundles quantize.json timed
RUNTIME = "executorch"
# ratio name -> (variant, against) in quantize.json
PAIRS = {"int4_vs_int8": ("int4", "int8"), "emb_int8": ("int8+emb8", "int8"), "emb_int4": ("int4+emb4", "int4")}
POINTS = ("32/1", "128/1")  # seq/threads: one thread, the calibration's ratios (2-thread runs shared the machine's 2 cores)


def same_machine(key: dict, env: dict) -> list[str]:
    """Where the benchmark's machine differs from the table's key (empty: the same kind of machine)."""
    cpu = env.get("cpu", {})
    out = []
    if cpu.get("model") != key.get("cpu"):
        out.append(f"cpu {cpu.get('model')!r} != {key.get('cpu')!r}")
    if set(key.get("isa", [])) != set(cpu.get("isa", [])):
        out.append(f"isa {sorted(cpu.get('isa', []))} != {sorted(key.get('isa', []))}")
    for k, v in key.get("versions", {}).items():
        if env.get("versions", {}).get(k) != v:
            out.append(f"{k} {env.get('versions', {}).get(k)} != {v}")
    return out


def build(table: dict | None = None) -> dict:
    """``notes["measured_ratios"]`` as the results file gives them today."""
    table = table if table is not None else json.loads(TABLE.read_text())
    doc = json.loads((REPO / SOURCE).read_text())
    diff = same_machine(table["key"], doc["environment"])
    if diff:
        raise SystemExit(f"{SOURCE} was measured on another machine than the reference table: {'; '.join(diff)}")
    variants = doc["tasks"][TASK]
    ratios = {}
    for name, (variant, against) in PAIRS.items():
        a, b = variants[variant]["latency"][RUNTIME], variants[against]["latency"][RUNTIME]
        ratios[name] = {p: round(a[p] / b[p], 4) for p in POINTS}
    measured = doc.get("measured", {}).get(TASK, {})
    return {
        "source": SOURCE, "task": TASK, "runtime": RUNTIME, "date": measured.get("date", doc.get("date")),
        "cpu": doc["environment"]["cpu"]["model"], "isa": sorted(doc["environment"]["cpu"]["isa"]),
        "what": "end-to-end latency of MiniLM-L6 bundles, variant / against, median of alternating rounds; keys seq/threads",
        **ratios,
    }  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the table's measured ratios are out of date")
    args = ap.parse_args(argv)
    table = json.loads(TABLE.read_text())
    want = build(table)
    if args.check:
        ok = table["notes"].get("measured_ratios") == want
        print(f"{TABLE.relative_to(REPO)}: measured ratios {'up to date' if ok else 'out of date'}")
        return 0 if ok else 1
    table["notes"]["measured_ratios"] = want
    table["notes"]["measured_ratios_note"] = ("int4 linears and the int8/int4 word tables: end-to-end ratios measured on the same "
                                              "kind of machine by the quantization benchmark (measured_ratios); no grid of "
                                              "their own yet")  # fmt: skip
    TABLE.write_text(json.dumps(table, indent=2) + "\n")
    print(f"wrote {TABLE.relative_to(REPO)}: {json.dumps({k: want[k] for k in PAIRS})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
