"""Derive a many-class user task from banking77 for the fine-tuning bench (not CI).

``banking77-x-question``: each banking77 intent split by whether the query ends
with a question mark, 154 classes on the training split (152 of them occur in
dev). Both halves of a class are real user queries, and the split is visible in
the text, so a classifier can learn all of it. It stands in for a user's
intent set of 100+ classes, which no shared dataset here has.

    python tools/bench/derive_task.py --out /tmp/tasks/banking77-x-question
    python tools/bench/finetune.py --tasks banking154 --task-dir banking154=/tmp/tasks/banking77-x-question \\
        --train-limit 4000 --epochs auto --priming-epochs 1 --only full learner far --seeds 0
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

log = logging.getLogger("bench.derive_task")


def question_label(text: str, label: str) -> str:
    return f"{label}__{'q' if text.rstrip().endswith('?') else 's'}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default=None, help="folder holding banking77/ (default: the shared data folder)")
    p.add_argument("--out", type=Path, required=True, help="task folder to write (train.tsv, dev.tsv)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    from edgenlp.data.tasks import load_task
    from edgenlp.errors import EdgeNLPError
    from edgenlp.utils import atomic_write_text

    try:
        data = load_task("banking77", data_dir=args.data_dir)
    except EdgeNLPError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name, split in (("train", data.train), ("dev", data.dev)):
        rows = [(t, question_label(t, l)) for t, l in zip(split.texts, split.labels)]
        buf = io.StringIO()
        w = csv.writer(buf, delimiter="\t", lineterminator="\n")
        w.writerow(["text", "label"])
        w.writerows(rows)
        atomic_write_text(args.out / f"{name}.tsv", buf.getvalue())
        counts = Counter(l for _, l in rows)
        log.info("%s: %d rows, %d classes (%d to %d rows per class)", name, len(rows), len(counts),
                 min(counts.values()), max(counts.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
