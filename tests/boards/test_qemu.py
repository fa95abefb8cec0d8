"""qemu-aarch64 as three boards: profile and eval of a tiny bundle end to end, cleanup, one-line errors."""

import dataclasses
import json
import os
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgenlp.boards.base import open_board
from edgenlp.boards.errors import NoSpace, RunnerKilled, WrongArchitecture
from edgenlp.boards.evaluate import evaluate_on_board
from edgenlp.boards.measure import BoardMeasurer, board_runtime
from edgenlp.cli import main
from edgenlp.profile.api import MEASURERS, ProfileConfig, profile
from profile_testing import check_attribution, check_document, recorded_measurements

pytestmark = pytest.mark.cross

# The board path (deploy, profile, eval) is the same on every CPU model: CI runs one, -m slow the others
# (runtime/tests/test_cross.py covers the kernels on each).
CPUS = ["cortex-a53", pytest.param("cortex-a76", marks=pytest.mark.slow), pytest.param("max", marks=pytest.mark.slow)]


def check_profile(doc: dict, rt: str, measured: list) -> None:
    """Every component present with a latency, and the board's ETDump attributed completely (by event count)."""
    check_document(doc, rt)
    assert measured, "the board measurer was not called"
    for target, m in measured:
        check_attribution(m, target.plan, runs=doc["runs"])


@pytest.mark.parametrize("cpu", CPUS)
def test_profile_and_eval_on_qemu(cpu, aarch64_runner, host_runner, board_bundle, tiny_task_dir, monkeypatch):
    with open_board(f"qemu:{cpu}") as board, recorded_measurements(monkeypatch, BoardMeasurer) as measured:
        with board_runtime(board) as rt:
            (doc,) = profile(board_bundle, ProfileConfig(seq_lens=(16,), runtimes=(rt,), threads=(1,), runs=4, warmup=1))
        assert rt not in MEASURERS  # unregistered after the block
        report = evaluate_on_board(board, board_bundle, task=tiny_task_dir, host_runtime="native")
        workdir = board.workdir
    assert not Path(workdir).exists()
    check_profile(doc, rt, measured)
    dev = doc["device"]
    assert dev["runtime"] == rt == f"native@qemu:{cpu}" and dev["arch"] == "aarch64" and dev["transport"] == "qemu"
    assert cpu in dev["cpu_model"] and dev["emulated"].startswith("qemu-aarch64")
    assert dev["software"]["runner_arch"] == "aarch64" and "libexecutorch.so" in dev["software"]["files"]
    host = report["host"]
    assert host["same_prediction"] == host["n"] == report["n"] == 3
    assert host["max_abs_prob_diff"] < 1e-4 and host["accuracy"] == report["accuracy"]
    assert report["latency_ms"]["median"] > 0 and report["device"]["arch"] == "aarch64"


def test_cli_profile_and_eval_on_qemu(aarch64_runner, host_runner, board_bundle, tiny_task_dir, tmp_path, monkeypatch):
    out = tmp_path / "p.json"
    with recorded_measurements(monkeypatch, BoardMeasurer) as measured:
        r = CliRunner().invoke(main, ["profile", str(board_bundle), "--on", "qemu:cortex-a53", "--seq-len", "16", "--runs", "3",
                                      "--warmup", "1", "--runtime", "native", "--cores", "big", "--json", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["runtimes"] == ["native@qemu:cortex-a53", "native"] and doc["device"]["cores_requested"] == "big"
    check_profile(doc, "native@qemu:cortex-a53", measured)
    r = CliRunner().invoke(main, ["eval", str(board_bundle), "--task", str(tiny_task_dir), "--on", "qemu:cortex-a53", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{"):])
    assert report["host"]["runtime"] == "native" and report["host"]["same_prediction"] == 3


def test_workdir_removed_after_error_ctrl_c_and_sigterm(aarch64_runner):
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(exc)):
            with open_board("qemu:max") as board:
                workdir = Path(board.workdir)
                assert workdir.is_dir()
                raise exc
        assert not workdir.exists()
    with pytest.raises(KeyboardInterrupt):
        with open_board("qemu:max") as board:
            workdir = Path(board.workdir)
            os.kill(os.getpid(), signal.SIGTERM)  # unwinds like Ctrl-C while a board is open
    assert not workdir.exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_runner_killed_by_sigkill_is_reported_as_oom(aarch64_runner, monkeypatch):
    from edgenlp.boards.qemu import QemuBoard

    monkeypatch.setattr(QemuBoard, "_runner_prefix", lambda self, rt: ["sh", "-c", "kill -9 $$", "edgenlp-run"])
    with open_board("qemu:cortex-a53") as board:
        with pytest.raises(RunnerKilled, match=r"^qemu:cortex-a53: run: .*out-of-memory killer; \d+ MB were available"):
            board.run_runner(["--help"])


def test_no_space_and_wrong_architecture_name_device_and_step(aarch64_runner, board_bundle):
    with open_board("qemu:cortex-a76") as board:
        board._info = dataclasses.replace(board.probe(), tmp_free_mb=1)
        with pytest.raises(NoSpace, match=r"^qemu:cortex-a76: push runner: .* MB to push but only 1 MB free"):
            board.deploy()
        board._info = dataclasses.replace(board.probe(), arch="riscv64")
        with pytest.raises(WrongArchitecture, match=r"^qemu:cortex-a76: deploy: the device reports 'riscv64'"):
            board.deploy()


def test_cli_errors_are_one_line(aarch64_runner, board_bundle):
    for uri, expected in (("qemu:cortex-z9", "error: qemu:cortex-z9: connect: qemu-aarch64 has no CPU model 'cortex-z9'"),
                          ("telnet://x", "error: --on 'telnet://x': use ssh://user@host[:port], adb[:serial] or qemu:CPU")):
        r = CliRunner().invoke(main, ["profile", str(board_bundle), "--on", uri])
        assert r.exit_code == 2 and r.output.startswith(expected), r.output
        assert len(r.output.strip().splitlines()) == 1
