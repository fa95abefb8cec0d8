"""Benchmark: block-sparse linear kernels (runtime/kernels) against XNNPACK's dense GEMMs (issue 23, stage 1).

On MiniLM's linear shapes (tokens M = 16..128; K, N in {384, 1536}) the
C++ bench binary ``sparse_linear_bench`` times, one thread, in interleaved
rounds in one process:

* XNNPACK dense fp32 and QD8 (dynamic int8 activations x per-channel int8
  weights) fully-connected operators, as the ExecuTorch wheel runs them: one
  ``nn.Linear`` per program, lowered here with ``XnnpackPartitioner`` (QD8
  through PT2E ``XNNPACKQuantizer``, per-channel, dynamic), one method per M;
* the sparse kernels (fp32 and int8, blocks 1x4 / 1x8 / 4x1) with the ISA the
  dispatcher picks on this CPU, at 50/70/80/90/95% of the blocks removed by
  block magnitude. Each call includes what a drop-in linear must do: the
  activation transpose (and, for int8, the per-token quantization) and the
  transposed store into ``y [M][N]``.

An ExecuTorch call of a tiny (8x8) linear measures the fixed per-call cost
that the XNNPACK numbers carry (``overhead``).

The decision gate of the issue, per precision, block and sparsity <= 80%:
the kernel must beat the faster of XNNPACK's dense fp32 and QD8 by >= 1.3x.
It is judged on a whole MiniLM encoder layer's linears (Q, K, V, attention
output, FFN in, FFN out, shapes from the packaged model's config) at every
measured M, as the median over rounds of that round's ratio.

ARM: qemu gives no timings. The script reports, from the aarch64 build's
object code, the instructions of each kernel's inner block loop per non-zero
block (objdump), and says that device times are unknown. The same counts are
given for the x86 kernels, AVX-512 included (built, not runnable on an AVX2 host).

    python tools/bench/sparse_kernels.py [--rounds 15] [--m 16 32 64 128] [--out tools/bench/results/sparse-kernels]

Writes ``<out>.json`` and ``<out>.md``; :func:`render_markdown` turns the
JSON into the README section ``<!-- results:sparse-kernels -->``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # a bench script must not shadow the stdlib

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

ROOT = _HERE.parents[1]
RESULTS = ROOT / "tools" / "bench" / "results"
CACHE = ROOT / ".cache" / "sparse-kernels"
log = logging.getLogger("bench.sparse_kernels")

SPARSITIES = (0.5, 0.7, 0.8, 0.9, 0.95)
CONTROL = 0.0  # every block kept: the sparse format and kernel on dense weights (what the kernel itself is worth)
BLOCKS = ("1x4", "1x8", "4x1")
GATE_SPEEDUP = 1.3
GATE_MAX_SPARSITY = 0.8
SECTION = "sparse-kernels"  # <!-- results:sparse-kernels --> in the README

# Which dimensions of the encoder shape each per-layer linear maps (in_features, out_features).
LINEAR_IO = {"query": ("hidden", "hidden"), "key": ("hidden", "hidden"), "value": ("hidden", "hidden"),
             "attn_out": ("hidden", "hidden"), "ffn_in": ("hidden", "ffn"), "ffn_out": ("ffn", "hidden")}


def layer_linears(model: str = "minilm-l6") -> tuple[dict, list[tuple[str, int, int]]]:
    """The encoder shape of ``model`` and one layer's linears as (name, K, N)."""
    from edgenlp.models.families import LAYER_LINEARS
    from edgenlp.models.registry import _minilm_dir, shape_from_hf_config

    if model != "minilm-l6":
        raise ValueError(f"only minilm-l6 is wired here, got {model!r}")
    shape = shape_from_hf_config(json.loads((_minilm_dir() / "config.json").read_text()))
    dims = {"hidden": shape.hidden, "ffn": shape.ffn[0]}
    return dims, [(name, dims[LINEAR_IO[name][0]], dims[LINEAR_IO[name][1]]) for name in LAYER_LINEARS]


# ----------------------------------------------------------------------------- programs


def _lower_linear(k: int, n: int, ms: list[int], *, qd8: bool, seed: int) -> tuple[bytes, dict]:
    """One nn.Linear(k, n) lowered to XNNPACK, one method ``m<M>`` per token count; and the ops left outside."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(seed)
    lin = torch.nn.Linear(k, n).eval()
    programs = {}
    for m in ms:
        x = (torch.randn(m, k),)
        mod = lin
        if qd8:
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
                XNNPACKQuantizer,
                get_symmetric_quantization_config,
            )
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

            q = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
            with torch.no_grad():
                mod = prepare_pt2e(torch.export.export(lin, x, strict=False).module(), q)
                mod(*x)
                mod = convert_pt2e(mod)
        with torch.no_grad():
            programs[f"m{m}"] = torch.export.export(mod, x, strict=False)
    edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()])
    outside = {}
    for name in programs:
        for node in edge.exported_program(name).graph.nodes:
            if node.op == "call_function" and "executorch_call_delegate" not in str(node.target) \
                    and "getitem" not in str(node.target):
                outside[str(node.target)] = outside.get(str(node.target), 0) + 1
    return edge.to_executorch().buffer, outside


def write_programs(ms: list[int], kns: list[tuple[int, int]], *, seed: int = 0) -> tuple[Path, dict]:
    """The XNNPACK one-linear programs the bench binary loads, cached by content under .cache/."""
    from importlib.metadata import version

    import inspect

    key = hashlib.sha256(repr((sorted(ms), sorted(kns), seed, version("torch"), version("executorch"),
                               version("torchao"), inspect.getsource(_lower_linear))).encode()).hexdigest()[:16]
    out = CACHE / f"programs-{key}"
    info_path = out / "programs.json"
    if info_path.is_file():
        return out, json.loads(info_path.read_text())
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    info = {}
    jobs = [("f32", 8, 8, [1])] + [(p, k, n, ms) for k, n in kns for p in ("f32", "qd8")]
    for prec, k, n, mlist in jobs:
        t0 = time.time()
        pte, outside = _lower_linear(k, n, mlist, qd8=prec == "qd8", seed=seed)
        name = f"xnn-{prec}-k{k}-n{n}.pte"
        (tmp / name).write_bytes(pte)
        info[name] = {"ops_outside_xnnpack": outside, "bytes": len(pte)}
        log.info("lowered %s in %.1f s (ops outside XNNPACK: %s)", name, time.time() - t0, outside or "none")
    (tmp / "programs.json").write_text(json.dumps(info, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out, info

# ----------------------------------------------------------------------------- running


def build_host() -> Path:
    env = dict(os.environ, PYTHON=os.environ.get("PYTHON", sys.executable))
    proc = subprocess.run(["bash", str(ROOT / "runtime" / "build.sh")], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"runtime/build.sh failed:\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _try_nice(delta: int):
    def pre():
        try:
            os.nice(delta)
        except OSError:
            pass
    return pre


def run_bench(binary: Path, pte_dir: Path, *, ms, kns, sparsities, blocks, rounds: int, min_ms: float,
              nice: int) -> tuple[dict, dict]:
    """Run the bench binary at ``nice`` (if permitted); returns its JSON and the run's conditions."""
    args = [str(binary), "--pte-dir", str(pte_dir), "--m", ",".join(map(str, ms)),
            "--kn", ",".join(f"{k}x{n}" for k, n in kns), "--sparsity", ",".join(map(str, sparsities)),
            "--blocks", ",".join(blocks), "--rounds", str(rounds), "--min-ms", str(min_ms)]
    load_before = os.getloadavg()
    t0 = time.time()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_try_nice(nice))
    got_nice = None
    try:
        got_nice = os.getpriority(os.PRIO_PROCESS, proc.pid)
    except OSError:
        pass
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{binary.name} failed ({proc.returncode}):\n{err[-3000:]}")
    cond = {"load_avg_before": [round(v, 2) for v in load_before], "load_avg_after": [round(v, 2) for v in os.getloadavg()],
            "nice_requested": nice, "nice": got_nice, "wall_s": round(time.time() - t0, 1),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    return json.loads(out), cond


# ----------------------------------------------------------------------------- analysis


def _q(xs: list[float]) -> dict:
    xs = sorted(xs)
    if len(xs) < 2:
        return {"median": xs[0], "p10": xs[0], "p90": xs[0]}
    dec = statistics.quantiles(xs, n=10, method="inclusive")
    return {"median": statistics.median(xs), "p10": dec[0], "p90": dec[-1]}


def analyse(raw: dict, layer: list[tuple[str, int, int]], *, clock: str = "cpu") -> dict:
    """Per-shape rows, layer-level speedups and the gate, from the bench binary's JSON.

    ``clock="cpu"`` uses the process CPU time of each sample (what the code costs,
    without the time other processes held the core on a shared host); ``"wall"`` the wall time.
    """
    sk = {"cpu": "cpu_samples_us", "wall": "samples_us"}[clock]
    cands = raw["candidates"]
    overhead = next(c for c in cands if c["kind"] == "overhead")
    dense: dict[tuple, dict] = {}
    sparse: dict[tuple, dict] = {}
    for c in cands:
        key = (c["m"], c["k"], c["n"])
        if c["kind"] in ("xnn_f32", "xnn_qd8"):
            dense.setdefault(key, {})[c["kind"]] = c
        elif c["kind"].startswith("sparse_"):
            sparse[(c["kind"].removeprefix("sparse_"), c["block"], c["sparsity"]) + key] = c
    rows = []
    for (prec, block, sp, m, k, n), c in sorted(sparse.items()):
        d = dense[(m, k, n)]
        # The faster dense precision by median, then its sample of each round (a per-round min of two
        # noisy samples would be biased low).
        faster = min(("xnn_f32", "xnn_qd8"), key=lambda kind: statistics.median(d[kind][sk]))
        best = d[faster][sk]
        ratios = [b / s for b, s in zip(best, c[sk])]
        rows.append({"precision": prec, "block": block, "sparsity": sp, "m": m, "k": k, "n": n,
                     "us": _q(c[sk]), "speedup_vs_best_dense": _q(ratios), "faster_dense": faster,
                     "kernel": c["kernel"], "isa": c["isa"], "blocks": c["blocks"], "tiles": c["tiles"],
                     "weight_bytes": c["weight_bytes"]})
    dense_rows = [{"m": m, "k": k, "n": n, "xnn_f32_us": _q(d["xnn_f32"][sk]),
                   "xnn_qd8_us": _q(d["xnn_qd8"][sk]),
                   "qd8_over_f32": _q([b / a for a, b in zip(d["xnn_f32"][sk], d["xnn_qd8"][sk])])}
                  for (m, k, n), d in sorted(dense.items())]
    # A MiniLM encoder layer's linears, summed per round.
    ms = sorted({m for (m, _, _) in dense})
    layer_rows = []
    for m in ms:
        if not all((m, k, n) in dense for _, k, n in layer):
            continue
        f32 = [sum(v) for v in zip(*(dense[(m, k, n)]["xnn_f32"][sk] for _, k, n in layer))]
        qd8 = [sum(v) for v in zip(*(dense[(m, k, n)]["xnn_qd8"][sk] for _, k, n in layer))]
        best = f32 if statistics.median(f32) <= statistics.median(qd8) else qd8
        for prec in ("f32", "qd8"):
            for block in BLOCKS:
                for sp in sorted({s for (_, _, s, *_rest) in sparse}):
                    keys = [(prec, block, sp, m, k, n) for _, k, n in layer]
                    if not all(key in sparse for key in keys):
                        continue
                    t = [sum(v) for v in zip(*(sparse[key][sk] for key in keys))]
                    layer_rows.append({"m": m, "precision": prec, "block": block, "sparsity": sp, "us": _q(t),
                                       "faster_dense": "xnn_f32" if best is f32 else "xnn_qd8",
                                       "xnn_f32_us": _q(f32), "xnn_qd8_us": _q(qd8),
                                       "speedup_vs_best_dense": _q([b / s for b, s in zip(best, t)])})
    gate = []
    for prec in ("f32", "qd8"):
        for block in BLOCKS:
            for sp in sorted({r["sparsity"] for r in layer_rows}):
                sel = [r for r in layer_rows if r["precision"] == prec and r["block"] == block and r["sparsity"] == sp]
                if not sel:
                    continue
                worst = min(r["speedup_vs_best_dense"]["median"] for r in sel)
                best_ = max(r["speedup_vs_best_dense"]["median"] for r in sel)
                in_range = 0.0 < sp <= GATE_MAX_SPARSITY + 1e-9
                gate.append({"precision": prec, "block": block, "sparsity": sp, "min_speedup": worst,
                             "max_speedup": best_, "in_gate_range": in_range,
                             "passes": in_range and worst >= GATE_SPEEDUP})
    return {"overhead_us": _q(overhead[sk]), "dense": dense_rows, "rows": rows, "layer": layer_rows,
            "gate": gate}


# ----------------------------------------------------------------------------- instruction counts

_X86_COMPUTE = re.compile(r"^(vfmadd\w+|vpmaddubsw|vpdpbusds?|vpmaddwd)$")
_ARM_COMPUTE = re.compile(r"^(fmla|sdot|smull2?|sadalp)$")
_TILE = re.compile(r"(f32|qd8)_tile<[^<>]*?::(\w+), (\d+), (\d+), (\d+), (\d+)>")
_LANES = {"Avx2F32": 8, "Avx512F32": 16, "NeonF32": 4, "Avx2Q8": 8, "Avx512VnniQ8": 16, "NeonQ8": 4, "NeonDotQ8": 4,
          "ScalarF32": 1, "ScalarQ8": 1}
_ISA = {"Avx2F32": "avx2", "Avx512F32": "avx512", "NeonF32": "neon", "Avx2Q8": "avx2", "Avx512VnniQ8": "avx512vnni",
        "NeonQ8": "neon", "NeonDotQ8": "neondot"}


def _functions(objdump_text: str):
    name, body = None, []
    for line in objdump_text.splitlines():
        head = re.match(r"^([0-9a-f]+) <(.+)>:$", line)
        if head:
            if name:
                yield name, body
            name, body = head.group(2), []
            continue
        ins = re.match(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
        if name and ins:
            body.append((int(ins.group(1), 16), ins.group(2), ins.group(3)))
    if name:
        yield name, body


def block_loop_counts(objdump: str, library: Path, *, arm: bool) -> list[dict]:
    """Instructions per non-zero block in each kernel's main block loop (the widest tile of each kernel).

    The main loop handles S blocks per iteration (S accumulator sets); it is the
    loop (a backward branch) whose multiply instructions match S blocks' worth.
    """
    text = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                          check=True).stdout
    compute = _ARM_COMPUTE if arm else _X86_COMPUTE
    best: dict[tuple, dict] = {}
    for name, body in _functions(text):
        m = _TILE.search(name)
        if not m or m.group(2).startswith("Scalar"):
            continue
        prec, traits = m.group(1), m.group(2)
        r, c, nv, s = (int(m.group(i)) for i in range(3, 7))
        lanes = _LANES[traits]
        # multiply instructions per block: fp32 R*C*NV FMAs; int8 R*G*NV dot4 (one instruction each, except
        # AVX2 maddubs+maddwd and NEON smull+smull2+sadalp, counted all).
        per_dot = {"Avx2Q8": 2, "NeonQ8": 3}.get(traits, 1)
        want = r * c * nv * (per_dot if prec == "qd8" else 1)
        loops = []
        for i, (addr, mnem, ops) in enumerate(body):
            tgt = re.search(r"(?:^|,\s*)([0-9a-f]+) <", ops)
            is_branch = (mnem.startswith("j") if not arm else (mnem.startswith("b.") or mnem in ("b", "cbnz", "cbz")))
            if not is_branch or not tgt:
                continue
            target = int(tgt.group(1), 16)
            if target >= addr:
                continue
            ins = [x for x in body if target <= x[0] <= addr]
            n_comp = sum(1 for x in ins if compute.match(x[1]))
            loops.append((len(ins), n_comp))
        main = [lp for lp in loops if lp[1] == want * s]
        if not main:
            continue
        n_ins, n_comp = min(main)
        key = (prec, traits, r, c)
        if key in best and best[key]["tile_tokens"] >= nv * lanes:
            continue
        tokens = nv * lanes
        macs = r * (c * 4 if prec == "qd8" else c) * tokens
        best[key] = {"precision": prec, "isa": _ISA[traits],
                     "block": ("4x1" if r == 4 else f"1x{4 * c}") if prec == "qd8" else f"{r}x{c}",
                     "tile": ("4x4" if r == 4 else f"1x{4 * c}") if prec == "qd8" else f"{r}x{c}",
                     "tile_tokens": tokens, "blocks_per_iteration": s, "instructions_per_block": n_ins / s,
                     "multiply_instructions_per_block": n_comp / s, "macs_per_block": macs,
                     "macs_per_instruction": macs * s / n_ins}
    return sorted(best.values(), key=lambda d: (d["isa"], d["precision"], d["block"]))


# Host classes not measured here: which sparse kernels they run, and the MACs per instruction of the
# faster ideal dense loop there (multiplies only: an upper bound for any dense GEMM, so the sparsities
# derived from it are lower bounds). vpdpbusd zmm = 64 MACs, sdot .4s = 16, fmla / smlal .4s = 4.
UNMEASURED_CLASSES = (
    ("x86-64 AVX-512 VNNI", {"f32": "avx512", "qd8": "avx512vnni"}, 64),
    ("aarch64 with dot product (Cortex-A55, A76 and later)", {"f32": "neon", "qd8": "neondot"}, 16),
    ("aarch64 NEON only (Cortex-A53)", {"f32": "neon", "qd8": "neon"}, 4),
)


def breakeven_sparsity(row: dict, dense_macs_per_instruction: float, speedup: float) -> float:
    """Sparsity from which the sparse loop issues `speedup`x fewer instructions than the dense loop."""
    return max(0.0, 1.0 - row["macs_per_instruction"] / (speedup * dense_macs_per_instruction))


def class_estimates(ic: dict, speedup: float = GATE_SPEEDUP) -> list[dict]:
    """Per unmeasured host class, precision and block: the lower-bound sparsity for `speedup` (instruction counts)."""
    rows = [d for arch in ("x86_64", "aarch64") for d in (ic.get(arch) or [])]
    out = []
    for name, kernels, dense in UNMEASURED_CLASSES:
        for prec, isa in kernels.items():
            for d in rows:
                if d["isa"] == isa and d["precision"] == prec:
                    # A merged 4x4 int8 tile of 4x1 blocks holds one block at high sparsity: count its useful MACs.
                    fill = 4 if d["tile"] != d["block"] else 1
                    useful = dict(d, macs_per_instruction=d["macs_per_instruction"] / fill)
                    out.append({"host_class": name, "precision": prec, "isa": isa, "block": d["block"],
                                "sparsity_lower_bound": breakeven_sparsity(useful, dense, speedup)})
    return out


def instruction_counts(host_build: Path) -> dict:
    out = {"x86_64": None, "aarch64": None, "notes": []}
    lib = host_build / "kernels" / "libedgenlp_kernels.a"
    if lib.is_file() and shutil.which("objdump"):
        out["x86_64"] = block_loop_counts("objdump", lib, arm=False)
    arm_lib = ROOT / "runtime" / "build" / "aarch64" / "kernels" / "libedgenlp_kernels.a"
    if arm_lib.is_file() and shutil.which("aarch64-linux-gnu-objdump"):
        out["aarch64"] = block_loop_counts("aarch64-linux-gnu-objdump", arm_lib, arm=True)
    else:
        out["notes"].append("no aarch64 build (bash runtime/build.sh --arch aarch64): ARM counts missing")
    return out


# ----------------------------------------------------------------------------- report


def _pct(s: float) -> str:
    return f"{round(s * 100)}%"


def _prec(p: str) -> str:
    return "fp32" if p == "f32" else "int8"


def render_markdown(results: dict) -> str:
    """The README section for issue 23's gate, from a sparse-kernels results dict (the JSON this script writes)."""
    h = results["host"]
    a = results["analysis"]
    cond = results["conditions"]
    lines = [f"**Block-sparse kernels vs XNNPACK dense (issue 23, stage 1)** — host: {h['cpu'].get('model', '?')}, "
             f"ISA flags `{h['isa']}`, {results['raw']['isa_f32']} fp32 / {results['raw']['isa_qd8']} int8 kernels "
             f"(int8 activations {'7' if results['raw']['act_qmax'] == 127 else '8'}-bit), 1 thread, "
             f"{results['raw']['rounds']} interleaved rounds, process CPU time per call, load average {cond['load_avg_before'][0]} → "
             f"{cond['load_avg_after'][0]}, nice {cond['nice']}. Measured {results['date']}.", ""]
    gate = a["gate"]
    passed = [g for g in gate if g["passes"]]
    if passed:
        lines.append("**Gate: passed** (≥ {:.1f}× the faster dense XNNPACK GEMM on a whole MiniLM layer at every "
                     "measured M, ≤ {} sparsity) for: ".format(GATE_SPEEDUP, _pct(GATE_MAX_SPARSITY))
                     + ", ".join(f"{_prec(g['precision'])} {g['block']} at {_pct(g['sparsity'])} "
                                 f"({g['min_speedup']:.2f}–{g['max_speedup']:.2f}×)" for g in passed) + ".")
    else:
        lines.append("**Gate: not passed on this host class** — no precision, block and sparsity ≤ {} reaches "
                     "{:.1f}× the faster dense XNNPACK GEMM on a whole MiniLM layer at every measured M."
                     .format(_pct(GATE_MAX_SPARSITY), GATE_SPEEDUP))
    wall = results.get("gate_wall_clock") or []
    if wall:
        cpu = {(g["precision"], g["block"], g["sparsity"]): g["passes"] for g in gate if g["in_gate_range"]}
        differ = [g for g in wall if g["in_gate_range"] and cpu.get((g["precision"], g["block"], g["sparsity"])) != g["passes"]]
        lines += ["", "The same gate on wall time (noisier on a shared host): "
                  + ("the same verdicts." if not differ else "differs for " + ", ".join(
                      f"{_prec(g['precision'])} {g['block']} at {_pct(g['sparsity'])} "
                      f"({'passes' if g['passes'] else 'fails'}, worst M {g['min_speedup']:.2f}x)" for g in differ) + ".")]
    ic = results.get("instructions") or {}
    est = class_estimates(ic)
    if est:
        lines += ["", f"Host classes not measured, from instruction counts only: the sparsity from which each "
                  f"kernel's inner loop issues {GATE_SPEEDUP}x fewer instructions than the faster ideal dense "
                  "loop there (a lower bound on what the gate needs; not a time):", ""]
        for name, _, _ in UNMEASURED_CLASSES:
            sel = [e for e in est if e["host_class"] == name]
            if sel:
                lines.append(f"- {name}: " + ", ".join(f"{_prec(e['precision'])} {e['block']} ≥ "
                                                       f"{_pct(e['sparsity_lower_bound'])}" for e in sel))
    lines += ["", "Host classes measured: " + results["host_class"] + ". Not measured: "
              + "; ".join(results["not_measured"]) + ".", ""]
    lines += ["Speedup of one MiniLM encoder layer's six linears (Q, K, V, attn-out, FFN in, FFN out) over the "
              "faster of XNNPACK fp32 / QD8 at the same M (median over rounds of the ratio to that round's sample of the faster dense precision; >1 is faster):", ""]
    ms = sorted({r["m"] for r in a["layer"]})
    sps = sorted({r["sparsity"] for r in a["layer"]})
    lines.append("| kernel | block | " + " | ".join(f"M={m}" for m in ms) + " |")
    lines.append("|---|---|" + "---|" * len(ms))
    for prec in ("f32", "qd8"):
        for block in BLOCKS:
            for sp in sps:
                cells = []
                for m in ms:
                    r = next((r for r in a["layer"] if r["precision"] == prec and r["block"] == block
                              and r["sparsity"] == sp and r["m"] == m), None)
                    cells.append(f"{r['speedup_vs_best_dense']['median']:.2f}" if r else "–")
                label = f"{_prec(prec)} {_pct(sp)}" + (" (control: no block removed)" if sp == CONTROL else "")
                lines.append(f"| {label} | {block} | " + " | ".join(cells) + " |")
    lines += ["", "Dense XNNPACK per layer (µs, median [p10–p90]):", "",
              "| M | fp32 | QD8 int8 | int8 / fp32 |", "|---|---|---|---|"]
    seen = set()
    for r in a["layer"]:
        if r["m"] in seen:
            continue
        seen.add(r["m"])
        f, q = r["xnn_f32_us"], r["xnn_qd8_us"]
        lines.append(f"| {r['m']} | {f['median']:.0f} [{f['p10']:.0f}–{f['p90']:.0f}] | {q['median']:.0f} "
                     f"[{q['p10']:.0f}–{q['p90']:.0f}] | {q['median'] / f['median']:.2f} |")
    lines += ["", f"An ExecuTorch call of an 8x8 linear (fixed cost inside every XNNPACK number): "
              f"{a['overhead_us']['median']:.1f} µs."]
    if ic.get("aarch64"):
        lines += ["", "ARM (aarch64 build, objdump of each kernel's inner block loop; **device times unknown**: "
                  "qemu gives no timings):", "",
                  "| ISA | precision | block (tile) | tokens per block | instructions per block | multiplies | "
                  "MACs / instruction |", "|---|---|---|---|---|---|---|"]
        for d in ic["aarch64"]:
            lines.append(f"| {d['isa']} | {'fp32' if d['precision'] == 'f32' else 'int8'} | {d['block']} ({d['tile']}) | "
                         f"{d['tile_tokens']} | {d['instructions_per_block']:.1f} | "
                         f"{d['multiply_instructions_per_block']:.0f} | {d['macs_per_instruction']:.1f} |")
    if results.get("analysis_notes"):
        lines += [""] + [f"- {note}" for note in results["analysis_notes"]]
    return "\n".join(lines) + "\n"


def render_full_markdown(results: dict) -> str:
    """The results file: the README section plus the per-shape tables."""
    a = results["analysis"]
    lines = ["# Block-sparse kernels vs XNNPACK dense GEMMs", "", render_markdown(results), "## Per shape", "",
             "Sparse kernel time (µs, median [p10–p90]) and speedup over the faster dense XNNPACK GEMM of the same shape.",
             "", "| precision | block | sparsity | M | K | N | µs | speedup | kernel | tiles | weight KiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in a["rows"]:
        u, s = r["us"], r["speedup_vs_best_dense"]
        lines.append(f"| {r['precision']} | {r['block']} | {_pct(r['sparsity'])} | {r['m']} | {r['k']} | {r['n']} | "
                     f"{u['median']:.0f} [{u['p10']:.0f}–{u['p90']:.0f}] | {s['median']:.2f} | {r['kernel']} | "
                     f"{r['tiles']} | {r['weight_bytes'] / 1024:.0f} |")
    lines += ["", "## Dense XNNPACK per shape", "", "| M | K | N | fp32 µs | QD8 µs | QD8 / fp32 |", "|---|---|---|---|---|---|"]
    for d in a["dense"]:
        f, q = d["xnn_f32_us"], d["xnn_qd8_us"]
        lines.append(f"| {d['m']} | {d['k']} | {d['n']} | {f['median']:.0f} [{f['p10']:.0f}–{f['p90']:.0f}] | "
                     f"{q['median']:.0f} [{q['p10']:.0f}–{q['p90']:.0f}] | {d['qd8_over_f32']['median']:.2f} |")
    ic = results.get("instructions") or {}
    if ic.get("x86_64"):
        lines += ["", "## x86 inner block loops (objdump)", "",
                  "| ISA | precision | block (tile) | tokens per block | instructions per block | multiplies | "
                  "MACs / instruction |", "|---|---|---|---|---|---|---|"]
        for d in ic["x86_64"]:
            lines.append(f"| {d['isa']} | {'fp32' if d['precision'] == 'f32' else 'int8'} | {d['block']} ({d['tile']}) | "
                         f"{d['tile_tokens']} | {d['instructions_per_block']:.1f} | "
                         f"{d['multiply_instructions_per_block']:.0f} | {d['macs_per_instruction']:.1f} |")
    lines += ["", "Programs: " + ", ".join(f"{k} (ops outside XNNPACK: {v['ops_outside_xnnpack'] or 'none'})"
                                         for k, v in results["programs"].items())]
    return "\n".join(lines) + "\n"


def derive_notes(analysis: dict, raw: dict) -> list[str]:
    """Sentences computed from the numbers: what the control says, break-even sparsities, block shapes."""
    layer = analysis["layer"]

    def med(prec, block, sp):
        xs = [r["speedup_vs_best_dense"]["median"] for r in layer
              if r["precision"] == prec and r["block"] == block and r["sparsity"] == sp]
        return statistics.median(xs) if xs else None

    notes = []
    for prec in ("f32", "qd8"):
        ctl = med(prec, "1x4", CONTROL)
        if ctl is not None:
            notes.append(f"Control ({_prec(prec)} 1x4, no block removed): {ctl:.2f}x the faster dense XNNPACK GEMM "
                         "(median over M). " + (
                             "The kernel is already faster than XNNPACK on dense weights here, so part of the "
                             "sparse speedup is the kernel, not the sparsity"
                             + (f" (7-bit u8 x s8 vpmaddubsw activations, act_qmax {raw['act_qmax']}, against "
                                "XNNPACK's exact 8-bit QD8 path; the accuracy cost of 7-bit activations is for "
                                "stage 2 to measure)" if prec == "qd8" and raw.get("act_qmax") == 127 else "")
                             + "." if ctl >= 1.0 else
                             "On dense weights the kernel is slower than XNNPACK's tuned GEMM; what it gains comes "
                             "from skipping blocks."))
        sps = sorted({r["sparsity"] for r in layer if r["sparsity"] > 0})
        for block in BLOCKS:
            even = next((sp for sp in sps if (med(prec, block, sp) or 0) >= 1.0), None)
            gate = next((sp for sp in sps if (med(prec, block, sp) or 0) >= GATE_SPEEDUP), None)
            notes.append(f"{_prec(prec)} {block}: faster than dense from {_pct(even) if even is not None else 'never'}"
                         f" sparsity, ≥ {GATE_SPEEDUP}x from {_pct(gate) if gate is not None else 'never'} "
                         "(median over M).")
    return notes


def host_class(isa: str) -> str:
    flags = set(isa.split())
    if {"avx512f", "avx512_vnni"} <= flags or {"avx512f", "avx512vnni"} <= flags:
        return "x86-64 with AVX-512 VNNI"
    if "avx512f" in flags:
        return "x86-64 with AVX-512 (no VNNI)"
    if "avx2" in flags:
        return "x86-64 with AVX2 only (no AVX-512, no VNNI)"
    if "asimddp" in flags:
        return "aarch64 with dot product"
    if "asimd" in flags:
        return "aarch64 NEON (no dot product)"
    return "unknown"


NOT_MEASURED = {
    "x86-64 with AVX-512 VNNI": "x86-64 with AVX-512 VNNI (the avx512 / avx512vnni kernels are built, their loops counted and "
                                "their logic tested with the intrinsics emulated by SIMDe, but not timed: qemu-x86_64 7.2 "
                                "has no AVX-512 and Intel SDE is not installable)",
    "aarch64": "ARM phones and boards (NEON kernels tested under qemu-aarch64 cortex-a53 / a76 / max; instruction "
               "counts only, device times unknown)",
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--kn", nargs="+", default=["384x384", "384x1536", "1536x384", "1536x1536"],
                    help="K x N shapes (in x out features)")
    ap.add_argument("--sparsity", type=float, nargs="+", default=[CONTROL, *SPARSITIES],
                    help="fractions of blocks removed (0 is the control: dense weights in the sparse kernel)")
    ap.add_argument("--blocks", nargs="+", default=list(BLOCKS))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--min-ms", type=float, default=2.0, help="time per sample (back-to-back calls)")
    ap.add_argument("--nice", type=int, default=-5, help="niceness for the timed process, if permitted")
    ap.add_argument("--out", type=Path, default=RESULTS / "sparse-kernels")
    ap.add_argument("--note", default="")
    ap.add_argument("--raw", type=Path, help="re-analyse this saved bench output instead of running (with its conditions)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from edgenlp.utils import atomic_write_json, atomic_write_text, cpu_info, environment, isa_flags

    kns = [tuple(int(v) for v in s.split("x")) for s in args.kn]
    dims, layer = layer_linears()
    for _, k, n in layer:
        if (k, n) not in kns:
            kns.append((k, n))
    build = build_host()
    pte_dir, programs = write_programs(args.m, kns)
    if args.raw:
        saved = json.loads(args.raw.read_text())
        raw, cond = saved["raw"], saved["conditions"]
    else:
        raw, cond = run_bench(build / "kernels" / "sparse_linear_bench", pte_dir, ms=args.m, kns=kns,
                              sparsities=args.sparsity, blocks=args.blocks, rounds=args.rounds, min_ms=args.min_ms,
                              nice=args.nice)
        atomic_write_json(CACHE / "last-raw.json", {"raw": raw, "conditions": cond})
    analysis = analyse(raw, layer, clock="cpu")
    analysis_wall = analyse(raw, layer, clock="wall")
    isa = isa_flags()
    hc = host_class(isa)
    results = {
        "date": cond.get("date") or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "note": args.note,
        "host": {"cpu": cpu_info(), "isa": isa}, "host_class": hc,
        "not_measured": [v for k, v in NOT_MEASURED.items() if not hc.startswith(k)],
        "environment": environment(), "conditions": cond, "model_dims": dims,
        "layer": [{"name": n, "k": k, "n": nn} for n, k, nn in layer],
        "gate_rule": {"speedup": GATE_SPEEDUP, "max_sparsity": GATE_MAX_SPARSITY,
                      "judged_on": "one MiniLM encoder layer's linears, every measured M, median over rounds of the "
                                   "ratio to the same round's sample of the faster (by median) of XNNPACK fp32 / QD8"},
        "programs": programs, "raw": {k: v for k, v in raw.items() if k != "candidates"},
        "clock": "cpu", "analysis": analysis,
        "gate_wall_clock": analysis_wall["gate"], "overhead_wall_us": analysis_wall["overhead_us"],
        "instructions": instruction_counts(build), "analysis_notes": derive_notes(analysis, raw),
        "samples_file": args.out.name + ".samples.json",
    }
    atomic_write_json(args.out.with_suffix(".json"), results)
    # Every per-round sample, compact (re-analyse with --raw <out>.samples.json).
    compact = {"raw": {**raw, "candidates": [
        {**c, "samples_us": [round(v, 1) for v in c["samples_us"]],
         "cpu_samples_us": [round(v, 1) for v in c["cpu_samples_us"]]} for c in raw["candidates"]]}, "conditions": cond}
    atomic_write_text(args.out.parent / (args.out.name + ".samples.json"), json.dumps(compact, separators=(",", ":")) + "\n")
    atomic_write_text(args.out.with_suffix(".md"), render_full_markdown(results))
    log.info("%s", render_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
