"""Profiling on a board: a profiler :class:`~edgenlp.profile.measure.Measurer` that runs ``edgenlp-run`` there.

:class:`BoardMeasurer` pushes the runner and the bundle, runs the bundle on a
text of exactly ``seq_len`` tokens — once plainly (``--json``, each call's time
on the device's clock) and once with ``--etdump`` — pinned to the chosen
cluster with ``taskset``, pulls the ETDump back and attributes its XNNPACK
events with the host's reader (:func:`edgenlp.profile._et_worker.read_etdump`,
:func:`edgenlp.profile.attribution.attribute`), exactly like the native
measurer. The rest of the profiler (analytic columns, documents, tables,
plots) is unchanged; the document gains a ``device`` section.

::

    with open_board("ssh://pi@raspberrypi.local") as board, board_runtime(board, cores="big") as rt:
        docs = profile("out/minilm-sst2", ProfileConfig(seq_lens=(32, 128), runtimes=(rt,), threads=(1, 4)))

For calibrating a cost model, :func:`measure_components` measures a grid of
bundles (or encoder shapes, exported with random weights; :func:`calibration_shapes`
gives a default grid from tiny to MiniLM) and returns one flat table of
per-component latencies (:class:`ComponentTable`, JSON with ``to_dict()``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Sequence

from edgenlp.boards.base import Board
from edgenlp.errors import EdgeNLPError
from edgenlp.profile.attribution import TimedEvent, attribute
from edgenlp.profile.executorch import ExecuTorchMeasurer, classify
from edgenlp.profile.measure import Measurement, MeasureSpec, ProfileTarget
from edgenlp.profile.native import text_of_length

log = logging.getLogger(__name__)


def runtime_name(board: Board) -> str:
    """The profile's runtime key for a board: ``native@<uri>``."""
    return f"native@{board.uri}"


class BoardMeasurer(ExecuTorchMeasurer):
    """The native runner on a board; ``cores`` is "all", "big" or "little" (taskset to that cluster)."""

    def __init__(self, board: Board, *, cores: str = "all", timeout_s: float | None = None) -> None:
        super().__init__(timeout_s=timeout_s or board.timeout_s)
        self.board = board
        self.cores = cores
        self.runtime = runtime_name(board)
        self.method = (
            f"edgenlp-run on {board.uri} (cores: {cores}): ETDump XNNPACK per-operator events pulled back and attributed by "
            "anchoring on 'Fully Connected' events in execution order; end-to-end = plain edgenlp_classify calls timed on "
            "the device (native tokenizer included), in a separate run without ETDump"
        )

    def device_section(self) -> dict:
        info = self.board.probe()
        return {**self.board.describe(), "cores_requested": self.cores, "cpus_used": list(info.cpus_for(self.cores))}

    def measure(self, target: ProfileTarget, spec: MeasureSpec) -> Measurement:
        if target.info.get("kind") != "bundle":
            raise EdgeNLPError(f"{self.board.uri}: profile: boards run bundles; run `edgenlp export` and profile the bundle directory")
        _, method_name = self.program_for(target, spec)
        board = self.board
        info = board.probe()
        if spec.threads > len(info.cpus_for(self.cores)):
            log.warning("%s: %d threads on %d cores (--cores %s)", board.uri, spec.threads, len(info.cpus_for(self.cores)), self.cores)
        bundle = board.push_bundle(target.info["source"])
        text = text_of_length(spec.seq_len)
        n_tokens = _count_tokens(Path(target.info["source"]), text)
        if n_tokens > spec.seq_len:
            raise EdgeNLPError(f"{board.uri}: profile: a {spec.seq_len}-token text did not fit method {method_name}")
        n = spec.warmup + spec.runs
        with tempfile.TemporaryDirectory(prefix="edgenlp-board-") as tmp:
            lines = Path(tmp) / f"seq{spec.seq_len}.txt"
            lines.write_text((text + "\n") * n)
            remote_in = board.push_file(lines, lines.name)
            common = [bundle, "--threads", str(spec.threads), "--input", remote_in]
            log.info("%s: seq %d, %d thread(s): %d plain runs", board.uri, spec.seq_len, spec.threads, n)
            plain = board.run_runner([*common, "--json"], cores=self.cores, step="run (plain)")
            ms = [json.loads(l)["ms"] for l in plain.stdout.splitlines() if l.startswith("{")]
            if len(ms) != n:
                raise EdgeNLPError(f"{board.uri}: run (plain): expected {n} results, got {len(ms)}")
            remote_et = f"{board.workdir}/seq{spec.seq_len}-t{spec.threads}.etdp"
            log.info("%s: seq %d, %d thread(s): %d runs with ETDump", board.uri, spec.seq_len, spec.threads, n)
            board.run_runner([*common, "--etdump", remote_et], cores=self.cores, step="run (ETDump)")
            local_et = board.pull(remote_et, Path(tmp) / "board.etdp")
            from edgenlp.profile._et_worker import read_etdump

            events_raw, method_ms = read_etdump(local_et)
        events = [TimedEvent(r["name"], kind, tuple(r["raw_ms"][-spec.runs :]))
                  for r in events_raw if (kind := classify(r["name"])) is not None]  # fmt: skip
        attributed = attribute(events, target.plan, runtime=self.runtime)
        return Measurement(self.runtime, self.method, spec, ms[spec.warmup :], method_ms[-spec.runs :], attributed,
                           device=self.device_section())  # fmt: skip


def _count_tokens(bundle: Path, text: str) -> int:
    from edgenlp.bundle import Bundle
    from edgenlp.models.tokenizer import token_ids

    b = Bundle.open(bundle, verify=False)
    return len(token_ids(b.tokenizer, [text], max_len=b.max_seq_len)[0])


@contextlib.contextmanager
def board_runtime(board: Board, *, cores: str = "all") -> Iterator[str]:
    """Register a :class:`BoardMeasurer` for ``board`` with the profiler while the block runs; yield its runtime name."""
    from edgenlp.profile.api import register_measurer, unregister_measurer

    name = runtime_name(board)
    register_measurer(name, lambda: BoardMeasurer(board, cores=cores))
    try:
        yield name
    finally:
        unregister_measurer(name)


# --------------------------------------------------------------------------- calibration API


@dataclass(frozen=True)
class ComponentRow:
    """One measured component for one (model, seq_len, threads) on one board."""

    model: str  # bundle path, or the shape's label
    shape: dict  # hidden, heads per layer, head_dim, ffn per layer, num_labels
    seq_len: int
    threads: int
    component: str  # embedding, attn_qkv, attn_core, attn_out, ffn, other, runtime_overhead, total
    latency_ms: float
    latency_p90_ms: float | None
    flops: int | None
    params: int | None
    weight_bytes: int | None


@dataclass(frozen=True)
class ComponentTable:
    """Per-component latencies measured on a board; ``device`` is the board's profile section."""

    device: dict
    cores: str
    rows: tuple[ComponentRow, ...]

    def lookup(self, *, model: str, seq_len: int, threads: int) -> dict[str, float]:
        """``{component: latency_ms}`` of one measurement."""
        return {r.component: r.latency_ms for r in self.rows if (r.model, r.seq_len, r.threads) == (model, seq_len, threads)}

    def to_dict(self) -> dict:
        return {"schema": "edgenlp.board-components/1", "device": self.device, "cores": self.cores,
                "rows": [asdict(r) for r in self.rows]}  # fmt: skip


def measure_components(board: Board, models: Sequence, *, seq_lens: Sequence[int], threads: Sequence[int] = (1,),
                       cores: str = "all", runs: int = 10, warmup: int = 2, workdir: str | Path | None = None) -> ComponentTable:
    """Measure per-component latency on ``board`` for each model × seq_len × threads.

    ``models`` holds bundle directories and/or
    :class:`~edgenlp.models.encoder.EncoderShape` objects; a shape is exported
    (random weights, fp32, one method per length in ``seq_lens``) into
    ``workdir`` first (a temporary directory when None). Rows come in
    components, then ``runtime_overhead`` (total minus components) and
    ``total`` (median end-to-end). ``board`` must be open (a context manager).

    Example::

        with open_board("ssh://pi@raspberrypi.local") as board:
            table = measure_components(board, [EncoderShape.uniform(family="bert", num_layers=2, hidden=256,
                                       num_heads=4, ffn=1024, max_positions=512)], seq_lens=(32, 128), threads=(1, 4))
        table.lookup(model="bert-L2-H256-A4-D64-F1024", seq_len=128, threads=4)["ffn"]
    """
    from edgenlp.profile.api import ProfileConfig, profile

    seq_lens = tuple(int(s) for s in seq_lens)
    rows: list[ComponentRow] = []
    device: dict = {}
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="edgenlp-calibrate-"))
        rt = stack.enter_context(board_runtime(board, cores=cores))
        config = ProfileConfig(seq_lens=seq_lens, runtimes=(rt,), threads=tuple(threads), runs=runs, warmup=warmup)
        for m in models:
            label, path = _model_path(m, Path(workdir), seq_lens)
            for doc in profile(path, config):
                device = doc.get("device", device)
                for c in doc["components"]:
                    rows.append(ComponentRow(label, doc["shape"], doc["seq_len"], doc["threads"], c["name"], c["latency_ms"][rt],
                                             c["latency_p90_ms"][rt], c["flops"], c["params"], c["weight_bytes"]))  # fmt: skip
                t = doc["total"]
                rows.append(ComponentRow(label, doc["shape"], doc["seq_len"], doc["threads"], "runtime_overhead",
                                         t["unattributed_ms"][rt], None, None, None, None))  # fmt: skip
                rows.append(ComponentRow(label, doc["shape"], doc["seq_len"], doc["threads"], "total", t["latency_ms"][rt],
                                         t["latency_p90_ms"][rt], t["flops"], t["params"], t["weight_bytes"]))  # fmt: skip
    return ComponentTable(device, cores, tuple(rows))


# (hidden, heads, ffn) per layer, head_dim 32: tiny, small, a MiniLM-L6 layer, and MiniLM with half its heads / FFN pruned
CALIBRATION_GRID = ((128, 4, 512), (256, 8, 1024), (384, 12, 1536), (384, 6, 1536), (384, 12, 768))


def calibration_shapes(*, family: str = "bert", num_layers: int = 2, head_dim: int = 32,
                       grid: Sequence[tuple[int, int, int]] = CALIBRATION_GRID) -> tuple:
    """Encoder shapes from tiny to MiniLM (``(hidden, heads, ffn)`` per ``grid`` row) for :func:`measure_components`.

    Pruned rows keep ``head_dim`` (whole heads removed), as pruning does; the
    rows are small enough to export and run in minutes on a Cortex-A53.
    """
    from edgenlp.models.encoder import EncoderShape

    return tuple(EncoderShape(family=family, vocab_size=30522, hidden=h, heads=(a,) * num_layers, head_dim=head_dim,
                              ffn=(f,) * num_layers) for h, a, f in grid)  # fmt: skip


def shape_label(shape) -> str:
    """``bert-L2-H384-A12-D32-F1536`` (per-layer lists where layers differ)."""
    heads = shape.heads if len(set(shape.heads)) > 1 else shape.heads[0]
    ffn = shape.ffn if len(set(shape.ffn)) > 1 else shape.ffn[0]
    return f"{shape.family}-L{len(shape.heads)}-H{shape.hidden}-A{heads}-D{shape.head_dim}-F{ffn}".replace(" ", "")


def _model_path(m, workdir: Path, seq_lens: tuple[int, ...]) -> tuple[str, Path]:
    from edgenlp.models.encoder import EncoderShape

    if isinstance(m, EncoderShape):
        label = shape_label(m)
        out = workdir / label
        if not (out / "manifest.json").is_file():
            shape_bundle(m, out, seq_lens=seq_lens)
        return label, out
    path = Path(str(m))
    if not (path / "manifest.json").is_file():
        raise EdgeNLPError(f"{path}: not a bundle directory (no manifest.json); pass bundles or EncoderShape objects")
    return str(path), path


def shape_bundle(shape, out: str | Path, *, seq_lens: Sequence[int], num_labels: int = 2, seed: int = 0) -> Path:
    """Export an fp32 bundle of ``shape`` with seeded random weights (for latency only), one method per length."""
    from edgenlp.export.api import ExportConfig, export_bundle
    from edgenlp.models.encoder import EncoderClassifier, ModelInfo
    from edgenlp.models.registry import DEFAULT_TOKENIZER, default_vocab_file

    labels = tuple(f"label{i}" for i in range(num_labels))
    model = EncoderClassifier(shape, num_labels, labels=labels).init_weights(std=0.02, seed=seed).eval()
    info = ModelInfo(shape_label(shape), "random weights for latency calibration", shape, False, str(default_vocab_file()),
                     dict(DEFAULT_TOKENIZER))  # fmt: skip
    seqs = tuple(sorted(set(int(s) for s in seq_lens)))
    export_bundle(model, info, out, config=ExportConfig(max_seq_len=seqs[-1], buckets=seqs, formats=("pte",)))
    return Path(out)
