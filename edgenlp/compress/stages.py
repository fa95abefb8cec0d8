"""Resumable stages: each writes its output folder atomically with a stage record.

``edgenlp compress`` chains fine-tune -> prune -> quantize -> export -> verify.
A :class:`StageRunner` runs each stage into a temporary folder beside
``DIR/<stage>/`` and renames it into place only when the stage finished, with
``stage.json`` inside::

    {"stage": "prune", "fingerprint": "<sha256>", "run_id": "<uuid>", "inputs": {...},
     "result": {...}, "seconds": 12.3, "edgenlp_version": "..."}

The fingerprint hashes the stage's own inputs (its config, as JSON) and the
``run_id`` of each stage it reads from. Re-running skips a stage whose record
exists with the same fingerprint; a stage whose inputs changed, or whose
upstream stage ran again (training is not bit-reproducible across machines, so
a redone stage is a new input), runs again and replaces its folder. An interrupted
stage leaves no folder behind (only its temporary one, removed on the way out
or at the next start).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from edgenlp import __version__
from edgenlp.errors import EdgeNLPError
from edgenlp.utils import atomic_dir

log = logging.getLogger(__name__)

RECORD = "stage.json"


@dataclass(frozen=True)
class StageRecord:
    """A finished stage: where its output lives and what it measured."""

    stage: str
    path: Path
    fingerprint: str
    inputs: dict[str, Any]
    result: dict[str, Any]
    seconds: float
    run_id: str
    skipped: bool = False  # True when this run reused a finished stage

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "fingerprint": self.fingerprint, "run_id": self.run_id, "inputs": self.inputs,
                "result": self.result, "seconds": round(self.seconds, 2), "edgenlp_version": __version__}


def fingerprint(inputs: dict[str, Any], upstream: tuple[StageRecord, ...] = ()) -> str:
    """sha256 over the canonical JSON of ``inputs`` and the run ids of the upstream stages."""
    blob = json.dumps({"inputs": inputs, "upstream": {r.stage: r.run_id for r in upstream}}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class StageRunner:
    """Runs named stages under ``workdir``, skipping the finished ones whose inputs did not change."""

    workdir: Path
    on_event: Callable[[str, str], None] | None = None  # (stage, "skip"|"start"|"done") for progress output
    records: dict[str, StageRecord] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        for stale in self.workdir.glob(".*.tmp-*"):  # a previous run was killed mid-stage
            shutil.rmtree(stale, ignore_errors=True)

    def finished(self, stage: str) -> StageRecord | None:
        """The record of ``stage`` on disk, if it finished (whatever its inputs)."""
        path = self.workdir / stage
        try:
            d = json.loads((path / RECORD).read_text())
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
            return None
        return StageRecord(stage, path, d.get("fingerprint", ""), d.get("inputs", {}), d.get("result", {}),
                           float(d.get("seconds", 0)), str(d.get("run_id", "")))

    def up_to_date(self, stage: str, inputs: dict[str, Any], upstream: tuple[StageRecord, ...] = ()) -> bool:
        """Whether :meth:`run` would skip ``stage`` (a finished record with the same fingerprint)."""
        done = self.finished(stage)
        return done is not None and done.fingerprint == fingerprint(inputs, upstream)

    def run(
        self,
        stage: str,
        fn: Callable[[Path], dict[str, Any]],
        *,
        inputs: dict[str, Any],
        upstream: tuple[StageRecord, ...] = (),
    ) -> StageRecord:
        """Run ``fn(tmp_dir) -> result`` for ``stage`` unless a finished record has the same fingerprint.

        ``fn`` writes its artifacts into ``tmp_dir``; the folder becomes
        ``workdir/stage`` only when ``fn`` returns. ``result`` must be JSON.
        """
        fp = fingerprint(inputs, upstream)
        done = self.finished(stage)
        if done is not None and done.fingerprint == fp:
            rec = StageRecord(stage, done.path, fp, done.inputs, done.result, done.seconds, done.run_id, skipped=True)
            log.info("stage %s: up to date, skipped", stage)
            self._event(stage, "skip")
        else:
            if done is not None:
                log.info("stage %s: inputs changed, running again", stage)
            self._event(stage, "start")
            t0 = time.perf_counter()
            with atomic_dir(self.workdir / stage) as tmp:
                result = fn(tmp)
                if not isinstance(result, dict):
                    raise TypeError(f"stage {stage} returned {type(result).__name__}, expected a dict")
                rec = StageRecord(stage, self.workdir / stage, fp, inputs, result, time.perf_counter() - t0, uuid.uuid4().hex)
                (tmp / RECORD).write_text(json.dumps(rec.to_dict(), indent=2, default=str) + "\n")
            self._event(stage, "done")
        self.records[stage] = rec
        return rec

    def require(self, stage: str) -> StageRecord:
        try:
            return self.records[stage]
        except KeyError:
            raise EdgeNLPError(f"stage {stage} has not run in this pipeline") from None

    def _event(self, stage: str, what: str) -> None:
        if self.on_event is not None:
            self.on_event(stage, what)
