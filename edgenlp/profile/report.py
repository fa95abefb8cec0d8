"""Terminal tables, markdown tables and the stacked-share plot for profile documents."""

from __future__ import annotations

from typing import Sequence

from edgenlp.profile.components import COMPONENTS

COLORS = {  # one colour per component, everywhere
    "embedding": "#4C72B0",
    "attn_qkv": "#DD8452",
    "attn_core": "#C44E52",
    "attn_out": "#8172B3",
    "ffn": "#55A868",
    "other": "#937860",
    "runtime_overhead": "#BBBBBB",
}
LABELS = {
    "embedding": "embedding",
    "attn_qkv": "linear before attn (QKV)",
    "attn_core": "attention core (QKᵀ, softmax, AV)",
    "attn_out": "linear after attn (out proj)",
    "ffn": "FFN",
    "other": "other (norms, residual, head)",
    "runtime_overhead": "runtime overhead",
}


def human(n: float, unit: str = "") -> str:
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suffix}{unit}"
    return f"{n:.0f}{unit}"


def _cell(value: str, pct: float) -> str:
    return f"{value} ({pct:.1f}%)"


def table_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows (components, overhead, total) of one document, as strings."""
    rts = doc["runtimes"]
    header = ["component", "params", "FLOPs", "weights", "activations"] + [f"{rt} ms" for rt in rts]
    rows = []
    for c in doc["components"]:
        sh = c["share_pct"]
        row = [
            c["name"],
            _cell(human(c["params"]), sh["params"]),
            _cell(human(c["flops"]), sh["flops"]),
            _cell(human(c["weight_bytes"], "B"), sh["weight_bytes"]),
            _cell(human(c["activation_bytes"], "B"), sh["activation_bytes"]),
        ]
        row += [_cell(f"{c['latency_ms'][rt]:.3f}", sh["latency"][rt]) for rt in rts]
        rows.append(row)
    t = doc["total"]
    if rts:
        over = [t["unattributed_ms"][rt] for rt in rts]
        rows.append(["runtime overhead", "", "", "", ""] + [_cell(f"{o:.3f}", 100 * o / t["latency_ms"][rt]) for o, rt in zip(over, rts)])
    rows.append(
        ["total", human(t["params"]), human(t["flops"]), human(t["weight_bytes"], "B"), human(t["activation_bytes"], "B")]
        + [f"{t['latency_ms'][rt]:.3f} (p90 {t['latency_p90_ms'][rt]:.3f})" for rt in rts]
    )
    return header, rows


def title(doc: dict) -> str:
    return f"{doc['model']} · seq {doc['seq_len']} · batch {doc['batch']} · {doc['threads']} thread(s)"


def print_tables(docs: Sequence[dict], *, per_layer: bool = False, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:  # files and pipes: do not squeeze the table into 80 columns
            console = Console(width=200)
    for doc in docs:
        header, rows = table_rows(doc)
        table = Table(title=title(doc), title_justify="left")
        for i, h in enumerate(header):
            table.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
        for r in rows:
            table.add_row(*r, style="bold" if r[0] == "total" else None)
        console.print(table)
        if per_layer and "layers" in doc:
            console.print(layer_table(doc))
    seen: set[int] = set()
    for doc in docs:  # one dynamic section per thread count, shared by that count's documents
        d = doc.get("dynamic")
        if d is not None and id(d) not in seen:
            seen.add(id(d))
            console.print(dynamic_markdown_text(d, threads=doc["threads"]), markup=False, highlight=False)


def layer_table(doc: dict):
    from rich.table import Table

    rts = doc["runtimes"]
    table = Table(title=f"per layer · {title(doc)}", title_justify="left")
    for h in ["layer", "heads", "ffn", "component", "params", "FLOPs"] + [f"{rt} ms" for rt in rts]:
        table.add_column(h, justify="left" if h in ("component",) else "right", no_wrap=True)
    for layer in doc["layers"]:
        i = layer["index"]
        for c in layer["components"]:
            table.add_row(
                str(i), str(doc["shape"]["heads"][i]), str(doc["shape"]["ffn"][i]), c["name"], human(c["params"]), human(c["flops"]),
                *[f"{c['latency_ms'][rt]:.3f}" for rt in rts],
            )  # fmt: skip
    return table


def markdown(docs: Sequence[dict]) -> str:
    """Markdown tables, one per document, and the dynamic section of each thread count when there is one."""
    out = []
    for doc in docs:
        header, rows = table_rows(doc)
        out.append(f"**{title(doc)}**\n")
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
    seen: set[int] = set()
    for doc in docs:
        d = doc.get("dynamic")
        if d is not None and id(d) not in seen:
            seen.add(id(d))
            out += [dynamic_markdown_text(d, threads=doc["threads"]), ""]
    return "\n".join(out)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
            + ["| " + " | ".join(r) + " |" for r in rows])


def _num(x, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def dynamic_markdown_text(d: dict, *, threads: int) -> str:
    """The ``dynamic`` section of a profile as markdown: per runtime, the per-sentence summary, segments, the
    weighted component table and the latency-accuracy curve."""
    where = f"{d['data']}" + (f" ({d['split']})" if d.get("split") else "")
    out = [f"**dynamic · {d['n']} sentences of {where} · rule {d['rule']} at {d['threshold']} · {threads} thread(s)**", ""]
    for rt, r in d["runtimes"].items():
        lat, st = r["latency_ms"], r["static"]["latency_ms"]
        out += [f"*{rt}*: accuracy {r['accuracy']:.2f} (static {r['static']['accuracy']:.2f}); latency per sentence "
                f"mean {lat['mean']:.3f} / p50 {lat['p50']:.3f} / p90 {lat['p90']:.3f} / max {lat['max']:.3f} ms "
                f"(static mean {st['mean']:.3f} / p90 {st['p90']:.3f}); exits {r['exit_layers']} "
                f"(mean layer {r['mean_exit_layer']:.2f}); tokens per layer {r['tokens_kept']}", ""]
        out += _md_table(["segment", "layers", "exit", "reach", "mean tokens", "p90 tokens", "length", "FLOPs", "ms"],
                         [[str(s["index"]), f"{s['layers'][0]}-{s['layers'][1]}", "yes" if s["exit"] else "",
                           f"{s['reach']:.3f}", _num(s["mean_tokens"], ".1f"), _num(s["p90_tokens"], ".1f"),
                           _num(s["length"], "d"), human(s["cost"]["flops"]) if s.get("cost") else "-",
                           _num((s.get("cost") or {}).get("latency_ms"), ".3f")] for s in r["segments"]])
        out.append("")
        rows = [[LABELS.get(c["name"], c["name"]), f"{human(c['flops'])} ({c['share_pct']['flops']:.1f}%)",
                 human(c["activation_bytes"], "B"), f"{c['latency_ms']:.3f} ({c['share_pct']['latency_ms']:.1f}%)"]
                for c in r["components"]]
        t = r["total"]
        rows.append(["**expected total**", human(t["flops"]), human(t["activation_bytes"], "B"), f"{t['latency_ms']:.3f}"])
        out += ["Components weighted by how often each segment runs:", ""]
        out += _md_table(["component", "FLOPs", "activations", "ms"], rows)
        if r["curve"]:
            out += ["", "Latency against accuracy as the exit threshold moves:", ""]
            out += _md_table(["threshold", "accuracy", "mean ms", "p90 ms", "mean exit layer"],
                             [[f"{c['threshold']:g}" + (" (profiled)" if c["threshold"] == d["threshold"] else ""),
                               f"{c['accuracy']:.2f}", f"{c['latency_ms']['mean']:.3f}", f"{c['latency_ms']['p90']:.3f}",
                               f"{c['mean_exit_layer']:.2f}"] for c in r["curve"]])
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- plot


def _bars(docs: Sequence[dict]) -> list[tuple[str, dict[str, float]]]:
    """(label, component -> percent) for each bar: params, then per seq len FLOPs and each runtime's latency."""
    bars: list[tuple[str, dict[str, float]]] = []
    first = docs[0]
    bars.append(("params", {c["name"]: c["share_pct"]["params"] for c in first["components"]}))
    seen_seq = set()
    for doc in docs:
        s = doc["seq_len"]
        if s not in seen_seq:
            seen_seq.add(s)
            bars.append((f"FLOPs\nseq {s}", {c["name"]: c["share_pct"]["flops"] for c in doc["components"]}))
        for rt in doc["runtimes"]:
            shares = {c["name"]: c["share_pct"]["latency"][rt] for c in doc["components"]}
            attributed = sum(shares.values())
            if attributed > 100.0:  # components measured above the end-to-end median: show them as parts of their sum
                shares = {k: 100.0 * v / attributed for k, v in shares.items()}
            shares["runtime_overhead"] = max(0.0, 100.0 - sum(shares.values()))
            bars.append((f"{rt}\nseq {s}", shares))
    return bars


def plot(docs: Sequence[dict], path, *, dpi: int = 150) -> None:
    """Stacked 100% bars of params / FLOPs / latency share per component; one panel per thread count."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    threads = sorted({d["threads"] for d in docs})
    panels = [[d for d in docs if d["threads"] == t] for t in threads]
    n_bars = max(len(_bars(p)) for p in panels)
    fig_w = max(6.0, 0.7 * n_bars + 1.6)
    fig, axes = plt.subplots(len(panels), 1, figsize=(fig_w, 3.9 * len(panels) + 0.5), squeeze=False)
    order = list(COMPONENTS) + ["runtime_overhead"]
    used: dict[str, object] = {}
    for ax, panel, t in zip(axes[:, 0], panels, threads):
        bars = _bars(panel)
        xs = list(range(len(bars)))
        bottoms = [0.0] * len(bars)
        for comp in order:
            vals = [b[1].get(comp, 0.0) for b in bars]
            if not any(vals):
                continue
            used[comp] = ax.bar(xs, vals, bottom=bottoms, color=COLORS[comp], width=0.72, edgecolor="white", linewidth=0.6)
            for x, v, b in zip(xs, vals, bottoms):
                if v >= 6:
                    ax.text(x, b + v / 2, f"{v:.0f}", ha="center", va="center", fontsize=7.5, color="white", fontweight="bold")
            bottoms = [b + v for b, v in zip(bottoms, vals)]
        ax.set_xticks(xs, [b[0] for b in bars], fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_ylabel("share of total (%)")
        ax.set_xlim(-0.6, len(bars) - 0.4)
        for x in range(1, len(bars)):  # dotted line before each sequence-length group
            if bars[x][0].startswith("FLOPs"):
                ax.axvline(x - 0.5, color="#444444", linewidth=0.8, linestyle=":")
        ax.set_title(f"{t} thread{'s' if t > 1 else ''} · batch {panel[0]['batch']}", fontsize=10, loc="left")
        ax.spines[["top", "right"]].set_visible(False)
    comps = [c for c in order if c in used]
    fig.legend([used[c] for c in reversed(comps)], [LABELS[c] for c in reversed(comps)], loc="center left",
               bbox_to_anchor=(1.0, 0.5), fontsize=8.5, frameon=False)  # fmt: skip
    fig.suptitle(f"{docs[0]['model']}: share of parameters, FLOPs and latency per component", fontsize=11.5, x=0.02, ha="left")
    fig.tight_layout()
    _save(fig, path, dpi=dpi)


def _save(fig, path, *, dpi: int) -> None:
    """Write ``fig`` to ``path`` through a temporary name beside it, then close it."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)


def plot_curve(doc: dict, path, *, dpi: int = 150) -> None:
    """Mean per-sentence latency against accuracy, one line per runtime, a point per exit threshold (labelled), the
    bundle's threshold circled and the static program as a cross. ``doc`` is a profile document with ``dynamic``."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    d = doc.get("dynamic")
    if d is None:
        raise ValueError("the document has no dynamic section (profile a dynamic bundle with --data)")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (rt, r) in enumerate(d["runtimes"].items()):
        color = f"C{i}"
        pts = r["curve"] or [{"threshold": d["threshold"], "accuracy": r["accuracy"], "latency_ms": r["latency_ms"]}]
        xs, ys = [c["latency_ms"]["mean"] for c in pts], [c["accuracy"] for c in pts]
        ax.plot(xs, ys, "o-", color=color, label=f"{rt}: exit threshold ({d['rule']})", linewidth=1.2, markersize=4)
        for c, x, y in zip(pts, xs, ys):
            ax.annotate(f"{c['threshold']:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7.5)
            if c["threshold"] == d["threshold"]:
                ax.plot([x], [y], "o", markersize=10, markerfacecolor="none", markeredgecolor=color)
        st = r["static"]
        ax.plot([st["latency_ms"]["mean"]], [st["accuracy"]], "x", color=color, markersize=8, label=f"{rt}: static")
    ax.set_xlabel("mean latency per sentence (ms)")
    ax.set_ylabel("accuracy (%)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(f"{doc['model']}: {d['n']} sentences of {d['data']}, {doc['threads']} thread(s)", fontsize=10, loc="left")
    fig.tight_layout()
    _save(fig, path, dpi=dpi)
