"""Native measurer: the C++ runtime (``libedgenlp``) with its ExecuTorch ETDump.

The same program a phone app runs: the native WordPiece tokenizer, the
ExecuTorch C++ runtime and its XNNPACK delegate, driven through the C API
(:mod:`edgenlp.run.native`). Per-operator XNNPACK events come from the
library's ETDump (``edgenlp_enable_etdump`` / ``edgenlp_write_etdump``) and
are attributed exactly as the ExecuTorch measurer does (anchoring on the
``Fully Connected`` events). End-to-end time is a plain ``classify`` call on a
second handle: text in, logits out, tokenization included.

Only bundles can be profiled natively (the runtime opens bundle directories):
``edgenlp export`` first. Each measurement runs in a fresh subprocess so the
process-wide thread pool is sized before a program is loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from edgenlp.errors import EdgeNLPError
from edgenlp.profile.attribution import TimedEvent, attribute
from edgenlp.profile.executorch import ExecuTorchMeasurer, classify
from edgenlp.profile.measure import Measurement, MeasureSpec, ProfileTarget
from edgenlp.profile.timing import interleave


def text_of_length(seq_len: int) -> str:
    """A text that tokenizes to exactly ``seq_len`` tokens ([CLS] + words + [SEP]) with an uncased BERT vocab."""
    return " ".join(["a"] * max(seq_len - 2, 0))


class NativeMeasurer(ExecuTorchMeasurer):
    runtime = "native"
    method = (
        "libedgenlp ETDump XNNPACK per-operator events (Inspector), attributed by anchoring on 'Fully Connected' "
        "events in execution order; end-to-end = plain edgenlp_logits_batch calls (native tokenizer included)"
    )

    def measure(self, target: ProfileTarget, spec: MeasureSpec) -> Measurement:
        if target.info.get("kind") != "bundle":
            raise EdgeNLPError("native: the native runtime profiles bundles; run `edgenlp export` and profile the bundle directory")
        _, method_name = self.program_for(target, spec)
        with tempfile.TemporaryDirectory(prefix="edgenlp-native-") as tmp:
            out = Path(tmp) / "result.json"
            args = {"bundle": target.info["source"], "threads": spec.threads, "runs": spec.runs, "warmup": spec.warmup,
                    "seq_len": spec.seq_len, "workdir": tmp, "out": str(out)}
            proc = subprocess.run([sys.executable, "-m", "edgenlp.profile.native", json.dumps(args)],
                                  capture_output=True, text=True, timeout=self.timeout_s)
            if proc.returncode != 0 or not out.exists():
                tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
                raise EdgeNLPError(f"native: profiling {target.info['source']} failed (exit {proc.returncode}): {tail}")
            result = json.loads(out.read_text())
        if result["method_tokens"] > spec.seq_len:
            raise EdgeNLPError(f"native: a {spec.seq_len}-token text did not fit method {method_name}")
        events = [TimedEvent(r["name"], kind, tuple(r["raw_ms"][-spec.runs :]))
                  for r in result["events"] if (kind := classify(r["name"])) is not None]
        attributed = attribute(events, target.plan, runtime=self.runtime)
        totals = result["method_execute_ms"][-spec.runs :]
        return Measurement(self.runtime, self.method, spec, result["end_to_end_ms"], totals, attributed)


def _worker(args: dict) -> dict:
    """Subprocess body: size threads, time plain runs on one handle, profiled runs on another."""
    from edgenlp.profile._et_worker import read_etdump
    from edgenlp.run.native import NativeHandle

    text = text_of_length(int(args["seq_len"]))
    plain = NativeHandle(args["bundle"])
    plain.set_threads(int(args["threads"]))  # process-wide pool: before the first program load
    traced = NativeHandle(args["bundle"])
    traced.enable_etdump()
    n_tokens = len(plain.tokenize([text])[0])
    # plain and traced runs alternate so both see the same machine load
    t = interleave({"plain": lambda: plain.logits([text]), "traced": lambda: traced.logits([text])},
                   rounds=int(args["runs"]), warmup=int(args["warmup"]), alternate=False)
    e2e = t.values("plain")
    etdump = Path(args["workdir"]) / "native.etdp"
    traced.write_etdump(etdump)
    events, method_ms = read_etdump(etdump)
    return {"end_to_end_ms": e2e, "method_execute_ms": method_ms, "events": events, "method_tokens": n_tokens}


if __name__ == "__main__":
    _args = json.loads(sys.argv[1])
    Path(_args["out"]).write_text(json.dumps(_worker(_args)))
