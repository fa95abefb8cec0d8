"""Render the README's measured numbers from the benchmark results, in place.

Every table and sentence of the README that quotes a measured number sits
between two markers::

    <!-- results:NAME -->
    ...generated text...
    <!-- /results:NAME -->

and is written by the renderer of NAME below from the JSON files that the
benchmarks write into ``tools/bench/results/``. Timings carry the host they
were measured on (CPU model, ISA flags, cores) and the load average the
results file recorded (or say that it recorded none). A results file that
does not exist yet renders as a sentence saying how to produce it.

    python tools/readme.py            # rewrite the marked sections of README.md
    python tools/readme.py --check    # exit 1 with a diff when README.md differs from what this would write

``tests/test_readme.py`` runs the check, so a README that drifts from its
results files fails the test suite. To change a number, re-run its benchmark;
to change the words around it, edit the renderer here.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import statistics
import sys
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
RESULTS = REPO / "tools" / "bench" / "results"

MARKER = re.compile(r"^(?P<indent>[ \t]*)<!-- results:(?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)^(?P=indent)<!-- /results:(?P=name) -->$",
                    re.S | re.M)
MINUS = "\u2212"


class MissingResults(Exception):
    """A results file a renderer needs is absent."""


class Results:
    """The JSON files of ``tools/bench/results/``, read once each."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._cache: dict[str, dict] = {}

    def has(self, name: str) -> bool:
        return (self.folder / f"{name}.json").is_file()

    def __call__(self, name: str) -> dict:
        if name not in self._cache:
            path = self.folder / f"{name}.json"
            if not path.is_file():
                raise MissingResults(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path} is missing")
            self._cache[name] = json.loads(path.read_text())
        return self._cache[name]


RENDERERS: dict[str, Callable[[Results], str]] = {}


def section(name: str):
    def register(fn: Callable[[Results], str]) -> Callable[[Results], str]:
        RENDERERS[name] = fn
        return fn

    return register


# --------------------------------------------------------------------------- formatting


def num(x: float, nd: int = 1) -> str:
    return f"{x:.{nd}f}".replace("-", MINUS)


def signed(x: float, nd: int = 2) -> str:
    """Points of accuracy with their sign: −0.11, +0.23, 0.00."""
    s = f"{x:+.{nd}f}"
    if float(s) == 0:
        return f"{0:.{nd}f}"
    return s.replace("-", MINUS)


def pct(fraction: float, nd: int = 2) -> str:
    return f"{100 * fraction:.{nd}f}"


def pts(x: float) -> str:
    """An accuracy change as the README writes it: 2 decimals below 10 points, 1 above."""
    return signed(x, 2 if abs(x) < 10 else 1)


def drop(x: float) -> str:
    """A drop in points (positive = lost) written as a change: −1.03."""
    return pts(-x)


def span(values, nd: int = 2, unit: str = "") -> str:
    lo, hi = min(values), max(values)
    return f"{num(lo, nd)}{unit}" if round(lo, nd) == round(hi, nd) else f"{num(lo, nd)}–{num(hi, nd)}{unit}"


def minsec(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def thousands(n: int) -> str:
    return f"{n:,}"


def isa_of(doc: dict) -> str:
    isa = (doc.get("isa") or doc.get("environment", {}).get("cpu", {}).get("isa") or doc.get("meta", {}).get("isa")
           or _harness_host(doc).get("isa_flags"))
    return " ".join(isa) if isinstance(isa, list) else (isa or "not recorded")


def cpu_of(doc: dict) -> str:
    return (doc.get("cpu") or doc.get("environment", {}).get("cpu", {}).get("model") or doc.get("meta", {}).get("cpu")
            or _harness_host(doc).get("cpu_model") or "CPU not recorded")


def cores_of(doc: dict):
    return (doc.get("environment", {}).get("cpu", {}).get("cpu_count") or doc.get("meta", {}).get("cores") or doc.get("nproc")
            or _harness_host(doc).get("cpu_count"))


def _harness_host(doc: dict) -> dict:
    """The ``host`` block :class:`tools.bench.harness.Results` writes (CPU model, ISA flags, cores), or ``{}``."""
    h = doc.get("host")
    return h if isinstance(h, dict) else {}


def load_text(load) -> str:
    if not load:
        return "load average not recorded"
    if isinstance(load, dict):
        return "; ".join(f"load average {' / '.join(num(x, 2) for x in v)} {k}" for k, v in load.items() if v)
    return f"load average {' / '.join(num(x, 2) for x in load)} (1/5/15 min)"


def _loads(host_doc: dict) -> dict | None:
    """The load averages the bench harness recorded before and after, when it did."""
    return {k: host_doc[f"load_avg_{k}"] for k in ("before", "after") if host_doc.get(f"load_avg_{k}")} or None


def host(doc: dict, *, cpu: str | None = None, isa: str | None = None, load=None, file: str | None = None) -> str:
    """`Host: CPU, N cores, ISA flags ...; load average ...` for a results document (``load`` by default: the load
    averages the bench harness recorded in the document's ``host`` block, when it did)."""
    if load is None:
        load = _loads(doc.get("host") or {})
    cores = cores_of(doc)
    parts = [cpu or cpu_of(doc)] + ([f"{cores} cores"] if cores else []) + [f"ISA flags {isa or isa_of(doc)}"]
    where = f" (`{file}`)" if file else ""
    return f"Host: {', '.join(parts)}; {load_text(load)}{where}."


def table(header: list[str], align: list[str], rows: list[list[str]]) -> str:
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


WIDTH = 100


def wrap(text: str, *, first: str = "", rest: str = "") -> str:
    import textwrap

    return textwrap.fill(text, width=WIDTH, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                         break_on_hyphens=False)


def clause(text: str) -> str:
    """A template written one clause per line here, as one line of text."""
    return " ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def paragraph(text: str) -> str:
    """A template as one paragraph, wrapped like the README's prose."""
    return wrap(clause(text))


def bullets(items: list) -> str:
    """A list: each item is a text (top level) or ``(level, text)``; each item wrapped under its own bullet."""
    out = []
    for item in items:
        level, text = item if isinstance(item, tuple) else (0, item)
        pad = "  " * level
        out.append(wrap(" ".join(text.split()), first=pad + "- ", rest=pad + "  "))
    return "\n".join(out)


def lr(x: float) -> str:
    """A learning rate as the README writes it: 5e-5, 1.6e-4 (the library's own formatter, as in the CLI help)."""
    from edgenlp.finetune.config import format_rate

    return format_rate(x)


def verdict(ok: bool, yes: str = "holds", no: str = "misses") -> str:
    return yes if ok else no


# --------------------------------------------------------------------------- two commands: a fresh clone


def _step_load(d: dict, key: str):
    load = (d.get("load") or {}).get(key) if isinstance(d.get("load"), dict) else d.get("load")
    if isinstance(load, dict) and "before" in load:
        return {"before": load["before"], "after": load["after"]}
    return load


@section("fresh-clone-setup")
def fresh_clone_setup(r: Results) -> str:
    if not r.has("fresh-clone"):
        return paragraph("""
            Set-up time in a fresh clone: not measured yet (`python tools/bench/fresh_clone.py` times set-up, the test suite and
            the main job in a fresh clone and writes `tools/bench/results/fresh-clone.json`).""")
    d = r("fresh-clone")
    steps = [(k, label) for k, label in (("setup", "set-up (`bash tools/setup.sh`)"), ("suite", "the test suite (`bash .ci/run`)"),
                                         ("main_job", "the main job (`bash tools/setup.sh run`)")) if d.get(f"{k}_s") is not None]
    timed = "; ".join(f"{label} {minsec(d[f'{k}_s'])} ({load_text(_step_load(d, k))})" for k, label in steps)
    cores = f", {d['cores']} cores" if d.get("cores") else ""
    text = (f"In a fresh clone (`tools/bench/results/fresh-clone.json`, {d['date']}, commit {str(d['commit'])[:12]}; "
            f"{d['host']}{cores}, ISA flags {d['isa_flags']}), one step after the other: {timed}.")
    later = r.has("fresh-clone-suite") and r("fresh-clone-suite").get("date", "") > d["date"]  # ("YYYY-MM-DD HH:MM UTC")
    if later and r("fresh-clone-suite").get("suite_s") is not None:
        t = r("fresh-clone-suite")  # the suite alone, timed again after later changes
        text += (f" The test suite alone, timed later in another fresh clone (`fresh-clone-suite.json`, {t['date']}, commit "
                 f"{str(t['commit'])[:12]}; {t['host']}, ISA flags {t['isa_flags']}): set-up {minsec(t['setup_s'])}, "
                 f"the suite {minsec(t['suite_s'])}, exit status {t['steps']['suite']['exit_status']} "
                 f"({load_text(_step_load(t, 'suite'))}).")
    return paragraph(text)


def fresh_clone_row(r: Results, key: str, what: str) -> str:
    if not r.has("fresh-clone") or r("fresh-clone").get(f"{key}_s") is None:
        return "not timed yet in a fresh clone (`python tools/bench/fresh_clone.py` writes `fresh-clone.json`)"
    d = r("fresh-clone")
    return (f"{minsec(d[f'{key}_s'])} {what} in a fresh clone ({d['host']}, ISA flags {d['isa_flags']}; "
            f"{load_text(_step_load(d, key))}; `fresh-clone.json`)")


# --------------------------------------------------------------------------- the main job


def candidate_text(chosen: dict) -> str:
    words = {"int8": "int8 linears", "int4": "int4 linears", "fp32": "fp32 linears", "mixed": "mixed-precision linears"}
    out = [words.get(chosen["bits"], chosen["bits"])]
    if chosen.get("embeddings"):
        out.append(f"{chosen['embeddings']} word embeddings")
    if chosen.get("trim_vocab"):
        out.append("trimmed vocabulary")
    if chosen.get("exits"):
        out.append("early exits")
    prune = f"`{chosen['prune_method']}` {chosen['sparsity']:.0%}" if chosen.get("prune_method") else "no pruning"
    return " + ".join(out) + f", {prune}"


def chosen_label(chosen: dict) -> str:
    """`fast` 30% + int4 linears + int4 table + trimmed vocabulary"""
    parts = [f"`{chosen['prune_method']}` {chosen['sparsity']:.0%}"] if chosen.get("prune_method") else []
    parts.append(f"{chosen['bits']} linears")
    if chosen.get("embeddings"):
        parts.append(f"{chosen['embeddings']} table")
    if chosen.get("trim_vocab"):
        parts.append("trimmed vocabulary")
    if chosen.get("exits"):
        parts.append("early exits")
    return " + ".join(parts)


def compress_row(r: Results, task: str, target: str) -> dict:
    for row in r("compress")["rows"]:
        if row["task"] == task and row["target"] == target:
            return row
    raise MissingResults(f"compress.json has no {task}/{target} row")


def ft_budget(mj: dict) -> str:
    """`` (800 steps)`` when the main job's record says how many fine-tuning steps it ran (records since 2026-11-28)."""
    steps = (mj.get("finetune") or {}).get("steps")
    return f" ({steps} steps)" if steps else ""


@section("main-job")
def main_job(r: Results) -> str:
    d = r("compress")
    row = compress_row(r, "sst2", "pixel-7")
    st, acc, lat, size = row["stage_seconds"], row["accuracy"], row["latency_ms"], row["size_mb"]
    b = row["budgets"]
    sp = row["host_speedup_detail"]
    fp32_mb = r("compress-headline")["fp32_pte_mb"]
    est = ", estimated" if lat["estimated"] else ""
    intro = paragraph(f"""
        Measured as the `sst2/pixel-7` run of `tools/bench/compress.py` ({d['date']}; `tools/bench/results/compress.json`).
        {host(d)} Run notes: {d['note']} The stage times are therefore upper bounds:""")
    rows = [
        ["fine-tune (Learner + priming, length 64; that run's quick preset: 300 steps × 32 on 8,000 rows)",
         f"{st['finetune']:.0f} s; SST-2 dev {pct(acc['reference'])}%"],
        [f"baseline host profile (fp32, seq {b['seq_len']}, {b['threads']} threads)", f"{st['baseline']:.0f} s"],
        ["plan", f"{candidate_text(row['chosen'])} (predicted {num(lat['predicted'])} ms on the Pixel 7 at {b['threads']} threads{est}; "
                 f"{num(size['predicted'])} MB)"],
        ["quantize + export (4 buckets, parity checked)",
         f"{st['export']:.0f} s; `model.pte` {num(size['measured'])} MB ({100 * size['measured'] / fp32_mb:.0f}% of the fp32 program's "
         f"{num(fp32_mb)} MB, `compress-headline.json`)"],
        ["verify (872 dev sentences through ExecuTorch and native)",
         f"{st['verify']:.0f} s; **{pct(acc['measured'])}%** ({drop(acc['drop_points'])} points); host {num(sp['bundle_ms'])} vs "
         f"{num(sp['baseline_ms'])} ms fp32, timed alternately in one process = **{num(sp['speedup'])}×**"],
        ["`bash tools/setup.sh run` after set-up", fresh_clone_row(r, "main_job", "for the main job")],
    ]
    out = intro + "\n\n" + table(["stage", "result"], ["l", "l"], rows)
    fc = r("fresh-clone") if r.has("fresh-clone") else {}
    mj = fc.get("main_job")
    if mj:
        built = "; ".join(f"{candidate_text(x['candidate'])}: predicted drop {num(x['predicted_drop'], 2)}, measured "
                          f"{num(x['measured_drop'], 2)} points, {num(x['measured_size_mb'])} MB" for x in mj["measured"])
        for a in reversed(mj.get("earlier_attempts") or []):  # what a main job that planned again spent its time on
            tried = "; ".join(f"{candidate_text(x['candidate'])} (predicted drop {num(x['predicted_drop'], 2)}, measured "
                              f"{num(x['measured_drop'], 2)})" for x in a["measured"])
            built = (f"in attempt {a['attempt']}, {tried}, and verification on dev failed "
                     f"{candidate_text(a['chosen'])} ({'; '.join(a['failures'])}), so `compress` planned again; in attempt "
                     f"{a['attempt'] + 1}, {built}")
        out += "\n\n" + paragraph(f"""
            The same job in the fresh clone above ({fc['date']}, commit {fc['commit'][:12]}), with measured planning
            (`--measure 2`, the default): fine-tuned with `{mj['finetune']['method']}` on the training split less
            {mj['val_rows']} validation rows{ft_budget(mj)} in {mj['stage_seconds']['finetune']:.0f} s; built and measured on validation {built}; chose
            {candidate_text(mj['chosen'])} ({mj['measured_why']}): SST-2 dev **{pct(mj['dev_accuracy'])}%** against
            {pct(mj['dev_reference'])}% uncompressed ({drop(mj['drop_points'])} points), {num(mj['size_mb'])} MB, **{num(mj['host_speedup'])}×** the uncompressed model on the
            host, {minsec(mj['wall_s'])} in all (`fresh-clone.json`, `main_job`).""")
    return out


# --------------------------------------------------------------------------- quantization


QUANT_LABELS = {"fp32": "fp32", "int8": "int8", "int4": "int4 (g32)", "int8+emb8": "int8 + int8 embeddings",
                "int4+emb4": "int4 + int4 embeddings", "int4+emb4+trim": "int4 + int4 emb + trimmed vocab"}


def quant_label(name: str, v: dict) -> str:
    if name in QUANT_LABELS:
        return QUANT_LABELS[name]
    frac = name.split("@", 1)[1]
    bits = v.get("bits", {})
    order = sorted(bits, key=lambda k: {"int8": 0, "int4": 1, "fp32": 2}.get(k, 3))
    table_bits = "int8" if float(frac.rstrip("%")) >= 22 else "int4"  # tools/bench/quantize.py: the word table per budget
    return f"mixed @ {frac} of fp32 ({', '.join(f'{bits[k]}×{k}' for k in order)}, {table_bits} table)"


@section("quantize-sst2")
def quantize_sst2(r: Results) -> str:
    d = r("quantize")
    v = d["tasks"]["sst2"]
    m = d["measured"]["sst2"]
    fp = v["fp32"]
    fp_et = fp["latency"]["executorch"]["128/1"]
    rows = []
    for name, x in v.items():
        lat = x["latency"]
        speed = fp_et / lat["executorch"]["128/1"]
        share = 100 * x["pte_mb"] / fp["pte_mb"]
        ort = "–"
        if name == "fp32":
            ort = num(lat["onnx"]["128/1"])
        elif name in ("int8", "int4"):
            ort = f"{num(lat['onnx']['128/1'])} (ORT {name})"
        share_txt = f"**{share:.0f}%**" if name in ("int8+emb8", "int4+emb4+trim") else f"{share:.0f}%"
        speed_txt = f"**{speed:.2f}**" if name == "int8" else f"{speed:.2f}"
        rows.append([quant_label(name, x), pct(x["acc_executorch"]),
                     "–" if name == "fp32" else signed(100 * (x["acc_executorch"] - fp["acc_executorch"])),
                     f"{num(x['pte_mb'])} ({share_txt})", num(lat["executorch"]["128/1"]), speed_txt, num(lat["executorch"]["128/2"]),
                     num(lat["native"]["128/1"]), ort, num(lat["native_peak_rss_mb"])])
    head = paragraph(f"""
        SST-2 (teacher: full fine-tuning, {pct(fp['acc_executorch'])}%), measured {m['date']}
        (`tools/bench/results/quantize.{{json,md}}`). {host(d, cpu=m['cpu'], isa=m['isa'])}""")
    tab = table(["variant", "dev acc", "Δ", "`.pte` MB (% fp32)", "ET ms 128/1t", "× fp32", "ET 128/2t", "native 128/1t", "ORT 128/1t",
                 "native peak RSS MB"], ["l"] + ["r"] * 9, rows)
    i8, e8, t4 = v["int8"], v["int8+emb8"], v["int4+emb4+trim"]
    i8_speed = fp_et / i8["latency"]["executorch"]["128/1"]
    i8_drop = 100 * (i8["acc_executorch"] - fp["acc_executorch"])
    e8_share = 100 * e8["pte_mb"] / fp["pte_mb"]
    t4_share = 100 * t4["pte_mb"] / fp["pte_mb"]
    t4_drop = 100 * (t4["acc_executorch"] - fp["acc_executorch"])
    met3 = "met, narrowly" if 3.0 <= i8_speed < 3.1 else verdict(i8_speed >= 3.0, "met", "missed")
    slower_than_fp32 = [n for n, x in v.items() if x["latency"]["executorch"]["128/1"] > fp_et]
    int4_slower = v["int4"]["latency"]["executorch"]["128/1"] > i8["latency"]["executorch"]["128/1"]
    two_slower = all(x["latency"][rt]["128/2"] > x["latency"][rt]["128/1"] for x in v.values() for rt in ("executorch", "native")
                     if "128/2" in x["latency"].get(rt, {}))
    targets = clause(f"""
        Against the targets on this host: int8 {verdict(abs(i8_drop) <= 0.5, 'within', 'not within')} 0.5 point ({signed(i8_drop)}),
        {i8_speed:.2f}× our fp32 bundle at seq 128 / 1 thread (goal ≥ 3× on AVX-512 VNNI: {met3}) and
        {verdict(i8['latency']['executorch']['128/1'] < i8['latency']['onnx']['128/1'], 'faster', 'slower')} than ONNX Runtime's int8
        of the same model ({num(i8['latency']['executorch']['128/1'])} vs {num(i8['latency']['onnx']['128/1'])} ms);
        int8 + int8 embeddings {e8_share:.0f}% of fp32 ({verdict(e8_share <= 27, '≤', '>')} 27%);
        int4 + int4 embeddings + trimmed vocabulary {t4_share:.0f}% ({verdict(t4_share <= 12, '≤', '>')} 12%) and
        {verdict(abs(t4_drop) <= 1.5, 'within', 'not within')} 1.5 points ({signed(t4_drop)}).
        {'No scheme is slower than fp32 here' if not slower_than_fp32 else 'Slower than fp32 here: ' + ', '.join(slower_than_fp32)};
        int4 is {verdict(int4_slower, 'slower', 'faster')} than int8 (XNNPACK's blockwise int4 kernels unpack the nibbles
        and apply bf16 group scales per 32 inputs).""")
    qp = r("quant_profile")
    rows_qp = {(x["seq_len"], x["precision"]): x for x in qp["rows"]}

    def comp(seq, prec, name):
        return rows_qp[(seq, prec)]["component_ms"][name]

    lin = ("attn_qkv", "attn_out", "ffn")
    lin32 = {p: sum(comp(32, p, c) for c in lin) for p in ("int8", "int4")}
    lin128 = {p: sum(comp(128, p, c) for c in lin) for p in ("int8", "int4")}
    core = [comp(128, p, "attn_core") for p in ("fp32", "int8", "int4")]
    tot = {p: rows_qp[(128, p)]["total_ms"] for p in ("fp32", "int8", "int4")}
    profile = clause(f"""
        The per-component profile shows where (`tools/bench/quant_profile.py`, `results/quant_profile.{{json,md}}`, {qp['meta']['date']}:
        fp32, int8 and int4 bundles of one model, word table fp32 in all three, profiled through ExecuTorch's ETDump in
        {qp['meta']['rounds']} alternating rounds. {host(qp, cpu=qp['meta']['cpu'], isa=qp['meta']['isa'])} {qp['meta']['note']})
        The int4 bundle loses only in the linear rows. At seq 128, QKV takes {comp(128, 'int4', 'attn_qkv'):.2f} ms with int4 against
        {comp(128, 'int8', 'attn_qkv'):.2f} with int8 (fp32 {comp(128, 'fp32', 'attn_qkv'):.2f}), the output projection
        {comp(128, 'int4', 'attn_out'):.2f} against {comp(128, 'int8', 'attn_out'):.2f}, and the FFN {comp(128, 'int4', 'ffn'):.2f} against
        {comp(128, 'int8', 'ffn'):.2f} (fp32 {comp(128, 'fp32', 'ffn'):.2f}). The attention core ({span(core, 2)} ms) and the other rows
        are about the same in all three. So int4 runs at {tot['int4'] / tot['fp32']:.2f}× fp32's time and int8 at
        {tot['int8'] / tot['fp32']:.2f}× (end to end). The linears of int4 take {lin128['int4'] / lin128['int8']:.2f}× int8's time at seq 128;
        at seq 32 the penalty shrinks to {lin32['int4'] / lin32['int8']:.2f}× (QKV {comp(32, 'int4', 'attn_qkv'):.2f} vs
        {comp(32, 'int8', 'attn_qkv'):.2f} ms), because there the linears are closer to bound by weight bytes, which int4 halves.""")
    nat_ratio = [x["latency"]["native"]["128/1"] / x["latency"]["executorch"]["128/1"] for x in v.values()]
    rss = fp["latency"]["native_peak_rss_mb"]
    rss_ok = all(x["latency"]["native_peak_rss_mb"] <= 1.5 * x["pte_mb"] + 30 for x in v.values())
    prune = r("prune")
    idle = prune["latency"]["sst2/unpruned"]["128"]["median_ms"]
    native = clause(f"""
        The native runtime runs every bundle at {span(nat_ratio, 2)}× ExecuTorch's time (seq 128, 1 thread), and with the XNNPACK
        weights cache its peak RSS {'stays' if rss_ok else 'does not always stay'} within 1.5× the weights + 30 MB (fp32: {rss:.0f} MB for
        {fp['pte_mb']:.0f} MB of weights).
        {'Two threads are slower than one' if two_slower else 'Two threads are not always slower than one'} at batch 1 on this
        2-vCPU host for ExecuTorch and the native runtime (not investigated: the 2 vCPUs may share a physical core). The previous
        host (AVX2 only) was not re-measured. The absolute times in this table come from a loaded run (the fp32 bundle takes
        {num(idle)} ms at seq 128 / 1 thread in the pruning benchmark's rounds, `prune.json`); the ratios were
        measured within the run.""")
    return "\n\n".join([head, tab, wrap(f"{targets} {profile} {native}")])


@section("quantize-banking77")
def quantize_banking77(r: Results) -> str:
    d = r("quantize")
    v = d["tasks"]["banking77"]
    m = d["measured"]["banking77"]
    fp = v["fp32"]
    rows = []
    for name, x in v.items():
        share = 100 * x["pte_mb"] / fp["pte_mb"]
        bold = name in ("int8+emb8", "int4+emb4+trim")
        rows.append([quant_label(name, x), pct(x["acc_executorch"]),
                     "–" if name == "fp32" else signed(100 * (x["acc_executorch"] - fp["acc_executorch"])), pct(x["acc_onnx"]),
                     f"{num(x['pte_mb'])} ({'**' if bold else ''}{share:.0f}%{'**' if bold else ''})"])
    i8, e8, t4 = v["int8"], v["int8+emb8"], v["int4+emb4+trim"]
    i8_drop = 100 * (i8["acc_executorch"] - fp["acc_executorch"])
    e8_share = 100 * e8["pte_mb"] / fp["pte_mb"]
    t4_share = 100 * t4["pte_mb"] / fp["pte_mb"]
    t4_drop = 100 * (t4["acc_executorch"] - fp["acc_executorch"])
    sst2_t4 = 100 * d["tasks"]["sst2"]["int4+emb4+trim"]["pte_mb"] / d["tasks"]["sst2"]["fp32"]["pte_mb"]
    holds = abs(i8_drop) <= 0.5 and e8_share <= 27 and t4_share <= 12 and abs(t4_drop) <= 1.5
    head = paragraph(f"""
        banking77 (teacher: full fine-tuning, {pct(fp['acc_executorch'])}%; accuracy and size, measured {m['date']} on
        {m['cpu']} without latency rounds, which the SST-2 rows already cover for the same shapes):""")
    tail = paragraph(f"""
        The accuracy and size targets {'hold' if holds else 'do not all hold'} on banking77 too: int8
        {verdict(abs(i8_drop) <= 0.5, 'within', 'not within')} 0.5 point ({signed(i8_drop)}), int8 + int8
        embeddings {e8_share:.0f}%, int4 + int4 embeddings + trimmed vocabulary {t4_share:.0f}%
        {verdict(abs(t4_drop) <= 1.5, 'within', 'not within')} 1.5 points ({signed(t4_drop)}; its 77-intent training set keeps
        fewer word ids than SST-2's, hence {t4_share:.0f}% against {sst2_t4:.0f}%).""")
    return "\n\n".join([head, table(["variant", "dev acc ET", "Δ", "ORT", "`.pte` MB (% fp32)"], ["l", "r", "r", "r", "r"], rows), tail])


# --------------------------------------------------------------------------- native runtime


@section("runtime-latency")
def runtime_latency(r: Results) -> str:
    d = r("runtime-latency")
    old = r("runtime")
    rounds = [x for row in d["latency"] for rt in ("native", "executorch", "onnx") for mode in ("model", "e2e")
              for x in [row[rt][mode]["round_medians_ms"]]]
    spread = max(max(x) / min(x) for x in rounds)
    head = paragraph(f"""
        The last like-for-like run (`runtime-latency.{{json,md}}`, MiniLM-L6 export, {d['latency'][0]['threads']} thread) was taken
        with the 2 cores oversubscribed (round medians of one runtime varied up to {spread:.1f}×), so only its ratios mean anything,
        and loosely. {host(d, load=d['load_avg_at_end'])[:-1]} at the end of the run.""")
    rows = []
    for row in d["latency"]:
        n, o = row["native"], row["onnx"]
        rows.append([str(row["seq_len"]), f"{n['model']['vs_baseline']:.2f} / {n['e2e']['vs_baseline']:.2f}",
                     f"{o['model']['vs_baseline']:.2f} / {o['e2e']['vs_baseline']:.2f}"])
    tab = table(["seq", "native ÷ ExecuTorch Python, model only / end to end", "ONNX Runtime ÷ ExecuTorch Python, model only / end to end"],
                ["l", "r", "r"], rows)
    threads = sorted({x["threads"] for x in old["latency"]})
    tail = paragraph(f"""
        The earlier table in `runtime.md` (native {span([x['native_vs_executorch_python'] for x in old['latency']])}× at
        {threads[0]}–{threads[-1]} threads, ONNX Runtime {span([x['onnxruntime_vs_executorch_python'] for x in old['latency']])}×,
        {load_text(old['load_avg_at_end'])} at its end) timed the native runtime text to label against the others' `execute` alone;
        re-run `tools/bench/runtime.py` on a quiet machine before quoting either.""")
    return "\n\n".join([head, tab, tail])


@section("runtime-facts")
def runtime_facts(r: Results) -> str:
    pred = r("native_predictions")
    rt = r("runtime")
    runs = {("qemu" in x["target"]): x for x in pred["runs"]}
    native, qemu = runs[False], runs.get(True)
    cs = rt["cold_start"]
    kb = 1024
    tok = rt["tokenizer"]
    sz = rt["sizes"]
    where = qemu["target"].split("(", 1)[1].rstrip(")").replace("qemu ", "qemu-aarch64 ") if qemu else None
    return bullets([
        f"Predictions: the C example agrees with `edgenlp eval --runtime executorch` on **{native['agree']}/{native['n']}** SST-2 dev"
        f" sentences on x86-64" + (f" and on a seeded **{qemu['agree']}/{qemu['n']}** subset under `{where}`" if qemu else "")
        + " (`native_predictions.json`).",
        f"Memory: {cs['native']['peak_rss_kb'] / kb:.0f} MB peak RSS natively vs {cs['executorch_python']['peak_rss_kb'] / kb:.0f} MB for"
        " the ExecuTorch Python runtime (which links libtorch; `runtime.json`).",
        f"Cold start (open → first result, seq 128): {num(cs['native']['cold_start_ms'])} ms with sha256 verification (SHA-NI / ARMv8"
        " SHA2 with a scalar fallback, runtime dispatch; only the files the runtime reads are hashed, and the program is loaded from"
        f" the verified mapping), {num(cs['native_no_verify']['cold_start_ms'])} ms with `EDGENLP_OPEN_SKIP_VERIFY`; bucket methods load"
        f" on first use. Cold start, memory and tokenizer come from `runtime.json` ({rt['machine']}, {rt['nproc']} cores; CPU model and"
        f" ISA flags not recorded; {load_text(rt['load_avg_at_end'])} at the end of the run).",
        f"Tokenizer: {tok['native']['texts_per_s'] / 1000:.0f}k texts/s natively vs {tok['hf_fast_batch']['texts_per_s'] / 1000:.0f}k"
        " texts/s for the Hugging Face fast tokenizer (batched).",
        f"Stripped sizes: `libedgenlp.so` {sz['x86_64']['own']['libedgenlp.so'] / kb:.0f} kB (x86-64) /"
        f" {sz['aarch64']['own']['libedgenlp.so'] / kb:.0f} kB (aarch64); with the ExecuTorch libraries an app ships"
        f" {sz['x86_64']['total_bytes'] / 1e6:.1f} MB (x86-64) / {sz['aarch64']['total_bytes'] / 1e6:.1f} MB (aarch64).",
    ])


@section("runtime-memory")
def runtime_memory(r: Results) -> str:
    mem = r("memory")
    nq = r("native_quant")
    by = {x["bundle"]: x for x in mem["rows"]}
    fp = by["fp32"]
    others = "; ".join(f"{b} ({x['weight_mb']:.1f} MB bundle) {x['per-method packing']['peak_rss_mb']:.1f} → "
                       f"{x['weights cache']['peak_rss_mb']:.1f} MB" for b, x in by.items() if b != "fp32")
    ratios = {b: [x["ratio_to_fp32"] for x in nq["rows"] if x["bundle"] == b] for b in ("int8", "int4")}
    seqs = sorted({x["seq_len"] for x in nq["rows"]})
    threads = sorted({x["threads"] for x in nq["rows"]})
    return bullets([
        "Weights packed once: the XNNPACK weights cache is on, so the bucket methods share one packed copy of the weights."
        f" MiniLM fp32, {fp['buckets']} buckets, every bucket run once in a fresh process: peak RSS"
        f" {fp['per-method packing']['peak_rss_mb']:.1f} MB → {fp['weights cache']['peak_rss_mb']:.1f} MB (goal ≤ 1.5 ×"
        f" {fp['weight_mb']:.1f} MB + 30 MB = {fp['goal_mb']:.1f} MB: {verdict(fp['meets_goal'], 'met', 'missed')}); {others}"
        f" (`tools/bench/memory.py`; `tools/bench/results/memory.{{json,md}}`; {mem['meta']['machine']}, ISA flags"
        f" {mem['meta']['isa']}; load average not recorded). The latency cost of the cache is not in a results file yet"
        " (`native_quant.py --no-weight-cache-row` measures it).",
        "Native latency of quantized bundles (`tools/bench/native_quant.py`, `results/native_quant.{json,md}`;"
        f" {nq['meta']['machine']}, ISA flags {nq['meta']['isa']}, {nq['meta']['cores']} cores; load average not recorded):"
        f" int8 ÷ fp32 {span(ratios['int8'])}, int4 ÷ fp32 {span(ratios['int4'])} at seq {'/'.join(map(str, seqs))},"
        f" {threads[0]}–{threads[-1]} threads — XNNPACK's int8/int4 GEMMs do not beat fp32 on AVX2 (see"
        " ../shared/RUNTIME_NOTES.md).",
    ])


# --------------------------------------------------------------------------- profiling

COMPONENT_LABELS = {"embedding": "embedding", "attn_qkv": "linear before attn (QKV)", "attn_core": "attention core",
                    "attn_out": "linear after attn", "ffn": "FFN", "other": "other (norms, residual, head)"}
RUNTIMES = ("eager", "executorch", "onnx")


def _profiles(r: Results) -> dict:
    return {(m, doc["seq_len"], doc["threads"]): doc for m, docs in r("profile")["profiles"].items() for doc in docs}


@section("profile-tables")
def profile_tables(r: Results) -> str:
    p = _profiles(r)
    doc = p[("bert-base", 128, 1)]
    rows = []
    for c in doc["components"]:
        sh = c["share_pct"]
        flops = "0" if not c["flops"] else (f"{c['flops'] / 1e9:.2f}G" if c["flops"] >= 1e7 * 1e1 else f"{c['flops'] / 1e9:.3f}G")
        params = f"{c['params'] / 1e6:.2f}M" if c["params"] else "0"
        rows.append([COMPONENT_LABELS[c["name"]], f"{params} ({sh['params']:.1f}%)", f"{flops} ({sh['flops']:.1f}%)"]
                    + [f"{c['latency_ms'][rt]:.1f} ({sh['latency'][rt]:.1f}%)" for rt in RUNTIMES])
    t = doc["total"]
    rows.append(["**total**", f"{t['params'] / 1e6:.2f}M", f"{t['flops'] / 1e9:.2f}G"] + [f"{t['latency_ms'][rt]:.0f}" for rt in RUNTIMES])
    first = table(["component", "params", "FLOPs", "eager", "ExecuTorch", "ONNX Runtime"], ["l"] + ["r"] * 5, rows)
    seqs = sorted({s for (_, s, th) in p if th == 1})
    rows2 = []
    for model, label in (("bert-base", "bert-base"), ("minilm-l6", "MiniLM-L6")):
        core = {s: next(c for c in p[(model, s, 1)]["components"] if c["name"] == "attn_core") for s in seqs}
        rows2.append([label, " / ".join(map(str, seqs)), " / ".join(f"{core[s]['share_pct']['flops']:.1f}" for s in seqs) + " %"]
                     + [" / ".join(f"{core[s]['share_pct']['latency'][rt]:.1f}" for s in seqs) + " %" for rt in RUNTIMES])
    second = table(["model", "seq", "FLOPs", "eager time", "ExecuTorch time", "ONNX Runtime time"], ["l", "r", "r", "r", "r", "r"], rows2)

    one = [d for (m, s, th), d in p.items() if th == 1]

    def share(d, name, key="latency", rt=None):
        c = next(c for c in d["components"] if c["name"] == name)
        return c["share_pct"][key][rt] if rt else c["share_pct"][key]

    def comp(d, name):
        return next(c for c in d["components"] if c["name"] == name)

    emb_time = max(share(d, "embedding", rt=rt) for d in one for rt in RUNTIMES)
    mini = p[("minilm-l6", 128, 1)]
    mini_emb = comp(mini, "embedding")
    qkv_out = [comp(d, "attn_qkv")["latency_ms"][rt] / comp(d, "attn_out")["latency_ms"][rt] for d in one for rt in RUNTIMES]
    params_ratio = {comp(d, "attn_qkv")["params"] / comp(d, "attn_out")["params"] for d in one}
    flops_ratio = {comp(d, "attn_qkv")["flops"] / comp(d, "attn_out")["flops"] for d in one}
    ffn_flops = [share(d, "ffn", "flops") for d in one]
    ffn_time = [share(d, "ffn", rt=rt) for d in one for rt in RUNTIMES]
    ffn_largest = all(max(d["components"], key=lambda c: c["latency_ms"][rt])["name"] == "ffn" for d in one for rt in RUNTIMES)
    core_ratio = {rt: [(share(d, "attn_core", rt=rt) / share(d, "attn_core", "flops"), m, s) for (m, s, th), d in p.items() if th == 1]
                  for rt in RUNTIMES}
    eo = [x[0] for rt in ("eager", "onnx") for x in core_ratio[rt]]
    et = sorted(core_ratio["executorch"])
    grows = all(share(p[(m, seqs[-1], 1)], "attn_core", rt=rt) > share(p[(m, seqs[0], 1)], "attn_core", rt=rt)
                for m in ("bert-base", "minilm-l6") for rt in RUNTIMES)
    act = comp(p[("bert-base", seqs[-1], 1)], "attn_core")["share_pct"]["activation_bytes"]
    other = {rt: [share(d, "other", rt=rt) for d in one] for rt in ("onnx", "executorch")}
    bert_ffn_params = share(doc, "ffn", "params")
    core_name = "MiniLM-L6" if et[0][1] == "minilm-l6" else et[0][1]
    shows = bullets([
        f"**Embedding:** {share(doc, 'embedding', 'params'):.1f}% of `bert-base` parameters ({share(mini, 'embedding', 'params'):.1f}% of"
        f" MiniLM-L6's: {mini_emb['weight_bytes'] / 1e6:.1f} MB of its {mini['total']['weight_bytes'] / 1e6:.1f} MB) but 0 FLOPs, and at"
        f" most {emb_time:.1f}% of the time on any runtime at any length.",
        f"**QKV vs output projection:** {'exactly 3×' if params_ratio == flops_ratio == {3.0} else 'not 3×'} the parameters and FLOPs;"
        f" measured time ratios range from {min(qkv_out):.1f}× to {max(qkv_out):.1f}× (median {statistics.median(qkv_out):.1f}×).",
        f"**FFN:** the largest row by FLOPs ({min(ffn_flops):.0f}–{max(ffn_flops):.0f}%)"
        f"{' and by time on every runtime at every length' if ffn_largest else ''} ({min(ffn_time):.0f}–{max(ffn_time):.0f}%); the most"
        f" parameters in `bert-base` ({bert_ffn_params:.1f}%) — in MiniLM-L6 the embedding holds more.",
        f"**Attention core:** no parameters; on eager and ONNX Runtime its time share is {min(eo):.1f}–{max(eo):.0f}× its FLOP share, on"
        f" ExecuTorch {et[0][0]:.1f}–{et[-1][0]:.1f}× (lowest: {core_name} at seq {et[0][2]}). Its share"
        f" {'grows' if grows else 'does not always grow'} from seq {seqs[0]} to {seqs[-1]} on every runtime, and its outputs (the s²"
        f" attention probabilities) are {act:.0f}% of `bert-base` activation bytes at seq {seqs[-1]}.",
        f"**Other** costs {min(other['onnx']):.0f}–{max(other['onnx']):.0f}% of the time on ONNX Runtime (fused residual-add + layer norm"
        f" and the reshapes around each matmul) against {min(other['executorch']):.0f}–{max(other['executorch']):.0f}% on ExecuTorch.",
    ])
    head = paragraph(f"""
        `bert-base`, sequence length 128, 1 thread, batch 1 (`tools/bench/results/profile.{{json,md}}`; {r('profile')['config']['runs']}
        runs after {r('profile')['config']['warmup']} warm-up); latency cells are ms (share of the end-to-end median):""")
    return "\n\n".join([head, first, "Attention-core share as the sequence grows (1 thread):", second,
                        "What the numbers show (1 thread):\n" + shows])


@section("profile-host")
def profile_host(r: Results) -> str:
    d = r("profile")
    loads = [doc["environment"].get("load_avg_1_5_15") for docs in d["profiles"].values() for doc in docs]
    known = [x for x in loads if x]
    load = (f"load average {min(x[0] for x in known):.1f}–{max(x[0] for x in known):.1f} (1 min) during the MiniLM-L6 runs, not recorded "
            "for bert-base" if known else "load average not recorded")
    return paragraph(f"""
        These were measured on a shared {cores_of(d)}-core VM ({cpu_of(d)}, ISA flags {isa_of(d)}; {load}), under load from other jobs:
        shares are steadier than absolute times, and 2-thread numbers were dominated by the oversubscribed cores. Re-run
        `tools/bench/component_profile.py` on a quiet machine before quoting thread scaling.""")


# --------------------------------------------------------------------------- compress


@section("compress-targets")
def compress_targets(r: Results) -> str:
    d = r("compress")
    rows = []
    seen = set()
    for row in d["rows"]:
        task = "SST-2" if row["task"] == "sst2" else row["task"]
        label = task if row["task"] in seen else f"{task} ({pct(row['accuracy']['reference'])}%)"
        seen.add(row["task"])
        lat, size, b = row["latency_ms"], row["size_mb"], row["budgets"]
        extra = []
        if b["threads"] != 1 and row is d["rows"][0]:
            extra.append(f"{b['threads']} threads")
        if row["target"] == "host":
            extra.append(f"measured {num(lat['host_measured'])}")
        elif lat["estimated"]:
            extra.append("est.")
        chosen = row["chosen"]
        ch = f"{chosen['bits']} + {chosen['embeddings']} table" if chosen.get("embeddings") else chosen["bits"]
        if chosen.get("prune_method"):
            ch = f"{chosen['prune_method']} {chosen['sparsity']:.0%} + {ch}"
        rows.append([label, row["target"], ch, f"{pct(row['accuracy']['measured'])}%",
                     f"{num(lat['predicted'])} / {b['latency_ms']:.0f} ms ({', '.join(extra)})",
                     f"{num(size['measured'])} / {b['size_mb']:.0f} MB", f"{row['host_speedup']:.2f}×"])
    tab = table(["task (uncompressed)", "target", "chosen", "dev acc", "predicted latency / budget", "`model.pte` / budget", "host speed-up"],
                ["l", "l", "l", "r", "l", "l", "r"], rows)
    chosen = {json.dumps(x["chosen"], sort_keys=True) for x in d["rows"]}
    worst = max(x["accuracy"]["drop_points"] for x in d["rows"])
    b77 = next(x for x in d["rows"] if x["task"] == "banking77")
    ft = r("finetune")
    tuned_full = max((x for x in ft["rows"] if x["task"] == "banking77" and x["variant"] == "full" and len(x["seeds"]) > 1),
                     key=lambda x: x["accuracy"])
    one = json.loads(next(iter(chosen)))
    same = (f"Every target's default budgets are met by {candidate_text(one).replace('word embeddings', 'word table')},"
            f" within {worst:.2f} points" if len(chosen) == 1 and all(x["passed"] for x in d["rows"])
            else f"The targets' default budgets pick {len(chosen)} different candidates; the largest drop is {worst:.2f} points")
    head = paragraph(f"""
        **Benchmark across targets** (`tools/bench/compress.py`, `tools/bench/results/compress.{{json,md}}`, {d['date']}): one
        `compress` run per task × target (pixel-7, raspberry-pi-5, raspberry-pi-4, host), the fine-tune stage shared per task,
        {d['preset']} preset, max drop {d['max_drop']:g} point. {host(d)} Run notes: {d['note']}""")
    tail = paragraph(f"""
        {same}. That candidate has the smallest predicted drop among those that fit, and pruning costs accuracy that these
        budgets do not ask for (the headline target below does ask for it). The host speed-up is the uncompressed program
        against the bundle, alternately in one process. banking77's uncompressed model is that run's quick preset's (300
        Learner steps on 77 intents): {pct(b77['accuracy']['reference'])}%, against {tuned_full['accuracy']:.1f}% for a
        tuned full fine-tuning (`finetune.json`; see [Fine-tuning](#fine-tuning)). The quick preset has since changed
        (FAR, 500 steps, for banking77: see its fine-tuning budget under [The main job](#the-main-job-edgenlp-compress));
        these runs predate it and are not yet repeated.""")
    return "\n\n".join([head, tab, tail])


def _attempt_ms(attempts: list[str]) -> list[float]:
    return [float(m) for a in attempts for m in re.findall(r"latency ms ([0-9.]+) >", a)]


HEADLINE_RUNS = ("compress-headline", "compress-headline-amd-avx512vnni")  # one per host class measured, oldest first
# the headline again through compress --recovery long, one per host class measured, oldest first
LONG_RECOVERY_RUNS = ("compress-headline-intel-amx-long", "compress-headline-amd-avx512vnni-long")
BANKING77_RUN = "compress-headline-banking77-intel-amx-long"  # the same rules on banking77
# the long runs' prunings with early exits, beside the fastest peer (the same order as LONG_RECOVERY_RUNS)
COMBINED_RUNS = ("combined-headline", "combined-headline-amd-avx512vnni")


@section("compress-headline")
def compress_headline(r: Results) -> str:
    """Every host's headline run (``HEADLINE_RUNS`` present in the results), each rendered by :func:`headline_run`."""
    blocks = [headline_run(r(name), name) for name in HEADLINE_RUNS if r.has(name) or name == HEADLINE_RUNS[0]]
    if len(blocks) > 1:
        blocks.append(paragraph("""
            The two runs' accuracy ends differ for a reason besides the host: the first run's planner still counted an int4
            word table at a scale per 32 columns (the quantizer stores one per row) and a trimmed table at half the
            vocabulary (SST-2 keeps far fewer tokens), which put `fast` 50% with int8 linears over the size budget and left
            int4 linears; the second prices both as the quantizer stores them."""))
    if r.has(LATENCY_PRUNING_RUN) and r.has(HEADLINE_RUNS[-1]):
        blocks.append(_latency_pruning(r(HEADLINE_RUNS[-1]), r(LATENCY_PRUNING_RUN)))
    if r.has("recovery-budget"):
        blocks.append(_recovery_budget(r("recovery-budget"), long_rows=r.has("recovery-1200")))
    long_runs = [name for name in LONG_RECOVERY_RUNS if r.has(name)]
    if long_runs:
        hosts = " and ".join(_host_class(r(name)) for name in long_runs)
        blocks.append(paragraph(f"""
            **Through `compress`, with the long recovery.** The same headline run again with `--recovery long`, on {hosts}:
            the planner reads the prior's rows at the long budget and `compress` builds, scores on validation and verifies
            the candidates itself."""))
        blocks += [headline_run(r(name), name) for name in long_runs]
    combined = [name for name in COMBINED_RUNS if r.has(name)]
    for i, name in enumerate(combined):
        last = i == len(combined) - 1
        blocks.append(combined_run(r(name), r("segment-overhead") if last and r.has("segment-overhead") else None, file=name,
                                   first=i == 0))
    if r.has(BANKING77_RUN):
        blocks.append(paragraph("""
            **banking77, the same rules.** The issue asks for banking77 beside SST-2: the same command with `--task banking77`,
            `compress` fine-tuning the model itself from the pretrained MiniLM."""))
        blocks.append(headline_run(r(BANKING77_RUN), BANKING77_RUN))
    return "\n\n".join(blocks)


def segment_overhead(o: dict) -> str:
    """``segment_overhead.py``: what running in segments costs over the static program, fp32 against int8 exit heads."""
    cases = {(c["bundle"], c["bucket"]): c for c in o["cases"]}
    labels = list(dict.fromkeys(c["bundle"] for c in o["cases"]))
    buckets = sorted({c["bucket"] for c in o["cases"]})

    def cost(label):
        return ", ".join(f"{100 * cases[label, b]['overhead']:.0f}% at {b} tokens" for b in buckets if (label, b) in cases)

    fp32 = next((lab for lab in labels if "fp32" in lab), None)
    head_ms = {b: sum(cases[fp32, b]["profile"]["chain"]["ms"].get(k, 0.0) for k in _bench_module("segment_overhead").HEAD_OPS)
               for b in buckets if (fp32, b) in cases} if fp32 else {}
    where = (" ETDump's XNNPACK events put the largest single part of it in the fp32 exit heads: their poolers read a 384 × 384"
             " fp32 matrix for one row, " + ", ".join(f"{ms:.3f} ms per pass at {b} tokens" for b, ms in head_ms.items())
             + ". `quantize` now ships the exit heads int8 like the layers (`--exit-heads int8`, the default).") if head_ms else ""
    return paragraph(f"""
        **What the segments cost** (`tools/bench/segment_overhead.py`, `results/segment-overhead.{{json,md}}`): running every
        segment of the real-length bundle, no exit taken, against its static program through the Python binding (its calls
        included): {'; '.join(f'{lab}: {cost(lab)}' for lab in labels)}.{where} The rest is spread over the layers' own
        operators (separate XNNPACK runtimes per segment) and the calls themselves. {host(o)}""")


def _host_kind(d: dict) -> str:
    """A results file's host by vendor: "AMD EPYC host", "Intel Xeon host" or "host"."""
    cpu = cpu_of(d)
    return "AMD EPYC host" if "AMD" in cpu else "Intel Xeon host" if "Intel" in cpu else "host"


def _host_class(d: dict) -> str:
    """A results file's host in a few words: the vendor and the fastest int8 instructions its ISA flags name."""
    flags, kind = isa_of(d), _host_kind(d)
    isa = "AMX" if "amx" in flags else "AVX-512 VNNI" if "avx512_vnni" in flags else "AVX2" if "avx2" in flags else ""
    vendor = f"an {kind}" if kind[0] in "AI" else f"a {kind}"
    return f"{vendor} with {isa}" if isa else vendor


def combined_run(d: dict, segments: dict | None = None, *, file: str = COMBINED_RUNS[0], first: bool = True) -> str:
    """``combined_headline.py``: the headline's pruning with early exits beside the fastest peer, on the same dev inputs."""
    res, nat, best, t = d["result"], d.get("native_result"), d.get("best_on_dev_curve"), d["target"]
    peer = next(row for row in d["rows"] if "threshold" not in row and "static" not in row["program"])
    static = next(row for row in d["rows"] if row["program"] == "static")
    python = [row for row in d["rows"] if "threshold" in row and row.get("runtime", "python") == "python"]
    native = [row for row in d["rows"] if row.get("runtime") == "native" or row["program"] == "native static"]
    shown = [peer, static, *python, *native]
    rows = []
    for row in shown:
        where = "native, " if row in native else ""
        name = {"static": "the pruned int8 bundle, static", "native static": "the same, static, native (libedgenlp)",
                peer["program"]: peer["program"] + " (the fastest peer)"}.get(
            row["program"], f"with exits, {where}threshold {row.get('threshold', 0):g}" + (" **(calibrated)**" if row.get("calibrated") else ""))
        rows.append([name, f"{pct(row['dev_accuracy'])}%", drop(row["drop_points"]), f"{row['mean_ms']:.2f}", f"{row['p90_ms']:.2f}",
                     f"{row['mean_exit_layer']:.2f}" if "mean_exit_layer" in row else "6", f"{row['speedup_vs_peer_mean']:.2f}×"])
    tab = table(["program (every dev sentence at seq 128, alternating)", "dev acc", "drop", "mean ms", "p90 ms",
                 "mean exit layer", "× the peer (mean)"], ["l", "r", "r", "r", "r", "r", "r"], rows)
    faster = [row for row in python if row["speedup_vs_peer_mean"] > res["speedup_vs_peer_mean"]]
    nxt = min(faster, key=lambda row: row["speedup_vs_peer_mean"], default=None)
    if best is not None and best is not res and best["threshold"] != res["threshold"]:
        curve = (f" Read off dev, the fastest threshold within {t['max_drop']:g} point is {best['threshold']:g}, at"
                 f" {best['speedup_vs_peer_mean']:.2f}×: an upper bound on what a better calibration could reach, not a result.")
    elif nxt is not None:
        curve = (f" On the dev curve no threshold within {t['max_drop']:g} point is faster than the calibrated one: the next,"
                 f" {nxt['threshold']:g}, runs at {nxt['speedup_vs_peer_mean']:.2f}× and loses {nxt['drop_points']:.2f} points, so"
                 f" {t['speedup']:g}× within the bound lies between the two, if anywhere.")
    else:
        curve = ""
    static_ms, exit_hi = static["mean_ms"], max(python, key=lambda row: row["threshold"])
    overhead = (f" The Python segment loop costs something of its own: at threshold {exit_hi['threshold']:g} the sentences run"
                f" {exit_hi['mean_exit_layer']:.1f} of 6 layers on average yet take {exit_hi['mean_ms']:.2f} ms against the static"
                f" program's {static_ms:.2f} ms (one delegate call per segment and the Python loop between them).") if exit_hi["mean_ms"] > static_ms else ""
    again = (" The bundles measured are the same candidate exported again by the current code (`--export-again`: int8 exit"
             " heads, the exit threshold calibrated again on training rows the way `compress` does)."
             if d.get("exported_again") else "")
    where = _host_kind(d)
    built = (f"The {where} run's plan chose the static candidate"
             f" ({d['chosen_static']}), so the exits went on that pruning as `compress`'s prune-exits stage builds them for a"
             " candidate with exits: the exits stage's config, trained and calibrated on the same training rows"
             " (`--add-exits`)." if d.get("exits_added") else
             f"The {where} run above also built its pruning with exit heads after every layer (the plan offers every"
             " candidate with exits too, `--dynamic auto`).")
    head = paragraph(f"""
        **With early exits on top{'' if first else ', on ' + _host_class(d)}** (`tools/bench/combined_headline.py`,
        `tools/bench/results/{file}.{{json,md,png}}`).
        The dynamic-inference issue's combined target is this headline at ≥ {t['speedup']:g}× the fastest peer within
        {t['max_drop']:g} point. {built} This benchmark runs each of the {d['dev_rows']:,} dev sentences, padded to
        {d['seq_len']} positions as the headline's rule says, through the fastest peer, the pruned bundle's static program and
        its segment loop{" in Python and in libedgenlp" if nat is not None else ""}, {d['rounds']} alternating rounds in one process, 1 thread. The exits cut layers per sentence, so the
        mean over sentences is the statistic they move; p90 stays near full depth.{again} {host(d)}""")
    python_says = (f"the bundle's Python segment loop runs at **{res['speedup_vs_peer_mean']:.2f}×** the peer's mean and loses"
                   f" {res['drop_points']:.2f} points against the uncompressed model ({pct(d['reference_accuracy'])}%).{curve}{overhead}")
    if nat is None:
        body = paragraph(f"""
            The combined target is **{'met' if d['met'] else 'not met'}**: at the exit threshold `compress` calibrated on training
            rows ({d['calibrated_threshold']:g}), {python_says}""")
    else:
        n_static = next(row for row in native if row["program"] == "native static")
        body = paragraph(f"""
            The combined target is **{'met' if d['met'] else 'not met'}** through libedgenlp: at the exit threshold `compress`
            calibrated on training rows ({d['calibrated_threshold']:g}), the C API's segment loop (`edgenlp_logits_dynamic`,
            its tokenization in C++ included in its time) runs at **{nat['speedup_vs_peer_mean']:.2f}×** the peer's mean and
            loses {nat['drop_points']:.2f} points against the uncompressed model ({pct(d['reference_accuracy'])}%), taking the
            same exit layer as the Python loop on {100 * nat['same_exit_layer_as_python']:.1f}% of the sentences. It runs the same
            model exported with the one bucket {d['seq_len']} (libedgenlp re-pads a sentence to the smallest bucket holding it).
            The two call paths cost the same: the static program takes {static_ms:.2f} ms through the Python binding and
            {n_static['mean_ms']:.2f} ms through libedgenlp. At the same threshold {python_says}""")
    rl = d.get("real_lengths")
    if rl is not None:
        r, t2 = rl["result"], rl["target"]
        body += "\n\n" + paragraph(f"""
            **The same bundle at each sentence's real length** (its buckets {', '.join(map(str, rl['buckets']))}; mean
            {rl['tokens_mean']:g} tokens), static against exits through libedgenlp in the same rounds: this is the issue's
            SST-2 exits target (mean ≥ {t2['speedup']:g}× the same static int8 bundle at ≤ {t2['max_extra_drop']:g} points extra
            drop, p90 ≤ {t2['p90_vs_static']:g}× static), on `compress`'s pruned model. At the calibrated threshold the exits run
            at **{r['speedup_vs_static_mean']:.2f}×** the static bundle's mean ({r['mean_ms']:.2f} ms against
            {next(x for x in rl['rows'] if 'threshold' not in x)['mean_ms']:.2f} ms) at
            {r['extra_drop_points']:.2f} points extra drop, p90 {r['p90_vs_static']:.2f}× static: **{'met' if r['met'] else 'not met'}**{'' if r['met'] else ' (short sentences leave less per layer to save against the loop and exit-head costs than at 128 positions)'}.""")
    if segments is not None:
        body += "\n\n" + segment_overhead(segments)
    return "\n\n".join([head, tab, body])


def _recovery_budget(d: dict, *, long_rows: bool) -> str:
    """``recovery_budget.py``: the headline's prunings again with longer recovery, timed beside the same peers."""
    rows = d["rows"]
    short, long_ = min(r["steps"] for r in rows), max(r["steps"] for r in rows)
    met = [r for r in rows if r["meets"]]
    best = max(met, key=lambda r: r["speedup_vs_fastest_peer"]) if met else None
    verdict = (f"With {long_:,} steps `fast` {best['sparsity']:.0%} + int8 runs at **{best['speedup_vs_fastest_peer']:.2f}×** the fastest "
               f"peer and loses **{best['dev_drop']:.2f}** points on dev: the {d['speedup']:g}× target within {d['max_drop']:g} point is "
               "there once the recovery is long enough." if best else
               f"No pruning met X and the {d['max_drop']:g}-point bound at either budget.")
    offered = ("`compress --recovery long` spends the longer budget, planned with the prior's rows measured at it"
               " ([Recovery distillation](#recovery-distillation))." if long_rows else
               "The planner's accuracy prior has rows at the quick preset's budget only, so `compress` does not offer the"
               " longer recovery yet.")
    table_md = _bench_module("recovery_budget").markdown(d).split("\n")
    body = [line for line in table_md if line.startswith("|")]
    tail = [line for line in table_md if line.startswith("Peers in the same process")]
    return "\n\n".join([paragraph(f"""
        **What stands in the way is the recovery budget** (`tools/bench/recovery_budget.py`,
        `tools/bench/results/recovery-budget.{{json,md}}`, {d['date']}): the headline run's prunings again, on the same
        fine-tuned model and validation rows, recovered for {short:,} steps (the quick preset's budget) and for {long_:,} (the
        same recovery on {long_ / short:g}× the rows), each built as `compress` builds it and timed beside the same peers in one process.
        {verdict} {offered}"""), "\n".join(body), "\n".join(tail)])


LATENCY_PRUNING_RUN = "compress-headline-amd-avx512vnni-latency"  # the same host's headline, pruning by latency


def _latency_pruning(params: dict, latency: dict) -> str:
    """The same host's headline run again with ``--prune-target latency``: what pruning by latency changed."""

    def first(d: dict, sparsity: str, rows_of: str) -> dict:
        c = d["compress"] if rows_of == "compress" else d["frontier"][rows_of]["compress"]
        return next(v for v in c.get("validation", []) if v["candidate"].startswith(f"fast {sparsity}"))

    def end(d: dict) -> dict:
        return d["frontier"]["most_accurate_within_x"]["compress"]

    p50, l50 = first(params, "50%", "compress"), first(latency, "50%", "compress")
    (pv,), (lv,) = _attempt_ms(params["compress"]["attempts"]), _attempt_ms(latency["compress"]["attempts"])
    pe, le = end(params), end(latency)
    return paragraph(f"""
        **Pruning by latency** (`compress --prune-target latency`, `tools/bench/results/{LATENCY_PRUNING_RUN}.{{json,md}}`,
        {latency['date']}, same host, same fine-tuned model). The cost model prices one attention-core FLOP at
        {latency['compress']['prune_measure']['attention_weight']:.2f} int8-linear FLOPs here, so `fast` at 50% of the latency keeps {l50['heads']} heads and {l50['ffn']:,} neurons where
        50% of the parameters keeps more heads. Verification measured {num(lv, 2)} ms against {num(pv, 2)} ms for the
        parameter pruning ({100 * (1 - lv / pv):.0f}% faster), and on the validation rows it lost {l50['val_drop']:.2f}
        points against {p50['val_drop']:.2f} (1,000 rows: about a point of noise). At the latency end `fast` 70% ran at
        {le['speedup_vs_fastest_peer']:.2f}× the fastest peer and lost {le['drop_points']:.2f} points on dev, against
        {pe['speedup_vs_fastest_peer']:.2f}× and {pe['drop_points']:.2f} by parameters. Pruning by latency moves along the
        same trade-off rather than past it: `params` stays the default.""")


HEADLINE_COLUMNS = (["program (alternating rounds, one process)", "median ms", "dev acc", "drop", "`model.pte`"],
                    ["l", "r", "r", "r", "r"])


def _headline_model(d: dict) -> str:
    """The model the headline compressed: SST-2's runs are Learner-tuned; another task's, tuned by `compress` itself."""
    task = d.get("task", "sst2")
    if task == "sst2":
        return "SST-2, Learner-tuned MiniLM"
    ft = ((d.get("compress") or {}).get("compress_json") or {}).get("finetune") or {}
    how = f"{ft['method']}, " if ft.get("method") else ""
    return f"{task}, MiniLM fine-tuned by `compress`'s own fine-tune stage ({how}{d.get('preset', 'quick')} preset)"


def _headline_head(d: dict, name: str, sp: float, ref: float) -> str:
    """The paragraph that opens a headline run's block: the target, the budgets, the model and the host."""
    return paragraph(f"""
        **The headline target** (`tools/bench/compress_headline.py`, `tools/bench/results/{name}.{{json,md}}`, {d['date']}):
        `compress --target host --latency-ms X --max-drop {d['max_drop']:.1f}{' --recovery ' + d['recovery'] if d.get('recovery') else ''}` at seq {d['seq_len']} / {d['threads']} thread, with X the
        fastest peer's time divided by {sp:g}, measured in the same process, and a size budget of {d['size_fraction']:.0%} of the fp32
        `model.pte`. {_headline_model(d)} at {pct(ref)}%; every time is the median of {d['runs']} alternating rounds.
        {host(d)}
        {('Run notes: ' + d['note']) if d.get('note') else ''}""")


def _peer_rows(d: dict, sp: float, fp32_name: str, ref: float) -> list[list[str]]:
    """The headline table's first rows: our fp32 bundle at the reference accuracy, then every peer (the fastest named)."""
    peers = d["peers_before"]
    rows = [["ExecuTorch fp32 (our bundle)", f"{peers[fp32_name]['median_ms']:.2f}", f"{pct(ref)}%", "–", f"{d['fp32_pte_mb']:.1f} MB"]]
    for name, p in peers.items():
        if name == fp32_name:
            continue
        label = name.replace("ExecuTorch int8 (stock XNNPACK flow)", "ExecuTorch int8, stock XNNPACK flow")
        if name == d["fastest_peer"]:
            label += f" (fastest peer: X = {d['fastest_peer_ms']:.2f} / {sp:g} = {d['latency_budget_ms']:.2f} ms)"
        rows.append([label, f"{p['median_ms']:.2f}", "", "", ""])
    return rows


def headline_run(d: dict, name: str) -> str:
    """One ``compress_headline.py`` run: the peers, what ``compress`` built (or both ends of the trade-off), and why."""
    sp = d.get("speedup") or round(d["fastest_peer_ms"] / d["latency_budget_ms"], 1)  # (older files: from X)
    peers = d["peers_before"]
    fp32_name = next(k for k in peers if k.startswith("ExecuTorch fp32"))
    met = "compress" in d and "error" not in d["compress"] and d["compress"].get("passed")
    if met:
        return _headline_met(d, name, sp, fp32_name)
    acc_end = d["frontier"]["fastest_within_drop"]
    lat_end = d["frontier"]["most_accurate_within_x"]
    a, l = acc_end["compress"], lat_end["compress"]
    ref = next(c["reference"] for c in (a, l) if "reference" in c)  # an end that failed verification has no bundle
    rows = _peer_rows(d, sp, fp32_name, ref)

    def failed_drop(c) -> float | None:
        """The dev drop of an end whose attempt failed the accuracy bound (no bundle was kept)."""
        found = [float(m) for x in c.get("attempts", []) for m in re.findall(r"accuracy drop ([0-9.]+) points >", x)]
        return found[-1] if found else None

    def end_row(label, e, bold_drop=False, bold_ms=False):
        c = e["compress"]
        if "error" in c:
            fd = failed_drop(c)
            return [f"{label}: {e['candidate']} (planned), no bundle", "–", "–",
                    f"{drop(fd)} (over the bound)" if fd is not None else "failed", "–"]
        ms = f"{c['host_timing']['median_ms']:.2f}"
        dp = drop(c["drop_points"])
        return [f"{label}: {chosen_label(c['compress_json']['chosen'])}", f"**{ms}**" if bold_ms else ms, f"{pct(c['measured'])}%",
                f"**{dp}**" if bold_drop else dp, f"{c['size_mb']:.1f} MB ({100 * c['size_mb'] / d['fp32_pte_mb']:.1f}%)"]

    rows.append(end_row("accuracy end", acc_end, bold_drop=True))
    rows.append(end_row("latency end", lat_end, bold_ms=True))
    tab = table(*HEADLINE_COLUMNS, rows)
    failed_ms = _attempt_ms(l["attempts"])
    head = _headline_head(d, name, sp, ref)
    if "error" in a:
        acc_text = (f"Within {d['max_drop']:g} point and {d['size_fraction']:.0%} of the size there is no bundle: the only candidate"
                    f" predicted within the bound, {acc_end['candidate']} (predicted {acc_end['predicted_drop']:.2f}"
                    f" points at {acc_end['predicted_latency_ms']:.2f} ms), lost {failed_drop(a):.2f} points on dev.")
    else:
        acc_text = (f"Within {d['max_drop']:g} point and {d['size_fraction']:.0%} of the size, the bundle runs at"
                    f" {a['speedup_vs_fastest_peer']:.2f}× the fastest peer's speed, not {sp:g}×.")
    attempts = (f" (the first {len(failed_ms)} attempts measured {' and '.join(num(x) for x in failed_ms)} ms and were re-planned)"
                if failed_ms else "")
    own = d.get("compress", {})
    tried = [(att.split(" (", 1)[1].split("):", 1)[0], ms) for att in own.get("attempts", [])
             for ms in _attempt_ms([att])]  # the plan's picks that verification measured over X
    if tried:
        picks = "; ".join(f"{cand}, measured at {num(ms, 2)} ms" for cand, ms in tried)
        why = (f": the plan's pick was predicted within X, the size budget and the bound, but verification on the host"
               f" measured it over X ({picks}), and with no other candidate predicted to meet all three `compress`"
               " says so in one line. The benchmark then builds both ends of the trade-off for real")
    else:
        why = (": no candidate is predicted to meet X, the size budget and the 1-point bound together, and `compress`"
               " says so in one line (it names both ends of the trade-off). The benchmark then builds both ends for real")
    body = paragraph(f"""
        The target is **{'met' if met else 'not met'}**{why}. {acc_text} Within X, the bundle runs at
        {l['speedup_vs_fastest_peer']:.2f}× the fastest peer and loses {l['drop_points']:.2f} points{attempts}. What stands in the way:""")
    lat_chosen = l["compress_json"]["chosen"]
    stands = bullets([
        f"{sp:g}× over XNNPACK's own int8 within the size budget took {chosen_label(lat_chosen)}: {lat_chosen['sparsity']:.0%} of the"
        " encoder removed, then recovery distillation from the unpruned model, and it still loses"
        f" {l['drop_points']:.2f} points. CoFi with distillation is the method that kept the most accuracy in the pruning"
        " benchmarks (see the pruning section), and it needs more training than the quick preset's CPU budget.",
        f"The {d['size_fraction']:.0%} size budget forces int4 linears or heavy pruning (the unpruned encoder alone is larger than the"
        " budget in int8), and XNNPACK's int4 kernels are slower than int8 on x86 (`tools/bench/results/quant_profile.md`).",
    ])
    return "\n\n".join([head, tab, body, stands])


def _loses(points: float) -> str:
    """``loses X points``, or for a negative drop ``gains X points`` (a distilled student can pass an under-trained teacher)."""
    return f"loses {points:.2f} points" if points >= 0 else f"gains {-points:.2f} points over the uncompressed model"


def _headline_met(d: dict, name: str, sp: float, fp32_name: str) -> str:
    """A headline run whose ``compress`` met every budget: the bundle beside the peers."""
    c = d["compress"]
    rows = _peer_rows(d, sp, fp32_name, c["reference"])
    rows.append([f"`compress`: {chosen_label(c['compress_json']['chosen'])}", f"**{c['host_timing']['median_ms']:.2f}**",
                 f"{pct(c['measured'])}%", f"**{drop(c['drop_points'])}**",
                 f"{c['size_mb']:.1f} MB ({100 * c['size_mb'] / d['fp32_pte_mb']:.1f}%)"])
    tab = table(*HEADLINE_COLUMNS, rows)
    head = _headline_head(d, name, sp, c["reference"])
    checks = [c.get("latency_met"), c.get("size_met"), c.get("accuracy_met")]
    verdict = "met" if all(checks) else "not met, though `compress` passed its own verification"
    after = d.get("fastest_peer_ms_after")
    edge = ""
    if all(checks) and c["speedup_vs_fastest_peer"] < sp:
        verdict = "met on the line"
        edge = (f" The bundle ran under X, which the peers' first timing set ({d['fastest_peer_ms']:.2f} ms / {sp:g}), but the"
                f" peers ran faster the second time, so against that timing the ratio is just under {sp:g}×.")
    body = paragraph(f"""
        The target is **{verdict}**: `compress` chose {chosen_label(c['compress_json']['chosen'])}, which
        {_loses(c['drop_points'])} on dev (bound {d['max_drop']:g}), weighs {c['size_mb']:.1f} MB (budget
        {d['size_budget_mb']:.1f} MB) and runs in {c['host_timing']['median_ms']:.2f} ms beside the peers (X =
        {d['latency_budget_ms']:.2f} ms), **{c['speedup_vs_fastest_peer']:.2f}×** the fastest peer timed in the same rounds
        ({after:.2f} ms).{edge}""")
    return "\n\n".join([head, tab, body])


# --------------------------------------------------------------------------- cost model


@section("costmodel-int4")
def costmodel_int4(r: Results) -> str:
    qp = {(x["seq_len"], x["precision"]): x for x in r("quant_profile")["rows"]}
    hostrow = compress_row(r, "banking77", "host")
    return paragraph(f"""
        A calibrated precision keeps what was measured, even where it is slower: int4 on x86, where MiniLM-L6 bundles measured
        {num(qp[(128, 'int4')]['total_ms'])} ms with int4 linears against {num(qp[(128, 'int8')]['total_ms'])} ms with int8 at seq 128,
        1 thread on the Xeon host (`quant_profile.json`); there the calibrated table predicted {num(hostrow['latency_ms']['predicted'])} ms
        for the int8 bundle that measured {num(hostrow['latency_ms']['host_measured'])} ms (`compress.json`, banking77 on `host`).""")


@section("planner-reference")
def planner_reference(r: Results) -> str:
    """The int4 : int8 and word-table ratios the shipped reference table carries (tools/targets/reference_ratios.py)."""
    q = r("quantize")
    et = {v: q["tasks"]["sst2"][v]["latency"]["executorch"] for v in ("int8", "int4", "int8+emb8", "int4+emb4")}
    when = q.get("measured", {}).get("sst2", {})
    return paragraph(f"""
        Measured on the reference machine's kind ({when.get('cpu', q['cpu'])}, {when.get('isa', q['isa'])}; `quantize.json`,
        {when.get('date', q['date'])}, ExecuTorch, 1 thread): MiniLM-L6 ran {num(et['int4']['128/1'])} ms with int4 linears
        against {num(et['int8']['128/1'])} ms with int8 at seq 128 ({et['int4']['128/1'] / et['int8']['128/1']:.2f}x) and
        {num(et['int4']['32/1'])} against {num(et['int8']['32/1'])} ms at seq 32
        ({et['int4']['32/1'] / et['int8']['32/1']:.2f}x); the int8 / int4 word tables changed the end-to-end time by
        {et['int8+emb8']['128/1'] / et['int8']['128/1']:.2f}x / {et['int4+emb4']['128/1'] / et['int4']['128/1']:.2f}x at seq 128,
        too little to resolve the gather, which is then priced as the fp32 table's.""")


@section("costmodel-validation")
def costmodel_validation(r: Results) -> str:
    d = r("cost_model")
    v = d["variants"]
    by = {}
    for x in v:
        by.setdefault(x["precision"], []).append(x)
    layers = [len(x["heads"]) for x in v]
    heads = [h for x in v for h in x["heads"]]
    ffn = [f for x in v for f in x["ffn"]]
    counts = ", ".join(f"{len(xs)} {p}" for p, xs in by.items())
    head = paragraph(f"""
        **Validation** (`tools/bench/cost_model.py`, results in `tools/bench/results/cost_model.{{json,md}}`): {len(v)} uneven
        MiniLM-sized variants outside the calibration grid ({min(layers)}-{max(layers)} layers, {min(heads)}-{max(heads)} heads and
        {thousands(min(ffn))}-{thousands(max(ffn))} FFN neurons per layer; {counts} through ExecuTorch), seq {d['seq_len']},
        {d['threads']} thread, predicted vs measured against a table of {d['table_observations']} observations calibrated on the same host. The validation took {minsec(d['wall_s'])}.
        {host(d, load={'at the start': d['load_avg_start'], 'at the end': d['load_avg_end']})}""")
    rows = []
    for key, label in (("executorch/fp32", "fp32"), ("executorch/int8", "int8"), ("all", "all")):
        s, m = d["summary"][key], d["summary_median"][key]
        b = "**" if key == "all" else ""
        rows.append([label, str(s["n"]), f"{b}{s['mean_rel_err_pct']:.1f}%{b}", f"{b}{s['max_rel_err_pct']:.1f}%{b}",
                     f"{m['mean_rel_err_pct']:.1f}%", f"{m['max_rel_err_pct']:.1f}%"])
    tab = table(["ExecuTorch", "variants", "mean error", "max error", "mean error (median run)", "max error (median run)"],
                ["l"] + ["r"] * 5, rows)
    s, m = d["summary"]["all"], d["summary_median"]["all"]
    fastest_ok = s["mean_rel_err_pct"] <= 15 and s["max_rel_err_pct"] <= 30
    median_mean, median_max = m["mean_rel_err_pct"] <= 15, m["max_rel_err_pct"] <= 30
    if median_mean and median_max:
        median_txt = "Against the median run it holds too."
    elif median_mean:
        median_txt = (f"Against the median run it holds for the mean and misses the max by {m['max_rel_err_pct'] - 30:.1f} points.")
    else:
        median_txt = "Against the median run it misses."
    under = [100 * (x["measured_min_ms"] - x["predicted_ms"]) / x["measured_min_ms"] for x in by.get("int8", [])]
    tail = paragraph(f"""
        Errors are measured against each variant's fastest run, the statistic the calibration fits.
        Measured that way, the goal (mean ≤ 15%, max ≤ 30%) {verdict(fastest_ok, 'holds', 'misses')}. {median_txt}
        The model under-predicts int8 by {min(under):.0f}–{max(under):.0f}% (mean {statistics.mean(under):.0f}%). Its int8 fit comes
        from six shapes, and the fixed cost of quantizing activations between linears weighs more on small variants.
        The shipped `targets/host.costs.json` is this calibration; `targets/host.toml` describes the host it was measured on
        ({cpu_of(d)}, AVX-512 VNNI).""")
    return "\n\n".join([head, tab, tail])


# --------------------------------------------------------------------------- boards


@section("boards")
def boards(r: Results) -> str:
    d = r("boards")
    qp = {(x["seq_len"], x["precision"]): x for x in r("quant_profile")["rows"]}
    seq = d["config"]["seq_lens"][0]
    docs = {q: next(doc for doc in d["variants"][q] if doc["seq_len"] == seq) for q in d["variants"]}
    rts = [rt for rt in docs["fp32"]["runtimes"]]
    qemu = [rt for rt in rts if "qemu" in rt]
    hostrt = [rt for rt in rts if "qemu" not in rt][0]

    def shares(doc, rt):
        comps = {c["name"]: c["latency_ms"][rt] for c in doc["components"]}
        total = sum(comps.values())
        return {k: 100 * v / total for k, v in comps.items()}

    sh = {(q, rt): shares(docs[q], rt) for q in docs for rt in rts}
    merged = {"QKV": ("attn_qkv",), "attention core": ("attn_core",), "output projection": ("attn_out",), "FFN": ("ffn",),
              "embedding + other": ("embedding", "other")}
    cpus = [rt.split(":", 1)[1] for rt in qemu]
    short = {c: c.replace("cortex-", "") for c in cpus}
    rows = []
    for label, keys in merged.items():
        def cell(q, rt):
            return f"{sum(sh[(q, rt)][k] for k in keys):.1f}"
        rows.append([label, " / ".join(cell("fp32", rt) for rt in qemu) + "%", " / ".join(cell("int8", rt) for rt in qemu) + "%",
                     f"{cell('fp32', hostrt)} / {cell('int8', hostrt)}%"])
    names = " / ".join(short[c] for c in cpus)
    tab = table(["component", f"fp32 {names} (qemu)", f"int8 {names} (qemu)", "fp32 / int8 host"], ["l", "r", "r", "r"], rows)
    ffn_flops = next(c for c in docs["fp32"]["components"] if c["name"] == "ffn")["share_pct"]["flops"]
    core_fp = [sh[("fp32", rt)]["attn_core"] for rt in qemu]
    core_i8 = [sh[("int8", rt)]["attn_core"] for rt in qemu]
    ratio = [docs["int8"]["total"]["latency_ms"][rt] / docs["fp32"]["total"]["latency_ms"][rt] for rt in qemu]
    host_fp32 = docs["fp32"]["total"]["latency_ms"][hostrt]
    head = paragraph(f"""
        qemu times are emulation times, not device times: `tools/bench/boards.py` compares per-component shares on
        {', '.join(f'`qemu:{c}`' for c in cpus)} and the host (`tools/bench/results/boards.{{json,md}}`) to show that the same command
        works, not how fast a board is. With `--quant fp32,int8` it exports one fine-tuned model at both precisions and puts the
        shares side by side. Learner-tuned MiniLM on SST-2, seq {seq}, {docs['fp32']['threads']} thread; shares of the component sum.
        {host(d)} Run notes: {d['note']}.""")
    tail = paragraph(f"""
        On fp32 the emulated shares follow the FLOP shares (FFN {ffn_flops:.1f}% of FLOPs). With int8 linears the attention core,
        which stays fp32, grows from {span(core_fp, 0)}% to {span(core_i8, 0)}% of the time under emulation and from
        {sh[('fp32', hostrt)]['attn_core']:.0f}% to {sh[('int8', hostrt)]['attn_core']:.0f}% on the host: after quantization it is the
        next thing to attack. The emulated int8 ÷ fp32 ratio ({span(ratio, 2)}×) is an artefact: qemu emulates floating point in
        software and integer SIMD cheaply. The host column ran while other benchmarks shared the 2 cores, so its times are inflated
        (fp32 {num(host_fp32)} ms against {num(qp[(seq, 'fp32')]['total_ms'])} ms in `quant_profile.json`) and its shares are noisier
        than the qemu ones.""")
    return "\n\n".join([head, tab, tail])


# --------------------------------------------------------------------------- fine-tuning


def _rows(doc: dict, task: str, variant: str) -> list[dict]:
    return [x for x in doc["rows"] if x["task"] == task and x["variant"] == variant]


def _chosen(doc: dict, task: str, variant: str) -> dict:
    rows = _rows(doc, task, variant)
    multi = [x for x in rows if len(x["seeds"]) > 1]
    return max(multi or rows, key=lambda x: x["accuracy"])


def _scale_of(row: dict, scales, defaults: dict) -> float | None:
    if row["setting"] == "lr=default,head=default":
        return 1.0
    for s in scales:
        if abs(row["lr"]["head"] - defaults["head"] * s) < 1e-9 and abs(row["lr"]["body"] - defaults["body"] * s) < 1e-9:
            return s
    return None


def _sweep(doc: dict, task: str, variant: str) -> dict[float, float]:
    """Seed-0 dev accuracy per scale of the default rates."""
    rows = _rows(doc, task, variant)
    default = next(x for x in rows if x["setting"] == "lr=default,head=default")["lr"]
    out = {}
    for x in rows:
        s = _scale_of(x, doc["meta"]["sweep"]["scale"] or [1.0], default)
        if s is not None:
            out[s] = x["accuracy_per_seed"][x["seeds"].index(0)]
    return out


def _mean_std(row: dict) -> str:
    return f"{row['accuracy']:.2f} ± {row['accuracy_std']:.2f}" if len(row["seeds"]) > 1 else f"{row['accuracy']:.1f} (1 seed)"


METHOD = {"full": "full", "learner": "Learner + priming", "far": "FAR"}
TASK = {"banking77": "banking77", "sst2": "SST-2"}


@section("finetune-defaults")
def finetune_defaults(r: Results) -> str:
    old = r("finetune-old-defaults")
    ft = r("finetune")
    before = next(x for x in old["rows"] if x["task"] == "banking77" and x["variant"] == "full")
    now = _sweep(ft, "banking77", "full")[1.0]
    return paragraph(f"""
        Why the head has its own rate: with the whole model at 5e-5, full fine-tuning reached {before['accuracy']:.1f}% on banking77
        after an epoch (`finetune-old-defaults.json`); with the head at 2e-3 and the body at 5e-5 it reaches {now:.1f}% after one
        epoch (`finetune.json`, seed 0).""")


BODY_RATE_FILES = ("full-body-rate-banking77-1epoch", "full-body-rate-sst2-1epoch")


def _rates(run: dict) -> tuple[float, float]:
    """The (body, head) learning rates a run trained with, from its recorded parameter groups."""
    groups = {g["name"]: g["lr"] for phase in run["phases"] for g in phase["lr_groups"]}
    return groups["body"], groups["head"]


def _val_per_seed(runs: list[dict]) -> list[float]:
    return [100 * x["val"]["accuracy"] for x in sorted(runs, key=lambda x: x["seed"])]


@section("finetune-body-rate")
def finetune_body_rate(r: Results) -> str:
    rows, gains = [], []
    for name in BODY_RATE_FILES:
        doc = r(name)
        meta = doc["meta"]
        by: dict[tuple[float, float], list[dict]] = {}
        for run in doc["runs"]:
            by.setdefault(_rates(run), []).append(run)
        task = TASK.get(meta["task"], meta["task"])
        for (body, head), runs in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            val = _val_per_seed(runs)
            dev = [100 * x["dev"]["accuracy"] for x in runs]
            rows.append([f"{task}, {meta['fit_rows']:,} rows", lr(body), lr(head), str(len(runs)),
                         f"{num(statistics.mean(val), 2)} ({' / '.join(num(v, 1) for v in val)})",
                         f"{num(statistics.mean(dev), 2)} ± {num(statistics.stdev(dev), 2) if len(dev) > 1 else '–'}"])
        heads = {head for _, head in by}
        for head in sorted(heads):
            low, high = by.get((5e-5, head)), by.get((1.6e-4, head))
            if low and high and len(low) == len(high):
                diffs = [b - a for a, b in zip(_val_per_seed(low), _val_per_seed(high))]
                gains.append(f"{task} (head {lr(head)}): {pts(statistics.mean(diffs))} on validation "
                             f"({', '.join(pts(d) for d in diffs)} per seed)")
    text = paragraph(f"""
        Full fine-tuning's body rate, chosen on a validation split: 1,000 training rows held out (seeded), the rest (or
        a seeded subset) trained for 1 epoch, 3 seeds, the head at the library's rate for the budget; dev is reported
        and chose nothing (`tools/bench/learner_ablation.py`, {', '.join(f'`{n}.json`' for n in BODY_RATE_FILES)}).
        1.6e-4 against 5e-5: {'; '.join(gains)}. So 1.6e-4 is the default for full fine-tuning (FinetuneConfig
        version 3; a recipe written earlier without a rate reads back as the 5e-5 it ran with). FAR and freeze-FFN
        keep 5e-5: their rates were not chosen on a validation split.""")
    return text + "\n\n" + table(["task", "body rate", "head rate", "seeds", "validation (%) mean (per seed)",
                                    "dev (%) mean ± std"], ["l", "r", "r", "r", "r", "r"], rows)


def _default_lr(doc: dict, task: str, variant: str) -> dict:
    return next(x for x in _rows(doc, task, variant) if x["setting"] == "lr=default,head=default")["lr"]


def _chosen_scale(doc: dict, task: str, variant: str) -> float | None:
    return _scale_of(_chosen(doc, task, variant), doc["meta"]["sweep"]["scale"] or [1.0], _default_lr(doc, task, variant))


def _bracketed(doc: dict, task: str, variant: str) -> bool:
    """A rate above the chosen one was swept and did no better."""
    sw, cs = _sweep(doc, task, variant), _chosen_scale(doc, task, variant)
    return any(s > cs and sw[s] <= sw[cs] for s in sw)


def _setting(row: dict) -> str:
    if row["setting"] == "lr=default,head=default":
        return f"the defaults (body {lr(row['lr']['body'])}, head {lr(row['lr']['head'])})"
    return f"body {lr(row['lr']['body'])}, head {lr(row['lr']['head'])}"


@section("finetune-comparison")
def finetune_comparison(r: Results) -> str:
    d = r("finetune")
    steps = r("finetune-steps")
    old_steps = r("finetune-old-defaults-steps")
    meta = d["meta"]
    scales = meta["sweep"]["scale"]
    rows = []
    chosen = {(t, m): _chosen(d, t, m) for t in TASK for m in METHOD}
    for task in TASK:
        best = max(METHOD, key=lambda m: chosen[(task, m)]["accuracy"])
        for method in METHOD:
            sw, c, cs = _sweep(d, task, method), chosen[(task, method)], _chosen_scale(d, task, method)
            cells = [("–" if s not in sw else f"**{sw[s]:.1f}**" if s == cs else f"{sw[s]:.1f}") for s in scales]
            acc = _mean_std(c)
            trainable = "100%" if c["trainable_percent"] > 99.5 else f"{c['trainable_percent']:.1f}%"
            rows.append([TASK[task], METHOD[method], " / ".join(cells), _setting(c), f"**{acc}**" if method == best else acc, trainable,
                         f"{steps['methods'][method]['vs_full']:.2f}"])
    tab = table(["task", "method", "seed-0 sweep " + " / ".join(f"{s:g}×" for s in scales), "chosen", "dev acc, 3 seeds", "trainable",
                 "step time vs full"], ["l", "l", "l", "l", "r", "r", "r"], rows)
    diff = max(abs(steps["methods"][m]["vs_full"] - old_steps["methods"][m]["vs_full"]) for m in steps["methods"] if m in old_steps["methods"])
    head = paragraph(f"""
        **Measured** (`tools/bench/results/finetune.{{md,json}}`): banking77 ({meta['rows']['banking77']}) and SST-2
        ({meta['rows']['sst2']}), {meta['epochs']} epoch, length {meta['max_seq_len']}, {meta['threads']} thread per run, CPU only.
        Full fine-tuning, Learner + priming and FAR were each swept over body and head rates scaled together by
        {', '.join(f'{s:g}×' for s in scales)} of the defaults (seed 0). Each then ran seeds 1 and 2 at its best setting.
        {host(meta)} Run notes: {meta['note']}.""")
    bk, ss = {m: chosen[("banking77", m)] for m in METHOD}, {m: chosen[("sst2", m)] for m in METHOD}

    def gap(task_rows, m):
        return task_rows["full"]["accuracy"] - task_rows[m]["accuracy"]

    all_bracketed = all(_bracketed(d, t, m) for t in TASK for m in METHOD)
    lsw = {t: _sweep(d, t, "learner") for t in TASK}
    top = max(lsw["sst2"])
    far_ok = all(gap(x, "far") <= 1 for x in (bk, ss)) and steps["methods"]["far"]["vs_full"] < 1
    learner_ok = {t: gap(x, "learner") <= 1 and x["learner"]["trainable_percent"] <= 10 for t, x in (("banking77", bk), ("sst2", ss))}
    old_b77 = next(x for x in r("finetune-old-defaults")["rows"] if x["task"] == "banking77" and x["variant"] == "full")["accuracy"]
    trainable = [x["trainable_percent"] for x in (bk["learner"], ss["learner"])]
    e3 = r("finetune-3epochs")
    e3_full, e3_def = _chosen(e3, "banking77", "full"), next(x for x in _rows(e3, "banking77", "full")
                                                              if x["setting"] == "lr=default,head=default")
    e3_gap = e3_full["accuracy"] - _chosen(e3, "banking77", "learner")["accuracy"]
    full_scale, e3_scale = _chosen_scale(d, "banking77", "full"), _chosen_scale(e3, "banking77", "full")
    learner_sweep = ", ".join(f"{lsw['banking77'][s]:.1f} at {s:g}×" for s in sorted(lsw["banking77"]))
    within_std = gap(ss, "learner") <= ss["learner"]["accuracy_std"]
    mid = paragraph(f"""
        {'Every chosen rate has a rate above it that did no better, so the sweep brackets each optimum' if all_bracketed else
         'Not every chosen rate has a worse rate above it, so some optima are not bracketed'}
        ({top:g}× diverges for the Learner: {lsw['sst2'][top]:.1f}% on SST-2 is the majority class).
        Step times come from {steps['methods']['full']['steps']} interleaved steps per method in one process on the same host,
        {steps['threads']} threads, batch {steps['batch_size']}, length {steps['max_seq_len']} (`results/finetune-steps.json`; full
        {steps['methods']['full']['median_s']:.3f} s median; the AMD host of an earlier stop, `finetune-old-defaults-steps.json`,
        gave ratios within {diff:.2f}). Against the targets, with the baseline tuned like the methods:""")
    learner_verdict = (f"{'holds' if learner_ok['sst2'] else 'misses'} on SST-2, "
                       f"{'holds on banking77' if learner_ok['banking77'] else 'not on banking77'}")
    items = bullets([
        f"**Full fine-tuning converges with its defaults** (banking77 {_sweep(d, 'banking77', 'full')[1.0]:.1f}% at 1 epoch, seed 0,"
        f" where the old default gave {old_b77:.1f}%; SST-2 {_sweep(d, 'sst2', 'full')[1.0]:.1f}%). Tuned, it reaches"
        f" {_mean_std(bk['full'])}% on banking77. Full fine-tuning prefers rates {full_scale:g}× the defaults at 1 epoch"
        + (f" and {e3_scale:g}× at the default 3 (next section, {e3_full['accuracy'] - e3_def['accuracy']:+.2f} points there against"
           f" the defaults' {_mean_std(e3_def)})" if e3_scale else "")
        + ". These runs had the body default at 5e-5; it is 1.6e-4 since a validation split chose it on both tasks"
          " (\"Defaults, and why\").",
        f"**FAR within 1 point of tuned full fine-tuning at a lower step time: {'holds on both tasks' if far_ok else 'does not hold on both tasks'}.**"
        f" banking77 {pts(-gap(bk, 'far'))} points ({_mean_std(bk['far'])}), SST-2 {pts(-gap(ss, 'far'))} ({_mean_std(ss['far'])}),"
        f" at {steps['methods']['far']['vs_full']:.2f} of full's step.",
        f"**Learner + priming within 1 point with ≤ 10% trainable parameters: {learner_verdict}.** It trains {span(trainable, 1)}% of"
        f" the parameters at {steps['methods']['learner']['vs_full']:.2f} of full's step. On SST-2 it lands {gap(ss, 'learner'):.2f}"
        f" points below ({_mean_std(ss['learner'])}){', within one standard deviation' if within_std else ''}. On banking77 it lands"
        f" {gap(bk, 'learner'):.2f} points below ({_mean_std(bk['learner'])}), with its optimum"
        f" {'bracketed' if _bracketed(d, 'banking77', 'learner') else 'not bracketed'} ({learner_sweep}). At one epoch the 77-class"
        f" task needs more of the body to move than the Learners give it. At the default 3 epochs the gap is {e3_gap:.2f} points"
        f"{', still a miss' if e3_gap > 1 else ''} (next section).",
    ])
    return "\n\n".join([head, tab, mid, items])


@section("finetune-3epochs")
def finetune_3epochs(r: Results) -> str:
    import math

    e3 = r("finetune-3epochs")
    c154 = r("finetune-154-classes")
    runs3 = {(x["method"], x["seed"], x["config"].get("lr"), x["config"].get("head_lr")): x for x in e3["runs"]}
    runs154 = {(x["method"], x["seed"]): x for x in c154["runs"]}

    def acc_curve(run):
        return [100 * e["accuracy"] for e in run["dev_per_epoch"]]

    def curve(run):
        return " / ".join(f"{a:.1f}" for a in acc_curve(run))

    def seed0(method, row):
        if row["setting"] == "lr=default,head=default":
            return runs3[(method, 0, None, None)]
        return runs3[(method, 0, row["lr"]["body"], row["lr"]["head"])]

    def sweep_txt(method, chosen):
        sw, cs = _sweep(e3, "banking77", method), _chosen_scale(e3, "banking77", method)
        keys = sorted(sw)
        return (f"best of {' / '.join(f'{s:g}×' for s in keys)} = "
                + " / ".join(f"**{sw[s]:.1f}**" if s == cs else f"{sw[s]:.1f}" for s in keys))

    fdef = next(x for x in _rows(e3, "banking77", "full") if x["setting"] == "lr=default,head=default")
    ftun = _chosen(e3, "banking77", "full")
    lrn = _chosen(e3, "banking77", "learner")
    lrn_setting = ("defaults (body 1e-3, head 2e-3, priming 1 epoch)" if lrn["setting"] == "lr=default,head=default"
                   else f"body {lr(lrn['lr']['body'])}, head {lr(lrn['lr']['head'])}")
    rows = [
        ["banking77, 3", "full", "defaults (body 5e-5, head 2e-3)", curve(seed0("full", fdef)), _mean_std(fdef)],
        ["banking77, 3", "full", f"body {lr(ftun['lr']['body'])}, head {lr(ftun['lr']['head'])}: {sweep_txt('full', ftun)}",
         curve(seed0("full", ftun)), f"**{_mean_std(ftun)}**"],
        ["banking77, 3", "Learner + priming", f"{lrn_setting}: {sweep_txt('learner', lrn)}", curve(seed0("learner", lrn)), _mean_std(lrn)],
    ]
    n154 = {}
    for m in ("full", "far", "learner"):
        n154[m] = _rows(c154, "banking154", m)[0]
        rows.append([f"154 classes, {len(runs154[(m, 0)]['dev_per_epoch'])}", METHOD[m], "defaults", curve(runs154[(m, 0)]),
                     _mean_std(n154[m])])
    tab = table(["task, epochs", "method", "setting", "dev acc by epoch (seed 0)", "dev acc"], ["l", "l", "l", "l", "r"], rows)
    head = paragraph(f"""
        The host was an {cpu_of(e3['meta'])} with ISA flags {e3['meta']['isa']} (another machine than the one above). Each run had
        {e3['meta']['threads']} thread, with several runs sharing the 2 cores, so the s/epoch in those files are not timings; load
        average not recorded. Run notes: {e3['meta']['note']}.""")
    fd = acc_curve(seed0("full", fdef))
    full154 = runs154[("full", 0)]
    loss = {m: runs154[(m, 0)]["epochs"][-1]["train_loss"] for m in n154}
    gap = ftun["accuracy"] - lrn["accuracy"]
    gap_def = fdef["accuracy"] - lrn["accuracy"]
    ft1 = r("finetune")
    e1 = _chosen(ft1, "banking77", "full")["accuracy"] - _chosen(ft1, "banking77", "learner")["accuracy"]
    l154 = acc_curve(runs154[("learner", 0)])
    ftun_scale = _chosen_scale(e3, "banking77", "full")
    lc, fc = acc_curve(seed0("learner", lrn)), acc_curve(seed0("full", ftun))
    steeper = lc[-1] - lc[-2] > fc[-1] - fc[-2]
    lsw = _sweep(e3, "banking77", "learner")
    items = bullets([
        f"**Full fine-tuning at the defaults on banking77** reaches {fd[0]:.1f}% after 1 epoch, {fd[1]:.1f}% after 2 and"
        f" {fd[2]:.1f}% after 3 (seed 0, one seed). Tuned, 3 epochs prefer rates {ftun_scale:g}× the defaults ({_mean_std(ftun)}),"
        f" as 1 epoch did; {'a higher rate did no better, so the optimum is bracketed' if _bracketed(e3, 'banking77', 'full') else 'the optimum is not bracketed'}.",
        f"**Every method {'converges' if min(x['accuracy'] for x in n154.values()) > 80 else 'does not converge'} with its defaults on"
        " 154 classes.** The report that opened this work got 51% from full fine-tuning at the old defaults on a 150-class task of"
        f" the same size, with a training loss near ln 151. At the new defaults full fine-tuning reaches {n154['full']['accuracy']:.1f}%,"
        f" and its training loss falls from {full154['epochs'][0]['train_loss']:.1f} to {loss['full']:.2f} (ln 154 = {math.log(154):.1f})."
        f" FAR reaches {n154['far']['accuracy']:.1f}% (loss {loss['far']:.2f}) and the Learner {n154['learner']['accuracy']:.1f}% (loss"
        f" {loss['learner']:.2f}). The Learner and FAR trail by {n154['full']['accuracy'] - n154['learner']['accuracy']:.1f} and"
        f" {n154['full']['accuracy'] - n154['far']['accuracy']:.1f} points there, on one seed"
        + (f", with the Learner's curve still rising at epoch {len(l154)}." if l154[-1] > l154[-2] else "."),
        f"**Learner + priming at equal epochs: the banking77 gap {'shrinks' if gap < e1 else 'grows'} from {e1:.2f} to {gap:.2f} points"
        f" and {'meets' if gap <= 1 else 'still misses'} the 1-point target.** The Learner reaches {_mean_std(lrn)}% against tuned full"
        f" fine-tuning's {_mean_std(ftun)}% ({gap_def:.2f} points against full at its defaults, one seed). Its seeds spread"
        f"{' wider' if lrn['accuracy_std'] > ftun['accuracy_std'] else ''}"
        f" ({min(lrn['accuracy_per_seed']):.1f} to {max(lrn['accuracy_per_seed']):.1f})"
        + (", and its curve rises more steeply at epoch 3 than full fine-tuning's." if steeper else ".")
        + f" Its rates were swept too (seed 0: {' / '.join(f'{lsw[s]:.1f}' for s in sorted(lsw))} at"
        f" {' / '.join(f'{s:g}×' for s in sorted(lsw))}), so"
        f" {'the defaults are its optimum' if lrn['setting'] == 'lr=default,head=default' else 'its optimum is not the default'}"
        " and the gap is not an untuned Learner."
        + (f" These Learner rows predate its schedule. Under it, banking77 at 3 epochs reaches"
           f" {_mean_std(_chosen(r(SCHEDULE_ROWS[0][2]), 'banking77', 'learner'))}% (\"The Learner schedule\" below)."
           if r.has(SCHEDULE_ROWS[0][2]) else ""),
    ])
    return "\n\n".join([head, tab, items])


# The Learner under its schedule (learner_schedule) against full fine-tuning, per task and budget:
# (label, classes, results with the schedule's Learner, task there, results with full, task there, Learner before the
# schedule (results, task) or None, the gap the issue allows)
SCHEDULE_ROWS = (
    ("banking77, 3 epochs (its default)", 77, "finetune-3epochs-schedule12", "banking77", "finetune-3epochs", "banking77",
     ("finetune-3epochs", "banking77"), 1.0),
    ("154 classes, 4,000 rows, 5 epochs", 154, "finetune-154-classes-5epochs", "banking154", "finetune-154-classes-5epochs",
     "banking154", ("finetune-154-classes", "banking154"), 2.0),
    ("154 classes, 4,000 rows, 2 epochs", 154, "finetune-154-classes-2epochs", "banking154", "finetune-154-classes-2epochs",
     "banking154", ("finetune-154-classes-2epochs-rank32", "banking154"), 2.0),
    ("154 classes, 4,000 rows, 2 epochs, chosen on validation (1,000 more train rows held out; dev chose nothing)", 154,
     "finetune-154-classes-2epochs-val", "banking154", "finetune-154-classes-2epochs-val", "banking154", None, 2.0),
)
SST2_EQUAL_TIME = "finetune-sst2-equal-time"


def _full_setting(doc: dict, task: str) -> str:
    """How full fine-tuning's row was set: its defaults, or tuned over the settings the file swept."""
    row, n = _chosen(doc, task, "full"), len(_rows(doc, task, "full"))
    rates = f"body {lr(row['lr']['body'])}, head {lr(row['lr']['head'])}"
    return f"tuned over {n} settings: {rates}" if n > 1 else rates


@section("finetune-schedule")
def finetune_schedule(r: Results) -> str:
    rows, hosts, notes = [], {}, []
    for label, classes, lname, ltask, fname, ftask, before, bound in SCHEDULE_ROWS:
        if not (r.has(lname) and r.has(fname)):
            continue
        lrn = _chosen(r(lname), ltask, "learner")
        full = _chosen(r(fname), ftask, "full")
        run = next(x for x in r(lname)["runs"] if x["method"] == "learner")
        old = _chosen(r(before[0]), before[1], "learner") if before else None
        gap = full["accuracy"] - lrn["accuracy"]
        rows.append([label, f"{run['steps'] / classes:.1f}", f"{_mean_std(full)} ({_full_setting(r(fname), ftask)})",
                     _mean_std(old) if old else "–", f"**{_mean_std(lrn)}**", pts(-gap),
                     f"≤ {bound:g}: {'met' if gap <= bound else 'MISSED'}"])
        hosts.setdefault(f"{cpu_of(r(lname)['meta'])}, ISA flags {r(lname)['meta']['isa']}", []).append(label)
    for label, _, lname, ltask, fname, ftask, _, bound in SCHEDULE_ROWS:
        if not (r.has(fname) and r.has(lname)) or not r(fname)["meta"].get("val_rows"):
            continue
        d = r(fname)
        sweep = sorted(_rows(d, ftask, "full"), key=lambda x: x["lr"]["body"])
        seed0 = [f"{lr(x['lr']['body'])} {num(x['validation_per_seed'][x['seeds'].index(0)], 1)}%" for x in sweep]
        full, lrn = _chosen(d, ftask, "full"), _chosen(r(lname), ltask, "learner")
        dev_gap = full["accuracy"] - lrn["accuracy"]
        val_gap = statistics.mean(full["validation_per_seed"]) - statistics.mean(lrn["validation_per_seed"])
        notes.append(paragraph(f"""
            The row chosen on validation repeats the 2-epoch comparison under the issue's protocol
            (`{fname}.json`): {d['meta']['val_rows']:,} seeded training rows held out of every run, {d['meta']['train_limit']:,}
            of the rest trained on, full fine-tuning's body rate chosen on seed 0's validation accuracy ({', '.join(seed0)};
            head at the library's rate), dev scored once per run and choosing nothing. Validation, mean of seeds: full
            {num(statistics.mean(full['validation_per_seed']), 2)}%, Learner {num(statistics.mean(lrn['validation_per_seed']), 2)}%.
            The gap is {pts(-dev_gap)} points on dev ({'within' if dev_gap <= bound else 'outside'} the {bound:g}-point
            target) and {pts(-val_gap)} on validation{
            ': met on dev and not on validation, two 1,000-row splits whose seeds spread by about a point, so met narrowly'
            if (dev_gap <= bound) != (val_gap <= bound) else ''}. The row above chose full's rates on dev, which
            favours the baseline it picks."""))
    if r.has(SST2_EQUAL_TIME):
        d = r(SST2_EQUAL_TIME)
        lrn, full = _chosen(d, "sst2", "learner"), _chosen(d, "sst2", "full")
        old = _chosen(r("finetune"), "sst2", "learner")
        gap = full["accuracy"] - lrn["accuracy"]
        rows.append([f"SST-2, 8,000 rows: full 1 epoch, the Learner {d['meta']['max_steps']} steps (equal time)", "–",
                     f"{_mean_std(full)} ({_full_setting(d, 'sst2')})", f"{_mean_std(old)} (250 steps)", f"**{_mean_std(lrn)}**", pts(-gap),
                     f"≥ full: {'met' if gap <= 0 else 'MISSED'}"])
        hosts.setdefault(f"{cpu_of(d['meta'])}, ISA flags {d['meta']['isa']}", []).append("SST-2")
        ratio = r(LIBRARY_STEPS)["methods"]["learner"]["vs_full"]
        full_steps = next(x for x in d["runs"] if x["method"] == "full")["steps"]
        notes.append(paragraph(f"""
            The SST-2 row gives both methods the same training time: full fine-tuning's {full_steps} steps (1 epoch of 8,000
            rows) against the Learner's {d['meta']['max_steps']}. The Learner's steady step takes {100 * ratio:.0f}% of
            full's (`{LIBRARY_STEPS}.json`, interleaved); its priming steps, a third of the run, train more and are counted at
            full's cost: {full_steps} / (1/3 + 2/3 × {ratio:.2f}) = {full_steps / (1 / 3 + 2 / 3 * ratio):.0f} steps at most; the
            runs took {d['meta']['max_steps']}."""))
    if not rows:
        raise MissingResults("no results with the Learner's schedule")
    tab = table(["task, budget", "steps per class", "full fine-tuning", "Learner, earlier defaults",
                 "Learner, schedule", "Learner − full", "target"], ["l", "r", "r", "r", "r", "r", "l"], rows)
    where = f"every Learner run on an {next(iter(hosts))}" if len(hosts) == 1 else \
        "; ".join(f"{' / '.join(v)} on an {k}" for k, v in hosts.items())
    return "\n\n".join([paragraph(f"""
        Dev accuracy, mean ± std over seeds 0, 1, 2 unless marked, 1 thread per run, batch 32, length 64; the Learner at the
        library's defaults, so its schedule decides priming, probe and head rate, and below 2 steps per class the rank
        (hidden/8). Full fine-tuning's rows come from the
        files above (tuned: its rates chosen by the sweep there); {where}."""), tab, *notes])


HF_REFERENCE = "hf-reference-154-classes-2epochs"


@section("finetune-hf-reference")
def finetune_hf_reference(r: Results) -> str:
    """edgenlp's full fine-tuning against transformers' BertForSequenceClassification (tools/bench/hf_reference.py)."""
    d = r(HF_REFERENCE)
    m = d["meta"]

    cell = _bench_module("hf_reference").stats
    rows = []
    for name, runs in (("Hugging Face `BertForSequenceClassification`", d["reference"]),
                       ("`edgenlp finetune --method full`", d["edgenlp"]["runs"])):
        s0 = next(x for x in runs if x["seed"] == 0)
        rows.append([name, ",".join(str(x["seed"]) for x in runs), " / ".join(f"{100 * a:.1f}" for a in s0["dev_per_epoch"]),
                     cell(runs, "last")])
    tab = table(["implementation", "seeds", "dev by epoch (seed 0)", "dev, last epoch"], ["l", "l", "l", "r"], rows)
    seeds = ", ".join(map(str, d["gap_seeds"]))
    return "\n\n".join([paragraph(f"""
        {m['task']} ({m['classes']} classes), the same {thousands(m['rows'])} training rows, {m['epochs']} epochs, batch
        {m['batch_size']}, length {m['max_len']}, body {m['lr']:g}, classifier and pooler {m['head_lr']:g} (edgenlp's defaults),
        6% warm-up and linear decay, 1 thread. The reference loads the same checkpoint with `transformers` and trains in a
        plain loop (`tools/bench/hf_reference.py`); edgenlp's runs are `{d['edgenlp']['source']}`'s."""), tab,
        paragraph(f"""edgenlp − reference over seed(s) {seeds}: {pts(d['gap_last'])} points at the last epoch.
        {'The two implementations agree within the seeds’ spread, so the issue’s 4-point gap does not reproduce here;'
         ' at these rates both are low after 2 epochs, and the head rate is what fixes it (above).'
         if abs(d['gap_last']) < 1 else 'The two implementations disagree by a point or more.'} {host(d)}""")])


def _isa_text(flags) -> str:
    return " ".join(flags) if isinstance(flags, (list, tuple)) else (flags or "not recorded")


@section("joint-check")
def joint_check(r: Results) -> str:
    """Frozen backbone against --joint, on training rows neither model saw (tools/bench/joint_check.py)."""
    d = r("joint-check-imdb128")
    h = d["host"]
    rows = [[f"`{Path(m['model']).parent.name}`", "joint" if m["joint"] else "frozen", f"{m['accuracy']:.2f}",
             f"{m['drop']:.2f} ± {m['drop_se']:.2f}", f"{m['flops_vs_static']:.2f}", f"{m['mean_exit_layer']:.2f}",
             "–" if i == 0 else f"{signed(m['vs_first'])} ± {m['vs_first_se']:.2f}"]
            for i, m in enumerate(d["models"])]
    tab = table(["model", "backbone", "accuracy (%)", "drop ± SE vs the fine-tuned model (pts)", "FLOPs vs static",
                 "mean exit layer", "vs the first row (pts, paired)"], ["l", "l", "r", "r", "r", "r", "r"], rows)
    return "\n\n".join([paragraph(f"""
        **Frozen backbone or `--joint`, judged off dev** (`tools/bench/joint_check.py`,
        `tools/bench/results/joint-check-imdb128.{{md,json}}`, {h.get('written')}): the two IMDB models above, as built
        (thresholds included), on {thousands(d['rows'])} training rows that neither the fine-tuning nor either model's
        exit training or calibration saw; drops paired per row against the fine-tuned model
        ({d['reference_accuracy']:.2f}% on these rows), eager, length {d['max_seq_len']}. Host: {h.get('cpu_model')},
        ISA flags {h.get('isa_flags')}."""), tab])


@section("quick-preset")
def quick_preset(r: Results) -> str:
    """The quick preset's fine-tuning budget: CPU wall times (quick-preset.json), 3-seed accuracy (quick-preset-cuda.json)."""

    from edgenlp.compress.config import PRESETS, finetune_method_for

    cpu, gpu = r("quick-preset"), r("quick-preset-cuda")
    quick = PRESETS["quick"]

    def key(run):  # steps actually run (a budget past banking77's 3 epochs stops at them); rows: the subset or all
        return run["task"], run["method"], run["steps"], run["train_limit"] or "all"

    def mean_sd(vals):
        return f"{statistics.mean(vals):.2f} ± {statistics.stdev(vals):.2f}" if len(vals) > 1 else f"{vals[0]:.2f}"

    groups: dict = {}
    for run in gpu["runs"]:
        seeds = groups.setdefault(key(run), {})
        seeds.setdefault(run["seed"], run)  # a budget past the epochs repeats a setting: one run per seed
    timed = {key(run): run for run in cpu["runs"]}
    rows = []
    for task, classes in (("sst2", 2), ("banking77", 77)):
        method = finetune_method_for("auto", classes)[0]
        mine = [(k, list(v.values())) for k, v in groups.items() if k[0] == task]
        for k, runs in sorted(mine, key=lambda kv: (kv[0][1], kv[0][2], str(kv[0][3]))):
            _, m, steps, limit = k
            n = runs[0]["train_rows"]
            used = "all" if limit == "all" or limit >= n else limit
            expected = "all" if quick.train_limit is None or quick.train_limit >= n else quick.train_limit
            now = m == method and steps == quick.steps_for(m) and used == expected
            old = m == method and steps == 300 and limit == 8000
            t = timed.get(k)
            label = " **(the preset now)**" if now else (" (the preset before)" if old else "")
            rows.append([task, f"{m}{label}", str(steps), "all" if used == "all" else thousands(used),
                         mean_sd([x["val_accuracy"] for x in runs]), mean_sd([x["dev_accuracy"] for x in runs]),
                         f"{t['wall_s']:.0f} s; dev {t['dev_accuracy']:.2f}" if t else "–"])
    tab = table(["task", "method", "steps", "rows tuned on", "validation acc (%)", "dev acc (%)", "CPU: wall, dev (seed 0)"],
                ["l", "l", "r", "r", "r", "r", "r"], rows)
    gh, ch = gpu["host"], cpu["host"]
    return "\n\n".join([paragraph(f"""
        **The quick preset's fine-tuning budget** (`tools/bench/quick_preset.py`; accuracy
        `tools/bench/results/quick-preset-cuda.{{md,json}}`, wall time `quick-preset.{{md,json}}`). Target: SST-2 ≥
        {num(cpu['targets']['sst2'], 0)}% and banking77 ≥ {num(cpu['targets']['banking77'], 0)}% on dev within
        {cpu['budget_s'] // 60} minutes of a 2-core CPU. Accuracy: 3 seeds per setting on a GPU ({gh.get('written')},
        torch {gh.get('versions', {}).get('torch')}), validation rows held out of train choosing, dev reporting. Wall
        time: the whole fine-tune stage (loading, training, evaluation) of seed 0 on {ch.get('cpu_model')}, ISA flags
        {ch.get('isa_flags')}, 2 threads ({ch.get('written')}; {load_text(ch.get('load_avg_before'))}). The methods are
        `compress`'s automatic ones (Learner + priming for 2 classes, FAR for more); FAR and full fine-tuning train the
        word embeddings (16-23M parameters under AdamW against the Learners' 1.4M), so their steps cost more and the
        preset gives them fewer."""), tab])


# the ablation at 94 steps (3,000 rows), then on every training row but validation at 1 and 3 epochs
LEARNER_CURVES = "learner-curves"  # learner_ablation.py --curves-only
LEARNER_ABLATIONS = ("learner-ablation", "learner-ablation-1epoch-all-rows", "learner-ablation-3epochs-all-rows",
                     "learner-ablation-154-2epochs", "learner-ablation-154-2epochs-rank",
                     "learner-ablation-154-2epochs-4000rows")


@section("finetune-learner-ablation")
def finetune_learner_ablation(r: Results) -> str:
    d = r("learner-ablation")
    parts = [_learner_ablation(d, "learner-ablation")]
    parts += [_learner_ablation(r(name), name) for name in LEARNER_ABLATIONS[1:] if r.has(name)]
    curves, png = (r(LEARNER_CURVES)["curves"], f"{LEARNER_CURVES}.png") if r.has(LEARNER_CURVES) else \
        (d.get("curves"), "learner-ablation.png")
    if curves:
        parts.append(paragraph(f"""
            Learning curves, one row per task (dev accuracy after each epoch against steps and against training seconds, seed
            0: full fine-tuning and FAR at the rates the legend gives, the Learner at its defaults under its schedule and
            before it), drawn from
            {', '.join(f"`{t['source']}`" for t in curves['tasks'].values())}: `tools/bench/results/{png}`."""))
        parts.append(f"![dev accuracy against steps and training seconds, per task](tools/bench/results/{png})")
    if r.has(LIBRARY_STEPS):
        parts.append(_library_steps(r(LIBRARY_STEPS)))
    return "\n\n".join(parts)


LIBRARY_STEPS = "finetune-steps-library"  # the step time again, with the library's own train_step and a profile


def _library_steps(s: dict) -> str:
    """``finetune.py --step-timing``: every method's step against full fine-tuning's, and where the Learner step goes."""
    m, prof = s["methods"], s["learner_profile"]
    g = prof["groups_ms"]
    lr = m["learner"]
    ratios = ", ".join(f"{k} {100 * v['vs_full']:.0f}%" for k, v in m.items() if k not in ("full", "learner"))
    fwd, bwd = g["forward: base linears"], g["backward: base linears"]
    return paragraph(f"""
        **The step, timed with the library's own step** (`tools/bench/finetune.py --step-timing {lr['steps']}`,
        `tools/bench/results/{LIBRARY_STEPS}.{{json,md}}`): `edgenlp.finetune.trainer.train_step` (clipping, AdamW over the
        method's parameter groups), every method's k-th step beside the others' on the same batch, {s['threads']} threads,
        batch {s['batch_size']}, length {s['max_seq_len']}. The Learner's step is **{100 * lr['vs_full']:.0f}%** of full
        fine-tuning's (p10–p90 {100 * lr['vs_full_p10']:.0f}–{100 * lr['vs_full_p90']:.0f}%; {ratios}): the ≤ 75% goal is
        {'met' if lr['vs_full'] <= 0.75 else 'missed'}. Where it goes (torch.profiler, one step): the frozen base still runs its
        whole forward ({100 * fwd / g['total']:.0f}%) and its backward to the activations ({100 * prof['frozen_base_backward_ms'] /
        g['total']:.0f}%, of which the base linears' input gradients {100 * bwd / g['total']:.0f}%); the Learner factors cost
        {100 * prof['learner_parts_ms'] / g['total']:.0f}% and the optimizer {100 * g['optimizer'] / g['total']:.0f}%. What the
        Learner saves is the base linears' weight gradients and the optimizer over them; what dominates is the frozen base
        itself, which no low-rank method avoids without cutting the backward short of the early layers. {host(s)}""")


def _learner_ablation(d: dict, name: str) -> str:
    """One ``learner_ablation.py`` results file: its variants, the choice on validation and the gap to full fine-tuning."""
    m, rows, v = d["meta"], d["rows"], d.get("verdict", {})
    host_doc = d.get("host", {})
    by = {x["variant"]: x for x in rows}

    def acc(x):
        return f"{x['dev_mean']:.2f} ± {x['dev_std']:.2f}" if x["dev_std"] is not None else f"{x['dev_mean']:.1f}"

    base = by.get("default")
    out_rows = []
    for x in sorted(rows, key=lambda x: -(x["val_seed0"] or 0)):
        delta = "" if base is None or x is base else pts(x["dev_per_seed"][0] - base["dev_per_seed"][0])
        out_rows.append([f"`{x['variant']}`", x["description"], f"{x['val_seed0']:.1f}", delta, acc(x),
                         ",".join(map(str, x["seeds"])), f"{x['trainable_percent']:.1f}%"])
    tab = table(["variant", "what changes", "validation, seed 0", "dev vs `default`, seed 0", "dev acc (%)", "seeds", "trainable"],
                ["l", "l", "r", "r", "r", "l", "r"], out_rows)
    if not rows:
        return paragraph(f"""
            **Not measured yet** (`{name}`): no run of `tools/bench/learner_ablation.py` has finished
            ({m.get('note') or 'no note'}).""")
    side = "" if m.get("note") else f"; {m.get('jobs', 1)} runs side by side"
    about = f". {m['note']}" if m.get("note") else f"; {load_text(_loads(host_doc))}"  # a note is its own sentence
    hw = (f"Host: {host_doc.get('cpu_model', 'CPU not recorded')}, {host_doc.get('cpu_count')} cores, ISA flags"
          f" {_isa_text(host_doc.get('isa_flags'))}{about}{side}.")
    epochs = f"{m['epochs']} epoch{'s' if m['epochs'] > 1 else ''}"
    task = "banking77" if m["task"] == "banking77" else f"the task in `{m['task']}`"
    head = paragraph(f"""
        **Measured** (`tools/bench/results/{name}.{{md,json}}`): {task} ({m['classes']} classes), MiniLM-L6,
        {epochs} on {thousands(m['fit_rows'])} training rows ({by[next(iter(by))]['steps']} optimizer steps,
        {by[next(iter(by))]['steps'] / m['classes']:.1f} per class), length {m['max_seq_len']}, {m['threads']} thread per run,
        CPU. {thousands(m['val_rows'])} other train rows are the validation split the variants are chosen on; the
        {thousands(m['dev_rows'])} dev rows report them. {hw}""")
    items = []
    if v.get("over_trainable_cap"):
        items.append(f"Not eligible, above {m['max_trainable_percent']:g}% trainable: "
                     + ", ".join(f"`{n}` ({by[n]['trainable_percent']:.1f}%, validation mean {by[n]['val_mean']:.2f}%)"
                                 for n in v["over_trainable_cap"]) + ".")
    if v.get("chosen"):
        c = by[v["chosen"]]
        k = v.get("kept")  # the variant in use stayed: the best other one did not lead it by the margin asked
        kept = (f" A change had to lead it by {m['min_gain_points']:g} points of mean validation accuracy; the best, "
                f"`{k['leader']}`, led by {k['lead_points']:.2f}.") if k else ""
        items.append(f"Chosen on validation: `{v['chosen']}`, dev {acc(c)}% (seeds {', '.join(map(str, c['seeds']))}).{kept}")
    if "gap_points" in v:
        target = f", the 1-point target {'met' if v['target_met'] else 'missed'}." if m["task"] == "banking77" else \
            " (exploratory, not the issue's target setting)."
        items.append(f"Against full fine-tuning at its tuned rates ({acc(by['full'])}%): {pts(-v['gap_points'])} points{target}")
    if "far" in by:
        items.append(f"FAR at its tuned rates: {acc(by['far'])}%.")
    return "\n\n".join([head, tab] + ([bullets(items)] if items else []))


# --------------------------------------------------------------------------- pruning


@section("ffn-multiple")
def ffn_multiple(r: Results) -> str:
    out = []
    docs = {"int4": r("ffn_multiple"), "int8": r("ffn_multiple-int8")}
    rows = []
    size_gain, lat_cost, int8_change = [], [], []
    for scheme, d in docs.items():
        by = {(x["sparsity"], x["ffn_multiple"]): x for x in d["rows"]}
        for sp in sorted({k[0] for k in by}):
            a, b = by[(sp, 1)], by[(sp, 32)]
            la, lb = d["latency"][a["name"]]["128"]["median_ms"], d["latency"][b["name"]]["128"]["median_ms"]
            rows.append([f"{sp:.0%}, {scheme}", f"{pct(a['dev_quantized'])} → {pct(b['dev_quantized'])}%",
                         f"{a['pte_mb']:.2f} → {b['pte_mb']:.2f}", f"{la:.2f} → {lb:.2f}"])
            if scheme == "int4":
                size_gain.append(100 * (a["pte_mb"] - b["pte_mb"]) / a["pte_mb"])
                lat_cost.append(100 * (lb - la) / la)
            else:
                int8_change.append(abs(100 * (lb - la) / la))
    rows.sort(key=lambda x: (x[0].split(", ")[1] == "int8", x[0]))
    d4 = docs["int4"]
    acc_ok = all(float(row[1].split(" → ")[1].rstrip("%")) >= float(row[1].split(" → ")[0]) for row in rows if "int4" in row[0])
    out.append(paragraph(f"""
        `tools/bench/ffn_multiple.py` measures it (SST-2 teacher, `fast`, int4 word table and trimmed
        vocabulary, ExecuTorch 1 thread, interleaved; `results/ffn_multiple*.{{json,md}}`). {host(d4)} Run notes: {d4['note']}."""))
    out.append(table(["`fast` sparsity, linears", "`--ffn-multiple` 1 → 32: dev acc", ".pte MB", "ms @128"], ["l", "l", "l", "l"], rows))
    out.append(paragraph(f"""
        So it buys {span(size_gain, 0)}% of size under int4 {'at no accuracy cost' if acc_ok else 'at some accuracy cost'}, and costs
        {span(lat_cost, 0)}% of int4 latency. The six `ffn_out` layers move from int8 kernels to int4 ones, which are slower than int8
        on this x86 host (`quant_profile.md`). Under int8, widths that 32 divides change latency by
        {'under 1%' if max(int8_change) < 1 else f'up to {max(int8_change):.1f}%'}, within noise. The default stays 1. Use 32 when size is
        the binding budget."""))
    return "\n\n".join(out)


def _prune_rows(r: Results) -> dict:
    out = {}
    for name in ("prune", "prune-cofi"):
        for x in r(name)["rows"]:
            out[(x["task"], x["method"], x["target"])] = x
    return out


@section("prune-measured")
def prune_measured(r: Results) -> str:
    p, c = r("prune"), r("prune-cofi")
    rows = _prune_rows(r)
    base = {t: p["tasks"][t]["baseline"]["accuracy"] for t in ("sst2", "banking77")}
    unpruned = {t: p["latency"][f"{t}/unpruned"]["128"]["median_ms"] for t in base}
    cofi_unpruned = {t: c["latency"][f"{t}/unpruned"]["128"]["median_ms"] for t in base}
    cfg = c["config"]
    head = paragraph(f"""
        **Measured** (`tools/bench/results/prune.{{json,md,png}}`, one run of {p['wall_min']:.0f} minutes for all
        {len(p['rows'])} `fast` / `importance` rows). Teachers: full fine-tuning, 1 epoch; SST-2 {pct(base['sst2'])}% on the 8,000-row
        subset, banking77 {pct(base['banking77'])}%. Latency: ExecuTorch, 1 thread, seq 128, unpruned
        {num(unpruned['sst2'])} / {num(unpruned['banking77'])} ms. {host(p)} Run notes: {p['note']}. The latency rounds measure
        pruned and unpruned bundles interleaved. The `cofi` rows come from a separate run (`prune-cofi.{{json,md}}`), where the unpruned
        bundles run {num(cofi_unpruned['sst2'])} / {num(cofi_unpruned['banking77'])} ms; {host(c)[0].lower() + host(c)[1:-1]}; run notes:
        {c['note']}. Compare speed-ups within a run, not across the two hosts.""")
    trows = []
    order = [("fast", 0.3), ("importance", 0.3), ("fast", 0.5), ("importance", 0.5), ("fast", 0.7), ("importance", 0.7), ("fast", 0.9),
             ("importance", 0.9), ("cofi", 0.3), ("cofi", 0.5), ("cofi", 0.7), ("cofi", 0.9)]
    best = {}
    for t in base:
        for s in (0.3, 0.5, 0.7, 0.9):
            cands = [rows[(t, m, s)]["drop_points"] for m in ("fast", "importance", "cofi") if (t, m, s) in rows]
            best[(t, s)] = min(cands)
    for m, s in order:
        if (("sst2", m, s) not in rows) or (("banking77", m, s) not in rows):
            continue
        a, b = rows[("sst2", m, s)], rows[("banking77", m, s)]
        label = f"`{m}` {s:.0%}"
        if m == "cofi" and s == 0.3:
            label += (f" ({thousands(cfg['cofi_train_limit'])} rows, {cfg['cofi_epochs']:g} + {cfg['cofi_finetune_epochs']:g} epochs,"
                      f" {cfg['threads']} thread; `prune-cofi.md`)")
        elif m == "cofi" and s == 0.5:
            label += " (same budget and host)"

        def cell(x, t):
            v = drop(x["drop_points"])
            return f"**{v}**" if x["drop_points"] == best[(t, s)] and s >= 0.5 else v
        trows.append([label, cell(a, "sst2"), cell(b, "banking77"), f"{a['speedup_128']:.2f}× / {b['speedup_128']:.2f}×",
                      f"{a['wall_s']:.0f} / {b['wall_s']:.0f} s"])
    tab = table(["method, encoder sparsity", "SST-2 Δ points", "banking77 Δ points", "speed-up @128 (SST-2 / banking77)", "prune wall time"],
                ["l", "r", "r", "r", "r"], trows)
    return "\n\n".join([head, tab])


COFI_COMPRESS = "prune-cofi-compress"  # CoFi at the full preset's budget, from the teachers compress fine-tunes


@section("prune-cofi-compress")
def prune_cofi_compress(r: Results) -> str:
    """Issue 25's CoFi targets: at the full preset's budget, within 1 point at 50% and 3 points at 70%."""
    doc = r(COFI_COMPRESS)
    cfg = doc["config"]
    limits = {0.5: 1.0, 0.7: 3.0}
    head = paragraph(f"""
        **CoFi at the full preset's budget, from the teachers `compress` fine-tunes** (`tools/bench/prune.py`,
        `results/{COFI_COMPRESS}.{{json,md}}`): {thousands(cfg['cofi_train_limit'])} training rows, {cfg['cofi_epochs']:g} epochs of mask
        learning and {cfg['cofi_finetune_epochs']:g} epochs of distilled fine-tuning from the unpruned model (CoFi's own recovery; the
        budget `compress --preset full` spends), sequence length {cfg['max_seq_len']}, {cfg['threads']} thread per run. Teachers: the
        fine-tuning of `compress --preset quick` (SST-2: Learner + priming; banking77: FAR). Dev accuracy on the whole dev set (nothing is
        chosen on it). Latency: ExecuTorch fp32, seq 128 and 32, 1 thread, against the unpruned bundle in the same
        {cfg['rounds']} interleaved rounds. {host(doc)} Run notes: {doc['note']}.""")
    trows, verdicts = [], []
    for t in ("sst2", "banking77"):
        task = doc["tasks"].get(t)
        if not task:
            continue
        unp = doc["latency"][f"{t}/unpruned"]
        trows.append([TASK[t], "unpruned", "0%", f"{pct(task['baseline']['accuracy'])}%", "", "", "",
                      num(unp["128"]["median_ms"], 2), num(unp["32"]["median_ms"], 2), ""])
        for x in sorted((x for x in doc["rows"] if x["task"] == t), key=lambda x: x["target"]):
            lim = limits.get(x["target"])
            ok = lim is not None and x["drop_points"] <= lim
            trows.append([TASK[t], f"CoFi {x['target']:.0%}", f"{100 * x['encoder_sparsity']:.1f}%", f"{pct(x['accuracy'])}%",
                          f"**{drop(x['drop_points'])}**" if lim is not None and not ok else drop(x["drop_points"]),
                          f"{x['heads']}, FFN {x['ffn']}, hidden {x['hidden']}",
                          f"{x['speedup_128']:.2f}× / {x['speedup_32']:.2f}×", num(x["ms_128"], 2), num(x["ms_32"], 2),
                          f"{x['wall_s'] / 60:.0f} min"])
            if lim is not None:
                verdicts.append(f"{TASK[t]} at {x['target']:.0%}: {drop(x['drop_points'])} points (target within {lim:g}:"
                                f" {'met' if ok else 'MISSED'}).")
    tab = table(["task", "model", "encoder sparsity", "dev accuracy", "Δ points", "heads per layer, FFN, hidden",
                 "speed-up @128 / @32", "ms @128", "ms @32", "prune wall"],
                ["l", "l", "r", "r", "r", "l", "r", "r", "r", "r"], trows)
    return "\n\n".join([head, tab, bullets(verdicts)])


def _where(pairs: list[tuple[str, float]]) -> str:
    """[(task, sparsity)] -> "30% and 50% on both tasks, and 70% on SST-2"."""
    tasks = {}
    for t, s in pairs:
        tasks.setdefault(s, set()).add(t)
    both = [s for s, ts in sorted(tasks.items()) if len(ts) == 2]
    one: dict[str, list[float]] = {}
    for s, ts in sorted(tasks.items()):
        if len(ts) == 1:
            one.setdefault(next(iter(ts)), []).append(s)

    def pcts(xs):
        xs = [f"{x:.0%}" for x in xs]
        return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]

    parts = ([f"{pcts(both)} on both tasks"] if both else []) + [f"{pcts(xs)} on {TASK[t]}" for t, xs in one.items()]
    return ", and ".join(parts) if parts else "no sparsity"


@section("prune-targets")
def prune_targets(r: Results) -> str:
    rows = _prune_rows(r)
    c = r("prune-cofi")
    longer = r("prune-cofi-longer")
    lx = longer["rows"][0]
    lcfg, ccfg = longer["config"], c["config"]
    tasks, sps = ("sst2", "banking77"), (0.3, 0.5, 0.7, 0.9)

    def g(t, m, s):
        return rows[(t, m, s)]

    def d(t, m, s):
        return drop(g(t, m, s)["drop_points"])

    f50 = {t: g(t, "fast", 0.5) for t in tasks}
    c50 = {t: g(t, "cofi", 0.5) for t in tasks}
    c70 = {t: g(t, "cofi", 0.7) for t in tasks}
    unp = {t: c["latency"][f"{t}/unpruned"]["128"]["median_ms"] for t in tasks}
    fast_lines = []
    for t in tasks:
        x = f50[t]
        if x["drop_points"] <= 3 and x["wall_s"] <= 600:
            fast_lines.append(f"Holds on {TASK[t]} ({drop(x['drop_points'])} in {x['wall_s']:.0f} s).")
        else:
            fast_lines.append(f"Misses on {TASK[t]} by {x['drop_points'] - 3:.1f} point ({drop(x['drop_points'])} in {x['wall_s']:.0f} s).")
    speed_ok = all(c50[t]["speedup_128"] >= 1.8 and c70[t]["speedup_128"] >= 2.5 for t in tasks)
    acc_ok = all(c50[t]["drop_points"] <= 1.5 and c70[t]["drop_points"] <= 3 for t in tasks)
    lunp = longer["latency"]["sst2/unpruned"]["128"]["median_ms"]
    lteacher = longer["tasks"]["sst2"]["baseline"]["accuracy"]
    budget_ratio = (lcfg["cofi_train_limit"] * (lcfg["cofi_epochs"] + lcfg["cofi_finetune_epochs"])) / (
        ccfg["cofi_train_limit"] * (ccfg["cofi_epochs"] + ccfg["cofi_finetune_epochs"]))

    def best(t, s):
        low = min(g(t, m, s)["drop_points"] for m in ("fast", "importance", "cofi"))
        return [m for m in ("fast", "importance", "cofi") if g(t, m, s)["drop_points"] == low]

    cofi_best70 = all("cofi" in best(t, 0.7) for t in tasks)
    ties70 = [m for m in best("sst2", 0.7) if m != "cofi"]
    cofi_worst50 = all(max(("fast", "importance", "cofi"), key=lambda m: g(t, m, 0.5)["drop_points"]) == "cofi" for t in tasks)
    no_attention = [i for i, h in enumerate(c70["sst2"]["heads"]) if h == 0]
    b77_ffns = sum(1 for f in c70["banking77"]["ffn"] if f)
    f90 = g("sst2", "fast", 0.9)
    f90b = g("banking77", "fast", 0.9)
    middle = [h for x in (f90, f90b) for h in x["heads"][1:-1]]

    def beats(a, b):
        return [(t, s) for t in tasks for s in sps if g(t, a, s)["drop_points"] < g(t, b, s)["drop_points"]]

    mean_best = {s: min(("fast", "importance", "cofi"), key=lambda m: sum(g(t, m, s)["drop_points"] for t in tasks)) for s in sps}
    by_method: dict[str, list[float]] = {}
    for s, m in mean_best.items():
        by_method.setdefault(m, []).append(s)
    best_txt = "; ".join(f"`{m}` at {' and '.join(f'{s:.0%}' for s in ss)}" for m, ss in by_method.items())
    items = [
        f"**`fast` at 50% within 3 points, under 10 minutes.** {fast_lines[0]} {fast_lines[1]}",
        f"**`cofi` at 50% within 1.5 points and ≥ 1.8×; at 70% within 3 points and ≥ 2.5×.** The speed-ups"
        f" {'hold' if speed_ok else 'do not all hold'} ({c50['sst2']['speedup_128']:.2f}× / {c50['banking77']['speedup_128']:.2f}× at"
        f" 50%, {c70['sst2']['speedup_128']:.2f}× / {c70['banking77']['speedup_128']:.2f}× at 70%, ExecuTorch seq 128, 1 thread, against"
        f" the unpruned bundle in the same rounds, where it runs {num(unp['sst2'])} / {num(unp['banking77'])} ms). The accuracy targets"
        f" {'hold' if acc_ok else 'do not'}: {d('sst2', 'cofi', 0.5)} / {d('banking77', 'cofi', 0.5)} points at 50% and"
        f" {d('sst2', 'cofi', 0.7)} / {d('banking77', 'cofi', 0.7)} at 70% (SST-2 / banking77). Each run had a CPU budget of"
        f" {ccfg['cofi_epochs']:g} epoch of mask learning on {thousands(ccfg['cofi_train_limit'])} rows plus"
        f" {ccfg['cofi_finetune_epochs']:g} distilled epoch ({span([x['wall_s'] / 60 for x in rows.values() if x['method'] == 'cofi'], 0)}"
        " minutes on one core, beside other jobs). The paper trains 20 epochs on the full set. No GPU was lent in any stop, so the"
        " paper's 20-epoch schedule was never run. The masks are filled back up to the target, most probable units first"
        " (`fit_to_budget(fill=True)`, tested).",
        (1, f"**With {budget_ratio:.0f}× that budget, the 50% accuracy target {'holds' if lx['drop_points'] <= 1.5 else 'still misses'} on"
            f" SST-2.** The run used {thousands(lcfg['cofi_train_limit'])} rows, {lcfg['cofi_epochs']:g} epochs of mask learning and"
            f" {lcfg['cofi_finetune_epochs']:g} distilled epochs, {lx['wall_s'] / 60:.0f} minutes on one core shared with other jobs"
            f" (`results/prune-cofi-longer.{{md,json}}`). It reached {pct(lx['accuracy'])}% against a teacher at {pct(lteacher)}%,"
            f" **{drop(lx['drop_points'])} points**, where the short run lost {c50['sst2']['drop_points']:.2f}. It removed"
            f" {100 * lx['encoder_sparsity']:.1f}% of the encoder parameters, with heads {lx['heads']}, FFN {lx['ffn']} and hidden"
            f" {lx['hidden']}. Timed in {lcfg['rounds']} interleaved rounds after training, it runs **{lx['speedup_128']:.2f}×** faster"
            f" at seq 128 ({num(lx['ms_128'])} against {num(lunp)} ms) and {lx['speedup_32']:.2f}× at seq 32. {host(longer)} So the short"
            " schedule is what costs CoFi its accuracy here, not the method. The block after this list reruns that budget from the"
            " teachers `compress` fine-tunes, on both tasks at 50% and 70%."),
        (1, f"At 70%, CoFi is {'the best of the three methods on both tasks' if cofi_best70 else 'not the best method on both tasks'}:"
            f" {d('sst2', 'cofi', 0.7)} against `fast` {d('sst2', 'fast', 0.7)} and `importance` {d('sst2', 'importance', 0.7)} on SST-2"
            + (f" (tied with `{ties70[0]}`)" if ties70 else "")
            + f", and {d('banking77', 'cofi', 0.7)} against {d('banking77', 'fast', 0.7)} and {d('banking77', 'importance', 0.7)} on"
            " banking77. It drops whole sublayers (on SST-2 layer" + ("s " if len(no_attention) > 1 else " ")
            + " and ".join(str(i) for i in no_attention) + f" lose attention; banking77 keeps {b77_ffns} FFNs of"
            f" {len(c70['banking77']['ffn'])}), and its distilled fine-tune retrains the weights that stay, which neither"
            " retraining-free method does."),
        (1, f"At 50% it is {'the worst of the three' if cofi_worst50 else 'not the worst of the three on both tasks'}: `fast`"
            f" {d('sst2', 'fast', 0.5)} / {d('banking77', 'fast', 0.5)}, `importance` {d('sst2', 'importance', 0.5)} /"
            f" {d('banking77', 'importance', 0.5)}."),
        "**Every method beats `importance`.** Now that `importance` is a real baseline, this holds only in part:",
        (1, f"`fast` is better at {_where(beats('fast', 'importance'))}."),
        (1, f"`importance` is better than `fast` at {_where(beats('importance', 'fast'))}. At 90% `fast` spends its budget unevenly:"
            f" it keeps {f90['heads'][-1]} / {f90b['heads'][-1]} heads of the last layer (SST-2 / banking77) and strips the middle layers"
            f" to {min(middle)}-{max(middle)} heads, and its retraining-free rescaling cannot repair that. `importance`'s even"
            " attention/FFN split degrades more gracefully."),
        (1, f"`cofi` beats `importance` at {_where(beats('cofi', 'importance'))} (90%: {d('sst2', 'cofi', 0.9)} vs"
            f" {d('sst2', 'importance', 0.9)} on SST-2, {d('banking77', 'cofi', 0.9)} vs {d('banking77', 'importance', 0.9)} on"
            f" banking77), and loses to it at {_where(beats('importance', 'cofi'))}. By the mean of the two tasks the best method is"
            f" {best_txt}."),
    ]
    return "Against the issue's targets:\n\n" + bullets(items)


# --------------------------------------------------------------------------- SDK and sparse kernels


def _bench_module(name: str):
    """A ``tools/bench`` script as a module, for its own markdown renderer (one source for the table)."""
    import importlib

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module(f"tools.bench.{name}")


@section("recovery")
def recovery(r: Results) -> str:
    d = r("recovery")
    mod = _bench_module("recovery")
    s2 = d["tasks"].get("sst2", {})
    at50 = next((row for row in s2.get("rows", []) if row.get("chosen") and row["method"] == "fast" and row["sparsity"] == 0.5), None)
    gap = (f" With this teacher SST-2 loses more to pruning on validation than on dev (fast 50%:"
           f" {100 * (s2['teacher']['val_accuracy'] - at50['val_accuracy']):.2f} against"
           f" {100 * (s2['teacher']['dev_accuracy'] - at50['dev_accuracy']):.2f} points).") if at50 is not None else ""
    parts = [paragraph(f"""
        **Measured** (`tools/bench/recovery.py --teacher compress`, `results/recovery.{{json,md,png}}`). Per task, a
        MiniLM-L6 teacher is fine-tuned the way `compress --preset quick` fine-tunes it (the model `compress` prunes),
        pruned with no retraining, then recovered by distillation for the steps `compress` spends (300 steps of 32
        rows); `targets/accuracy-prior.json` takes the chosen rows' **validation** drops (the rows held out of train
        that `compress`'s measured planning checks a candidate on), so the planner predicts a recovered pruning's drop
        from these.{gap} The rows were first measured from a weaker full-fine-tuning teacher, which a recovered
        student could beat: the planner then took heavy pruning as free.""")]
    parts.append(_bench_module("recovery").markdown(d["tasks"], d.get("latency")).split("\n")[2])  # how it was run
    for name in sorted(d["tasks"]):
        body = mod.task_markdown(d["tasks"][name], ((d.get("latency") or {}).get("tasks") or {}).get(name))
        parts.append("\n".join(["#### " + body[0][3:], *body[1:]]).strip())
    parts += [line for line in mod.markdown(d["tasks"], d.get("latency")).split("\n") if line.startswith("Latency: ")]
    parts.append("![Δ dev accuracy against encoder sparsity, pruned only and recovered](tools/bench/results/recovery.png)")
    if r.has("recovery-1200"):
        longer = r("recovery-1200")
        same = all(longer["tasks"][t]["teacher"]["dev_accuracy"] == d["tasks"].get(t, {}).get("teacher", {}).get("dev_accuracy")
                   for t in longer["tasks"])
        kinds = {t.get("teacher", {}).get("kind", "full") for t in (*longer["tasks"].values(), *d["tasks"].values())}
        sparsities = sorted({row["sparsity"] for t in longer["tasks"].values() for row in t["rows"] if row.get("chosen")})
        teachers = ("the same teachers' (fine-tuned again the same way, to the same accuracies)" if same else
                    "teachers fine-tuned the same way (trained again, so their accuracies differ a little from the ones above)"
                    if len(kinds) == 1 else
                    "the weaker teachers' ("
                    + "; ".join(f"{t}: {mod.teacher_text(v)}, {pct(v['teacher']['val_accuracy'])}% on validation"
                                for t, v in sorted(longer["tasks"].items()))
                    + ("; measured again below from the teachers `compress` fine-tunes, the rows the prior reads)"
                       if r.has(RECOVERY_COMPRESS_TEACHERS) else
                       "; not yet measured again from the teacher `compress` fine-tunes, so these rows are "
                       "optimistic where a student beat its teacher)"))
        offered = ", ".join(f"{100 * x:.0f}%" for x in sparsities)

        # the drops as the prior reads them (tools/bench/accuracy_prior.py), per results file, sparsity and task; every
        # file read alone (two files at one budget are one budget measured twice), whether the prior reads it or not
        prior_mod = _bench_module("accuracy_prior")
        drops = {(row["source"].rsplit("/", 1)[-1], row["sparsity"]): row["measured"]
                 for name in ("recovery.json", "recovery-1200.json", f"{RECOVERY_COMPRESS_TEACHERS}.json")
                 for row in prior_mod.recovery_rows((name,)) if row["method"] == "fast"}  # (a missing file: no rows)
        long_file = next(f for f in prior_mod.RECOVERY_FILES if f != "recovery.json")

        def val_drop(name: str, sparsity: float) -> str:
            return " / ".join(f"{v:.2f}" if (v := drops.get((name, sparsity), {}).get(t)) is not None else "–"
                              for t in ("sst2", "banking77"))

        prior_reads = (", and the accuracy prior takes these rows at it" if long_file == "recovery-1200.json" else
                       f" (the accuracy prior reads `results/{long_file}` at it, below)")
        compared = "; ".join(f"{100 * x:.0f}%: {val_drop('recovery.json', x)} → {val_drop('recovery-1200.json', x)}"
                             for x in sparsities)
        parts.append(paragraph(f"""
            **A longer recovery** (`tools/bench/recovery.py --steps 1200 --recovery-rows 32000`,
            `results/recovery-1200.{{json,md}}`): {teachers} prunings distilled for 1,200 steps on up to 32,000 training rows
            (banking77 has fewer: all of its training rows but the validation ones). `compress --recovery long` spends this
            budget{prior_reads}: with it the planner offers `fast` at {offered}, the sparsities measured here. Validation
            drop against each file's teacher, SST-2 / banking77, short → long recovery: {compared}."""))
        for name in sorted(longer["tasks"]):
            body = mod.task_markdown(longer["tasks"][name])
            parts.append("\n".join(["#### " + body[0][3:] + " (1,200 steps)", *body[1:]]).strip())
        if r.has(RECOVERY_COMPRESS_TEACHERS):
            parts.append(_recovery_from_compress_teachers(r(RECOVERY_COMPRESS_TEACHERS), drops,
                                                          read=long_file == f"{RECOVERY_COMPRESS_TEACHERS}.json"))
    return "\n\n".join(parts)


RECOVERY_COMPRESS_TEACHERS = "recovery-1200-compress"


def _recovery_from_compress_teachers(d: dict, drops: dict, *, read: bool) -> str:
    """The long recovery from the teachers compress fine-tunes, against the same budget from weaker teachers
    (recovery-1200.json); ``read``: the accuracy prior reads these rows (else it still reads the weaker ones)."""
    rows, errs, teachers = [], [], []
    measured = sorted({row["sparsity"] for t in d["tasks"].values() for row in t["rows"] if row.get("chosen")})
    for name, t in sorted(d["tasks"].items()):
        c = t["teacher"].get("config", {})
        teachers.append(f"{TASK.get(name, name)} {c.get('method')}, {c.get('max_steps')} steps: "
                        f"{pct(t['teacher']['val_accuracy'])}% on {t['val_rows']:,} validation rows, "
                        f"{pct(t['teacher']['dev_accuracy'])}% on dev")
        for row in sorted((x for x in t["rows"] if x.get("chosen")), key=lambda x: x["sparsity"]):
            drop = 100 * (t["teacher"]["val_accuracy"] - row["val_accuracy"])
            weaker = drops.get(("recovery-1200.json", row["sparsity"]), {}).get(name)
            if weaker is not None and abs(drop - weaker) >= 0.005:
                errs.append(f"{'optimistic' if weaker < drop else 'pessimistic'} by {abs(drop - weaker):.2f} points for "
                            f"{TASK.get(name, name)} at {100 * row['sparsity']:.0f}%")
            rows.append([TASK.get(name, name), f"{row['method']} {100 * row['sparsity']:.0f}%", f"{pct(row['val_accuracy'])}%",
                         num(drop, 2), f"{pct(row['dev_accuracy'])}% ({pts(100 * (row['dev_accuracy'] - t['teacher']['dev_accuracy']))})",
                         "–" if weaker is None else num(weaker, 2)])
    tab = table(["task", "pruning", "recovered, validation", "drop on validation (points)", "recovered, dev (Δ)",
                 "drop from the weaker teacher" + ("" if read else " (the prior's)")], ["l", "l", "r", "r", "r", "r"], rows)
    if read:
        verdict = ("The weaker teachers' rows were " + ", ".join(errs) + "; the prior now reads these rows instead "
                   "(`tools/bench/accuracy_prior.py`), so `compress --recovery long` plans from the teachers it "
                   "fine-tunes." if errs else "The prior reads these rows.")
    else:
        verdict = (("Against these, the prior's long rows are " + ", ".join(errs) + ". " if errs else "")
                   + "The prior keeps the weaker teachers' rows until every sparsity it offers at this budget is measured "
                   "this way.")
    return "\n\n".join([paragraph(f"""
        **The long recovery from the teachers `compress` fine-tunes** (`tools/bench/recovery.py --teacher compress
        --steps 1200`, `results/{RECOVERY_COMPRESS_TEACHERS}.{{json,md}}`), at {', '.join(f'{100 * x:.0f}%' for x in measured)};
        the teachers: {'; '.join(teachers)}. A negative drop is a student that beat its teacher. {verdict}"""), tab])


@section("sdk-sizes")
def sdk_sizes(r: Results) -> str:
    result = r("sdk-sizes")
    body = _bench_module("sdk_sizes").markdown(result).split("\n", 2)[2]  # without the file's title
    return (f"Archive and wheel sizes (stripped; `tools/bench/sdk_sizes.py`, edgenlp {result['version']}, "
            f"ExecuTorch {result['executorch']}; measured {result['date']} on {result['host']}):\n\n" + body.split("\n", 2)[2])


@section("java-predictions")
def java_predictions(r: Results) -> str:
    d = r("java_predictions")
    return paragraph(f"`tools/bench/java_predictions.py` runs the Java example (`Classify.java`) over a task split against "
                     f"the ExecuTorch Python runner: {d['agree']}/{d['texts']} {d['task']} {d['split']} sentences agree "
                     f"(max |Δp| {d['max_abs_prob_diff']:.1e}; accuracy {pct(d['accuracy_java'])}% through Java, "
                     f"{pct(d['accuracy_executorch'])}% through ExecuTorch; `results/java_predictions.md`). {d['note']}")


@section("wheel-main-job")
def wheel_main_job(r: Results) -> str:
    d = r("wheel-main-job")
    acc = d["accuracy"]
    return paragraph(f"From a fresh virtualenv holding only the wheel (`pip install` {num(d['pip_install_s'], 0)} s), the "
                     f"main job {'passed' if d['passed'] else 'failed'} on {d['host']['model']} "
                     f"({' '.join(d['host']['isa'])}), {d['date']}: {candidate_text(d['chosen'])}, SST-2 dev "
                     f"{pct(acc['measured'])}% ({drop(acc['drop_points'])} points), {num(d['size_mb']['measured'], 1)} MB, "
                     f"{num(d['host_speedup_vs_uncompressed'], 2)}× the uncompressed model on the host, "
                     f"{minsec(d['compress_wall_s'])} ({d['conditions']}; `results/wheel-main-job.json`).")


def sparse_bundles_block(r: Results, name: str, title: str) -> str:
    """A ``tools/bench/sparse_bundles.py`` results file as its own markdown under ``title``, with its host line."""
    from tools.bench.harness import Results as BenchResults

    doc = r(name)
    return _bench_module("sparse_bundles").markdown(doc, title=title).rstrip("\n") + "\n\n" + BenchResults.host_line(doc["host"])


@section("sparse-bundles")
def sparse_bundles(r: Results) -> str:
    return sparse_bundles_block(r, "sparse-bundles",
                                "**Whole MiniLM bundles with the sparse ops against the dense bundles (issue 23, stage 2)**")


@section("sparse-bundles-avx512vnni")
def sparse_bundles_vnni(r: Results) -> str:
    """The same bundles timed on an AVX-512 VNNI host, one table per block shape (``--block``)."""
    parts = [sparse_bundles_block(r, f"sparse-bundles-{block}-avx512vnni",
                                  f"**{block} blocks, timed on an AVX-512 VNNI host (`sparse-bundles-{block}-avx512vnni.json`)**")
             for block in ("1x4", "1x8", "4x1")]
    parts.append(paragraph("""
        On this host whole int8 bundles do not pay at any measured sparsity, although the kernels alone pass the gate here
        (`sparse-kernels-avx512vnni`). An ETDump of the 1x4 bundles (libedgenlp, 1 thread) shows why: inside a bundle the
        sparse ops take about as long as XNNPACK's dense int8 linears take in the dense bundle, because there they run well
        below their kernel-bench speed (not pinned down yet; the candidates are weights that arrive cold, and each op
        transposing and quantizing its activations on its own) while XNNPACK's VNNI GEMMs run faster in the whole graph than one at a time; the dense
        remainder, split into one XNNPACK call per stretch, also costs more than in one call. Part of it was since found
        (next block): every call of a sparse op checked its packed weights with a modulo per block, a cost the kernel
        bench never paid, and these tables were timed before that check was made cheap. The planner offers
        block-sparse candidates only on the machine kind its shipped ratios were measured on (`targets/sparse-ratios.json`)."""))
    return "\n\n".join(parts)


@section("sparse-bundles-amd-avx512vnni")
def sparse_bundles_amd_vnni(r: Results) -> str:
    """The 1x4 bundles on the AMD AVX-512 VNNI host class the kernel gate was measured on, with their kernel-bench bound."""
    return "\n\n".join([
        sparse_bundles_block(r, "sparse-bundles-1x4-amd-avx512vnni",
                             "**1x4 blocks on an AMD AVX-512 VNNI host, with the kernel bench's bound "
                             "(`sparse-bundles-1x4-amd-avx512vnni.json`, `sparse-kernels-1x4-m128-amd-avx512vnni.json`)**"),
        paragraph("""
            Every call of a sparse op first checks the packed weights it is handed (a corrupted bundle must fail the call,
            not read out of bounds). That check used to take an integer division per block: at short inputs it cost
            as much as the int8 kernel itself, and the kernel bench, which calls the kernels directly, never paid it.
            It is now a vectorized scan (an OR and a max over the columns), and the bundles above were timed with it.
            What is left between a bundle and its bound is the integration: 24 more XNNPACK calls per forward (the graph is cut around each op), activations quantized once per op, weights
            that arrive cold. The bound itself settles the targets of issue 23 on this host: the encoder linears are
            only part of a dense bundle's time (the share column), so even at the kernel bench's speed the int8 bundle
            cannot reach 1.6× at 70% or 3× at 90%; fp32 at 90% is the one target within its bound."""),
    ])


@section("sparsify-accuracy")
def sparsify_accuracy(r: Results) -> str:
    doc = r("sparsify-accuracy")
    mod = _bench_module("sparsify_accuracy")
    from tools.bench.harness import Results as BenchResults

    title = "**Accuracy after `sparsify`, as int8 bundles (issue 23, stage 2)**"
    body = mod.markdown(doc).split("\n", 1)[1]
    out = title + "\n" + body.rstrip("\n") + "\n\n" + BenchResults.host_line(doc["host"])
    if r.has("sparsify-accuracy-long"):  # the same method at a longer distillation budget, from another teacher
        long = r("sparsify-accuracy-long")
        body = mod.markdown(long).split("\n", 1)[1]
        out += (f"\n\n**The same at {long['max_steps']} steps** (`sparsify-accuracy-long.json`)\n" + body.rstrip("\n")
                + "\n\n" + BenchResults.host_line(long["host"]))
    return out


@section("sparse-kernels")
def sparse_kernels(r: Results) -> str:
    return _bench_module("sparse_kernels").render_markdown(r("sparse-kernels"))


@section("sparse-kernels-avx512vnni")
def sparse_kernels_vnni(r: Results) -> str:
    return _bench_module("sparse_kernels").render_markdown(r("sparse-kernels-avx512vnni"))


@section("dynamic-val-rows")
def dynamic_val_rows(r: Results) -> str:
    doc = r("dynamic-val-rows")
    h = doc.get("host", {})
    table = [line for line in _bench_module("dynamic_val_rows").markdown(doc).splitlines() if line.startswith("|")]
    return "\n\n".join([
        "\n".join(table),
        paragraph(f"""{doc['task']}, rule {doc['rule']}, maximum drop {doc['max_drop']} points; the
                  {doc['validation_rows']} validation rows of `{Path(doc['model']).parent.name}` (below), each size
                  drawn {doc['rows'][0]['draws']} times. Host: {h.get('cpu_model', 'not recorded')}, ISA flags
                  {h.get('isa_flags')} (eager, FLOPs only; `tools/bench/results/dynamic-val-rows.md`)."""),
    ])


@section("calibration-margin")
def calibration_margin(r: Results) -> str:
    bench = _bench_module("calibration_margin")
    parts = []
    for name, what in (("calibration-margin-imdb128-exits", "Exits alone (the model's token pruning switched off)"),
                       ("calibration-margin-imdb128-ltp-exits", "Exits after the token pruning as built (its scale "
                                                                "calibrated with no margin)")):
        doc = r(name)
        h = doc.get("host", {})
        parts += [paragraph(f"""**{what}.** {bench.describe(doc)}"""), "\n".join(bench.margin_table(doc))]
        if doc["tokens"] != "none":
            floor = min(m["check_drop"]["min"] for m in doc["margins"])
            parts.append(paragraph(f"""Here the token pruning, its scale chosen on {doc['split']['val_rows']:,} rows with no margin, has
                                   spent the budget before any exit: no threshold brings the check rows' drop below
                                   {num(floor, 2)} points, so the exits' margin cannot help; the token scale needs the
                                   margin too (`imdb128-ltp-exits-m1` in the results below)."""))
        if "dev" in doc:
            parts += [paragraph(f"""Dev ({doc['dev']['rows']} rows, reported only): the threshold each margin chose on
                                the first calibration set."""), "\n".join(bench.dev_table(doc))]
        parts.append(paragraph(f"""Host: {h.get('cpu_model', 'not recorded')}, ISA flags {h.get('isa_flags')} (eager,
                               accuracy and FLOPs only; `tools/bench/results/{name}.md`)."""))
    return "\n\n".join(parts)


@section("dynamic")
def dynamic(r: Results) -> str:
    doc = r("dynamic")
    bench = _bench_module("dynamic")
    cases = {c: res for c, res in doc["cases"].items() if "variants" in res}
    if not cases:
        raise MissingResults("tools/bench/results/dynamic.json has no measured case")
    hosts: dict[str, list[str]] = {}  # host -> its cases (a case records the machine that measured it)
    for c, res in cases.items():
        hosts.setdefault(bench.host_text(res.get("host") or doc.get("host")), []).append(c)
    loads = "; ".join(f"{c}: {' / '.join(num(x, 2) for x in res['load_avg']['start'])} at the start, "
                      f"{' / '.join(num(x, 2) for x in res['load_avg']['end'])} at the end" for c, res in cases.items())
    notes = []
    for c, res in cases.items():
        for v, row in res["variants"].items():
            notes.append(f"{c} {v}: {num(row['speedup_mean'], 2)}x the static mean latency at "
                         f"{drop(bench.drop_of(row))} points of dev accuracy"
                         f"{' against the fine-tuned model (joint training changed the static path)' if 'reference' in row else ''}, p90 {num(row['p90_ratio'], 2)}x static "
                         f"(issue target {bench.target_text(res['spec']['target'])}: "
                         f"{'met' if bench.target_met(res['spec']['target'], row) else 'not met'}"
                         f"{bench.hidden_by_rounding(res['spec']['target'], row)})")
    native = [c for c, res in cases.items() if res.get("runtime") == "native"]
    native_text = (f"Cases marked (native) ran through libedgenlp's C API, the segment loop in C++ as an app runs it "
                   f"({', '.join(native)}; a call's time includes its tokenization, static and dynamic alike); the "
                   "others through the ExecuTorch Python runtime." if native else "")
    return "\n\n".join([
        bench.results_table(doc),
        bullets(notes),
        paragraph(f"""Hosts: {'; '.join(f"{h} ({', '.join(cs)})" for h, cs in hosts.items())}: compare static and
                  dynamic within a case, never across hosts; load average (1/5/15 min) {loads};
                  {span([res['rounds'] for res in cases.values()], 0)} rounds over each case's dev rows (the table)
                  (`tools/bench/results/dynamic.md`, curves of every rule in `dynamic.png`).
                  {native_text}"""),
    ])


@section("export-time")
def export_time(r: Results) -> str:
    result = r("export-time")
    body = _bench_module("export_time").markdown(result).split("\n", 2)[2]  # without the file's title
    host = result.get("host", {})
    load = result.get("load_during") or ["?"]
    return (f"Export time of {result['model']} for {result['task']} (ExecuTorch, buckets {result['buckets']}; "
            f"`tools/bench/export_time.py`, measured {host.get('written', '?')} on {host.get('cpu_model', '?')}, "
            f"ISA flags {host.get('isa_flags', '?')}, {host.get('threads')} thread(s), load average "
            f"{max(load) if load != ['?'] else '?'} at most, the export's own processes included: up to "
            f"{max((x.get('lowering_processes', 1) for x in result.get('rows', [])), default=1)} run at once, nothing else ran"
            f"):\n\n" + body)


# --------------------------------------------------------------------------- driver


def render(text: str, results: Results) -> str:
    """``text`` with every marked section rewritten; unknown section names and missing sections are errors."""
    seen = []

    def replace(m: re.Match) -> str:
        name, indent = m.group("name"), m.group("indent")
        if name not in RENDERERS:
            raise SystemExit(f"README: unknown section {name!r}; known: {', '.join(sorted(RENDERERS))}")
        seen.append(name)
        try:
            body = RENDERERS[name](results).rstrip("\n")
        except MissingResults as exc:
            body = f"(Not measured yet: {exc}.)"
        body = "\n".join(indent + line if line.strip() else "" for line in body.splitlines())
        return f"{indent}<!-- results:{name} -->\n{body}\n{indent}<!-- /results:{name} -->"

    out = MARKER.sub(replace, text)
    dup = sorted({n for n in seen if seen.count(n) > 1})
    if dup:
        raise SystemExit(f"README: section(s) {dup} appear more than once")
    missing = sorted(set(RENDERERS) - set(seen))
    if missing:
        raise SystemExit(f"README: no marked section for {missing}; add <!-- results:NAME --> ... <!-- /results:NAME -->")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 with a diff when the README differs from what would be written")
    ap.add_argument("--readme", type=Path, default=README)
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    old = args.readme.read_text()
    from edgenlp.cli.options import rewrite_option_tables

    new = rewrite_option_tables(render(old, Results(args.results)))  # and the option tables, from the options' help
    if args.check:
        if new == old:
            return 0
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"{args.readme} (as committed)",
                                                   f"{args.readme} (from {args.results})"))
        print(f"\n{args.readme} differs from its results files: run `python tools/readme.py`", file=sys.stderr)
        return 1
    if new != old:
        tmp = args.readme.with_name(f".{args.readme.name}.tmp")
        tmp.write_text(new)
        os.replace(tmp, args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
