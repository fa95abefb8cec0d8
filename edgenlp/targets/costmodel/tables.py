"""Cost tables on disk and where they are found.

A :class:`CostTable` is the observations measured on one machine (``schema``
``edgenlp.costtable/1`` JSON: ``device``, ``key``, ``notes``, the fits and the
observations they come from). Which table prices a target:

* a table measured on the device itself: ``targets/NAME.measured.json`` beside
  its file, else ``<cache>/costmodel/NAME.measured.json``
  (:func:`device_table_file`);
* for any other device, the reference table shipped as
  ``targets/host.costs.json`` (measured on the machine ``targets/host.toml``
  describes), transferred: never this machine's calibration, so a device's
  plan is the same on every host;
* for the ``host`` target, this machine's calibration,
  ``<cache>/costmodel/host-<digest>.json`` keyed by CPU and runtime versions
  (:func:`host_table_path`); ``compress`` measures a minimal one first when
  there is none (:func:`edgenlp.targets.calibrate.ensure_host_table`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from edgenlp.errors import EdgeNLPError
from edgenlp.targets.costmodel.fitting import Observation, cross_validated_error, embedding_ratios, fit_coefficients
from edgenlp.targets.target import Target, measured_table_path

log = logging.getLogger(__name__)

TABLE_SCHEMA = "edgenlp.costtable/1"


def cpu_key() -> dict:
    from edgenlp.utils import cpu_info, library_versions

    info = cpu_info()
    v = library_versions()
    return {"cpu": info.get("model", ""), "machine": info.get("machine", ""), "isa": info.get("isa", []), "cores": info.get("cpu_count"),
            "versions": {k: v.get(k) for k in ("torch", "executorch", "onnxruntime")}}  # fmt: skip


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """``$EDGENLP_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgenlp``, else ``~/.cache/edgenlp``."""
    env = os.environ.get("EDGENLP_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "edgenlp"


def host_table_path(key: dict | None = None) -> Path:
    """The host calibration for this CPU and these runtime versions: ``<cache>/costmodel/host-<digest>.json``."""
    return cache_dir() / "costmodel" / f"host-{key_digest(key or cpu_key())}.json"


def device_table_cache_path(target_name: str) -> Path:
    return cache_dir() / "costmodel" / f"{target_name}.measured.json"


@dataclass
class CostTable:
    """Observations measured on one machine (the host or a device), with their fits."""

    observations: list[Observation]
    key: dict = field(default_factory=dict)  # CPU + runtime versions (host) or the device probe
    device: str = "host"
    notes: dict = field(default_factory=dict)
    _fits: dict | None = field(default=None, repr=False)
    _cv: dict | None = field(default=None, repr=False)

    @property
    def fits(self) -> dict:
        if self._fits is None:
            self._fits = fit_coefficients(self.observations)
        return self._fits

    @property
    def cv_error(self) -> dict[tuple[str, str, int], float]:
        """Leave-one-shape-out error of each fit (:func:`~edgenlp.targets.costmodel.fitting.cross_validated_error`), computed once."""
        if self._cv is None:
            self._cv = cross_validated_error(self.observations)
        return self._cv

    @property
    def embedding_ratios(self) -> dict[tuple[str, str], float]:
        """``{(runtime, scheme): embedding latency with the word table at scheme / with it fp32}`` (measured pairs only)."""
        return embedding_ratios(self.observations)

    def keys(self) -> list[tuple[str, str, int]]:
        return sorted(self.fits)

    def to_dict(self) -> dict:
        return {
            "schema": TABLE_SCHEMA, "device": self.device, "key": self.key, "notes": self.notes,
            "fits": [{"runtime": r, "precision": p, "threads": t, "coefficients": c} for (r, p, t), c in sorted(self.fits.items())],
            "observations": [o.to_dict() for o in self.observations],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "cost table") -> "CostTable":
        if not isinstance(d, dict) or d.get("schema") != TABLE_SCHEMA:
            raise EdgeNLPError(f"{source}: not an edgenlp cost table (schema {TABLE_SCHEMA!r} expected)")
        try:
            obs = [Observation.from_dict(o) for o in d["observations"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise EdgeNLPError(f"{source}: malformed observation ({exc})") from None
        return cls(obs, d.get("key", {}), d.get("device", "host"), d.get("notes", {}))

    @classmethod
    def load(cls, path: str | Path) -> "CostTable":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise EdgeNLPError(f"{path}: cannot read cost table ({exc})") from None
        return cls.from_dict(data, source=str(path))

    def save(self, path: str | Path) -> Path:
        from edgenlp.utils import atomic_write_json

        return atomic_write_json(path, self.to_dict())

    def merged(self, other: "CostTable") -> "CostTable":
        """This table with ``other``'s observations added (same machine), replacing rows of the same key."""
        keys = {(o.runtime, o.precision, o.threads) for o in other.observations}
        kept = [o for o in self.observations if (o.runtime, o.precision, o.threads) not in keys]
        return CostTable(kept + list(other.observations), other.key or self.key, self.device, {**self.notes, **other.notes})


def reference_table_path() -> Path:
    """The calibration shipped with edgenlp (measured on the machine ``targets/host.toml`` describes)."""
    from edgenlp.targets.target import targets_dir

    return targets_dir() / "host.costs.json"


def cost_table_sources(target: Target) -> list[Path]:
    """The table file :meth:`~edgenlp.targets.costmodel.CostModel.for_target` reads for ``target`` as things stand, for stage fingerprints.

    A device: its measured table (beside its file or in the cache), else the
    shipped reference table. The host: this machine's calibration, else the
    reference table while there is none. Recalibrating changes this list's
    content, so a plan made from the old table is not reused.
    """
    if target.name != "host":
        p = device_table_file(target)
        return [p] if p is not None else [reference_table_path()]
    p = host_table_file()
    return [p] if p is not None else []


def device_table_file(target: Target) -> Path | None:
    """The table measured on ``target`` (beside its file, else in the cache); None for the host or when unmeasured."""
    if target.name == "host":
        return None
    return next((p for p in (measured_table_path(target), device_table_cache_path(target.name)) if p.is_file()), None)


def host_table_file() -> Path | None:
    """This machine's calibration, else the shipped reference table; None when neither exists."""
    return next((p for p in (host_table_path(), reference_table_path()) if p.is_file()), None)


def load_reference_table() -> CostTable:
    """The shipped reference table (``targets/host.costs.json``), marked ``shipped_reference`` in its notes."""
    table = CostTable.load(reference_table_path())
    table.notes = {**table.notes, "shipped_reference": True}
    return table


def load_host_table(path: str | Path | None = None, *, fallback: bool = False) -> CostTable:
    """The host calibration for this CPU and runtime versions (see :func:`host_table_path`).

    With ``fallback=True`` and no calibration of this machine, the shipped
    reference table is used (its predictions are labelled estimated: another
    machine measured them).
    """
    path = Path(path) if path else host_table_path()
    if path.is_file():
        return CostTable.load(path)
    ref = reference_table_path()
    if fallback and ref.is_file():
        log.warning("no cost calibration for this host at %s; using the shipped reference table (run `edgenlp targets calibrate host`)", path)
        return load_reference_table()
    raise EdgeNLPError(f"no host cost calibration at {path}; run `edgenlp targets calibrate host` (10-20 minutes on 2 cores)")
