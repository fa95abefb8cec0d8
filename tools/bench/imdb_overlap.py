"""Check: is IMDB's dev split drawn from other movies than its train split? (not CI)

The IMDB corpus splits train and test by movie. If ``dev.tsv`` came from the
test half, validation rows held out of ``train.tsv`` would share movies with
the rows the model was tuned on while dev rows would not, and a threshold
calibrated on validation rows would look better there than on dev (the gap
seen for token pruning, ``tools/bench/results/dynamic.md``).

No movie ids ship with the data, so names stand in for them: the capitalised
words (4+ letters) that occur in only 1-3 reviews of a reference pool of
training rows are mostly titles, actors and characters. For dev, and for a
seeded sample of training rows of the same size held out of the pool, the
script counts the reviews that contain such a rare name. Movie-disjoint dev
rows would contain fewer of them than the held-out training rows.

    python tools/bench/imdb_overlap.py
"""

from __future__ import annotations

import argparse
import collections
import csv
import random
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.bench.harness import RESULTS, Results  # noqa: E402

NAME = re.compile(r"\b[A-Z][a-z]{3,}\b")


def load(path: Path) -> list[tuple[str, str]]:
    csv.field_size_limit(1 << 30)
    with open(path, newline="", encoding="utf-8") as f:
        return [(row["text"], row["label"]) for row in csv.DictReader(f, delimiter="\t")]


def rare_name_stats(rows, doc_freq: collections.Counter, max_docs: int) -> dict:
    with_rare, names = 0, 0
    for text, _ in rows:
        rare = [w for w in set(NAME.findall(text)) if 1 <= doc_freq[w] <= max_docs]
        names += len(rare)
        with_rare += bool(rare)
    n = len(rows)
    p = with_rare / n
    return {"rows": n, "share_with_rare_name": round(p, 4), "share_se": round((p * (1 - p) / n) ** 0.5, 4),
            "rare_names_per_review": round(names / n, 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--max-docs", type=int, default=3, help="A name is rare when at most this many pool reviews hold it.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "imdb-overlap")
    args = ap.parse_args(argv)
    from edgenlp.data.tasks import default_data_dir

    folder = (args.data_dir or Path(default_data_dir())) / "imdb"
    train, dev = load(folder / "train.tsv"), load(folder / "dev.tsv")
    results = Results(script="imdb_overlap")
    order = list(range(len(train)))
    random.Random(args.seed).shuffle(order)
    held = [train[i] for i in order[: len(dev)]]
    pool = [train[i] for i in order[len(dev):]]
    doc_freq = collections.Counter()
    for text, _ in pool:
        doc_freq.update(set(NAME.findall(text)))
    dev_texts = {t for t, _ in dev}
    doc = {"rows": {"train": len(train), "dev": len(dev), "pool": len(pool)},
           "median_words": {"train": statistics.median(len(t.split()) for t, _ in train),
                            "dev": statistics.median(len(t.split()) for t, _ in dev)},
           "labels": {"train": dict(collections.Counter(l for _, l in train)), "dev": dict(collections.Counter(l for _, l in dev))},
           "dev_texts_also_in_train": sum(t in dev_texts for t, _ in train), "max_docs": args.max_docs, "seed": args.seed,
           "held_out_train": rare_name_stats(held, doc_freq, args.max_docs), "dev": rare_name_stats(dev, doc_freq, args.max_docs)}
    h, d = doc["held_out_train"], doc["dev"]
    diff = d["share_with_rare_name"] - h["share_with_rare_name"]
    se = (d["share_se"] ** 2 + h["share_se"] ** 2) ** 0.5
    doc["difference"] = {"dev_minus_held_out": round(diff, 4), "se": round(se, 4)}
    md = ["# Is IMDB dev from other movies than train? (rare names as a stand-in for movie ids)", "",
          f"Pool: {len(pool):,} training reviews; a name is a capitalised word of 4+ letters held by 1–{args.max_docs} pool reviews. "
          f"Held-out training rows: {len(held):,} seeded rows outside the pool; dev: all {len(dev):,} rows. Median words: "
          f"train {doc['median_words']['train']}, dev {doc['median_words']['dev']}; dev texts also in train: "
          f"{doc['dev_texts_also_in_train']}.", "",
          "| rows | reviews with a rare name | ± SE | rare names per review |", "|---|---:|---:|---:|",
          f"| held-out training rows | {h['share_with_rare_name']:.1%} | {h['share_se']:.1%} | {h['rare_names_per_review']:.2f} |",
          f"| dev | {d['share_with_rare_name']:.1%} | {d['share_se']:.1%} | {d['rare_names_per_review']:.2f} |", "",
          f"Dev minus held-out: {diff:+.1%} ± {se:.1%}. Dev rows from movies the training rows never cover would hold "
          "fewer of the pool's rare names than held-out training rows; "
          + ("they do not, so dev looks drawn from the same movies as train."
             if diff > -2 * se else "they do: dev looks drawn from other movies."),
          "", "A stand-in, not movie ids: how much a movie-disjoint dev would lower the share is not measured here (no split "
          "with known movies ships with the data)."]
    results.write(args.out, doc, "\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
