"""Target files: every shipped file validates and cites its values; unknown names and malformed files fail clearly."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgenlp.cli import main
from edgenlp.targets.target import ISA_FLAGS, Budgets, TargetError, list_targets, load_target, targets_dir

EXPECTED = {"pixel-7", "pixel-8", "galaxy-s24", "iphone-15", "raspberry-pi-4", "raspberry-pi-5", "jetson-orin-nano", "host"}


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_the_device_set_ships():
    assert EXPECTED <= {e.name for e in list_targets()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_target_validates(name, monkeypatch):
    t = load_target(name)
    assert t.name == name and Path(t.source).name == f"{name}.toml"
    # The file states every required flag (true or false), and the target read as written has exactly the flags set
    # true there; `host` takes this machine's flags, which must be ones the architecture knows.
    with open(t.source, "rb") as f:
        stated = tomllib.load(f)["isa"]
    required, optional = ISA_FLAGS[t.arch]
    assert set(required) <= set(stated) <= set(required) | set(optional), sorted(stated)
    monkeypatch.setenv("EDGENLP_HOST_AS_FILE", "1")
    as_written = load_target(name)
    assert set(as_written.isa) == {flag for flag, on in stated.items() if on}, (as_written.isa, stated)
    assert set(t.isa) <= set(required) | set(optional), t.isa
    monkeypatch.delenv("EDGENLP_HOST_AS_FILE")
    assert t.budgets.threads <= t.cores
    assert t.clusters == tuple(sorted(t.clusters, key=lambda c: -c.fp32_gflops_per_core))
    for c in t.clusters:  # int8 is never slower than fp32 per core on these cores
        assert c.int8_gops_per_core >= c.fp32_gflops_per_core
    if t.arch == "aarch64":
        assert "neon" in t.isa and t.qemu_cpu
        assert ("i8mm" not in t.isa) or ("dotprod" in t.isa)  # every I8MM core has DotProd
    assert t.throughput(precision="fp32", threads=t.budgets.threads) > 0
    assert load_target(t.source) == t  # a path works wherever a name does


@pytest.mark.parametrize("path", sorted(targets_dir().glob("*.toml")), ids=lambda p: p.stem)
def test_every_value_has_a_source_comment(path):
    """Each numeric or boolean value carries a comment, on its line or on its section header."""
    section_commented = False
    missing = []
    for line in path.read_text().splitlines():
        if line.startswith("["):
            section_commented = "#" in line
        elif re.match(r"^\w+\s*=\s*[-0-9tf]", line) and "#" not in line and not section_commented:
            missing.append(line)
    assert not missing, f"{path.name}: values without a source comment: {missing}"


def test_user_file_under_another_name(tmp_path):
    text = (targets_dir() / "raspberry-pi-5.toml").read_text().replace('name = "raspberry-pi-5"', 'name = "my-board"')
    p = tmp_path / "my-board.toml"
    p.write_text(text)
    t = load_target(p)
    assert t.name == "my-board" and t.cores == 4
    r = invoke("targets", "show", p, "--json")
    assert r.exit_code == 0 and '"my-board"' in r.output


def test_unknown_target_lists_known_ones():
    with pytest.raises(TargetError, match="known targets: .*pixel-7"):
        load_target("pixel-99")
    r = invoke("targets", "show", "pixel-99")
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown target 'pixel-99'") and "raspberry-pi-5" in lines[0]


def _mutated(tmp_path, old: str, new: str) -> Path:
    text = (targets_dir() / "pixel-7.toml").read_text()
    assert old in text
    p = tmp_path / "bad.toml"
    p.write_text(text.replace(old, new, 1))
    return p


@pytest.mark.parametrize(
    "old,new,field",
    [
        ("freq_ghz = 2.85", 'freq_ghz = "fast"', "clusters[0].freq_ghz"),
        ("bandwidth_gbps = 51.2", "bandwith_gbps = 51.2", "memory.bandwith_gbps"),
        ("dotprod = true", "dotprod = 1", "isa.dotprod"),
        ("cores = 2 ", "cores = 0 ", "clusters[0].cores"),
        ('preferred = "executorch"', 'preferred = "tflite"', "runtime"),
        ("threads = 2 ", "threads = 64 ", "budgets.threads"),
        ("seq_len = 128", "seq_len = 12.5", "budgets.seq_len"),
        ("[memory]", "[memory]\ntotal_mb = [", None),
    ],
)
def test_malformed_file_names_file_and_field(tmp_path, old, new, field):
    p = _mutated(tmp_path, old, new)
    with pytest.raises(TargetError) as err:
        load_target(p)
    msg = str(err.value)
    assert str(p) in msg
    if field:
        assert field in msg, msg
    r = invoke("targets", "show", p)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and r.output.startswith("error: ")


def test_missing_field(tmp_path):
    text = (targets_dir() / "pixel-7.toml").read_text()
    p = tmp_path / "bad.toml"
    p.write_text(re.sub(r"(?m)^int8_gops_per_core.*\n", "", text, count=1))
    with pytest.raises(TargetError, match=r"missing field clusters\[0\]\.int8_gops_per_core"):
        load_target(p)


def test_cli_table_and_calibrate_needs_a_board():
    r = invoke("targets")
    assert r.exit_code == 0
    for name in EXPECTED:
        assert name in r.output
    r = invoke("targets", "calibrate", "pixel-7")
    assert r.exit_code == 2 and "needs --on URI" in r.output


def test_budgets_validate_and_override():
    b = Budgets(latency_ms=20, memory_mb=150, size_mb=25, seq_len=128, threads=2)
    assert b.override(latency_ms=5, size_mb=None) == Budgets(latency_ms=5, memory_mb=150, size_mb=25, seq_len=128, threads=2)
    assert Budgets.from_dict(b.to_dict()) == b
    for bad in ({"latency_ms": 0}, {"threads": 0}, {"seq_len": 1.5}, {"memory_mb": float("nan")}):
        with pytest.raises(ValueError):
            Budgets(**bad)


def test_calibrate_on_a_board_without_board_support(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "edgenlp.boards", None)  # as if board support were not installed
    monkeypatch.setitem(sys.modules, "edgenlp.boards.base", None)
    r = invoke("targets", "calibrate", "raspberry-pi-5", "--on", "qemu:cortex-a76")
    assert r.exit_code == 2 and r.output.startswith("error: --on needs board support")
    r = invoke("targets", "calibrate", "host", "--threads", "1,x")
    assert r.exit_code == 2 and "--threads" in r.output


def test_host_target_describes_the_machine_it_runs_on(monkeypatch):
    """The built-in host is this machine: probed CPU, cores, ISA and memory; rates from its calibration when there is one."""
    from edgenlp.targets.target import parse_target, this_machine

    monkeypatch.setenv("EDGENLP_HOST_AS_FILE", "1")
    reference = load_target("host")
    assert reference == parse_target(targets_dir() / "host.toml")
    ref_rate = reference.clusters[0].fp32_gflops_per_core
    probe = {"arch": "x86_64", "model": "Some Other CPU", "cores": 1, "isa": ("avx2", "fma"), "memory_mb": 4096, "freq_ghz": 3.1}
    uncalibrated = this_machine(reference, probe=probe, rates={})
    assert uncalibrated.cores == 1 and uncalibrated.budgets.threads == 1
    assert uncalibrated.isa == ("avx2", "fma") and uncalibrated.memory_mb == 4096
    assert uncalibrated.clusters[0].core == "Some Other CPU" and uncalibrated.clusters[0].freq_ghz == 3.1
    assert uncalibrated.clusters[0].fp32_gflops_per_core == ref_rate  # no calibration here: the reference rates, and it says so
    assert "until `edgenlp targets calibrate host`" in uncalibrated.description
    assert {f"reference_{k}" for k, _ in reference.measured} <= set(uncalibrated.measured_dict)
    # the reference's model name is not enough (a hypervisor masks the part): an AVX2-only "AMD EPYC" is another machine
    masked = {**probe, "model": reference.clusters[0].core}
    assert "until `edgenlp targets calibrate host`" in this_machine(reference, probe=masked, rates={}).description
    same = this_machine(reference, probe={**masked, "isa": reference.isa}, rates={})
    assert "same CPU model" in same.description and not any(k.startswith("reference_") for k in same.measured_dict)
    calibrated = this_machine(reference, probe=probe, rates={"fp32_gemm_gflops": 40.0})
    c = calibrated.clusters[0]
    assert c.fp32_gflops_per_core == 40.0
    ref = reference.clusters[0]
    assert c.int8_gops_per_core == pytest.approx(40.0 * ref.int8_gops_per_core / ref.fp32_gflops_per_core)
    assert "calibration" in calibrated.description
    monkeypatch.delenv("EDGENLP_HOST_AS_FILE")
    live = load_target("host")
    assert live.cores == (os.cpu_count() or 1) and live == load_target(targets_dir() / "host.toml")
