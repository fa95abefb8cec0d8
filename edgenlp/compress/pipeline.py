"""``compress()``: fine-tune -> plan -> prune -> quantize + export -> verify -> report, resumable.

Every stage writes one folder under ``DIR`` through a :class:`StageRunner`
(atomic, with ``stage.json``), so a rerun skips what finished with the same
inputs and an interrupted stage leaves nothing half-written::

    DIR/finetune/model/         the fine-tuned model (the accuracy reference)
    DIR/baseline/profile.json   its per-component host profile (the "before")
    DIR/exits/model/            the fine-tuned model with early exits, calibrated on held-out training rows
                                (``--dynamic auto``): how deep those rows run prices every candidate with exits
    DIR/plan/plan.json          every candidate the planner weighed, the chosen one, the shortlist
    DIR/prune/model/            the pruned model (absent when the plan prunes nothing)
    DIR/prune-exits/model/      a pruned candidate with early exits: its static twin's pruned model, exits added
    DIR/export/bundle/          the quantized bundle (.pte and .onnx)
    DIR/prune-c2/, export-c2/   the shortlist's second candidate (``--measure 2``), and so on
    DIR/measure/measure.json    every built candidate on the validation split, predicted vs measured
    DIR/verify/verify.json      the measured choice: dev accuracy through the runtimes, budgets
    DIR/bundle/                 the final bundle (a copy of the passing attempt's)
    DIR/compress.json, DIR/report.md, DIR/*.png

A validation split is held out of the training data before fine-tuning
(:func:`edgenlp.compress.measured.validation_rows`): fine-tuning early-stops
on it, pruning and quantization calibrate on the rest of train, and the
``--measure K`` best candidates of each plan are chosen between on it
(:mod:`edgenlp.compress.measured`). Dev accuracy is measured for the
uncompressed model and for the chosen bundle only.

When verification fails (accuracy drop above ``max_drop`` or a budget
missed, or, for the ``host`` target, a bundle slower on this machine than the
uncompressed program), the planner runs again without the failed candidate
and what it implies (anything at least as aggressive after an accuracy miss,
anything at most as aggressive after a budget miss, anything of the same
precision pruned no more after a slower bundle); attempt ``k > 1`` writes
``plan-k``, ``prune-k``, ``export-k``, ``verify-k``. For the ``host`` target
without a calibration of this machine, a minimal one is measured first and
cached (:func:`edgenlp.targets.calibrate.ensure_host_table`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgenlp.compress.config import CompressConfig, Preset, finetune_method_for
from edgenlp.compress.stages import StageRecord, StageRunner
from edgenlp.errors import EdgeNLPError, ParityError

log = logging.getLogger(__name__)

STAGES = ("finetune", "baseline", "exits", "plan", "prune", "export", "measure", "verify")
SUMMARY_VERSION = 1
FINAL_FILES = ("compress.json", "report.md", "candidates.png", "profile.png")


@dataclass(frozen=True)
class Build:
    """A stage whose work is one executor task: ``task(dest, progress)`` writes ``subdir`` at ``dest`` and returns a value
    that ``result`` turns into the stage's result."""

    stage: str
    inputs: dict
    upstream: tuple
    subdir: str
    task: Callable
    result: Callable[[dict], dict]


@dataclass
class CompressResult:
    """``bundle``: the final bundle; ``summary``: ``compress.json``; ``out``: the run folder."""

    out: Path
    bundle: Path
    summary: dict


# --------------------------------------------------------------------------- inputs


_DIGESTS: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256, so a file is hashed once per process


def file_key(path: str | Path) -> dict:
    """What identifies a file's content for a stage fingerprint and the measured-candidate cache: name, size, sha256.

    By content, not by path or modification time: a data set copied, mounted
    again or touched keeps its stages and its measured rows.
    """
    from edgenlp.utils import sha256_file

    p = Path(path)
    st = p.stat()
    memo = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _DIGESTS:
        _DIGESTS[memo] = sha256_file(p)
    return {"name": p.name, "bytes": st.st_size, "sha256": _DIGESTS[memo]}


def model_key(spec: str) -> dict:
    """A registered model name as is; a model directory by the content of its config and weight files."""
    p = Path(spec)
    if not p.is_dir():
        return {"name": spec}
    files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in (".json", ".safetensors", ".bin"))
    return {"files": [file_key(f) for f in files]}


def check_model(spec: str) -> None:
    """A registered model name or an existing directory, else a one-line error naming the known models."""
    from edgenlp.models.registry import list_models

    if Path(spec).is_dir():
        return
    names = [m.name for m in list_models()]
    if spec not in names:
        raise EdgeNLPError(f"unknown model {spec!r}: not a directory and not one of {', '.join(names)}")


def finetune_config(config: CompressConfig, preset: Preset, num_classes: int):
    """The first stage's fine-tuning config: the library defaults, bounded by the preset; ``auto`` resolved for the task."""
    from edgenlp.finetune.config import FinetuneConfig, LearnerConfig

    method, _ = finetune_method_for(config.finetune_method, num_classes)
    learner = None
    if method == "learner" and preset.priming_steps is not None:
        learner = LearnerConfig(priming_steps=preset.priming_steps)
    return FinetuneConfig(method=method, epochs=None,
                          max_steps=preset.steps_for(method), train_limit=preset.train_limit, seed=config.seed,
                          max_seq_len=preset.finetune_seq_len, learner=learner)


def host_threads(threads: int) -> int:
    """The budget's thread count, capped at this host's cores (measured latency says so)."""
    return max(1, min(threads, os.cpu_count() or 1))


# --------------------------------------------------------------------------- stages


def stage_name(stage: str, attempt: int, slot: int = 1) -> str:
    """``stage``, ``stage-2`` for attempt 2, ``stage-c2`` / ``stage-2-c2`` for the shortlist's second candidate."""
    name = stage if attempt == 1 else f"{stage}-{attempt}"
    return name if slot == 1 else f"{name}-c{slot}"


def _prunes(cand: dict) -> bool:
    """Whether a candidate prunes or sparsifies (so it has a pruned model of its own)."""
    return bool(cand.get("sparsity")) or bool(cand.get("block_sparsity"))


def _static(cand: dict) -> dict:
    """The candidate without early exits: what its pruning is built from."""
    return {k: v for k, v in cand.items() if k != "exits"}


def _how(cand: dict) -> tuple:
    """How a candidate prunes (:func:`edgenlp.targets.prior.pruning_key`): candidates alike share a prune stage (the
    exits count only when nothing is pruned: then the stage hands on the exits stage's model or the fine-tuned one)."""
    from edgenlp.targets.planner import Candidate
    from edgenlp.targets.prior import pruning_key

    return (*pruning_key(Candidate.from_dict(cand)), None if _prunes(cand) else bool(cand.get("exits")))


def _accuracy(report: dict) -> float:
    return float(report["accuracy"])


def _profile(spec: Path, *, seq_len: int, threads: int, runs: int, runtimes: tuple[str, ...],
             workdir: Path | None = None) -> dict:
    from edgenlp.profile.api import ProfileConfig, profile

    docs = profile(spec, ProfileConfig(seq_lens=(seq_len,), runtimes=runtimes, threads=(threads,), runs=runs, warmup=3),
                   workdir=workdir)
    return docs[0]


def _native_available() -> bool:
    from edgenlp.run.native import native_available

    return native_available()


class Compressor:
    """One ``compress`` run: the config, the data, the target and the stage runner."""

    def __init__(self, config: CompressConfig, out: Path, *, data_dir: str | Path | None, device: str, progress: bool,
                 echo: Callable[[str], None] | None, executor=None) -> None:
        from edgenlp.data.tasks import load_task
        from edgenlp.compress.planning import load_target

        self.config = config
        self.preset = config.resolved_preset
        self.out = Path(out)
        self.device = device
        self.progress = progress
        self.echo = echo or (lambda msg: log.info("%s", msg))
        self.target = load_target(config.target)  # unknown target or model: an error before any work
        check_model(config.model)
        self.data = load_task(config.task, data_dir=data_dir)
        from edgenlp.compress.planning import resolve_budgets

        self.budgets = resolve_budgets(self.target, latency_ms=config.latency_ms, memory_mb=config.memory_mb,
                                       size_mb=config.size_mb, seq_len=config.seq_len, threads=config.threads,
                                       latency_stat=config.latency_stat)
        from edgenlp.compress.measured import validation_rows

        self.val_rows = validation_rows(len(self.data.train))
        # tuned on train minus validation; chosen between on validation; dev only reports
        self.tuning, self.val = self.data.hold_out(self.val_rows, seed=config.seed)
        self.data_key = {"task": self.data.name, "train": file_key(self.data.train.path), "dev": file_key(self.data.dev.path),
                         "validation": {"rows": self.val_rows, "seed": config.seed}}
        self.started = time.perf_counter()
        self.stage_seconds: dict[str, float] = {}
        self._trimmed_rows: int | None = None  # the tuning rows' kept tokens, counted once for every attempt's plan
        self.runner = StageRunner(self.out, on_event=self._event)
        self.executor = executor  # where candidate builds run (edgenlp.executor.Executor); None: in this process

    # -- progress
    def _event(self, stage: str, what: str) -> None:
        if what == "skip":
            self.echo(f"[{stage}] up to date, skipped")
        elif what == "start":
            self.echo(f"[{stage}] running")
        elif what == "done":
            self.echo(f"[{stage}] done")

    def _record(self, rec: StageRecord) -> StageRecord:
        self.stage_seconds[rec.stage] = round(rec.seconds, 1)
        return rec

    # -- stage 1: fine-tune
    def finetune(self) -> StageRecord:
        from edgenlp.finetune import finetune
        from edgenlp.models.registry import load_model

        ftc = finetune_config(self.config, self.preset, self.data.num_labels)
        _, why = finetune_method_for(self.config.finetune_method, self.data.num_labels)

        def run(tmp: Path) -> dict:
            model, info = load_model(self.config.model, labels=self.data.labels, seed=self.config.seed)
            res = finetune(model, info, self.tuning, ftc, device=self.device, show_progress=self.progress)
            res.save(tmp / "model", info)
            rep = res.report
            from edgenlp.compress.measured import eager_accuracy

            dev = eager_accuracy(res.model, info, self.data.dev, self.data.labels, max_len=ftc.max_seq_len)
            return {"dev": dev, "val": rep.get("dev", {}), "val_rows": len(self.val), "train_rows": len(self.tuning.train),
                    "method": rep.get("method"), "method_why": why, "trainable_params": rep.get("trainable_params"),
                    "total_params": rep.get("total_params"), "steps": rep.get("steps"), "device": rep.get("device")}

        inputs = {"model": model_key(self.config.model), "data": self.data_key, "finetune": ftc.to_dict()}
        return self._record(self.runner.run("finetune", run, inputs=inputs))

    # -- stage 2: the uncompressed model's host profile
    def baseline(self, ft: StageRecord) -> StageRecord:
        seq, threads = self.budgets.seq_len, host_threads(self.budgets.threads)

        def run(tmp: Path) -> dict:
            from edgenlp.utils import atomic_write_json

            # The lowered fp32 program stays in the stage folder: verify times it again, alternating with
            # the compressed bundle, so the reported speed-up is not skewed by a change of machine load.
            doc = _profile(ft.path / "model", seq_len=seq, threads=threads, runs=self.preset.profile_runs,
                           runtimes=("executorch",), workdir=tmp / "lowered")
            atomic_write_json(tmp / "profile.json", doc)
            return {"latency_ms": doc["total"]["latency_ms"]["executorch"], "seq_len": seq, "threads": threads,
                    "params": doc["total"].get("params"), "program": {"pte": "lowered/model.pte", "method": f"forward_{seq}"}}

        inputs = {"seq_len": seq, "threads": threads, "runs": self.preset.profile_runs, "keeps_program": True}
        return self._record(self.runner.run("baseline", run, inputs=inputs, upstream=(ft,)))

    # -- stage 2b: early exits, measured on training rows held out of their training (``--dynamic auto``)
    @property
    def exits_config(self):
        return self.preset.exits_config(max_drop=self.config.max_drop, seed=self.config.seed,
                                        joint=self.config.dynamic == "joint")

    def exits(self, ft: StageRecord) -> StageRecord:
        """Exit heads on the fine-tuned model and the share of held-out rows that runs each layer (:class:`ExitStats`).

        The planner prices every candidate with exits from these shares (its
        latency statistic, :func:`edgenlp.targets.costmodel.exit_latency`) and
        adds the exits' validation drop to the candidate's; a candidate with
        quantized linears from the shares of the int8 model, its threshold
        calibrated again as ``quantize`` will (``ExitStats.quantized``). Off with
        ``--dynamic off``, and for tasks too small to calibrate a threshold on.
        """
        from edgenlp.compress.config import EXITS_MIN_ROWS

        dcfg = self.exits_config
        n = len(self.tuning.train)

        def run(tmp: Path) -> dict:
            if self.config.dynamic == "off":
                return {"enabled": False, "why": "--dynamic off"}
            if n < EXITS_MIN_ROWS:
                return {"enabled": False, "why": f"{n} training rows: too few to calibrate an exit threshold on "
                                                 f"(exits need {EXITS_MIN_ROWS})"}
            import dataclasses

            from edgenlp.dynamic.api import make_dynamic
            from edgenlp.dynamic.calibrate import drop_text
            from edgenlp.models.registry import load_model
            from edgenlp.targets.costmodel import ExitStats

            cfg = dataclasses.replace(dcfg, val_rows=min(dcfg.val_rows, n // 5))
            model, info = load_model(ft.path / "model", labels=self.data.labels)
            res = make_dynamic(model, info, self.tuning, cfg, device=self.device)
            res.save(tmp / "model")
            val = res.report["validation"]
            chosen = val["chosen"]
            source = f"compress exits stage: {cfg.val_rows} training rows held out of the exits' training"
            quantized = self._quantized_exit_stats(tmp / "model", source)
            stats = ExitStats(tuple(chosen["reach"]), float(chosen["drop"]), rule=res.model.spec.rule,
                              threshold=float(res.model.spec.threshold), source=source, quantized=quantized)
            self.echo(f"[exits] {cfg.rule} at {stats.threshold:.4g}: validation sentences run {stats.mean_layers:.2f} of "
                      f"{len(stats.reach)} layers on average, drop {drop_text(chosen)} points")
            if quantized is not None:
                self.echo(f"[exits] with int8 linears: calibrated again at {quantized.threshold:.4g}, validation "
                          f"sentences run {quantized.mean_layers:.2f} layers, drop {quantized.drop:.2f} points")
            return {"enabled": True, "stats": stats.to_dict(), "config": cfg.to_dict(), "model": "exits/model",
                    "relative_flops": chosen["cost"], "static_accuracy": val["static_accuracy"],
                    "within_max_drop": chosen["within_max_drop"], "seconds": res.report.get("seconds")}

        inputs = {"dynamic": self.config.dynamic, "train_rows": n}
        if self.config.dynamic != "off" and n >= EXITS_MIN_ROWS:  # (the exits' budget follows --max-drop)
            inputs["exits"] = dcfg.to_dict()
            inputs["quantized_stats"] = "int8 linears, threshold calibrated again"  # (records without them: rerun)
        return self._record(self.runner.run("exits", run, inputs=inputs, upstream=(ft,)))

    def _quantized_exit_stats(self, model_dir: Path, source: str):
        """:class:`ExitStats` of the exits model at ``model_dir`` with int8 linears, its threshold calibrated again on
        it as ``quantize`` will (:func:`edgenlp.compress.guard.exits_calibrated`): a quantized candidate's depth."""
        from edgenlp.compress.guard import exits_calibrated
        from edgenlp.models.registry import load_model
        from edgenlp.quantize.api import quantize_model
        from edgenlp.quantize.config import QuantizeConfig
        from edgenlp.targets.costmodel import ExitStats

        model, info = load_model(model_dir, labels=self.data.labels)
        qmodel, qinfo = quantize_model(model, info, QuantizeConfig(scheme="int8"))
        q = exits_calibrated(qmodel, qinfo, info, self.tuning).recipe[-1].result["exits"]
        if "reach" not in q:  # the threshold was kept (fixed, or no early exit): the fp32 statistics hold
            return None
        return ExitStats(tuple(q["reach"]), float(q["drop"]), rule=info.recipe[-1].config.rule, threshold=float(q["threshold"]),
                         source=f"{source}; int8 linears, threshold calibrated again on them")

    @staticmethod
    def exit_stats(ex: StageRecord | None):
        if ex is None or not ex.result.get("enabled"):
            return None
        from edgenlp.targets.costmodel import ExitStats

        return ExitStats.from_dict(ex.result["stats"])

    # -- stage 3: plan
    def plan(self, ft: StageRecord, attempt: int, excluded: list[dict], ex: StageRecord | None = None) -> StageRecord:
        from edgenlp.compress.measured import recalled
        from edgenlp.compress.planning import plan_for_compress, trimmed_vocab_size

        def run(tmp: Path) -> dict:
            from edgenlp.models.registry import load_model
            from edgenlp.utils import atomic_write_json

            model, info = load_model(ft.path / "model", labels=self.data.labels)
            if self._trimmed_rows is None:  # a trimmed table keeps the tokens of the rows the quantize step trims on
                self._trimmed_rows = trimmed_vocab_size(info, self.tuning)
            doc = plan_for_compress(self.target, self.budgets, shape=model.shape, num_labels=model.num_labels,
                                    preset=self.preset, excluded=excluded, task=self.data, max_drop=self.config.max_drop,
                                    objective=self.config.objective, measure=self.config.measure,
                                    measured=recalled(self.measured_key(ft)), exit_stats=self.exit_stats(ex),
                                    trimmed_vocab_size=self._trimmed_rows)
            doc["prune_measure"] = self.prune_measure(ft) or {"target": "params"}
            atomic_write_json(tmp / "plan.json", doc)
            return {"chosen": doc["chosen"], "predicted": doc["chosen_prediction"], "considered": len(doc["considered"]),
                    "shortlist": doc["shortlist"], "why": doc.get("why")}

        from edgenlp.targets.costmodel import cost_table_sources

        # The cost tables by file identity: a recalibration (or a device table measured since) re-plans.
        # (the measured-candidates cache is not an input: a rerun resumes the plan it made; a new run reads the cache)
        inputs = {"target": self.target.to_dict(), "budgets": self.budgets.to_dict(), "preset": self.preset.name,
                  "excluded": excluded, "max_drop": self.config.max_drop, "objective": self.config.objective,
                  "measure": self.config.measure,
                  "prune_budgets": self.preset.prune_budget_map(),
                  "cost_tables": [{"path": str(Path(p).resolve()), **file_key(p)} for p in cost_table_sources(self.target)]}
        if self.config.prune_target != "params":  # it names the measured rows the plan reads
            inputs["prune_target"] = self.config.prune_target
        upstream = (ft,) if ex is None else (ft, ex)
        return self._record(self.runner.run(stage_name("plan", attempt), run, inputs=inputs, upstream=upstream))

    # -- candidate builds: a stage whose work is an executor task (several of them at once on a pool or Ray)
    @property
    def parallel(self) -> bool:
        """Whether this run's executor runs tasks beside each other (a pool or Ray), not in this process."""
        ex = getattr(self, "executor", None)
        return ex is not None and ex.backend != "inline"

    def _build_stage(self, b: "Build") -> StageRecord:
        """Run the stage of build ``b``: move in what :meth:`prebuild` built, else build it now on the executor."""
        pre = self.__dict__.setdefault("_prebuilt", {}).pop(b.stage, None)

        def run(tmp: Path) -> dict:
            if pre is not None:
                from edgenlp.executor import successful_values

                scratch, outcome = pre
                try:
                    (value,) = successful_values([outcome], reraise=True)
                    os.replace(scratch / b.subdir, tmp / b.subdir)
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
            else:
                (value,) = self.build_candidates([b.task(tmp / b.subdir, self.progress)])
            return b.result(value)

        return self._record(self.runner.run(b.stage, run, inputs=b.inputs, upstream=b.upstream))

    def prebuild(self, builds: list["Build"]) -> None:
        """Build the stages of ``builds`` that are not up to date all at once when the executor runs tasks in parallel.

        Each build goes to a hidden scratch folder in the run folder (removed
        by the next run if this one is killed); its stage then moves it in
        (:meth:`_build_stage`), so stage records stay on this process and read
        the same whichever backend built them. In this process (the default
        executor), or with one build pending, nothing happens here and each
        stage builds when it runs.
        """
        pending = [b for b in builds if not self.runner.up_to_date(b.stage, b.inputs, b.upstream)]
        if len(pending) < 2 or not self.parallel:
            return
        scratch = {b.stage: self.out / f".{b.stage}.tmp-prebuild" for b in pending}
        for d in scratch.values():
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        self.echo(f"building {len(pending)} candidate stage(s) {self.executor.describe()}")
        outcomes = self.executor.map([b.task(scratch[b.stage] / b.subdir, False) for b in pending],
                                     on_result=lambda o, done, total: self.echo(
                                         f"  {o.key}: {'built' if o.ok else o.status} in {o.seconds:.0f} s ({done}/{total})"))
        prebuilt = self.__dict__.setdefault("_prebuilt", {})
        for b, outcome in zip(pending, outcomes):  # a failed build fails in its own stage, as it would one at a time
            prebuilt[b.stage] = (scratch[b.stage], outcome)

    # -- stage 4: prune
    def prune_build(self, ft: StageRecord, plan: StageRecord, attempt: int, cand: dict, slot: int = 1) -> "Build | None":
        """The prune stage of ``cand`` as a build (``None`` when the plan neither prunes nor sparsifies).

        The pruning is the static candidate's: early exits, when ``cand`` has
        them, go on in a stage of their own (:meth:`exits_build`), so a
        candidate and its twin with exits share one pruning and recovery.
        """
        if not _prunes(cand):
            return None
        cand = _static(cand)
        blocks = float(cand.get("block_sparsity") or 0.0)
        from edgenlp.compress.build import prune_candidate
        from edgenlp.executor import Task

        method = cand.get("prune_method")
        # recovery distillation after any pruning that does not distil by itself, at the budget the prior measured
        recovery = (self.preset.recovery_config(seed=self.config.seed)
                    if method is not None and self.preset.recovers_after(method) else None)  # fmt: skip
        stage = stage_name("prune", attempt, slot)
        kwargs = {"candidate": cand, "labels": self.data.labels, "task": self.tuning,
                  # the budget the prior measured, and what the sparsity measures
                  "prune_kwargs": {**self.preset.prune_kwargs(method), **self.prune_measure(ft)} if method else {},
                  "seq_len": self.budgets.seq_len, "seed": self.config.seed,
                  "recovery": recovery.to_dict() if recovery is not None else None,
                  "dev_before": ft.result.get("val") or None, "device": self.device}
        inputs = {"candidate": cand, "seq_len": self.budgets.seq_len, "seed": self.config.seed,
                  "budget": self.preset.prune_budget(method) if method else None, "recovery": kwargs["recovery"]}
        if method and self.prune_measure(ft):
            inputs["measure"] = self.prune_measure(ft)
        if blocks:  # block sparsity under distillation from the fine-tuned model, at the budget the prior measured
            kwargs["sparsify"] = inputs["sparsify"] = self.preset.sparsify_config(blocks, seed=self.config.seed).to_dict()
        return Build(stage, inputs, (ft, plan), "model",
                     lambda dest, progress: Task(stage, prune_candidate, (str(ft.path / "model"), str(dest)),
                                                 {**kwargs, "progress": progress}),
                     lambda value: {"identity": False, "model": f"{stage}/model", "evaluated_on": "validation", **value})

    def exits_build(self, pr: StageRecord, plan: StageRecord, attempt: int, cand: dict, slot: int = 1) -> "Build":
        """Early exits on the pruned model of ``pr`` (the static candidate's prune stage), trained and calibrated as
        the exits stage did for the unpruned model. The stage's result is the pruning's, with ``exits`` added."""
        from edgenlp.compress.build import exits_candidate
        from edgenlp.executor import Task

        stage = stage_name("prune-exits", attempt, slot)
        kwargs = {"labels": self.data.labels, "task": self.tuning, "exits": self._exits_used(), "device": self.device}
        inputs = {"candidate": cand, "exits": kwargs["exits"]}
        return Build(stage, inputs, (pr, plan), "model",
                     lambda dest, progress: Task(stage, exits_candidate, (str(self._model_path(pr)), str(dest)),
                                                 {**kwargs, "progress": progress}),
                     lambda value: {**pr.result, "model": f"{stage}/model", "pruned_by": pr.stage, **value})

    def prune(self, ft: StageRecord, plan: StageRecord, attempt: int, cand: dict | None = None, slot: int = 1,
              static: StageRecord | None = None) -> StageRecord:
        """The prune stage of ``cand``: the pruned (and recovered) model it is built from.

        For a pruned candidate with early exits, ``static`` is the prune stage
        of its twin without them (built here when not given), and the exits go
        on in a stage of their own on that model.
        """
        cand = cand if cand is not None else plan.result["chosen"]
        b = self.prune_build(ft, plan, attempt, cand, slot)
        if b is not None:
            if not cand.get("exits"):
                return self._build_stage(b)
            return self._build_stage(self.exits_build(static or self._build_stage(b), plan, attempt, cand, slot))
        inputs = {"candidate": cand, "seq_len": self.budgets.seq_len, "seed": self.config.seed, "budget": None,
                  "recovery": None}
        model = "exits/model" if cand.get("exits") else "finetune/model"  # unpruned: the exits stage's model as is
        return self._record(self.runner.run(stage_name("prune", attempt, slot),
                                            lambda tmp: {"identity": True, "model": model},
                                            inputs=inputs, upstream=(ft, plan)))

    def prune_shortlist(self, ft: StageRecord, plan: StageRecord, attempt: int, cands: list[dict]) -> list[StageRecord]:
        """The prune stage of each candidate of the shortlist, each pruning built once.

        Candidates pruned alike share one prune stage (the first slot's), and
        a pruned candidate with early exits adds its exits to the pruned model
        of its static twin, so the pruning and its recovery run once for both.
        With a parallel executor the static prune stages, then the exits
        stages, build at once.
        """
        statics: dict[tuple, tuple[int, dict]] = {}  # how a candidate prunes -> (first slot, static candidate)
        exits: dict[tuple, tuple[int, dict]] = {}  # the same, for the pruned candidates with exits
        for slot, cand in enumerate(cands, 1):
            statics.setdefault(_how(cand), (slot, _static(cand) if _prunes(cand) else cand))
            if _prunes(cand) and cand.get("exits"):
                exits.setdefault(_how(cand), (slot, cand))
        if self.parallel:
            self.prebuild([b for slot, cand in statics.values() if (b := self.prune_build(ft, plan, attempt, cand, slot))])
        done = {key: self.prune(ft, plan, attempt, cand, slot) for key, (slot, cand) in statics.items()}
        if self.parallel:
            self.prebuild([self.exits_build(done[key], plan, attempt, cand, slot) for key, (slot, cand) in exits.items()])
        with_exits = {key: self.prune(ft, plan, attempt, cand, slot, static=done[key]) for key, (slot, cand) in exits.items()}
        return [with_exits[_how(c)] if _prunes(c) and c.get("exits") else done[_how(c)] for c in cands]

    def _exits_used(self) -> dict:
        """The exits config the exits stage trained with (what a pruned candidate with exits repeats)."""
        rec = getattr(self, "exits_rec", None)
        if rec is None or not rec.result.get("enabled"):
            raise EdgeNLPError("a candidate with early exits was planned, but the exits stage did not train any")
        return dict(rec.result["config"])

    def _model_path(self, pr: StageRecord) -> Path:
        """The model the prune stage hands on, relative to this run's folder (so a copied run folder stays whole)."""
        rel = Path(pr.result["model"])
        if rel.is_absolute():  # records written before paths were relative
            rel = Path(*rel.parts[-2:])
        return self.out / rel

    # -- stage 5: quantize + export
    def export_build(self, pr: StageRecord, plan: StageRecord, attempt: int, cand: dict, slot: int = 1) -> "Build":
        from edgenlp.compress.build import export_candidate
        from edgenlp.executor import Task

        stage = stage_name("export", attempt, slot)
        kwargs = {"candidate": cand, "labels": self.data.labels, "task": self.tuning, "max_seq_len": self.max_len,
                  "annotations": {"target": self.target.to_dict(), "budgets": self.budgets.to_dict()}}
        inputs = {"candidate": cand, "max_seq_len": self.max_len, "target": self.target.name}
        return Build(stage, inputs, (pr, plan), "bundle",
                     lambda dest, progress: Task(stage, export_candidate, (str(self._model_path(pr)), str(dest)),
                                                 {**kwargs, "progress": progress}),
                     lambda value: {"sizes": value["sizes"], "parity": value["parity"]})

    def export(self, pr: StageRecord, plan: StageRecord, attempt: int, cand: dict | None = None, slot: int = 1) -> StageRecord:
        cand = cand if cand is not None else plan.result["chosen"]
        return self._build_stage(self.export_build(pr, plan, attempt, cand, slot))

    @property
    def max_len(self) -> int:
        """The longest input a built bundle takes."""
        return max(self.budgets.seq_len, 128)

    # -- stage 6: the shortlist on the validation split
    def measure(self, ft: StageRecord, plan: StageRecord, built: list[tuple[dict, StageRecord, StageRecord]],
                attempt: int, not_built: list[dict] | None = None) -> StageRecord:
        """Score every built candidate on the validation split; choose the first (in the plan's order) that meets every bound.

        ``not_built`` (``{"candidate", "stage", "error"}``: shortlisted
        candidates whose build failed its parity check) go into
        ``measure.json`` and the report as such.
        """
        from edgenlp.compress.measured import measure_built

        def run(tmp: Path) -> dict:
            return measure_built([(p, ex.path / "bundle", ex.stage) for p, _, ex in built], tmp / "measure.json",
                                 model_dir=ft.path / "model", labels=self.data.labels, val=self.val, max_len=self.max_len,
                                 target=self.target, budgets=self.budgets, max_drop=self.config.max_drop,
                                 threads=host_threads(self.budgets.threads), not_built=not_built,
                                 echo=lambda msg: self.echo(f"[{stage_name('measure', attempt)}] {msg}"))

        inputs = {"candidates": [p["candidate"] for p, _, _ in built], "not_built": not_built or [],
                  "max_drop": self.config.max_drop,
                  "budgets": self.budgets.to_dict(), "validation": self.data_key["validation"], "max_len": self.max_len}
        rec = self._record(self.runner.run(stage_name("measure", attempt), run, inputs=inputs,
                                           upstream=(ft, plan, *(ex for _, _, ex in built))))
        if not rec.skipped:
            from edgenlp.compress.measured import remember

            remember(self.measured_key(ft), rec.result["rows"], source=f"compress run {self.out}")
        return rec

    def measured_key(self, ft: StageRecord) -> dict:
        """What this run's measurements are cached under: the model, the task's data, the fine-tuning (and what a
        pruning's sparsity measures, when it is not the parameters: the same sparsity then removes other units; and
        the recovery budget, when it is not the preset's)."""
        key = {"model": model_key(self.config.model), "data": self.data_key,
               "finetune": finetune_config(self.config, self.preset, self.data.num_labels).to_dict(), "seed": self.config.seed}
        if self.config.recovery_changed:  # a longer recovery leaves the same pruning more accurate
            key["recovery"] = self.preset.recovery_config().budget()
        measure = self.prune_measure(ft)
        return {**key, "prune_measure": measure} if measure else key

    def prune_measure(self, ft: StageRecord) -> dict:
        """The prune config knobs that say what a candidate's sparsity measures: ``{}`` for the parameters (the
        methods' default), else the ``latency`` target with the attention weight of this target's cost model at
        the budgets' length and threads (int8 linears), from the fine-tuned model's shape."""
        if self.config.prune_target == "params":
            return {}
        if getattr(self, "_prune_measure", None) is None:
            import json

            from edgenlp.compress.planning import attention_weight
            from edgenlp.models.registry import shape_from_hf_config

            shape = shape_from_hf_config(json.loads((ft.path / "model" / "config.json").read_text()))
            w = attention_weight(self.target, shape, seq_len=self.budgets.seq_len, threads=self.budgets.threads)
            self._prune_measure = {"target": "latency", "attention_weight": round(w, 1)}  # stable across recalibrations
            self.echo(f"pruning measures latency on {self.target.name}: one attention-core FLOP costs "
                      f"{w:.2f} linear FLOPs at seq {self.budgets.seq_len}")
        return dict(self._prune_measure)

    def build_candidates(self, tasks: list) -> list:
        """Run candidate builds (:class:`edgenlp.executor.Task`) on this run's executor; their results, in order.

        The builds may run in other processes or on a Ray cluster; their
        results come back here and the stage records are written by this
        process. A build that raised re-raises here as itself; a build whose
        worker died more often than allowed is a :class:`TasksFailedError`.
        """
        from edgenlp.executor import open_executor, successful_values

        ex = self.executor or open_executor()
        if ex.backend == "inline":  # the stage's own progress says it all
            return successful_values(ex.map(tasks), reraise=True)
        self.echo(f"building {len(tasks)} candidate(s) {ex.describe()}")
        outcomes = ex.map(tasks, on_result=lambda o, done, total: self.echo(
            f"  {o.key}: {'built' if o.ok else o.status} in {o.seconds:.0f} s ({done}/{total})"))
        return successful_values(outcomes, reraise=True)

    def _baseline_program(self, base: StageRecord) -> tuple[Path, str] | None:
        prog = base.result.get("program")
        if not prog or not (base.path / prog["pte"]).is_file():
            return None
        return base.path / prog["pte"], prog["method"]

    # -- stage 6: verify
    def verify(self, ft: StageRecord, base: StageRecord, plan: StageRecord, ex: StageRecord, attempt: int,
               cand: dict | None = None) -> StageRecord:
        from edgenlp.compress.verify import verify_bundle

        cand = cand if cand is not None else plan.result["chosen"]

        def run(tmp: Path) -> dict:
            return verify_bundle(ex.path / "bundle", tmp, data=self.data, target=self.target, budgets=self.budgets,
                                 reference_accuracy=_accuracy(ft.result["dev"]), max_drop=self.config.max_drop,
                                 baseline_latency_ms=base.result["latency_ms"], baseline_program=self._baseline_program(base),
                                 runs=self.preset.profile_runs, candidate=cand,
                                 threads=host_threads(self.budgets.threads), native=_native_available())

        inputs = {"max_drop": self.config.max_drop, "budgets": self.budgets.to_dict(), "runs": self.preset.profile_runs,
                  "host_speed_gate": True, "candidate": cand}
        return self._record(self.runner.run(stage_name("verify", attempt), run, inputs=inputs,
                                            upstream=(ft, base, plan, ex)))

    # -- before planning for the host: this machine's own cost table
    def calibrate_host(self) -> None:
        """For the ``host`` target, measure this machine's minimal calibration first unless one is cached.

        Another machine's table would price this one (the plan for ``host``
        depends on its kernels: int4 ran slower than fp32 on an AVX2-only CPU).
        """
        if self.target.name != "host":
            return
        from edgenlp.compress.planning import load_target
        from edgenlp.targets.calibrate import ensure_host_table

        ensure_host_table(seq_len=self.budgets.seq_len, threads=host_threads(self.budgets.threads),
                          precisions=self.preset.schemes, progress=self.progress, echo=self.echo)
        self.target = load_target(self.config.target)  # with this machine's calibrated rates

    def clear_final_outputs(self) -> None:
        """Remove a previous run's bundle and reports: they are rewritten only when this run ends."""
        shutil.rmtree(self.out / "bundle", ignore_errors=True)
        for name in FINAL_FILES:
            (self.out / name).unlink(missing_ok=True)

    # -- the chain
    def run(self) -> CompressResult:
        from edgenlp.compress.report import write_reports
        from edgenlp.compress.planning import exclusions_after

        self.clear_final_outputs()
        self.calibrate_host()
        ft = self.finetune()
        base = self.baseline(ft)
        self.exits_rec = exits = self.exits(ft)
        excluded: list[dict] = []
        attempts = []
        passed = None
        exhausted = None
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                plan = self.plan(ft, attempt, excluded, exits)
            except EdgeNLPError as exc:
                if not attempts:  # no candidate fits at all: the planner's error names the closest point per budget
                    raise
                exhausted = str(exc)  # every candidate left was ruled out by the failed attempts: report those
                break
            shortlist = plan.result.get("shortlist") or [plan.result.get("predicted") or {"candidate": plan.result["chosen"]}]
            # each pruning built once (exits go on the static twin's pruned model); with a parallel executor the
            # shortlist's prune stages, then its export stages, build at once
            prs = self.prune_shortlist(ft, plan, attempt, [p["candidate"] for p in shortlist])
            if self.parallel:
                self.prebuild([self.export_build(pr, plan, attempt, p["candidate"], slot)
                               for slot, (p, pr) in enumerate(zip(shortlist, prs), 1)])
            built, not_built = [], []
            for slot, (p, pr) in enumerate(zip(shortlist, prs), 1):
                try:
                    built.append((p, pr, self.export(pr, plan, attempt, p["candidate"], slot)))
                except ParityError as exc:  # this candidate does not lower faithfully here: measure the others
                    if len(shortlist) == 1:
                        raise
                    self.echo(f"attempt {attempt}: candidate {slot} was not built ({exc}); measuring the others")
                    not_built.append({"candidate": p["candidate"], "stage": stage_name("export", attempt, slot),
                                      "error": str(exc)})
            if not built:
                raise EdgeNLPError(f"attempt {attempt}: no candidate of the shortlist was built: "
                                   + "; ".join(f"{json.dumps(n['candidate'], sort_keys=True)}: {n['error']}" for n in not_built))
            ms = self.measure(ft, plan, built, attempt, not_built)
            point, pr, ex = built[ms.result["chosen_index"]]
            chosen = point["candidate"]
            self.echo(f"attempt {attempt}: measured {len(built)} candidate(s) on validation; chose {ms.result['why']}")
            ver = self.verify(ft, base, plan, ex, attempt, chosen)
            attempts.append({"attempt": attempt, "plan": plan, "prune": pr, "export": ex, "measure": ms, "verify": ver,
                             "chosen": chosen})
            if ver.result["passed"]:
                passed = attempts[-1]
                break
            self.echo(f"attempt {attempt}: {'; '.join(ver.result['failures'])}; planning again")
            missed = [{"exactly": r["candidate"]} for r in ms.result["rows"] if not r["meets"] and r["candidate"] != chosen]
            missed += [{"exactly": n["candidate"]} for n in not_built]
            excluded = [*excluded, *exclusions_after(chosen, ver.result["failures_kind"]), *missed]
        summary = write_reports(self, ft=ft, base=base, attempts=attempts, passed=passed)
        if passed is None:
            last = attempts[-1]["verify"].result
            left = f"; no candidate left to try ({exhausted})" if exhausted else ""
            raise EdgeNLPError(f"no candidate met the budgets and the accuracy limit in {len(attempts)} attempt(s) "
                               f"(last: {'; '.join(last['failures'])}){left}; see {self.out / 'report.md'}")
        return CompressResult(self.out, self.out / "bundle", summary)


def compress(config: CompressConfig, out_dir: str | Path, *, data_dir: str | Path | None = None, device: str = "auto",
             progress: bool = True, echo: Callable[[str], None] | None = None, executor=None) -> CompressResult:
    """Produce the best bundle on ``config.objective`` of ``config.model`` for ``config.task`` within ``config.target``'s budgets.

    Stages run into ``out_dir`` (see the module docstring); a rerun with the
    same config skips the finished ones. Raises :class:`EdgeNLPError` for an
    unknown target or task, a budget no candidate can meet (naming the closest
    achievable point per budget), or when every attempt fails verification.
    ``executor`` (:class:`edgenlp.executor.ExecutorConfig`) says where
    candidate builds run: in this process (default), a local process pool or
    Ray; :class:`edgenlp.executor.ExecutorError` when Ray cannot start.
    """
    from edgenlp.executor import open_executor

    run = Compressor(config, Path(out_dir), data_dir=data_dir, device=device, progress=progress, echo=echo)
    with open_executor(executor) as run.executor:  # after the inputs are checked, before any work
        return run.run()


def copy_bundle(src: Path, dest: Path) -> Path:
    """Copy a bundle folder into place atomically (hard links where the filesystem allows)."""
    from edgenlp.utils import atomic_dir

    with atomic_dir(dest) as tmp:
        for f in src.iterdir():
            if f.is_file():
                try:
                    os.link(f, tmp / f.name)
                except OSError:
                    shutil.copy2(f, tmp / f.name)
    return dest

