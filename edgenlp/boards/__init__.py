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

Nothing is imported at package import time; import the submodules.
"""
