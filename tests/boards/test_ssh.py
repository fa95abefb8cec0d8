"""The ssh transport against a real sshd on localhost (temporary host and user keys), x86-64 runner."""

import pytest

from edgenlp.boards.base import open_board
from edgenlp.boards.errors import BoardAuthError, BoardUnreachable
from edgenlp.boards.evaluate import evaluate_on_board
from edgenlp.boards.measure import BoardMeasurer, board_runtime
from edgenlp.boards.ssh import SshBoard
from edgenlp.profile.api import ProfileConfig, profile
from edgenlp.profile.components import COMPONENTS
from profile_testing import check_attribution, check_document, recorded_measurements

pytestmark = pytest.mark.native


def test_profile_and_eval_over_ssh(sshd, host_runner, board_bundle, tiny_task_dir, monkeypatch):
    opts = ("-F", str(sshd.client_config))
    # "board-under-test" is a host alias from the ssh config
    with open_board("ssh://board-under-test", ssh_options=opts) as board, \
            recorded_measurements(monkeypatch, BoardMeasurer) as measured:
        with board_runtime(board, cores="little") as rt:
            (doc,) = profile(board_bundle, ProfileConfig(seq_lens=(64,), runtimes=(rt, "native"), threads=(1,), runs=10, warmup=2))
        report = evaluate_on_board(board, board_bundle, task=tiny_task_dir, host_runtime="native")
        workdir = board.workdir
        assert board.probe().arch == "x86_64"
    for runtime in (rt, "native"):
        check_document(doc, runtime)
    ((target, m),) = measured
    check_attribution(m, target.plan, runs=10)
    assert doc["device"]["transport"] == "ssh" and doc["device"]["emulated"] is None
    assert doc["device"]["software"]["runner_arch"] == "x86_64"
    assert report["host"]["same_prediction"] == report["n"] == 3 and report["host"]["max_abs_prob_diff"] < 1e-5
    with open_board(f"ssh://{sshd.user}@127.0.0.1:{sshd.port}", ssh_options=opts) as board:  # user@host:port form
        out = board._sh(f"test -e {workdir} && echo present || echo gone", step="check").stdout
    assert out.strip() == "gone"


def test_ssh_refused_key_and_unreachable_port(sshd, tmp_path):
    opts = ("-F", str(sshd.client_config))
    refused = tmp_path / "refused_config"  # the same config offering only a key the server does not accept
    good_key = sshd.client_config.parent / "id"
    refused.write_text(sshd.client_config.read_text().replace(f"IdentityFile {good_key}\n", f"IdentityFile {sshd.other_key}\n"))
    assert str(good_key) + "\n" not in refused.read_text()
    with pytest.raises(BoardAuthError, match=rf"^ssh://127.0.0.1:{sshd.port}: connect: no key was accepted"):
        with open_board(f"ssh://127.0.0.1:{sshd.port}", ssh_options=("-F", str(refused))):
            pass
    from sshd import free_port

    port = free_port()
    with pytest.raises(BoardUnreachable, match=rf"^ssh://127.0.0.1:{port}: connect: cannot reach the host"):
        with open_board(f"ssh://127.0.0.1:{port}", ssh_options=opts):
            pass


def test_ssh_changed_host_key_is_an_auth_error(sshd, tmp_path):
    cfg = tmp_path / "cfg"
    (tmp_path / "known").write_text(f"[127.0.0.1]:{sshd.port} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDTeYoSOJgzKmV8Nb6K1vTtUvKjBb3w8bBLdTWsoXX0r\n")
    cfg.write_text(sshd.client_config.read_text().replace(str(sshd.client_config.parent / "known_hosts"), str(tmp_path / "known")))
    with pytest.raises(BoardAuthError, match="host key is unknown or changed"):
        with open_board(f"ssh://127.0.0.1:{sshd.port}", ssh_options=("-F", str(cfg))):
            pass


def test_ssh_command_lines():
    b = SshBoard.from_uri("ssh://pi@raspberrypi.local:2222")
    argv = b.ssh_argv("uname -m")
    assert argv[0] == "ssh" and ["-o", "BatchMode=yes"] == argv[1:3] and argv[-3:] == ["pi@raspberrypi.local", "--", "sh -c 'uname -m'"]
    assert argv[argv.index("-p") + 1] == "2222"
    scp = b.scp_argv(["a", "b"], b._remote("/tmp/x/"))
    assert scp[:3] == ["scp", "-q", "-p"] and scp[scp.index("-P") + 1] == "2222" and scp[-1] == "pi@raspberrypi.local:/tmp/x/"
    from edgenlp.errors import EdgeNLPError

    for bad in ("ssh://pi:secret@host", "ssh://host:99999", "ssh://host/path", "ssh://"):
        with pytest.raises(EdgeNLPError):
            SshBoard.from_uri(bad)


def test_measure_components_on_a_shape_grid(sshd, host_runner, tmp_path, monkeypatch):
    import json

    from edgenlp.boards import calibration_shapes, measure_components

    shapes = calibration_shapes(grid=((128, 2, 1024), (128, 2, 512)), num_layers=1)
    with open_board("ssh://board-under-test", ssh_options=("-F", str(sshd.client_config))) as board, \
            recorded_measurements(monkeypatch, BoardMeasurer) as measured:
        table = measure_components(board, shapes, seq_lens=(32,), threads=(1,), runs=3, warmup=1, workdir=tmp_path)
    assert len(measured) == len(shapes)
    for target, m in measured:  # every row of the table comes from a completely attributed ETDump
        check_attribution(m, target.plan, runs=3)
    assert table.device["transport"] == "ssh" and json.loads(json.dumps(table.to_dict()))["schema"] == "edgenlp.board-components/1"
    labels = {r.model for r in table.rows}
    assert labels == {"bert-L1-H128-A2-D32-F1024", "bert-L1-H128-A2-D32-F512"}
    for label in labels:
        row = table.lookup(model=label, seq_len=32, threads=1)
        assert set(row) == {*COMPONENTS, "runtime_overhead", "total"}
        # runtime_overhead is defined as the total minus the components: the table's bookkeeping, not a timing claim
        assert sum(row[c] for c in COMPONENTS) + row["runtime_overhead"] == pytest.approx(row["total"], abs=1e-2)
    flops = {r.model: r.flops for r in table.rows if r.component == "ffn"}
    assert flops["bert-L1-H128-A2-D32-F1024"] == 2 * flops["bert-L1-H128-A2-D32-F512"]  # the FFN width is what differs
