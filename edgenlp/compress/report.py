"""``compress.json`` and ``report.md``: budgets vs predicted vs measured, accuracy per stage, plots, the recipe."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from edgenlp.compress.pipeline import Compressor
    from edgenlp.compress.stages import StageRecord

log = logging.getLogger(__name__)


def _fmt(v, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def pareto_plot(plan_doc: dict, path: Path, *, budget_ms: float | None) -> bool:
    """Predicted accuracy drop vs predicted latency of every candidate, the chosen one marked."""
    pts = [c for c in plan_doc.get("considered", []) if c.get("predicted_latency_ms") is not None]
    if not pts:
        return False
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    fits = [c for c in pts if c.get("fits")]
    other = [c for c in pts if not c.get("fits")]
    if other:
        ax.scatter([c["predicted_latency_ms"] for c in other], [c["predicted_drop"] for c in other], s=14, c="#bbbbbb",
                   label="over a budget")
    if fits:
        ax.scatter([c["predicted_latency_ms"] for c in fits], [c["predicted_drop"] for c in fits], s=16, c="#4878d0",
                   label="fits every budget")
    chosen = plan_doc.get("chosen_point")
    if chosen:
        ax.scatter([chosen["predicted_latency_ms"]], [chosen["predicted_drop"]], s=90, marker="*", c="#d65f5f",
                   label="chosen", zorder=5)
    if budget_ms:
        ax.axvline(budget_ms, color="#d65f5f", lw=0.8, ls="--", label=f"latency budget {budget_ms:g} ms")
    ax.set_xlabel("predicted latency (ms)" + (" — estimated" if plan_doc.get("estimated") else ""))
    ax.set_ylabel("predicted dev-accuracy drop (points)")
    ax.set_title("Candidates the planner weighed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True


def write_reports(c: "Compressor", *, ft: "StageRecord", base: "StageRecord", attempts: list[dict],
                  passed: dict | None) -> dict:
    """Write ``compress.json``, ``report.md`` and the plots; copy the passing bundle to ``DIR/bundle``."""
    from edgenlp.bundle import Bundle
    from edgenlp.compress.pipeline import SUMMARY_VERSION, copy_bundle
    from edgenlp.utils import atomic_write_json, atomic_write_text, environment

    out = c.out
    final = attempts[-1] if passed is None else passed
    ver = final["verify"].result
    plan_doc = json.loads((final["plan"].path / "plan.json").read_text())
    bundle_dir = final["export"].path / "bundle"
    manifest = Bundle.open(bundle_dir, verify=False).manifest
    if passed is not None:
        copy_bundle(bundle_dir, out / "bundle")

    ref = float(ft.result["dev"]["accuracy"])
    stages_acc = [{"stage": "finetune (uncompressed)", "accuracy": ref, "split": "dev", "through": "eager PyTorch"}]
    pr = final["prune"].result
    if not pr.get("identity"):
        after = pr.get("dev_after", {})
        if isinstance(after, dict) and "accuracy" in after:
            stages_acc.append({"stage": "prune", "accuracy": float(after["accuracy"]),
                               "split": pr.get("evaluated_on", "dev"), "through": "eager PyTorch"})
    for rt, r in ver["accuracy"].items():
        stages_acc.append({"stage": "quantize + export", "accuracy": float(r["accuracy"]), "split": "dev",
                           "through": f"bundle, {rt}"})
    measured = final["measure"].result if final.get("measure") is not None else None

    summary = {
        "version": SUMMARY_VERSION,
        "passed": passed is not None,
        "config": c.config.to_dict(),
        "target": c.target.to_dict(),
        "budgets": c.budgets.to_dict(),
        "chosen": final.get("chosen", final["plan"].result["chosen"]),
        "measured": measured,
        "finetune": {"method": ft.result.get("method"), "why": ft.result.get("method_why"),
                     "train_rows": ft.result.get("train_rows"), "val_rows": ft.result.get("val_rows"),
                     "steps": ft.result.get("steps")},
        "why": plan_doc.get("why"),
        "exits": _exits_summary(getattr(c, "exits_rec", None), ver.get("dynamic")),
        "prior": {**(plan_doc.get("prior") or {}), "chosen": (plan_doc.get("chosen_point") or {}).get("prior")},
        "predicted": ver["checks"],
        "host_latency_ms": ver["host_latency_ms"],
        "host_speedup_vs_uncompressed": ver["host_speedup"],
        "host_speedup_detail": ver.get("host_speedup_detail", {}),
        "baseline_latency_ms": base.result["latency_ms"],
        "accuracy": stages_acc,
        "agreement_with_executorch": ver["agreement_with_executorch"],
        "parity": ver["parity"],
        "sizes": ver["sizes"],
        "attempts": [{"attempt": a["attempt"], "chosen": a.get("chosen", a["plan"].result["chosen"]),
                      "measured": len(a["measure"].result["rows"]) if a.get("measure") is not None else 0,
                      "passed": a["verify"].result["passed"],
                      "failures": a["verify"].result["failures"], "failures_kind": a["verify"].result.get("failures_kind"),
                      "host_speedup": a["verify"].result.get("host_speedup")} for a in attempts],
        "recipe": manifest.get("applied", []),
        "stage_seconds": {**c.stage_seconds},
        "stages_skipped": [r.stage for r in c.runner.records.values() if r.skipped],
        "wall_s": round(time.perf_counter() - c.started, 1),
        "bundle": str(out / "bundle") if passed is not None else None,
        "environment": environment(),
    }
    atomic_write_json(out / "compress.json", summary)

    plots = []
    if pareto_plot(plan_doc, out / "candidates.png", budget_ms=c.budgets.latency_ms):
        plots.append(("Candidates (predicted)", "candidates.png"))
    try:
        from edgenlp.profile.report import plot

        before = json.loads((base.path / "profile.json").read_text())
        after = json.loads((final["verify"].path / "profile.json").read_text())
        before = {**before, "model": "before (fp32, uncompressed)"}
        after = {**after, "model": "after (compressed)"}
        plot([before, after], out / "profile.png")
        plots.append(("Per-component host profile, before vs after", "profile.png"))
    except (OSError, KeyError, ValueError) as exc:  # a missing profile is reported, not fatal
        log.warning("profile plot skipped: %s", exc)
    atomic_write_text(out / "report.md", markdown(summary, plots))
    return summary


def _exits_summary(rec, bundle_dynamic: dict | None) -> dict | None:
    """The exits stage's outcome (and, for a chosen bundle with exits, what verify measured on dev)."""
    if rec is None:
        return None
    r = rec.result
    out = {"enabled": bool(r.get("enabled")), "why": r.get("why"), "stats": r.get("stats")}
    if bundle_dynamic is not None:
        out["bundle"] = bundle_dynamic
    return out


def markdown(s: dict, plots: list[tuple[str, str]]) -> str:
    from edgenlp.compress.verify import held_text

    cfg, t = s["config"], s["target"]
    lines = [f"# edgenlp compress: {cfg['model']} on {cfg['task']} for {t.get('name', cfg['target'])}", ""]
    lines.append(("**Result: every budget and the accuracy limit met.**" if s["passed"] else
                  "**Result: no candidate passed verification; no bundle was written.**"))
    lines += ["", f"Chosen: `{json.dumps(s['chosen'], sort_keys=True)}`  ", f"Bundle: `{s['bundle']}`", ""]
    lines += ["## Budgets", "", "| budget | limit | predicted for the target | measured on this host | met |", "|---|---|---|---|---|"]
    p = s["predicted"]
    est = " (estimated)" if p["latency_ms"].get("estimated") else ""
    stat = s["budgets"].get("latency_stat", "p90")
    lines.append(f"| latency (ms, {stat}, seq {s['budgets']['seq_len']}, {s['budgets']['threads']} thread(s)) | {_fmt(p['latency_ms']['budget'])} | "
                 f"{_fmt(p['latency_ms']['predicted'])}{est} | {_fmt(p['latency_ms']['host_measured'])}{held_text(p['latency_ms'])} | {_fmt(p['latency_ms']['passed'])} |")
    lines.append(f"| peak memory (MB) | {_fmt(p['memory_mb']['budget'])} | {_fmt(p['memory_mb']['predicted'])}{est} | - | "
                 f"{_fmt(p['memory_mb']['passed'])} |")
    lines.append(f"| size (MB, {p['size_mb']['artifact']}) | {_fmt(p['size_mb']['budget'])} | {_fmt(p['size_mb']['predicted'])} | "
                 f"{_fmt(p['size_mb']['measured'])} | {_fmt(p['size_mb']['passed'])} |")
    for f, mb in (p["size_mb"].get("artifacts") or {}).items():  # every runtime file must fit, not only the target's
        if f != p["size_mb"]["artifact"]:
            lines.append(f"| size (MB, {f}) | {_fmt(p['size_mb']['budget'])} | - | {_fmt(mb)} | "
                         f"{_fmt(f not in p['size_mb'].get('over_budget', []))} |")
    gate = p.get("host_speedup")
    if gate and gate.get("applies"):
        lines.append(f"| host speed-up vs the uncompressed program (gate) | ≥ {gate['limit']:g}× | - | {_fmt(gate['measured'])}× | "
                     f"{_fmt(gate['passed'])} |")
    sp = s.get("host_speedup_detail") or {}
    lines += ["", f"Host latency of the uncompressed model: {_fmt(sp.get('baseline_ms', s['baseline_latency_ms']))} ms; compressed: "
              f"{_fmt(sp.get('bundle_ms', s['host_latency_ms'].get('executorch')))} ms (speed-up "
              f"{_fmt(s['host_speedup_vs_uncompressed'])}×, {sp.get('method', 'separate measurements')}). "
              "Host times are this machine's, not the target's.", ""]
    ex = s.get("exits") or {}
    if ex:
        lines += ["## Early exits (`--dynamic`)", ""]
        if not ex.get("enabled"):
            lines += [f"Not offered: {ex.get('why')}.", ""]
        else:
            st = ex["stats"]
            lines += [f"Exit heads after every layer of the fine-tuned model, {st['rule']} threshold {_fmt(st['threshold'], 4)} "
                      f"calibrated on held-out training rows: sentences there ran {_fmt(st['mean_layers'])} of "
                      f"{len(st['reach'])} layers on average, at {_fmt(st['drop'])} points of validation accuracy. "
                      f"The planner offered every candidate with these exits too, priced on the latency budget's "
                      f"statistic ({stat}); the chosen one {'has' if s['chosen'].get('exits') else 'has no'} exits."]
            q = st.get("quantized")
            if q:
                lines[-1] += (f" With int8 linears the threshold is calibrated again ({_fmt(q['threshold'], 4)}, as "
                              f"`quantize` does): sentences ran {_fmt(q['mean_layers'])} layers there at "
                              f"{_fmt(q['drop'])} points, the depth a quantized candidate was priced at.")
            dyn = ex.get("bundle")
            if dyn:
                d = dyn["dev_sentences_ms"]
                lines += ["", f"On dev, the bundle's sentences stopped at layer {_fmt(dyn['mean_exit_layer'])} on average; timed "
                          f"at their own lengths through the segments: mean {_fmt(d['dynamic']['mean'])} / p90 "
                          f"{_fmt(d['dynamic']['p90'])} ms against the static methods' {_fmt(d['static']['mean'])} / "
                          f"{_fmt(d['static']['p90'])} ms (this host)."]
            lines.append("")
    why = s.get("why")
    if why:
        lines += ["## Why this candidate", "", why["reason"], ""]
        prior = s.get("prior") or {}
        chosen_prior = prior.get("chosen") or {}
        if chosen_prior:
            src = ", ".join(f"`{x}`" for x in chosen_prior.get("sources", [])) or "-"
            whose = (f"{prior['task']}'s own drops, measured on this task" if prior.get("task_rows") else
                     "the mean over the tasks the prior measured, not this one")
            lines += [f"The predicted drop is {chosen_prior.get('basis', 'measured')} (accuracy prior rows from {src}; "
                      f"{whose})" + (f"; {chosen_prior['note']}" if chosen_prior.get("note") else "") + "."]
        if prior.get("methods_without_rows"):
            lines += [f"Not offered: {', '.join(prior['methods_without_rows'])} (no measured prior row at the budget this "
                      "preset spends)."]
        lines.append("")
    m = s.get("measured")
    if m:
        ref = m["reference"]["val_accuracy"]
        lines += ["## Candidates built and measured", "",
                  f"The plan's best {len(m['rows'])} candidate(s) on its objective, each built for real and run through "
                  f"ExecuTorch on {m['val_rows']} validation rows held out of the training data (the uncompressed model: "
                  f"{ref:.4f} there). Chosen: {m['why']}. Dev accuracy is measured for the chosen bundle only.", "",
                  "| # | candidate | predicted drop | measured drop (validation) | predicted size (MB) | measured size (MB) | "
                  "predicted latency (ms) | for its real shape (ms) | meets every bound |", "|---|---|---|---|---|---|---|---|---|"]
        for i, r in enumerate(m["rows"]):
            mark = " (chosen)" if i == m["chosen_index"] else ""
            lines.append(f"| {i + 1}{mark} | `{json.dumps(r['candidate'], sort_keys=True)}` | {_fmt(r['predicted_drop'])} | "
                         f"{_fmt(r['measured_drop'])} | {_fmt(r['predicted_size_mb'])} | {_fmt(r['measured_size_mb'])} | "
                         f"{_fmt(r['predicted_latency_ms'])} | {_fmt(r['real_shape_latency_ms'])} | "
                         f"{'yes' if r['meets'] else 'no: ' + ', '.join(r['fails'])} |")
        for r in m.get("not_built") or ():
            lines.append(f"| – | `{json.dumps(r['candidate'], sort_keys=True)}` | not built: {r['error']} | | | | | | no |")
        lines.append("")
    f = s.get("finetune") or {}
    if f.get("method"):
        lines += [f"Fine-tuned with `{f['method']}`" + (f" ({f['why']})" if f.get("why") else "") +
                  (f"; the training split had {f['train_rows']} rows after {f['val_rows']} were held out for validation."
                   if f.get("val_rows") else "."), ""]
    lines += ["## Accuracy after each stage", "", "| stage | accuracy | split | measured through |", "|---|---|---|---|"]
    for r in s["accuracy"]:
        lines.append(f"| {r['stage']} | {r['accuracy']:.4f} | {r.get('split', 'dev')} | {r['through']} |")
    a = p["accuracy"]
    lines += ["", f"Drop against the uncompressed model: {a['drop_points']:.2f} points (limit {a['limit']}).", ""]
    if s["agreement_with_executorch"]:
        lines += ["Native runtime predictions equal ExecuTorch's on " + ", ".join(
            f"{100 * v:.1f}%" for v in s["agreement_with_executorch"].values()) + " of the dev set.", ""]
    if len(s["attempts"]) > 1 or not s["passed"]:
        lines += ["## Attempts", "", "| attempt | candidate | passed | why not |", "|---|---|---|---|"]
        for at in s["attempts"]:
            lines.append(f"| {at['attempt']} | `{json.dumps(at['chosen'], sort_keys=True)}` | {_fmt(at['passed'])} | "
                         f"{'; '.join(at['failures']) or '-'} |")
        lines.append("")
    for title, f in plots:
        lines += [f"## {title}", "", f"![{title}]({f})", ""]
    lines += ["## Stages", "", "| stage | seconds |", "|---|---|"]
    for k, v in s["stage_seconds"].items():
        lines.append(f"| {k}{' (reused)' if k in s['stages_skipped'] else ''} | {v} |")
    lines += ["", f"Wall time of this run: {s['wall_s']} s.", "", "## Recipe", "", "```json",
              json.dumps(s["recipe"], indent=2), "```", ""]
    return "\n".join(lines)
