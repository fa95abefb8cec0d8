"""Device targets, the cost model and the compression planner.

Modules:
  target      ``targets/*.toml`` device files: :class:`Target`, :func:`load_target`, :func:`list_targets`, :class:`Budgets`
  costmodel   :class:`CostModel` (``predict(shape, *, bits, embeddings, seq_len, threads) -> Prediction``), cost tables
  calibrate   the host (or board) calibration grid, profiled through the real runtimes
  planner     :class:`Candidate`, :func:`plan`, :class:`AccuracyModel`, :class:`BudgetError`
  cli         ``edgenlp targets`` (list, show, calibrate)

Only the light target module is imported here (no torch); the cost model and
planner load on first use.
"""

from __future__ import annotations

from edgenlp.targets.target import Budgets, Cluster, Target, TargetError, list_targets, load_target

__all__ = ["Budgets", "Cluster", "Target", "TargetError", "cost_model_for", "list_targets", "load_target"]


def cost_model_for(target: Target | str, *, runtime: str | None = None):
    """:meth:`CostModel.for_target` for a target or target name (measured table, host calibration or the shipped reference)."""
    from edgenlp.targets.costmodel import CostModel

    return CostModel.for_target(load_target(target) if isinstance(target, str) else target, runtime=runtime)
