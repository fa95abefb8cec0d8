"""Write the measured block-sparse : dense latency ratios the cost model prices sparse candidates with.

``tools/bench/results/sparse-bundles.json`` (``tools/bench/sparse_bundles.py``)
timed MiniLM-L6 bundles whose every encoder linear is block-sparse against
the dense bundle of the same precision, in one process, alternating rounds.
This writes ``targets/sparse-ratios.json``: per precision and block sparsity,
the sparse bundle's median latency over the dense one's, with the machine
(CPU model, ISA flags), runtime, sequence length and thread count they hold
for. :meth:`edgenlp.targets.costmodel.CostModel.sparse_factor` turns a ratio
into a factor on the linears' cost. No number is typed here: rerun after the
benchmark.

    PYTHONPATH=$PWD python tools/targets/sparse_ratios.py            # rewrites targets/sparse-ratios.json
    PYTHONPATH=$PWD python tools/targets/sparse_ratios.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = "tools/bench/results/sparse-bundles.json"
OUT = REPO / "targets" / "sparse-ratios.json"
SCHEMA = "edgenlp.sparse-ratios/1"


def build() -> dict:
    doc = json.loads((REPO / SOURCE).read_text())
    bundles = doc["bundles"]
    dense = {b["precision"]: b for b in bundles.values() if not b["sparse_linears"]}
    ratios: dict[str, dict[str, float]] = {}
    for b in sorted(bundles.values(), key=lambda b: (b["precision"], b["sparsity"])):
        if b["sparse_linears"] and b["block"] == doc["block"]:
            ratios.setdefault(b["precision"], {})[f"{b['sparsity']:g}"] = round(b["median_ms"] / dense[b["precision"]]["median_ms"], 4)
    host = doc["host"]
    return {
        "schema": SCHEMA, "source": SOURCE, "date": host.get("written"),
        "what": ("median latency of a MiniLM-L6 bundle whose every encoder linear is block-sparse (edgenlp's sparse ops) "
                 "over the dense bundle of the same precision, one process, alternating rounds; keyed by precision, then "
                 "block sparsity"),
        "machine": {"cpu": host["cpu_model"], "isa": sorted(host["isa_flags"].split())},
        "runtime": "executorch", "block": doc["block"], "seq_len": int(doc["seq"]), "threads": int(doc["threads"]),
        "ratios": ratios,
    }  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if targets/sparse-ratios.json is out of date")
    args = ap.parse_args(argv)
    text = json.dumps(build(), indent=2) + "\n"
    if args.check:
        same = OUT.is_file() and OUT.read_text() == text
        print(f"{OUT.relative_to(REPO)}: {'up to date' if same else 'out of date'}")
        return 0 if same else 1
    tmp = OUT.with_name(f".{OUT.name}.tmp")
    tmp.write_text(text)
    tmp.replace(OUT)
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
