"""Profile and evaluate on target boards: ``--on ssh://user@host[:port] | adb[:serial] | qemu:CPU``.

Modules:
  base      Board (probe, push, run, pull, cleanup as a context manager), open_board(uri)
  ssh       the system OpenSSH client (ssh, scp; your ssh config and agent; BatchMode)
  adb       the system adb (push to /data/local/tmp, shell, pull)
  qemu      qemu-aarch64 -cpu CPU on this machine, the stand-in the tests use
  probe     the device probe script and its parser (DeviceInfo, clusters)
  deploy    which runner, libraries and bundle files a board needs
  measure   BoardMeasurer (a profiler Measurer) and measure_components()
  evaluate  dev-set accuracy and per-sentence latency on the board, compared with the host
  errors    one-line errors naming the device and the step

The main names are importable from the package (loaded on first use, nothing
runs at import)::

    from edgenlp.boards import open_board, measure_components
"""

from __future__ import annotations

from edgenlp.utils import lazy_exports

_EXPORTS = {
    "Board": "base", "open_board": "base", "DeviceInfo": "probe", "BoardError": "errors",
    "BoardMeasurer": "measure", "board_runtime": "measure", "measure_components": "measure",
    "calibration_shapes": "measure", "ComponentTable": "measure", "ComponentRow": "measure",
    "evaluate_on_board": "evaluate",
}  # fmt: skip

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
