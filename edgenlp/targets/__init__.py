"""Device targets, the cost model and the compression planner.

Modules:
  target      ``targets/*.toml`` device files: :class:`Target`, :func:`load_target`, :func:`list_targets`, :class:`Budgets`
  costmodel   :class:`CostModel` (``predict(shape, *, bits, embeddings, seq_len, threads) -> Prediction``), cost tables
  calibrate   the host (or board) calibration grid, profiled through the real runtimes
  planner     :class:`Candidate`, :func:`plan`, :class:`AccuracyModel`, :class:`BudgetError`
  cli         ``edgenlp targets`` (list, show, calibrate)

Nothing heavy is imported at package import time; import the submodules.
"""
