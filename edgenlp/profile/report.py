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
    """Markdown tables, one per document."""
    out = []
    for doc in docs:
        header, rows = table_rows(doc)
        out.append(f"**{title(doc)}**\n")
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        out += ["| " + " | ".join(r) + " |" for r in rows]
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
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)
