"""Lowering in several processes (edgenlp.export.lowering) gives the program one joint lowering gives."""

from __future__ import annotations

import logging

import pytest
import torch

from edgenlp.export import lowering as lw
from edgenlp.export.executorch import to_pte
from edgenlp.export.graph import example_inputs
from edgenlp_testing import tiny_model

BUCKETS = (16, 32)


@pytest.fixture(scope="module")
def quantized_tiny():
    """int8 linears + int8 word table: the program whose quant-fusion pass needs positional arguments."""
    from edgenlp.quantize.api import quantize_model
    from edgenlp.quantize.config import QuantizeConfig

    model, info = tiny_model(num_layers=1)  # one layer: the same graph pattern, half the lowering
    model, _ = quantize_model(model, info, QuantizeConfig(scheme="int8", embeddings="int8"))
    return model


@pytest.fixture(autouse=True)
def no_lowering_cache(monkeypatch):
    """These tests lower the same programs again on purpose: the session's lowering cache is off for them."""
    monkeypatch.delenv(lw.ENV_CACHE, raising=False)


def test_two_processes_give_the_bytes_of_one(quantized_tiny, monkeypatch, tmp_path, caplog):
    """... with shared node provenance (lowering.shared_provenance) against torch's own deep copies, and with methods
    from the lowering cache: a damaged entry is lowered again (one process), the other one taken from the cache."""
    import contextlib

    monkeypatch.setenv(lw.ENV_CACHE, str(tmp_path / "cache"))
    two = to_pte(quantized_tiny, buckets=BUCKETS, processes=2)  # shared provenance; lowers, and fills the cache
    assert two.lowering_processes == 2 and two.manifest_entry()["lowering_processes"] == 2
    assert "lowering_handoff" in two.stages
    entries = sorted((tmp_path / "cache").glob("*.edge"))
    assert len(entries) == len(BUCKETS)
    entries[0].write_bytes(b"not a lowered method")
    with monkeypatch.context() as m, caplog.at_level(logging.INFO, logger=lw.__name__):
        m.setattr(lw, "shared_provenance", contextlib.nullcontext)  # torch's own deep copies
        one = to_pte(quantized_tiny, buckets=BUCKETS, processes=1)
    assert one.lowering_processes == 1 and "lowering_handoff" not in one.stages
    assert one.buffer == two.buffer
    assert [m.to_dict() for m in one.methods] == [m.to_dict() for m in two.methods]
    messages = [r.getMessage() for r in caplog.records]
    assert any("unreadable" in m for m in messages) and any(f"1 of {len(BUCKETS)} methods lowered before" in m for m in messages)


def test_a_failed_helper_costs_time_not_the_export(monkeypatch, caplog):
    model, _ = tiny_model(num_layers=1)
    lw._close_idle_helpers()  # no warm helper from an earlier export: the next one starts now, and fails
    monkeypatch.setattr(lw.sys, "executable", "/bin/false")  # every helper exits at once with status 1
    with caplog.at_level(logging.WARNING, logger=lw.__name__):
        res = to_pte(model, buckets=BUCKETS, processes=2)
    assert res.lowering_processes == 1
    assert any("lowering process failed" in r.getMessage() for r in caplog.records)
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(res.buffer)
    model.eval()
    for seq in BUCKETS:
        ids, mask = example_inputs(seq, vocab_size=model.shape.vocab_size)
        got = program.load_method(f"forward_{seq}").execute([ids, mask])[0]
        with torch.no_grad():
            want = model(ids, mask)
        assert torch.allclose(got, want, atol=1e-4), (seq, float((got - want).abs().max()))


def test_helpers_stay_warm_between_exports_unless_interrupted():
    lw._close_idle_helpers()
    (first,) = lw._take_helpers(1)
    lw._release_helpers([first])
    (again,) = lw._take_helpers(1)
    assert again is first and again.alive()  # the next export reuses it: no second start-up
    again.busy = True  # handed a job whose answer was never read (the export was interrupted)
    lw._release_helpers([again])
    assert not lw._IDLE and not again.alive()  # never reused: it could answer the stale job
    (fresh,) = lw._take_helpers(1)
    assert fresh is not first
    lw._release_helpers([fresh])
    lw._close_idle_helpers()
    assert not fresh.alive()


def test_positional_args_restores_what_the_serializer_made_keywords():
    x = torch.randn(4)

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.aten.clamp.default(x, -0.5, 0.5) + torch.ops.aten.clamp.default(x, None, 0.25)

    gm = torch.fx.symbolic_trace(M())
    clamps = [n for n in gm.graph.nodes if n.target is torch.ops.aten.clamp.default]
    want = gm(x)
    # what a round trip through the edge serializer leaves: defaulted arguments as keywords
    clamps[0].args, clamps[0].kwargs = (clamps[0].args[0],), {"min": -0.5, "max": 0.5}
    clamps[1].args, clamps[1].kwargs = (clamps[1].args[0],), {"max": 0.25}  # min missing: max must stay a keyword
    gm.recompile()
    assert lw.positional_args(gm) == 1
    assert clamps[0].args[1:] == (-0.5, 0.5) and clamps[0].kwargs == {}
    assert clamps[1].args[1:] == () and clamps[1].kwargs == {"max": 0.25}
    assert torch.equal(gm(x), want)


def test_how_many_processes(monkeypatch):
    monkeypatch.delenv(lw.ENV_PROCESSES, raising=False)
    monkeypatch.setattr(lw, "usable_cores", lambda: 8)
    assert lw.resolve_processes(None, 4) == 4  # never more than there are methods
    assert lw.resolve_processes(None, 1) == 1
    assert lw.resolve_processes(3, 10) == 3
    monkeypatch.setenv(lw.ENV_PROCESSES, "1")
    assert lw.resolve_processes(None, 4) == 1
    assert lw.resolve_processes(2, 4) == 2  # an explicit value wins over the environment
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(lw.ENV_PROCESSES, bad)
        with pytest.raises(ValueError, match=lw.ENV_PROCESSES):
            lw.resolve_processes(None, 4)
    with pytest.raises(ValueError):
        lw.resolve_processes(0, 4)


def test_export_config_validates_lower_processes():
    from edgenlp.export.api import ExportConfig

    assert ExportConfig(lower_processes=2).lower_processes == 2
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="lower_processes"):
            ExportConfig(lower_processes=bad)


def _fake_helper(code: str) -> lw._Helper:
    """A _Helper around ``python -c code`` instead of the lowering service (the parent's side of the protocol)."""
    import subprocess
    import sys
    import tempfile

    h = lw._Helper.__new__(lw._Helper)
    h.log = tempfile.TemporaryFile()
    h.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=h.log)
    h.busy = True
    return h


@pytest.mark.parametrize("code, why", [
    ("import time; time.sleep(60)", "no answer within 2 s"),
    # a line that is not an answer, from a helper that then goes on working: stopped, not waited for
    ("import sys, time; print('a library speaking'); sys.stdout.flush(); time.sleep(60)", "exit status -9"),
])
def test_a_helper_that_does_not_answer_is_stopped_and_never_reused(code, why):
    import time

    h = _fake_helper(code)
    start = time.monotonic()
    assert h.result(timeout_s=2) == why
    assert time.monotonic() - start < 30 and not h.alive()
    lw._release_helpers([h])
    assert h not in lw._IDLE


def test_what_the_helper_prints_cannot_pass_for_an_answer(tmp_path):
    """The service answers on a descriptor of its own: a library printing to standard output lands in the log."""
    import subprocess
    import sys

    code = ("import torch, sys; from edgenlp.export import lowering as lw\n"
            "def load(path):\n"
            "    print('ok'); sys.stdout.flush(); raise FileNotFoundError(str(path))\n"
            "torch.export.load = load\n"
            "sys.exit(lw._serve(60))\n")
    proc = subprocess.run([sys.executable, "-c", code], input=f"{tmp_path} m\n", capture_output=True, text=True,
                          env=lw._helper_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [f"error FileNotFoundError: {tmp_path / 'm.pt2'}"]
    assert "ok" in proc.stderr.splitlines()
