"""Benchmark: early exits and token pruning on a fine-tuned MiniLM-L6, static vs dynamic, ExecuTorch, 1 thread; not CI.

For each case (a task, a sequence length, what is dynamic):

1. ``make_dynamic`` on the fine-tuned teacher (exit heads distilled with the
   backbone frozen; token thresholds learned; the exit threshold and the token
   scale calibrated on rows of the *training* split held out for it, to the
   case's maximum drop). Dev is only ever measured;
2. export of a dynamic bundle per variant (fp32, and int8 with ``--variants``;
   ExecuTorch only). The int8 variant's exit threshold is calibrated again on
   the int8 model, on the same held-out rows, as ``edgenlp quantize`` does.
   A dynamic bundle also holds the static ``forward_<S>``
   methods: ``static=True`` runs exactly the static bundle's program, so static
   and dynamic are measured on the same weights and kernels;
3. on dev at each sentence's real length (the smallest bucket holding it), 1
   thread, in one process: ``--rounds`` passes over the sentences; in every
   pass each sentence runs static and dynamic of every variant back to back,
   in an order that alternates from sentence to sentence and round to round
   (:func:`tools.bench.harness.round_order`). A sentence's latency is the
   median of its rounds (model only, tokenization excluded); mean, p50, p90
   and max are over sentences. Accuracy of each. ``--runtime native`` runs the
   same through libedgenlp's C API instead (the segment loop in C++, as an app
   runs it; the case is recorded as ``<case> (native)``): a call's time there
   includes its tokenization, for static and dynamic alike, and no curves are
   drawn (the C API takes no rule switch);
4. latency-vs-accuracy curves: every exit rule at thresholds spread over its
   validation curve (and keep ratios, where tokens may drop), on the first
   ``--curve-limit`` sentences, one round.

Writes ``<out>.json``, ``<out>.md`` and ``<out>.png`` (the curves of the last
case measured) through :class:`tools.bench.harness.Results` (host CPU, ISA
flags, load averages, commit). Published reference points are marked as such
(other models, hardware and batch sizes). A rerun with the same ``--workdir``
reuses trained models and bundles.

    nice -n 10 python tools/bench/dynamic.py --teacher sst2=/tmp/dyn/ft-sst2 --cases sst2 --workdir /tmp/dyn/bench

The SST-2 teacher of the sst2-8k-val cases has the quick preset's fine-tuning settings (``compress --preset quick``
draws its 25,600 rows from the training split less its 1,000 validation rows, so its model differs):

    edgenlp finetune minilm-l6 --task sst2 --method learner --train-limit 25600 --max-steps 800 \
        --priming-steps 100 --max-seq-len 64 --out /tmp/sst2/ft
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# tools/bench/profile.py would shadow the standard library's ``profile`` if this folder led the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from tools.bench.harness import RESULTS, Results, load_average, median, round_order  # noqa: E402

log = logging.getLogger("bench.dynamic")

# name -> what to build and the target for it (speedup of the mean latency vs the same static bundle,
# at most this many points of extra drop on dev; p90 no more than p90_slower slower than static). ``heads``: exit-head
# training settings other than DynamicConfig's defaults, chosen on the validation rows carved from the training split
# (SST-2: 20 epochs at 3e-3 reached 0.74x the static FLOPs within the 0.5-point limit there; 4 at 1e-3, 0.82x).
# The [CLS] cases name their pooling: they were measured before mean pooling became the default. These cases were
# calibrated to the measured drop alone (margin_se 0, the default then).
CASES = {
    "sst2": dict(task="sst2", seq=64, buckets=(32, 64), exits="all", tokens="none", max_drop=0.5,
                 margin_se=0.0, val_rows=1000, train_limit=2000, heads=dict(epochs=20, lr=3e-3, exit_pooling="cls"),
                 target=dict(speedup=1.6, drop=0.5, p90_slower=0.05)),
    # The same, calibrated on the longest quarter of the training rows (at least 13 words, the training split's 75th
    # percentile): SST-2 trains on phrases (median 7 words) and is used on sentences, so a threshold calibrated on
    # phrases, which the early exits find easy, stops too many sentences early.
    "sst2-long-val": dict(task="sst2", seq=64, buckets=(32, 64), exits="all", tokens="none", max_drop=0.5,
                          margin_se=0.0, val_rows=1000, val_min_words=13, train_limit=2000,
                          heads=dict(epochs=20, lr=3e-3, exit_pooling="cls"),
                          target=dict(speedup=1.6, drop=0.5, p90_slower=0.05)),
    # The same as sst2-long-val, with exit heads that read the mean of the tokens their layer processed ([CLS] at the
    # first layers has barely mixed in the sentence); head settings as chosen for the [CLS] heads.
    "sst2-mean": dict(task="sst2", seq=64, buckets=(32, 64), exits="all", tokens="none", max_drop=0.5,
                      margin_se=0.0, val_rows=1000, val_min_words=13, train_limit=2000,
                      heads=dict(epochs=20, lr=3e-3, exit_pooling="mean"),
                      target=dict(speedup=1.6, drop=0.5, p90_slower=0.05)),
    # sst2-mean with 8000 validation rows (of the 12,925 unseen training rows of at least 13 words) and heads
    # distilled on 16,000 training rows: on 1000 rows the drop of a threshold is known to about +-0.8 points (the
    # paired standard error), more than the 0.5 allowed, so the calibration mostly followed noise. Settings chosen on
    # the validation rows (training split): 0.82x -> 0.55x the static FLOPs at 0.5 points.
    "sst2-8k-val": dict(task="sst2", seq=64, buckets=(32, 64), exits="all", tokens="none", max_drop=0.5,
                        margin_se=0.0, val_rows=8000, val_min_words=13, train_limit=16000,
                        heads=dict(epochs=5, lr=3e-3, exit_pooling="mean"),
                        target=dict(speedup=1.6, drop=0.5, p90_slower=0.05)),
    # sst2-8k-val with --joint: the backbone trains with the exits (2 epochs over the same 16,000 rows, distilled from
    # the fine-tuned model), so the early layers learn to decide. Its drop is against sst2-8k-val's static bundle (the
    # fine-tuned model), its speed-up against its own static methods (the same shapes).
    "sst2-8k-val-joint": dict(task="sst2", seq=64, buckets=(32, 64), exits="all", tokens="none", max_drop=0.5,
                              margin_se=0.0, val_rows=8000, val_min_words=13, train_limit=16000,
                              heads=dict(epochs=2, lr=3e-3, exit_pooling="mean", joint=True),
                              reference_case="sst2-8k-val", target=dict(speedup=1.6, drop=0.5, p90_slower=0.05)),
    # banking77: the teacher fine-tunes on 7,000 of the 9,003 training rows (--train-limit 7000), so the 2,000
    # validation rows are rows it never saw; heads as in sst2-8k-val, distilled on the other 7,003 rows.
    "banking77": dict(task="banking77", seq=64, buckets=(32, 64), exits="all", tokens="none", max_drop=0.5,
                      margin_se=0.0, val_rows=2000, train_limit=7003, heads=dict(epochs=5, lr=3e-3, exit_pooling="mean"),
                      target=dict(speedup=1.3, drop=0.5)),
    # IMDB (full reviews): the teacher fine-tunes on 4,000 of the 19,931 training rows at 256 tokens
    # (--train-limit 4000 --max-seq-len 256), so validation rows are reviews it never saw. A review costs ~4x an SST-2
    # sentence per pass, and the token scale is calibrated over up to 15 passes: 1,000 validation rows at 128 tokens,
    # 500 at 256.
    "imdb128-ltp": dict(task="imdb", seq=128, exits="none", tokens="ltp", max_drop=1.0,
                        margin_se=0.0, val_rows=1000, train_limit=1500, target=dict(speedup=2.0, drop=1.0)),
    # imdb128-ltp's model with buckets 32, then every 16 tokens from 64: with the default powers of two a review pruned
    # from 128 to 102 tokens still runs in the 128 bucket (measured: 0.57x the static FLOPs, 1.17x the speed).
    "imdb128-ltp-buckets": dict(task="imdb", seq=128, buckets=(32, 64, 80, 96, 112, 128), exits="none", tokens="ltp",
                                max_drop=1.0, margin_se=0.0, val_rows=1000, train_limit=1500,
                                target=dict(speedup=2.0, drop=1.0),
                                model_of="imdb128-ltp"),
    "imdb128-ltp-exits": dict(task="imdb", seq=128, exits="all", tokens="ltp", max_drop=1.0,
                              margin_se=0.0, val_rows=1000, train_limit=1500, target=dict(speedup=2.0, drop=1.0)),
    # imdb128-ltp-exits calibrated with one standard error to spare (margin_se 1, DynamicConfig's default): the token
    # scale and the exit threshold must fit drop + SE <= budget on the same 1,000 validation rows.
    "imdb128-ltp-exits-m1": dict(task="imdb", seq=128, exits="all", tokens="ltp", max_drop=1.0, margin_se=1.0,
                                 val_rows=1000, train_limit=1500, target=dict(speedup=2.0, drop=1.0)),
    # The same with 3,000 validation rows: on 1,000 a drop is measured to about +-0.8 points, and the token scale chosen
    # there with no margin cost ~2 points on 3,000 other unseen training rows (calibration-margin-imdb128-ltp-exits).
    "imdb128-ltp-exits-m1-3k": dict(task="imdb", seq=128, exits="all", tokens="ltp", max_drop=1.0, margin_se=1.0,
                                    val_rows=3000, train_limit=1500, target=dict(speedup=2.0, drop=1.0)),
    # imdb128-ltp-exits-m1-3k with --joint: the backbone trains with the exits, under the hard token pruning (distilled
    # from the fine-tuned model), so the static model changes. Its drop is against the fine-tuned model's own static
    # bundle (``reference_case``: the same teacher, int8 as quantize makes it), its speed-up against its own static
    # methods (the same shapes). Buckets fixed at the powers of two the m1-3k case ran with, for the comparison.
    "imdb128-ltp-exits-joint": dict(task="imdb", seq=128, buckets=(16, 32, 64, 128), exits="all", tokens="ltp",
                                    max_drop=1.0, margin_se=1.0, val_rows=3000, train_limit=1500,
                                    heads=dict(joint=True), reference_case="imdb128-ltp-exits-m1-3k",
                                    target=dict(speedup=2.0, drop=1.0)),
    # imdb128-ltp-exits-joint's model with export's default buckets for a model that prunes tokens (every 16 from 64)
    "imdb128-ltp-exits-joint-buckets": dict(task="imdb", seq=128, exits="all", tokens="ltp", max_drop=1.0, margin_se=1.0,
                                            val_rows=3000, train_limit=1500, heads=dict(joint=True),
                                            reference_case="imdb128-ltp-exits-m1-3k", model_of="imdb128-ltp-exits-joint",
                                            target=dict(speedup=2.0, drop=1.0)),
    "imdb256-ltp": dict(task="imdb", seq=256, exits="none", tokens="ltp", max_drop=1.0,
                        margin_se=0.0, val_rows=500, train_limit=1200, target=dict(speedup=2.0, drop=1.0)),
    # IMDB at 256 tokens with exits and token pruning, frozen backbone (joint training at 256 costs over an hour on 2
    # cores), calibrated with one standard error to spare on 1,000 validation rows (500 left the margin wider than the
    # budget). Its teacher is shorter than imdb256-ltp's: full fine-tuning for 150 steps of 32 on 4,000 rows at 256
    # tokens (`edgenlp finetune minilm-l6 --task imdb --train-limit 4000 --max-seq-len 256 --max-steps 150`; the
    # default 625 steps take ~100 minutes on 2 cores), so its static accuracy is its own, not imdb256-ltp's.
    "imdb256-ltp-exits": dict(task="imdb", seq=256, exits="all", tokens="ltp", max_drop=1.0, margin_se=1.0,
                              val_rows=1000, train_limit=1200, teacher_steps=150, target=dict(speedup=2.0, drop=1.0)),
    # imdb256-ltp-exits with --joint: the same teacher, rows, calibration and buckets; the backbone trains with the
    # exits through the hard token pruning (distilled from the fine-tuned model), as imdb128-ltp-exits-joint does at
    # 128 tokens. Its drop is against imdb256-ltp-exits' static bundle (the fine-tuned model), its speed-up against
    # its own static methods. Two training threads (a backward pass through the whole model at 256 tokens).
    "imdb256-ltp-exits-joint": dict(task="imdb", seq=256, exits="all", tokens="ltp", max_drop=1.0, margin_se=1.0,
                                    val_rows=1000, train_limit=1200, teacher_steps=150,
                                    heads=dict(joint=True, threads=2), reference_case="imdb256-ltp-exits",
                                    target=dict(speedup=2.0, drop=1.0)),
    # Token pruning alone at 256 tokens, LTP's last stage: the backbone fine-tuned through the hardened pruning
    # (--joint, distilled from the fine-tuned model) at the scale that cost 10 points on the frozen model
    # (--joint-token-drop 10: imdb256-ltp-exits' frozen curve puts ~0.4x the static FLOPs there), 2 epochs over 4,000
    # rows at 5e-5, then the scale calibrated again on the trained model to the 1-point budget with one standard
    # error to spare. Settings fixed before any dev number; the same teacher as imdb256-ltp-exits, whose static int8
    # bundle is the drop's reference. Built once (4,590 s, 2 threads): trained at scale 1.906 (frozen: 8.2 +- 1.19
    # points at 0.42x FLOPs), the trained model loses on the 1,000 validation rows 2.1 +- 0.79 points at 0.45x FLOPs,
    # 2.0 at 0.49x and 0.58x, 2.7 at 0.68x and 3.4 with no pruning: no scale fits the 1-point budget, so no bundle of
    # it was measured on dev. (That build's recalibration stopped at scale 0, before stop_early=False.)
    "imdb256-ltp-joint": dict(task="imdb", seq=256, exits="none", tokens="ltp", max_drop=1.0, margin_se=1.0,
                              val_rows=1000, train_limit=4000, teacher_steps=150,
                              heads=dict(joint=True, joint_token_drop=10.0, epochs=2, backbone_lr=5e-5, threads=2),
                              reference_case="imdb256-ltp-exits", target=dict(speedup=2.0, drop=1.0)),
}

# Published numbers: other models (BERT-base), other hardware and batch sizes; orientation only, never a baseline.
# drop = accuracy points lost (None: not recorded in our notes).
PUBLISHED = [
    {"method": "PABEE", "what": "BERT-base SST-2, batch 1, early exit (patience)", "speedup": 1.62, "drop": 0.1},
    {"method": "DeeBERT", "what": "BERT-base GLUE, early exit (entropy): up to ~40% of inference time saved",
     "speedup": round(1 / 0.6, 2), "drop": None},
    {"method": "LTP", "what": "learned token pruning, GLUE: 1.9x measured CPU throughput (2.1x fewer FLOPs)",
     "speedup": 1.9, "drop": 1.0, "drop_is_bound": True},
    {"method": "Magic Pyramid", "what": "exits + token pruning combined; no number recorded in our notes",
     "speedup": None, "drop": None},
]


# --------------------------------------------------------------------------- stage 1-2: models and bundles


def case_model_dir(work: Path, case: str, spec: dict) -> Path:
    """The dynamic model directory a case's bundles are exported from (``model_of``: another case's, other buckets)."""
    return work / spec.get("model_of", case) / "model"


def build(case: str, spec: dict, teacher: Path, work: Path, data, variants) -> dict:
    """The dynamic model directory and the dynamic bundle of each variant of ``case`` (reused when present)."""
    from edgenlp.cli.dynamic import parse_exits
    from edgenlp.dynamic.api import make_dynamic
    from edgenlp.dynamic.config import DynamicConfig
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.registry import load_model

    record = work / case / "build.json"  # the seconds each artifact in this workdir took, kept beside them
    out = json.loads(record.read_text()) if record.is_file() else {}
    model_dir = case_model_dir(work, case, spec)
    if not (model_dir / "dynamic.json").is_file():
        model, info = load_model(teacher)
        cfg = DynamicConfig(exits=parse_exits(spec["exits"]), rule="maxprob", tokens=spec["tokens"],
                            max_drop=spec["max_drop"], val_rows=spec["val_rows"], train_limit=spec["train_limit"],
                            val_min_words=spec.get("val_min_words", 0), margin_se=spec["margin_se"],
                            max_seq_len=spec["seq"], **{"threads": 1, **spec.get("heads", {})})
        t0 = time.perf_counter()
        res = make_dynamic(model, info, data, cfg, device="cpu")
        res.save(model_dir)
        out = {"train_seconds": round(time.perf_counter() - t0, 1)}  # a new model: earlier bundles' times are void
        log.info("%s: trained in %.0fs", case, out["train_seconds"])
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(out, indent=1) + "\n")
    for variant in variants:
        bundle = work / case / f"bundle-{variant}"
        if (bundle / "manifest.json").is_file():
            continue
        model, info = load_model(model_dir)
        if variant == "int8":  # as edgenlp quantize does it: the exit threshold calibrated again on the int8 model
            from edgenlp.compress.guard import exits_calibrated
            from edgenlp.quantize.api import quantize_model
            from edgenlp.quantize.config import QuantizeConfig

            qmodel, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8"))
            model, info = qmodel, exits_calibrated(qmodel, qinfo, info, data)
        t0 = time.perf_counter()
        export_bundle(model, info, bundle, task=data,
                      config=ExportConfig(formats=("pte",), max_seq_len=spec["seq"], buckets=spec.get("buckets")))
        out[f"export_seconds_{variant}"] = round(time.perf_counter() - t0, 1)
        log.info("%s: exported %s in %.0fs", case, variant, out[f"export_seconds_{variant}"])
        record.write_text(json.dumps(out, indent=1) + "\n")
    return out


# --------------------------------------------------------------------------- stage 3-4: measurement


def summarize(lat: list[float]) -> dict:
    a = np.asarray(lat)
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "max": float(a.max())}


def measure(case: str, spec: dict, work: Path, data, variants, *, dev_limit: int | None, rounds: int,
            curve_limit: int, runtime: str = "executorch") -> dict:
    """Static vs dynamic of every variant, interleaved per sentence over ``rounds`` rounds; then the per-rule curves
    (``runtime`` executorch: the Python loop over ExecuTorch methods; native: libedgenlp, no curves)."""
    from edgenlp.dynamic.calibrate import paired_se
    from edgenlp.run.base import get_runner
    from edgenlp.run.dynamic import run_sentence
    from edgenlp.run.executorch import set_threads

    set_threads(1)  # before any program loads
    native = runtime == "native"
    runners = {v: get_runner(work / case / f"bundle-{v}", runtime=runtime, threads=1) for v in variants}
    first = runners[variants[0]]
    dev = data.dev.head(dev_limit)
    gold = np.asarray(dev.label_ids(first.labels))
    ids = first.token_ids(dev.texts)
    inputs = list(dev.texts) if native else ids  # what a call takes: text (native: it tokenizes) or token ids

    def one(runner, x, settings):
        if native:  # settings: the per-call options; latency_ms: the whole C call
            return runner.predict_details([x], **settings)[0]
        t0 = time.perf_counter()
        p = run_sentence(runner.backend, runner.segments, x, settings, mask_bias=runner.mask_bias, pad_id=runner.pad_id,
                         num_layers=runner.spec.num_layers)
        p.latency_ms = 1000 * (time.perf_counter() - t0)
        return p

    def settings_of(runner, static: bool):
        return {"static": static} if native else runner.settings_for(static=static)

    modes = {f"{v}/{m}": (runners[v], settings_of(r, m == "static"))
             for v, r in runners.items() for m in ("static", "dynamic")}
    names = list(modes)
    by_length = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    for name in names:  # warm-up: load every method once (every bucket)
        for i in by_length[:: max(1, len(ids) // 8)]:
            one(*modes[name][:1], inputs[i], modes[name][1])
    la0 = load_average()
    lat = {k: [[] for _ in ids] for k in names + (["tokenize"] if native else [])}
    preds: dict = {}
    for r in range(rounds):
        for i, x in enumerate(inputs):
            for k in round_order(names, r + i):
                p = one(modes[k][0], x, modes[k][1])
                lat[k][i].append(p.latency_ms)
                preds.setdefault(k, [None] * len(ids))[i] = p  # decisions are deterministic: any round's
            if native:  # the tokenization every native call includes, timed alone (edgenlp_tokenize)
                t0 = time.perf_counter()
                first.handle.tokenize([x])
                lat["tokenize"][i].append(1000 * (time.perf_counter() - t0))
        log.info("%s: round %d/%d done (load %s)", case, r + 1, rounds, load_average())
    la1 = load_average()
    per_sentence = {k: [median(v) for v in lat[k]] for k in names}
    result = {"n": len(ids), "rounds": rounds, "runtime": runtime,
              "lengths": {"mean": float(np.mean([len(x) for x in ids])), "p90": float(np.percentile([len(x) for x in ids], 90)),
                          "max": int(max(len(x) for x in ids))},
              "load_avg": {"start": la0, "end": la1}, "variants": {}}
    right: dict[str, np.ndarray] = {}  # the dynamic path's correct rows per variant (the reference case's drop)
    for v, runner in runners.items():
        s, d = preds[f"{v}/static"], preds[f"{v}/dynamic"]
        right_s = np.array([p.logits.argmax() for p in s]) == gold
        right[v] = right_d = np.array([p.logits.argmax() for p in d]) == gold
        acc_s, acc_d = float(right_s.mean()), float(right_d.mean())
        ls, ld = summarize(per_sentence[f"{v}/static"]), summarize(per_sentence[f"{v}/dynamic"])
        ratio = np.array(per_sentence[f"{v}/static"]) / np.array(per_sentence[f"{v}/dynamic"])
        L = runner.spec.num_layers
        exits = {str(l): int(sum(p.exit_layer == l for p in d)) for l in runner.spec.exits}
        reached, tokens = np.zeros(L), np.zeros(L)
        for p in d:
            reached[: len(p.tokens)] += 1
            tokens[: len(p.tokens)] += p.tokens
        result["variants"][v] = {
            "static": {"accuracy": acc_s, "latency_ms": ls}, "dynamic": {"accuracy": acc_d, "latency_ms": ld},
            "extra_drop_points": round(100 * (acc_s - acc_d), 3),
            "extra_drop_se_points": round(paired_se(right_s, right_d), 3),  # the same sentences, static and dynamic
            "changed_rows": {"lost": int((right_s & ~right_d).sum()), "gained": int((right_d & ~right_s).sum())},
            "speedup_mean": ls["mean"] / ld["mean"], "p90_ratio": ld["p90"] / ls["p90"],
            "per_sentence_speedup_median": float(np.median(ratio)),
            "exit_layers": exits, "mean_exit_layer": float(np.mean([p.exit_layer for p in d])),
            "tokens_kept": [float(t / r) if r else None for t, r in zip(tokens, reached)],
            "same_prediction_static_dynamic": int(sum(a.logits.argmax() == b.logits.argmax() for a, b in zip(s, d))),
            "settings": {"rule": runner.spec.rule, "threshold": runner.spec.threshold, "tokens": runner.spec.tokens,
                         "token_thresholds": list(runner.spec.token_thresholds), "keep_ratio": runner.spec.keep_ratio},
        }
        if native:  # the speed-up of the model alone, as the Python rows measure it (the mean tokenization taken off both)
            tok = summarize([median(v_) for v_ in lat["tokenize"]])
            result["variants"][v]["tokenize_ms"] = tok
            result["variants"][v]["speedup_mean_model_only"] = (ls["mean"] - tok["mean"]) / (ld["mean"] - tok["mean"])
    if spec.get("reference_case"):  # a model whose static path changed (joint): the drop against the fine-tuned model
        ref_case = spec["reference_case"]
        for v in runners:
            ref = get_runner(work / ref_case / f"bundle-{v}", runtime=runtime, threads=1)
            right_r = np.array([one(ref, x, settings_of(ref, True)).logits.argmax() for x in inputs]) == gold
            ref.close()
            row = result["variants"][v]
            row["reference"] = {
                "case": ref_case, "accuracy": float(right_r.mean()),
                "static_drop_points": round(100 * (float(right_r.mean()) - row["static"]["accuracy"]), 3),
                "drop_points": round(100 * (float(right_r.mean()) - row["dynamic"]["accuracy"]), 3),
                "drop_se_points": round(paired_se(right_r, right[v]), 3)}
            log.info("%s %s: against %s's static bundle: %s", case, v, ref_case, result["variants"][v]["reference"])
    report = json.loads((case_model_dir(work, case, spec) / "dynamic-report.json").read_text())
    result["validation"] = {k: v for k, v in report["validation"].items() if k != "curves"}
    result["validation"]["split"] = report["task"]
    static_lat = {v: per_sentence[f"{v}/static"][:curve_limit] for v in runners}
    static_pred = {v: preds[f"{v}/static"][:curve_limit] for v in runners}
    if not native:  # (the C API switches no exit rule)
        result["curves"] = curves(case, report, runners, ids[:curve_limit], gold[:curve_limit], static_lat, static_pred,
                                  one)
    for r in runners.values():
        r.close()
    return result


def curve_thresholds(report: dict, rule: str, k: int = 7) -> list[float]:
    """``k`` thresholds spread over ``rule``'s validation curve (by relative cost), from the dynamic step's report."""
    pts = report["validation"]["curves"][rule]
    if rule == "patience":
        return sorted({p["threshold"] for p in pts})
    pts = sorted(pts, key=lambda p: p["cost"])
    idx = np.unique(np.linspace(0, len(pts) - 1, k).round().astype(int))
    return sorted({pts[i]["threshold"] for i in idx})


def curves(case, report, runners, ids, gold, static_lat, static_pred, one) -> dict:
    """Mean latency and accuracy of each rule at several thresholds (and of keep ratios without exits), one round."""
    n = len(ids)
    out = {}
    for v, r in runners.items():
        static = static_lat[v]
        static_acc = float((np.array([p.logits.argmax() for p in static_pred[v]]) == gold).mean())
        per = {"static": {"latency_ms": float(np.mean(static)), "accuracy": static_acc}}
        settings = []
        if len(r.spec.exits) > 1:
            for rule in ("maxprob", "entropy", "patience"):
                for t in curve_thresholds(report, rule):
                    settings.append((rule, t, r.settings_for(rule=rule, exit_threshold=t)))
        if r.spec.token_layers:
            for keep in (1.0, 0.8, 0.6, 0.5, 0.4, 0.3):
                settings.append(("keep", keep, r.settings_for(keep=keep, exits=False)))
        pts = []
        for name, t, st in settings:
            got = [one(r, x, st) for x in ids]
            acc = float((np.array([p.logits.argmax() for p in got]) == gold).mean())
            lat = float(np.mean([p.latency_ms for p in got]))
            pts.append({"rule": name, "threshold": t, "accuracy": acc, "latency_ms": lat,
                        "speedup": per["static"]["latency_ms"] / lat, "drop_points": 100 * (static_acc - acc),
                        "mean_exit_layer": float(np.mean([p.exit_layer for p in got]))})
            log.info("%s %s %s=%s: %.2fx, drop %.2f", case, v, name, t, pts[-1]["speedup"], pts[-1]["drop_points"])
        per["points"] = pts
        out[v] = per
    return {"sentences": n, "by_variant": out}


# --------------------------------------------------------------------------- report


def plot(results: dict, path: Path) -> None:
    """Accuracy change against speedup: one panel per measured case and variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c, res in results["cases"].items() if "variants" in res and res.get("curves")]
    cols = max(len(results["cases"][c]["variants"]) for c in cases)
    fig, axes = plt.subplots(len(cases), cols, figsize=(6.0 * cols, 3.6 * len(cases)), sharey=True, squeeze=False)
    for row, case in zip(axes, cases):
        res = results["cases"][case]
        for ax, v in zip(row, res["variants"]):
            cur = res["curves"]["by_variant"][v]
            for rule in ("maxprob", "entropy", "patience", "keep"):
                pts = sorted([p for p in cur["points"] if p["rule"] == rule], key=lambda p: p["speedup"])
                if pts:
                    ax.plot([p["speedup"] for p in pts], [-p["drop_points"] for p in pts], "o-", ms=3,
                            label=rule if rule != "keep" else "keep ratio (no exits)")
            t = res["spec"]["target"]  # the target region: at least this fast, at most this much lost
            ax.fill_between([t["speedup"], max(6.0, t["speedup"] + 1)], -t["drop"], 2.0, color="green", alpha=0.08,
                            label=f"issue target (≥{t['speedup']}x, ≤{t['drop']} pts)")
            ax.plot([1.0], [0.0], "ks", label="static")
            h = res["variants"][v]
            se = drop_se_of(h)
            ax.plot([h["speedup_mean"]], [-drop_of(h)], "r*", ms=12,
                    label="calibrated threshold (all measured dev rows)"
                    + (", drop vs the fine-tuned model" if "reference" in h else ""))
            if se is not None:
                ax.errorbar([h["speedup_mean"]], [-drop_of(h)], yerr=[se], color="r", capsize=3, lw=1)
            for p in PUBLISHED:
                if p["speedup"] is not None and p["drop"] is not None:
                    ax.plot([p["speedup"]], [-p["drop"]], "x", color="gray")
                    ax.annotate(f"{p['method']} (published{', bound' if p.get('drop_is_bound') else ''})",
                                (p["speedup"], -p["drop"]), fontsize=7, color="gray")
            ax.axhline(0, color="k", lw=0.5)
            ax.set_title(f"{case}, {v} (ExecuTorch Python runtime, 1 thread)")
            ax.set_xlim(0.8, 3.5)
            ax.set_ylim(-6.0, 1.5)  # the region that matters; the curves' fastest points run further down
            ax.grid(alpha=0.3)
        row[0].set_ylabel("dev accuracy change (points)")
    for ax in axes[-1]:
        ax.set_xlabel("mean-latency speedup vs the same static bundle")
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def target_met(t: dict, r: dict) -> bool:
    """Whether measured row ``r`` meets the issue's target ``t`` (the case's ``spec["target"]``)."""
    return r["speedup_mean"] >= t["speedup"] and drop_of(r) <= t["drop"] and (
        "p90_slower" not in t or r["p90_ratio"] <= 1 + t["p90_slower"])


def drop_of(row: dict) -> float:
    """The drop a row is held to: against the fine-tuned model's static bundle where the case names one (joint
    training changed the static path), else against the bundle's own static methods."""
    return row["reference"]["drop_points"] if "reference" in row else row["extra_drop_points"]


def drop_se_of(row: dict) -> float | None:
    """The paired SE of :func:`drop_of` (None in results measured before it was recorded)."""
    return row["reference"]["drop_se_points"] if "reference" in row else row.get("extra_drop_se_points")


def target_text(t: dict) -> str:
    return f"≥{t['speedup']}x at ≤{t['drop']} pts" + (f", p90 ≤{1 + t['p90_slower']:.2f}x static" if "p90_slower" in t else "")


def _se(row: dict) -> str:
    """`` ± SE`` of a measured extra drop: the paired standard error over the dev rows (not in older results)."""
    if "reference" in row:
        return f" ± {row['reference']['drop_se_points']:.2f} (vs the fine-tuned model; vs its own static {row['extra_drop_points']:.2f})"
    return f" ± {row['extra_drop_se_points']:.2f}" if "extra_drop_se_points" in row else ""


def hidden_by_rounding(t: dict, row: dict) -> str:
    """`` (1.998x)`` where the table's two decimals would show a missed speed-up target as reached."""
    return f" ({row['speedup_mean']:.3f}x)" if row["speedup_mean"] < t["speedup"] <= round(row["speedup_mean"], 2) else ""


def _model_only(row: dict) -> str:
    """A native row's speed-up without its tokenization (what the Python rows measure), beside the whole call's."""
    if "speedup_mean_model_only" not in row:
        return ""
    return f" ({row['speedup_mean_model_only']:.2f}x without the {row['tokenize_ms']['mean']:.2f} ms tokenization)"


def _ref_acc(row: dict) -> str:
    return f" (fine-tuned model {100 * row['reference']['accuracy']:.2f})" if "reference" in row else ""


def case_host(host: dict) -> dict:
    """What a case records of the machine that measured it (the file's ``host`` block is its last writer's)."""
    return {k: host.get(k) for k in ("cpu_model", "cpu_count", "isa_flags", "written")}


def host_text(host: dict | None) -> str:
    if not host:
        return "not recorded"
    return f"{host['cpu_model']}, {host['cpu_count']} cores, ISA flags {host['isa_flags']}"


def results_table(results: dict) -> str:
    """The measured table (also what the README shows)."""
    lines = ["| case | variant | dev rows | static acc | dynamic acc | extra drop ± SE (pts) | static mean / p90 ms "
             "| dynamic mean / p90 ms | speedup (mean) | p90 ratio | exit threshold | mean exit layer | tokens per layer "
             "| issue target |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for case, res in results["cases"].items():
        if "variants" not in res:
            continue
        for v, r in res["variants"].items():
            lines.append(
                f"| {case} | {v} | {res['n']} | {100 * r['static']['accuracy']:.2f}{_ref_acc(r)} | {100 * r['dynamic']['accuracy']:.2f} "
                f"| {drop_of(r):.2f}{_se(r)} "
                f"| {r['static']['latency_ms']['mean']:.2f} / {r['static']['latency_ms']['p90']:.2f} "
                f"| {r['dynamic']['latency_ms']['mean']:.2f} / {r['dynamic']['latency_ms']['p90']:.2f} "
                f"| {r['speedup_mean']:.2f}x{_model_only(r)} | {r['p90_ratio']:.2f} | {r['settings']['threshold']:.4g} "
                f"| {r['mean_exit_layer']:.2f} "
                f"| {', '.join(f'{x:.0f}' if x is not None else '-' for x in r['tokens_kept'])} "
                f"| {target_text(res['spec']['target'])}: {'met' if target_met(res['spec']['target'], r) else 'not met'}"
                f"{hidden_by_rounding(res['spec']['target'], r)} |")
    return "\n".join(lines)


def markdown(results: dict) -> str:
    lines = ["# Dynamic inference: early exits and token pruning (MiniLM-L6)", "",
             "ExecuTorch Python runtime (cases marked (native): libedgenlp's C API, the same segment loop in C++ as an "
             "app runs it, a call's time including its tokenization for static and dynamic alike; the speed-up without it "
             "takes the mean tokenization, timed alone in the same rounds, off both), "
             "1 thread, batch 1, each dev sentence padded to the smallest bucket that holds it "
             "(buckets per case: " + ", ".join(f"{c} {list(r['spec'].get('buckets') or ['default'])}" for c, r in results["cases"].items())
             + "). "
             "Static = the `forward_<S>` methods of the same bundle (the static bundle's program, same weights and "
             "kernels); static and dynamic of every variant interleaved per sentence, a sentence's latency the median "
             "of its rounds; mean/p90 over sentences. Thresholds calibrated on held-out *training* rows; every number "
             "below is dev. ± SE: the paired standard error of the extra drop over the dev rows (it grows with the "
             "number of sentences the exits change).", "", results_table(results), ""]
    lines += ["Host and load averages (1/5/15 min) at the start and end of each case's measurement (compare variants "
              "within a case only: cases may come from different machines):", ""]
    lines += [f"- {c}: {host_text(r.get('host'))}; load {r['load_avg']['start']} → {r['load_avg']['end']}"
              for c, r in results["cases"].items() if "load_avg" in r]
    lines += [""]
    for c, r in results["cases"].items():
        if "variants" not in r:
            continue
        st = next(iter(r["variants"].values()))["settings"]
        val = r.get("validation", {})
        ch = val.get("chosen", {})
        lines.append(f"- {c}: {st['rule']} threshold {st['threshold']:.4g}"
                     + (f", token thresholds {[round(x, 3) for x in st['token_thresholds'] if x is not None]}" if st["tokens"] == "ltp" else "")
                     + (f", keep ratio {st['keep_ratio']:g}" if st["tokens"] == "keep" else "")
                     + f"; on {val.get('split', {}).get('val_rows', '?')} held-out training rows: drop "
                     f"{ch.get('drop', float('nan')):.2f}" + (f" ± {ch['drop_se']:.2f}" if "drop_se" in ch else "")
                     + f" points at {ch.get('cost', float('nan')):.2f}x the static FLOPs")
    lines += ["", "## Published reference points (other models, hardware and batch sizes: orientation, not baselines)", "",
              "| method | setting | speedup | accuracy drop (pts) |", "|---|---|---|---|"]
    for p in PUBLISHED:
        lines.append(f"| {p['method']} | {p['what']} | {p['speedup'] if p['speedup'] is not None else 'n/a'} | "
                     f"{('≤' if p.get('drop_is_bound') else '') + str(p['drop']) if p['drop'] is not None else 'n/a'} |")
    lines += ["", "Curves (`dynamic.png`): every rule at thresholds spread over its validation curve, and keep "
              "ratios without exits where tokens may drop, on the first sentences of the measured set (one round); "
              "x = mean-latency speedup vs the same static bundle, y = accuracy change.", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", action="append", default=[], metavar="TASK=DIR", help="A fine-tuned model directory per task.")
    ap.add_argument("--cases", nargs="+", default=["sst2"], choices=list(CASES))
    ap.add_argument("--variants", nargs="+", default=["fp32", "int8"], choices=["fp32", "int8"])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--dev-limit", type=int, default=None, help="Measure only the first N dev rows (all cases).")
    ap.add_argument("--imdb-dev-limit", type=int, default=300, help="Dev rows measured for the IMDB cases.")
    ap.add_argument("--rounds", type=int, default=3, help="Passes over the dev rows (a sentence's latency: their median).")
    ap.add_argument("--curve-limit", type=int, default=300, help="Sentences per curve point.")
    ap.add_argument("--stage", choices=["build", "measure", "all"], default="all")
    ap.add_argument("--runtime", choices=["executorch", "native"], default="executorch",
                    help="Measure through the ExecuTorch Python runtime or libedgenlp (recorded as '<case> (native)').")
    ap.add_argument("--out", type=Path, default=RESULTS / "dynamic")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for name in ("torchao", "torch", "executorch", "onnxscript", "onnx_ir"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from edgenlp.data.tasks import load_task

    bench = Results(script="dynamic", threads=1)
    teachers = dict(t.split("=", 1) for t in args.teacher)
    out_json = args.out.with_suffix(".json")
    results = json.loads(out_json.read_text()) if out_json.is_file() else {"cases": {}}
    earlier = results.pop("host", None)
    for entry in results["cases"].values():  # files before per-case hosts: every measured case was the last writer's
        if "variants" in entry and "host" not in entry and earlier:
            entry["host"] = case_host(earlier)
    for case in args.cases:
        spec = CASES[case]
        if spec["task"] not in teachers:
            log.warning("%s: no --teacher %s=DIR, skipped", case, spec["task"])
            continue
        data = load_task(spec["task"])
        key = case if args.runtime == "executorch" else f"{case} ({args.runtime})"
        entry = results["cases"].setdefault(key, {})
        entry["spec"] = {k: v for k, v in spec.items()}
        entry["teacher"] = teachers[spec["task"]]
        if args.stage in ("build", "all"):
            build(case, spec, Path(teachers[spec["task"]]), args.workdir, data, args.variants)
        record = args.workdir / case / "build.json"  # the build of the bundles measured, never an earlier file's
        entry["build"] = json.loads(record.read_text()) if record.is_file() else {}
        if args.stage in ("measure", "all"):
            limit = args.imdb_dev_limit if spec["task"] == "imdb" else args.dev_limit
            entry.update(measure(case, spec, args.workdir, data, args.variants, dev_limit=limit, rounds=args.rounds,
                                 curve_limit=args.curve_limit, runtime=args.runtime))
            entry["host"] = case_host(bench.host())  # cases of one file may come from different machines
        if args.stage == "build":  # the results file (its host, load and commit) is a measurement's; build.json holds this
            log.info("%s built in %s", case, args.workdir / case)
            continue
        measured = any("variants" in r and r.get("curves") for r in results["cases"].values())  # (what plot draws)
        bench.write(args.out, results, markdown(results), plot=(lambda p: plot(results, p)) if measured else None)
        log.info("%s done; wrote %s", case, out_json)


if __name__ == "__main__":
    main()
