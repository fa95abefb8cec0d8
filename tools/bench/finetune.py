"""Benchmark: cheap fine-tuning methods against tuned full fine-tuning on MiniLM-L6 (not CI).

Every (task, method, learning rates, seed) runs ``edgenlp finetune`` in its own
subprocess, so peak RSS is per run; all runs share one epoch count, thread
count and sequence length. The protocol, per task and method:

1. sweep: seed 0 at every (body lr, head lr) of ``--sweep-lr`` x
   ``--sweep-head-lr`` (``default`` is the library's default for that method),
   for the methods in ``--sweep-only`` and tasks in ``--sweep-tasks``;
2. seeds: every seed of ``--seeds`` at the sweep's best setting (dev accuracy).

Runs go in priority order (seed 0 at the defaults, then the sweep, then the
other seeds), so a run cut short by ``--budget-min`` still answers the main
comparison. The runs of a phase are independent tasks on :mod:`edgenlp.executor`:
one after another by default, ``--workers N`` at once on this machine, or
spread over a Ray cluster with ``--ray ADDRESS`` (each run asks for
``--threads`` CPUs; the reports come back to this process, which writes the
results). ``--step-timing N`` times N interleaved steps per method in one
process instead: the library's own step (``edgenlp.finetune.trainer.train_step``:
gradient clipping, AdamW from ``build_optimizer`` over the method's parameter
groups), written to ``<out>-steps.json``/``.md`` with a ``torch.profiler``
breakdown of one Learner step. Writes ``<out>.json`` (all reports) and
``<out>.md``, updated after every run; ``--report-only`` without ``--workdir``
rebuilds them from the runs stored in ``<out>.json``.

    # the full protocol (3 body x 3 head lrs spanning 10x, 3 seeds, every method; best on a CUDA machine)
    python tools/bench/finetune.py --sweep-lr 2e-5 5e-5 2e-4 --sweep-head-lr 5e-4 2e-3 5e-3 --seeds 0 1 2 --device cuda
    python tools/bench/finetune.py --step-timing 50                           # interleaved step times
    python tools/bench/finetune.py --ray 10.0.0.5:6379 --seeds 0 1 2 --device cuda   # the runs spread over a cluster
    python tools/bench/finetune.py --only full learner --sweep-head-lr default 5e-4 5e-3 --sweep-only full \
        --sweep-tasks banking77 --seeds 0 1 2 --budget-min 55 --workdir /tmp/ftb   # rerun reuses finished runs
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edgenlp.executor import Task, open_executor, successful_values  # noqa: E402
from tools.bench.harness import RESULTS, Results, interleave, median, run_rounds  # noqa: E402

log = logging.getLogger("bench.finetune")

# name -> (method, extra CLI args); the priming share is set per run from --priming-epochs (unset: the library's).
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "full": ("full", []),
    "learner": ("learner", ["--priming-epochs", "{priming}"]),
    "far": ("far", []),
    "bitfit": ("bitfit", []),
    "freeze-ffn": ("freeze-ffn", []),
    "learner-no-priming": ("learner", ["--priming-epochs", "0"]),
    "learner-rank-auto": ("learner", ["--rank", "auto", "--priming-epochs", "{priming}"]),
}
MAIN = ("full", "learner", "far")  # the comparison the targets are about: run first
DEFAULT = "default"  # a sweep value meaning "the library's default for this method"
TASK_ARGS = {"sst2": ["--train-limit", "8000"], "banking77": []}


def setting_name(setting: tuple[str, str]) -> str:
    lr, head = setting
    return f"lr={lr},head={head}"


def run_stem(task: str, variant: str, seed: int, setting: tuple[str, str], args) -> str:
    """A run's file name in the work folder (the setting and a validation split, when any, are part of it)."""
    tag = "" if setting == (DEFAULT, DEFAULT) else f"-lr{setting[0]}-head{setting[1]}"
    return f"{task}-{variant}{tag}{f'-val{args.val_rows}' if args.val_rows else ''}-{seed}"


def run_one(task: str, variant: str, seed: int, args, workdir: Path, setting: tuple[str, str] = (DEFAULT, DEFAULT)) -> dict:
    method, extra = VARIANTS[variant]
    if args.priming_epochs is None:  # the library's schedule (learner_schedule) decides priming
        fill = {i for i, a in enumerate(extra) if a == "{priming}"}
        extra = [a for i, a in enumerate(extra) if i not in fill and i + 1 not in fill]
    extra = [a.format(priming=args.priming_epochs) for a in extra]
    lr, head = setting
    extra += ([] if lr == DEFAULT else ["--lr", f"body={lr}"]) + ([] if head == DEFAULT else ["--lr", f"head={head}"])
    out = workdir / run_stem(task, variant, seed, setting, args)
    report = out.with_name(out.name + ".json")
    if report.exists():  # finished by an earlier, interrupted invocation with the same --workdir
        log.info("reuse: %s", report)
        data = json.loads(report.read_text())
        data["bench"] = {"task": task, "variant": variant, "seed": seed, "setting": setting_name(setting),
                         "process_wall_s": None, "reused": True}
        return data
    task_args = ["--train-limit", str(args.train_limit)] if args.train_limit else TASK_ARGS.get(task, [])
    epochs = [] if args.epochs == "auto" else ["--epochs", args.epochs]
    cmd = [sys.executable, "-m", "edgenlp.cli", "finetune", args.model, "--task", args.task_dirs.get(task, task),
           "--method", method, *extra, *task_args, *epochs, "--batch-size", str(args.batch_size),
           "--max-seq-len", str(args.max_seq_len), "--seed", str(seed), "--threads", str(args.threads),
           "--device", args.device, "--out", str(out), "--json-out", str(report), "--quiet"]
    if args.no_early_stop:
        cmd.append("--no-early-stop")
    if args.val_rows:
        cmd += ["--val-rows", str(args.val_rows)]
    if args.max_steps:
        cmd += ["--max-steps", str(args.max_steps)]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    log.info("run: %s", " ".join(cmd[3:]))
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{task}/{variant}/seed {seed} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    data = json.loads(report.read_text())
    data["bench"] = {"task": task, "variant": variant, "seed": seed, "setting": setting_name(setting),
                     "process_wall_s": round(time.perf_counter() - t0, 1)}
    import shutil

    shutil.rmtree(out, ignore_errors=True)  # the report is what the benchmark needs; model dirs are 90+ MB each
    return data


def attempt(task: str, variant: str, seed: int, setting: tuple[str, str], args, workdir: str, deadline: float | None) -> dict:
    """One run as an executor task: ``{"skipped": name}`` when it starts after ``deadline`` (a Unix time) or, with
    ``--report-only``, has no finished report; else ``{"run": report}``."""
    finished = Path(workdir) / f"{run_stem(task, variant, seed, setting, args)}.json"
    if (deadline is not None and time.time() > deadline) or (args.report_only and not finished.exists()):
        return {"skipped": f"{task}/{variant}/{setting_name(setting)}/seed {seed}"}
    return {"run": run_one(task, variant, seed, args, Path(workdir), setting)}


STEP = ("edgenlp.finetune.trainer.train_step: forward, cross-entropy, backward, clip_grad_norm_ of the optimizer's "
        "parameters (max_grad_norm), AdamW from build_optimizer over the method phase's parameter groups, zero_grad")


def step_setups(args, *, task: str, methods) -> tuple[dict, object, str]:
    """Per method: ``(model, optimizer, config)`` in its steady phase, the encoded training rows, the device.

    Each method is built as :func:`edgenlp.finetune.trainer.finetune` builds it:
    the method's phases from :data:`METHOD_TYPES`, the steady (last) phase
    entered (Learner and FAR after priming: FAR reconfigures from an untrained
    delta, same shapes), the optimizer from ``build_optimizer`` over that
    phase's parameter groups (decay / no-decay, the head at its own rate).
    """
    import torch

    from edgenlp.data.tasks import load_task
    from edgenlp.finetune.config import FinetuneConfig, LearnerConfig
    from edgenlp.finetune.methods import METHOD_TYPES
    from edgenlp.finetune.trainer import build_optimizer, count_trainable, encode_split, load_tokenizer
    from edgenlp.models.registry import load_model
    from edgenlp.utils import resolve_device

    device = resolve_device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)  # dropout
    data = load_task(args.task_dirs.get(task, task), data_dir=args.data_dir)
    split = data.train.sample(8000, seed=0)
    setups, enc = {}, None
    for name in methods:
        method_name, _ = VARIANTS[name]
        extra = {"learner": LearnerConfig(priming_steps=1)} if method_name == "learner" else {}
        cfg = FinetuneConfig(method=method_name, batch_size=args.batch_size, max_seq_len=args.max_seq_len, threads=args.threads,
                             **extra)
        model, info = load_model(args.model, labels=data.labels, seed=0)
        if enc is None:
            enc = encode_split(load_tokenizer(info), split, data.labels, max_len=args.max_seq_len)
        model.to(device)
        method = METHOD_TYPES[cfg.method](model, cfg, total_steps=100, steps_per_epoch=50)
        groups = method.phases()[-1].enter()
        model.to(device)  # modules a phase adds (Learners) start on the CPU
        optimizer = build_optimizer(groups, None)
        model.train()
        setups[name] = (model, optimizer, cfg, count_trainable(groups))
    return setups, enc, device


def interleaved_step_times(args, *, steps: int, task: str = "sst2") -> dict:
    """The library's training step (:data:`STEP`) per method, round-robin in one process on the same batches.

    On a machine shared with other jobs, separate runs see different load; here
    each method's k-th step runs right after the others' k-th step (the order
    flips every step), so load hits all methods alike and the ratios hold even
    when the seconds do not. Learner and FAR are timed in their steady phase
    (after priming). Reports median, mean, std, p10/p90 per method, and the
    median (p10–p90) of the per-step ratios to full.
    """
    import torch
    from torch import nn

    from edgenlp.finetune.trainer import collate, train_step

    setups, enc, device = step_setups(args, task=task, methods=args.timing_methods)
    sync = torch.cuda.synchronize if device == "cuda" else None
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(enc), generator=g).tolist()
    warm = 3  # first steps allocate optimizer state
    loss_fn = nn.CrossEntropyLoss()
    current: dict = {}

    def use_batch(k: int) -> None:
        index = perm[(k * args.batch_size) % len(perm):][: args.batch_size]
        current["batch"] = tuple(t.to(device) for t in collate(enc, index, pad_id=0))

    calls = {name: (lambda m=m, o=o, c=c: train_step(m, o, current["batch"], loss_fn=loss_fn, max_grad_norm=c.max_grad_norm))
             for name, (m, o, c, _) in setups.items()}
    run_rounds(calls, rounds=warm, before_round=use_batch)
    t = interleave(calls, rounds=steps, sync=sync, scale=1.0, unit="s", before_round=lambda k: use_batch(warm + k))
    base = "full" if "full" in calls else next(iter(calls))
    out = {}
    for n in calls:
        sm, r = t.summary(n), t.ratio_summary(n, base)
        out[n] = {"median_s": sm["median"], "mean_s": sm["mean"], "std_s": sm["std"], "p10_s": sm["p10"], "p90_s": sm["p90"],
                  "steps": sm["n"], f"vs_{base}": r["median"], f"vs_{base}_p10": r["p10"], f"vs_{base}_p90": r["p90"],
                  "trainable_params": setups[n][3]}
    log.info("interleaved step times: %s", {n: round(v[f"vs_{base}"], 3) for n, v in out.items()})
    doc = {"device": device, "task": task, "step": STEP, "warmup_steps": warm, "baseline": base, "methods": out}
    if "learner" in setups:
        use_batch(warm + steps)
        m, o, c, _ = setups["learner"]
        doc["learner_profile"] = learner_step_profile(m, o, current["batch"], max_grad_norm=c.max_grad_norm,
                                                      reference=setups.get(base))
    return doc


# Where a training step's time goes: top-level profiler events grouped by what they compute.
PROFILE_GROUPS = {
    "forward: base linears": "the encoder's own linears in the forward (aten::linear; frozen under a Learner)",
    "forward: Learner factors": "x @ P1 and (x P1) @ P2 in the forward (aten::matmul)",
    "forward: attention, norms, activations, embeddings, loss": "every other forward op",
    "backward: base linears": "AddmmBackward0: with frozen weights (Learner) only the gradient to the layer's input; "
                              "with trained weights (full) that and the weight gradient",
    "backward: Learner factors": "MmBackward0: gradients of P1, P2 and of their inputs",
    "backward: attention, norms, activations, embeddings": "every other backward node (bmm, softmax, layer norm, GELU, "
                                                           "dropout, views, gradient accumulation)",
    "gradient clipping": "clip_grad_norm_ over the optimizer's parameters",
    "optimizer": "AdamW step and zero_grad",
    "other": "the loss read back",
}
BASE_BACKWARD = ("backward: base linears", "backward: attention, norms, activations, embeddings")
LEARNER_PARTS = ("forward: Learner factors", "backward: Learner factors")


def learner_step_profile(model, optimizer, batch, *, max_grad_norm: float, reference=None) -> dict:
    """One Learner step under ``torch.profiler``, median of 3: ms per :data:`PROFILE_GROUPS` group.

    ``frozen_base_backward_ms`` sums the backward through the frozen encoder
    to the activations (the base linears' input gradients and every other
    backward node); ``learner_parts_ms`` the Learner factors' forward and
    backward. With ``reference`` (the full method's setup) the full step is
    profiled on the same batch, so the saving shows where it comes from.
    Profiler times carry its overhead; shares are what to read.
    """
    groups = _profile_step(model, optimizer, batch, max_grad_norm=max_grad_norm)
    out = {"groups_ms": groups, "groups": PROFILE_GROUPS,
           "frozen_base_backward_ms": round(sum(groups[g] for g in BASE_BACKWARD), 2),
           "learner_parts_ms": round(sum(groups[g] for g in LEARNER_PARTS), 2)}
    if reference is not None:
        out["full_groups_ms"] = _profile_step(reference[0], reference[1], batch, max_grad_norm=reference[2].max_grad_norm)
    return out


def _profile_step(model, optimizer, batch, *, max_grad_norm: float, repeats: int = 3) -> dict[str, float]:
    """Median over ``repeats`` profiled steps of the milliseconds per group (CPU time of top-level events)."""
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    from edgenlp.finetune.trainer import train_step

    per: list[dict[str, float]] = []
    for _ in range(repeats):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_step(model, optimizer, batch, loss_fn=nn.CrossEntropyLoss(), max_grad_norm=max_grad_norm)
        per.append(group_events(prof.events()))
    return {k: round(median([p.get(k, 0.0) for p in per]), 2) for k in [*PROFILE_GROUPS, "total"]}


def group_events(events) -> dict[str, float]:
    """Milliseconds per :data:`PROFILE_GROUPS` group of one profiled step (top-level events only: nothing counts twice)."""
    top = sorted((e for e in events if e.cpu_parent is None), key=lambda e: e.time_range.start)
    bwd = [i for i, e in enumerate(top) if e.name.startswith("autograd::engine::evaluate_function")]
    first_bwd, last_bwd = (bwd[0], bwd[-1]) if bwd else (len(top), len(top))
    opt = [i for i, e in enumerate(top) if e.name.startswith("Optimizer.")]
    first_opt = opt[0] if opt else len(top)
    out = dict.fromkeys([*PROFILE_GROUPS, "total"], 0.0)
    for i, e in enumerate(top):
        if i < first_bwd:
            group = ("forward: base linears" if e.name == "aten::linear" else "forward: Learner factors" if e.name == "aten::matmul"
                     else "forward: attention, norms, activations, embeddings, loss")
        elif i <= last_bwd:
            node = e.name.rsplit(":", 1)[-1].strip()
            group = ("backward: base linears" if node.startswith("AddmmBackward") else "backward: Learner factors"
                     if node.startswith("MmBackward") else "backward: attention, norms, activations, embeddings")
        elif e.name.startswith("Optimizer."):
            group = "optimizer"
        elif i < first_opt:
            group = "gradient clipping"
        else:
            group = "other"
        out[group] += e.cpu_time_total / 1e3
        out["total"] += e.cpu_time_total / 1e3
    return out


def _phase(report: dict, name: str) -> dict | None:
    return next((p for p in report["phases"] if p["name"] == name), None)


def _stats(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def settings_count(rows: list[dict], task: str, variant: str) -> int:
    """How many learning-rate settings a (task, method) ran: more than one means it was swept."""
    return sum(1 for r in rows if (r["task"], r["variant"]) == (task, variant))


def pm(mean: float, std: float, n: int) -> str:
    """``mean ± std`` over several seeds; one seed has no spread to show."""
    return f"{mean:.2f} ± {std:.2f}" if n > 1 else f"{mean:.2f} (1 seed)"


def summarize(runs: list[dict]) -> list[dict]:
    """One row per (task, variant, setting): mean and sample std over seeds."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in runs:
        b = r["bench"]
        groups.setdefault((b["task"], b["variant"], b.get("setting", setting_name((DEFAULT, DEFAULT)))), []).append(r)
    rows = []
    for (task, variant, setting), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["seed"])  # runs finish in any order
        acc, acc_std = _stats([r["dev"]["accuracy"] * 100 for r in rs])
        val = [r["validation"]["accuracy"] * 100 for r in rs if "validation" in r]
        f1 = [r["dev"]["macro_f1"] * 100 for r in rs if "macro_f1" in r["dev"]]
        main_phase = rs[0]["phases"][-1]  # the steady phase: learners-only / reconfigured / the only one
        rows.append({
            "task": task,
            "variant": variant,
            "setting": setting,
            "lr": rs[0].get("lr", {}),
            "seeds": [r["seed"] for r in rs],
            "accuracy": acc,
            "accuracy_std": acc_std,
            "accuracy_per_seed": [round(r["dev"]["accuracy"] * 100, 2) for r in rs],
            "validation_per_seed": [round(a, 2) for a in val] if len(val) == len(rs) else None,
            "macro_f1": statistics.mean(f1) if f1 else None,
            "macro_f1_std": _stats(f1)[1] if f1 else None,
            "epochs_run": rs[0].get("early_stop", {}).get("epochs_run", len(rs[0]["epochs"])),
            "trainable": main_phase["trainable_params"],
            "trainable_percent": main_phase["trainable_percent"],
            "trainable_peak": rs[0]["trainable_params"]["peak_count"],
            "s_per_epoch": statistics.mean(statistics.mean(r["wall_s_per_epoch"]) for r in rs),
            "step_s": statistics.mean(r["phases"][-1]["step_s"] for r in rs),
            "phase_step_s": {p["name"]: p["step_s"] for p in rs[0]["phases"]},
            "peak_rss_mb": statistics.mean(r["peak_rss_mb"] for r in rs),
            "device": rs[0].get("device", "cpu"),
            "ranks": rs[0].get("learner", {}).get("ranks"),
        })
    return rows


def choice_scores(r: dict) -> list[float]:
    """The per-seed accuracies a setting is chosen on: validation when the runs held it out (--val-rows), else dev."""
    return r.get("validation_per_seed") or r["accuracy_per_seed"]


def chosen(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """Per (task, variant): the row at the best setting (seed-0 validation accuracy with --val-rows, else seed-0 dev
    accuracy; ties keep the first listed)."""
    best: dict[tuple[str, str], dict] = {}
    for r in rows:
        key = (r["task"], r["variant"])
        scores = choice_scores(r)
        seed0 = scores[r["seeds"].index(0)] if 0 in r["seeds"] else statistics.mean(scores)
        if key not in best or seed0 > best[key][0]:
            best[key] = (seed0, r)
    return {k: v[1] for k, v in best.items()}


def targets(rows: list[dict], steps: dict | None = None) -> list[str]:
    """Target checks against the tuned full fine-tuning row; step-time ratios from the interleaved timing."""
    by = chosen(rows)
    ratio = {n: v["vs_full"] for n, v in (steps or {}).get("methods", {}).items()}
    out = []
    for task in sorted({r["task"] for r in rows}):
        full = by.get((task, "full"))
        if not full:
            continue
        n_settings = settings_count(rows, task, "full")
        full_name = f"tuned full ({n_settings} settings swept)" if n_settings > 1 else "full at one setting (not swept)"
        for variant, label in (("learner", "Learner (primed)"), ("far", "FAR")):
            r = by.get((task, variant))
            if not r:
                continue
            gap = full["accuracy"] - r["accuracy"]
            step = ratio.get(variant, r["step_s"] / full["step_s"])
            step_src = "" if variant in ratio else " (from the runs' own step times, which other jobs disturb)"
            line = (f"{task}: {label} accuracy {pm(r['accuracy'], r['accuracy_std'], len(r['seeds']))} (n={len(r['seeds'])}) "
                    f"vs {full_name} {pm(full['accuracy'], full['accuracy_std'], len(full['seeds']))} "
                    f"(n={len(full['seeds'])}, {full['setting']}) "
                    f"(gap {gap:+.2f} pt, target <= 1.0: {'met' if gap <= 1.0 else 'MISSED'})")
            if variant == "learner":
                share = r["trainable"] / full["trainable"]
                line += (f"; trainable {100 * share:.1f}% of full (target <= 10%: {'met' if share <= 0.10 else 'MISSED'})"
                         f"; step time {100 * step:.0f}% of full{step_src}")
            else:
                line += f"; reconfigured step time {100 * step:.0f}% of full ({'lower' if step < 1 else 'NOT lower'}){step_src}"
            out.append(line)
    return out


def body_defaults_as_run(rows: list[dict]) -> str | None:
    """The body rates the rows at the default setting trained with, per method ("5e-5 full, 1e-3 learner"): the runs
    record them, so a report rebuilt after a default changed still names what ran."""
    from edgenlp.finetune.config import format_rate

    ran: dict[str, float] = {}
    for r in rows:
        if r["setting"] == setting_name((DEFAULT, DEFAULT)) and "body" in r.get("lr", {}):
            ran.setdefault(VARIANTS[r["variant"]][0], r["lr"]["body"])
    return ", ".join(f"{format_rate(v)} {k}" for k, v in ran.items()) or None


def markdown(rows: list[dict], meta: dict, steps: dict | None = None, *, skipped: list[str] = ()) -> str:
    best = chosen(rows)
    as_run = body_defaults_as_run(rows)
    lines = [
        "# Fine-tuning methods on MiniLM-L6",
        "",
        ("Epochs from the training-set size (the library default)" if meta["epochs"] == "auto" else f"{meta['epochs']} epoch(s)")
        + (f", at most {meta['max_steps']} optimizer steps" if meta.get("max_steps") else "")
        + f" for every method (priming included), batch {meta['batch_size']}, max_seq_len "
        f"{meta['max_seq_len']}, {meta['threads']} threads" + (f" x {meta['jobs']} runs at once" if meta.get('jobs', 1) > 1 else "") + f", device {meta['device']}; rows used (a train subset is seeded, dev is always whole): "
        + "; ".join(f"{t} {v}" for t, v in sorted(meta.get("rows", {}).items()))
        + "".join(f"; {t} is the folder {d}" for t, d in sorted(meta.get("task_dirs", {}).items()))
        + ". Learning rates are the library defaults "
        f"(body {f'{as_run}, as the runs at the defaults record' if as_run else meta.get('default_lr', '5e-05 full/far/freeze-ffn, 0.001 learner/bitfit')}; head = classifier + pooler at "
        f"{meta.get('default_head_lr', 2e-3):g}" + (f", {meta['short_head_lr']:g} on a budget short for the classes"
                                                  if meta.get("short_head_lr") else "") + "; Learner "
        + (f"priming {meta['priming_epochs']} epoch at 5e-5" if meta["priming_epochs"] != "schedule" else
           "priming, probe and head rate from the library's schedule, learner_schedule")
        + ") unless the setting says otherwise. Accuracy is mean ± sample std over "
        "the seeds listed. Trainable = parameters trained in the steady phase (after priming); peak = most trained at once "
        "in any phase. s/epoch counts training steps only (no eval).",
        "",
        f"Machine: {meta['cpu']}, ISA flags {meta.get('isa')}. {meta.get('note') or 'Shared with other jobs, so times carry noise.'}",
        "",
        _sweep_text(meta),
        "",
        "## At each method's chosen setting",
        "",
        "| task | method | setting | seeds | dev acc (%) | macro-F1 | trainable | % | peak trainable | s/epoch | step s (phases) | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = list(VARIANTS)
    for r in sorted(best.values(), key=lambda r: (r["task"], order.index(r["variant"]))):
        f1 = pm(r["macro_f1"], r["macro_f1_std"], len(r["seeds"])) if r["macro_f1"] is not None else "–"
        phases = ", ".join(f"{k} {v:.3f}" for k, v in r["phase_step_s"].items())
        lines.append(f"| {r['task']} | {r['variant']} | {r['setting']} | {','.join(map(str, r['seeds']))} | "
                     f"{pm(r['accuracy'], r['accuracy_std'], len(r['seeds']))} | {f1} | {r['trainable']:,} | {r['trainable_percent']:.2f} | "
                     f"{r['trainable_peak']:,} | {r['s_per_epoch']:.0f} | {phases} | {r['peak_rss_mb']:.0f} |")
    swept = [r for r in rows if settings_count(rows, r["task"], r["variant"]) > 1]
    on = "validation" if meta.get("val_rows") else "dev"
    if swept:
        lines += ["", "## Learning-rate sweep (seed 0; the chosen setting then runs every seed)", "",
                  f"| task | method | setting | lr used | seed-0 {on} acc (%) | chosen |", "|---|---|---|---|---|---|"]
        for r in sorted(swept, key=lambda r: (r["task"], order.index(r["variant"]), r["setting"])):
            a0 = choice_scores(r)[r["seeds"].index(0)] if 0 in r["seeds"] else float("nan")
            used = ", ".join(f"{k} {v:g}" for k, v in r["lr"].items())
            pick = "yes" if best[(r["task"], r["variant"])] is r else ""
            lines.append(f"| {r['task']} | {r['variant']} | {r['setting']} | {used} | {a0:.2f} | {pick} |")
    if steps:
        lines += [""] + step_lines(steps)
    lines += ["", "## Targets (against the full fine-tuning row; tuned when its rates were swept)", ""] + [f"- {t}" for t in targets(rows, steps)]
    if skipped:
        lines += ["", "## Not run", "", "Left out for time (budget or --report-only): " + ", ".join(skipped) + "."]
    ranks = {r["task"]: r["ranks"] for r in rows if r["variant"] == "learner-rank-auto" and r["ranks"]}
    if ranks:
        lines += ["", "## Ranks chosen by `--rank auto`", ""]
        for task, rk in ranks.items():
            lines.append(f"- {task}: " + ", ".join(f"{k}={v}" for k, v in rk.items()))
    return "\n".join(lines) + "\n"


def step_lines(steps: dict, *, profile: bool = False) -> list[str]:
    """The step-time table of a ``-steps.json`` document (and, with ``profile``, where the Learner step goes)."""
    m = steps["methods"]
    base = steps.get("baseline", "full")
    n = next(iter(m.values()))["steps"]
    step = steps.get("step", "an older, hand-written step (no gradient clipping, a plain AdamW)")
    load = steps.get("host", {})
    lines = [f"## Step time, interleaved in one process ({n} steps each after {steps.get('warmup_steps', 3)} warm-up, "
             f"{steps['threads']} threads, batch {steps['batch_size']}, max_seq_len {steps['max_seq_len']}, "
             f"{steps.get('task', 'sst2')} batches, device {steps.get('device', 'cpu')})", "",
             f"Measured on: {steps.get('environment', {}).get('cpu', {}).get('model', '?')}, ISA flags "
             f"{steps.get('isa', '?')} (the ratios hold across hosts better than the seconds)"
             + (f"; load average (1 min) {load['load_avg_before'][0]} before, {load['load_avg_after'][0]} after"
                if load.get("load_avg_before") else "") + ".", "",
             f"The step timed: {step}. Each method's k-th step runs right after the others' k-th step on the same batch, "
             "the order flipping every step; ratios are per step against the baseline's step of the same round.", "",
             f"| method (steady phase) | median step s | mean ± std s | p10–p90 s | vs {base} (median of per-step ratios, p10–p90) |",
             "|---|---|---|---|---|"]
    for name, v in m.items():
        spread = (f"{v['mean_s']:.3f} ± {v['std_s']:.3f} | {v['p10_s']:.3f}–{v['p90_s']:.3f}" if "std_s" in v else "– | –")
        vs = f"{100 * v[f'vs_{base}']:.0f}%" + (f" ({100 * v[f'vs_{base}_p10']:.0f}–{100 * v[f'vs_{base}_p90']:.0f}%)"
                                               if f"vs_{base}_p10" in v else "")
        lines.append(f"| {name} | {v['median_s']:.3f} | {spread} | {vs} |")
    prof = steps.get("learner_profile")
    if profile and prof:
        g, full = prof["groups_ms"], prof.get("full_groups_ms") or {}
        lines += ["", "## Where the Learner step goes (torch.profiler, one step, median of 3, same batch as full)", "",
                  "Top-level profiler events grouped by what they compute (profiler times carry its overhead; read "
                  "the shares).", "", "| part | Learner ms | share | full ms | share | what |", "|---|---:|---:|---:|---:|---|"]
        for key, what in prof["groups"].items():
            fs = f"{full[key]:.1f} | {100 * full[key] / full['total']:.0f}%" if full else "– | –"
            lines.append(f"| {key} | {g[key]:.1f} | {100 * g[key] / g['total']:.0f}% | {fs} | {what} |")
        lines.append(f"| total | {g['total']:.1f} | 100% | " + (f"{full['total']:.1f} | 100%" if full else "– | –") + " | |")
        fb, lp = prof["frozen_base_backward_ms"], prof["learner_parts_ms"]
        biggest = max((k for k in prof["groups"]), key=lambda k: g[k])
        lines += ["", f"The frozen base's backward to the activations (base linears' input gradients and every other backward "
                  f"node) takes {fb:.1f} ms, {100 * fb / g['total']:.0f}% of the Learner step; the Learner factors, forward "
                  f"and backward, take {lp:.1f} ms ({100 * lp / g['total']:.0f}%). The largest single part is "
                  f"\"{biggest}\" ({100 * g[biggest] / g['total']:.0f}%)."]
        if full:
            lines[-1] += (f" Against full fine-tuning the Learner saves the weight gradients of the base linears "
                          f"(backward: base linears {full['backward: base linears']:.1f} → "
                          f"{g['backward: base linears']:.1f} ms) and most of the optimizer "
                          f"({full['optimizer']:.1f} → {g['optimizer']:.1f} ms), and pays for the factors.")
    return lines


def _sweep_text(meta: dict) -> str:
    sw = meta.get("sweep", {})
    who = (f"methods {', '.join(sw['methods'])}" if sw.get("methods") else "every method") + \
          (f" on {', '.join(sw['tasks'])}" if sw.get("tasks") else " on every task")
    if sw.get("scale"):
        how = ("body and head learning rates scaled together by " + ", ".join(f"{x:g}" for x in sw["scale"])
               + " (1 = the defaults)")
    else:
        how = f"body lr {', '.join(sw.get('lr', []))} x head lr {', '.join(sw.get('head_lr', []))}"
    on = (f"validation accuracy (on {meta['val_rows']} train rows held out of every run, seeded; dev is scored once per "
          f"run and chooses nothing)" if meta.get("val_rows") else "dev accuracy")
    return (f"Sweep ({who}, seed {meta['seeds'][0]}): {how}; the best seed-{meta['seeds'][0]} {on} picks the "
            f"setting that then runs seeds {', '.join(map(str, meta['seeds'][1:])) or '(none)'}.")


def rebuild(args, results: Results) -> int:
    """Rewrite ``<out>.json``/``.md`` from the runs stored in ``<out>.json`` and the current ``<out>-steps.json``."""
    out = Path(args.out)
    stored = out.with_name(out.name + ".json")
    if not stored.is_file():
        log.error("--report-only without --workdir rebuilds %s, which does not exist", stored)
        return 2
    doc = json.loads(stored.read_text())
    steps_file = Path(args.out + "-steps.json")
    steps = json.loads(steps_file.read_text()) if steps_file.exists() else None
    runs, meta, skipped = doc["runs"], doc["meta"], doc.get("skipped", [])
    rows = summarize(runs)
    results.write(out, {"meta": meta, "rows": rows, "targets": targets(rows, steps), "step_timing": steps, "skipped": skipped,
                        "runs": runs}, markdown(rows, meta, steps, skipped=skipped))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--tasks", nargs="+", default=["sst2", "banking77"])
    p.add_argument("--only", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--sweep-lr", nargs="+", default=[DEFAULT], help="Body learning rates to sweep ('default' allowed).")
    p.add_argument("--sweep-head-lr", nargs="+", default=[DEFAULT], help="Head learning rates to sweep ('default' allowed).")
    p.add_argument("--sweep-scale", nargs="+", type=float, default=None,
                   help="Sweep body and head rates together: each method's defaults times each factor "
                        "(e.g. 0.32 1 3.2 spans 10x; 1 is the default setting). Replaces --sweep-lr/--sweep-head-lr.")
    p.add_argument("--sweep-only", nargs="+", default=None, choices=list(VARIANTS), help="Methods swept (default: all of --only).")
    p.add_argument("--sweep-tasks", nargs="+", default=None, help="Tasks swept (default: all of --tasks).")
    p.add_argument("--epochs", default="1", help="Epochs per run, or 'auto' for the library's default (from the training-set size).")
    p.add_argument("--train-limit", type=int, default=None, help="A seeded subset of this many train rows for every task.")
    p.add_argument("--task-dir", action="append", default=[], metavar="NAME=DIR",
                   help="A user task folder (train.tsv, dev.tsv) known as NAME in --tasks and the tables.")
    p.add_argument("--no-early-stop", action="store_true", help="Pass --no-early-stop to every run.")
    p.add_argument("--val-rows", type=int, default=None,
                   help="Pass --val-rows to every run: early stopping and the sweep's choice use that many held-out "
                        "train rows, and dev only reports (default: the older protocol, chosen on dev).")
    p.add_argument("--priming-epochs", type=float, default=None,
                   help="The Learner's priming length for every Learner run (default: the library's schedule).")
    p.add_argument("--max-steps", type=int, default=None, help="Pass --max-steps to every run (an equal-budget comparison).")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-len", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workers", type=int, default=None,
                   help="Runs at once on this machine (each its own process with --threads threads; on 2 cores, "
                        "--workers 2 --threads 1 trains two runs side by side). Step timing is never run in parallel.")
    p.add_argument("--jobs", type=int, default=None, help=argparse.SUPPRESS)  # the old spelling of --workers
    p.add_argument("--ray", default=None, metavar="auto|HOST:PORT",
                   help="Spread the runs over a Ray cluster (pip install 'edgenlp[ray]'); each asks for --threads CPUs.")
    p.add_argument("--device", default="cpu", help="auto | cpu | cuda for training runs and step timing.")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--budget-min", type=float, default=None, help="Skip runs not started within this many minutes.")
    p.add_argument("--workdir", default=None, help="Keep per-run reports here; reports already there are reused.")
    p.add_argument("--note", default=None, help="A sentence added under the table header (e.g. machine load).")
    p.add_argument("--report-only", action="store_true",
                   help="Only rebuild the table from reports in --workdir (without --workdir: from the runs stored in "
                        "<out>.json, with the step times of <out>-steps.json).")
    p.add_argument("--step-timing", type=int, default=0, metavar="STEPS",
                   help="Only time STEPS interleaved steps per method in one process (writes <out>-steps.json).")
    p.add_argument("--timing-task", default="sst2", help="Task whose batches the step timing uses.")
    p.add_argument("--timing-methods", nargs="+", default=["full", "learner", "far", "bitfit", "freeze-ffn"])
    p.add_argument("--out", default=str(RESULTS / "finetune"), help="Results path without extension.")
    args = p.parse_args(argv)
    if args.jobs is not None:
        print("warning: --jobs is deprecated and goes away in the next release; use --workers", file=sys.stderr)
        args.workers = args.workers or args.jobs
    args.workers = 1 if args.workers is None else args.workers
    from edgenlp.executor import ExecutorConfig

    try:
        executor = ExecutorConfig(workers=args.workers, ray=args.ray, cpus_per_task=args.threads)
    except ValueError as exc:
        p.error(str(exc))
    if args.epochs != "auto" and not (args.epochs.isdigit() and int(args.epochs) >= 1):
        p.error(f"--epochs must be a positive integer or 'auto', got {args.epochs!r}")
    try:
        args.task_dirs = {name: str(Path(d).resolve()) for name, d in (spec.split("=", 1) for spec in args.task_dir)}
    except ValueError:
        p.error("--task-dir takes NAME=DIR")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from edgenlp.utils import isa_flags

    results = Results(script="finetune", threads=args.threads)
    env = results.environment
    if args.step_timing:
        if args.step_timing < 50:
            log.warning("%d steps: the issue asks for at least 50", args.step_timing)
        result = {"threads": args.threads, "batch_size": args.batch_size, "max_seq_len": args.max_seq_len,
                  **interleaved_step_times(args, steps=args.step_timing, task=args.timing_task), "isa": isa_flags(), "environment": env}
        md = ["# Fine-tuning step time per method (tools/bench/finetune.py --step-timing)", "",
              *step_lines({**result, "host": results.host()}, profile=True)]
        results.write(args.out + "-steps", result, "\n".join(md))
        return 0
    if args.report_only and not args.workdir:
        return rebuild(args, results)
    if args.report_only and not any(Path(args.workdir).glob("*.json")):
        log.error("--report-only: no run reports in %s; %s is left as it is", args.workdir, args.out)
        return 2
    from edgenlp.finetune.config import DEFAULT_HEAD_LR, DEFAULT_LR, SHORT_HEAD_LR, rates_by_method

    meta = {"model": args.model, "epochs": args.epochs, "max_steps": args.max_steps,
            "priming_epochs": "schedule" if args.priming_epochs is None else args.priming_epochs, "batch_size": args.batch_size,
            "max_seq_len": args.max_seq_len, "threads": args.threads, "jobs": args.workers, "seeds": args.seeds, "note": args.note,
            "val_rows": args.val_rows, "default_lr": rates_by_method(DEFAULT_LR), "default_head_lr": DEFAULT_HEAD_LR,
            "short_head_lr": SHORT_HEAD_LR,
            "device": args.device, "task_dirs": args.task_dirs, "train_limit": args.train_limit, "sweep": {"lr": args.sweep_lr, "head_lr": args.sweep_head_lr, "scale": args.sweep_scale,
                                             "methods": args.sweep_only, "tasks": args.sweep_tasks},
            "cpu": env["cpu"].get("model", env["cpu"].get("machine")), "isa": isa_flags(), "environment": env}
    out = Path(args.out)
    steps_file = Path(args.out + "-steps.json")
    steps = json.loads(steps_file.read_text()) if steps_file.exists() else None
    main_v = [v for v in args.only if v in MAIN] + [v for v in args.only if v not in MAIN]
    swept_v = set(args.sweep_only or args.only)
    swept_t = set(args.sweep_tasks or args.tasks)
    default = (DEFAULT, DEFAULT)

    def grid_for(variant: str) -> list[tuple[str, str]]:
        """The sweep of one method: --sweep-scale (both rates times each factor) or --sweep-lr x --sweep-head-lr."""
        if args.sweep_scale:
            from edgenlp.finetune.config import DEFAULT_HEAD_LR, DEFAULT_LR

            base = DEFAULT_LR[VARIANTS[variant][0]]
            return [default if s == 1 else (f"{base * s:.3g}", f"{DEFAULT_HEAD_LR * s:.3g}") for s in args.sweep_scale]
        return [(lr, h) for lr in args.sweep_lr for h in args.sweep_head_lr]

    first_seed = args.seeds[0]
    runs, skipped = [], []
    start = time.perf_counter()
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)

    def write() -> None:
        rows = summarize(runs)
        slim = [{k: v for k, v in r.items() if k != "environment"} for r in runs]
        results.write(out, {"meta": meta, "rows": rows, "targets": targets(rows, steps), "step_timing": steps,
                            "skipped": skipped, "runs": slim}, markdown(rows, meta, steps, skipped=skipped))

    deadline = None if args.budget_min is None else time.time() + args.budget_min * 60
    with (contextlib.nullcontext(args.workdir) if args.workdir else tempfile.TemporaryDirectory(prefix="bench-finetune-")) as tmp, \
            open_executor(executor) as ex:
        meta["executor"] = ex.describe()

        def collect(outcome, done: int, total: int) -> None:
            """On this process, as each run finishes: keep its report, rewrite the results."""
            if not outcome.ok:
                return
            if "skipped" in outcome.value:
                skipped.append(outcome.value["skipped"])
                return
            r = outcome.value["run"]
            runs.append(r)
            b = r["bench"]
            meta.setdefault("rows", {})[b["task"]] = f"train {r['task']['train_rows_used']}, dev {r['task']['dev_rows']}"
            log.info("%d/%d %s/%s/%s/%d: acc %.4f, %.1fs/epoch, rss %.0f MiB", done, total, b["task"], b["variant"],
                     b["setting"], b["seed"], r["dev"]["accuracy"], statistics.mean(r["wall_s_per_epoch"]), r["peak_rss_mb"])
            write()

        def run_all(todo: list[tuple]) -> None:
            """Run a phase's attempts on the executor (started in the listed, priority, order); a failed run stops
            the benchmark after the others of its phase, with the results written so far."""
            tasks = [Task(f"{t}/{v}/{setting_name(st)}/seed {sd}", attempt, (t, v, sd, st, args, str(tmp), deadline))
                     for t, v, sd, st in todo]
            successful_values(ex.map(tasks, on_result=collect), reraise=True)

        # 1. the first seed at the defaults (every method, every task): the main comparison;
        # 2. the sweep at the first seed. One phase: neither depends on the other.
        first_setting, todo = {}, []
        for task in args.tasks:
            for variant in main_v:
                grid = grid_for(variant)
                setting = default if default in grid or not (variant in swept_v and task in swept_t) else grid[0]
                first_setting[(task, variant)] = setting
                todo.append((task, variant, first_seed, setting))
        for task in args.tasks:
            for variant in main_v:
                if variant in swept_v and task in swept_t:
                    todo += [(task, variant, first_seed, s) for s in grid_for(variant) if s != first_setting[(task, variant)]]
        run_all(todo)
        # 3. the other seeds at each method's best setting (which needs phase 1-2 finished)
        todo = []
        for seed in args.seeds[1:]:
            for task in args.tasks:
                for variant in main_v:
                    done = [r for r in summarize(runs) if (r["task"], r["variant"]) == (task, variant)]
                    best = chosen(done).get((task, variant)) if done else None
                    setting = default
                    if best is not None and best["setting"] != setting_name(default):
                        lr, head = (x.split("=")[1] for x in best["setting"].split(","))
                        setting = (lr, head)
                    todo.append((task, variant, seed, setting))
        run_all(todo)
    if skipped:
        log.warning("not run: %s", ", ".join(skipped))
    write()
    log.info("done in %.1f min: %s", (time.perf_counter() - start) / 60, out.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
