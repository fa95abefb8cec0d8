"""The adb transport through a fake ``adb`` (no phone here): command lines, error handling, a real run.

The fake serves a "device" whose /data/local/tmp is a folder on this machine
and whose shell is this machine's, so the x86-64 runner does the work; it
reports exit status 0 for every shell command like adb without the shell
protocol, so the exit-status marker is what the transport relies on.
"""

import pytest
from click.testing import CliRunner

from edgenlp.boards.adb import AdbBoard
from edgenlp.boards.base import open_board
from edgenlp.boards.errors import BoardAuthError, DeviceOffline, NoSpace, RunnerFailed, ToolMissing
from edgenlp.cli import main
from edgenlp.errors import EdgeNLPError


def test_adb_command_lines_and_uri():
    assert AdbBoard.from_uri("adb").adb_argv("shell", "uname -m") == ["adb", "shell", "uname -m"]
    b = AdbBoard.from_uri("adb:R58M123ABC")
    assert b.uri == "adb:R58M123ABC" and b.adb_argv("pull", "/a", "b") == ["adb", "-s", "R58M123ABC", "pull", "/a", "b"]
    assert AdbBoard.from_uri("adb:192.168.1.20:5555").serial == "192.168.1.20:5555"  # adb over Wi-Fi
    with pytest.raises(EdgeNLPError, match="not a device serial"):
        AdbBoard.from_uri("adb:bad serial;rm")


def test_no_adb_on_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissing, match=r"^adb: connect: `adb` is not on PATH"):
        with open_board("adb"):
            pass


@pytest.mark.parametrize("mode, exc, message", [
    ("none", DeviceOffline, r"^adb:SER1: connect: no such device connected"),
    ("offline", DeviceOffline, r"^adb:SER1: connect: the device is offline"),
    ("unauthorized", BoardAuthError, r"^adb:SER1: connect: the device has not authorized this computer"),
])  # fmt: skip
def test_device_errors_name_device_and_step(fake_adb, monkeypatch, mode, exc, message):
    monkeypatch.setenv("FAKE_ADB_MODE", mode)
    with pytest.raises(exc, match=message):
        with open_board("adb:SER1"):
            pass


@pytest.mark.native
def test_push_pull_run_and_cleanup_through_adb(fake_adb, monkeypatch, host_runner, tmp_path):
    root, log = fake_adb
    with open_board("adb:SER1") as board:
        workdir = board.workdir
        assert workdir.startswith("/data/local/tmp/edgenlp-") and (root / workdir.rsplit("/", 1)[1]).is_dir()
        remote = board.push_file(_write(tmp_path / "in.txt", "hello\n"), "in.txt")
        assert board.pull(remote, tmp_path / "back.txt").read_text() == "hello\n"
        assert board.run_runner(["--help"]).stdout.startswith("usage: edgenlp-run BUNDLE")
        with pytest.raises(RunnerFailed, match=r"^adb:SER1: run: edgenlp-run failed \(exit \d+\)"):
            board.run_runner(["/data/local/tmp/no-such-bundle"])  # exit status seen through the marker line
        monkeypatch.setenv("FAKE_ADB_MODE", "nospace")
        with pytest.raises(NoSpace, match=r"^adb:SER1: push input: .*No space left on device"):
            board.push_file(_write(tmp_path / "big.txt", "x\n"), "big.txt")
        monkeypatch.setenv("FAKE_ADB_MODE", "ok")
    assert list(root.iterdir()) == []  # the temporary directory is gone
    calls = log.read_text().splitlines()  # a shell script spans several lines
    assert not [c for c in calls if c.startswith(("shell", "push", "pull"))] and any(c.startswith("-s SER1 shell ") for c in calls)
    assert any(c.startswith("-s SER1 push ") and c.endswith(f"{workdir}/in/") for c in calls)


def test_cli_without_adb_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    bundle = tmp_path / "b"
    bundle.mkdir()
    r = CliRunner().invoke(main, ["eval", str(bundle), "--on", "adb:SER1", "--task", str(tmp_path)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and r.output.startswith("error: "), r.output


def _write(path, text):
    path.write_text(text)
    return path
