"""The README's measured numbers are what tools/readme.py renders from tools/bench/results/, byte for byte."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def readme_tool():
    spec = importlib.util.spec_from_file_location("edgenlp_readme_tool", REPO / "tools" / "readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_what_the_results_files_render(readme_tool, capsys):
    rc = readme_tool.main(["--check"])
    assert rc == 0, f"README.md differs from its results files; run `python tools/readme.py`:\n{capsys.readouterr().out}"


def test_a_changed_number_fails_the_check_and_a_rewrite_restores_it(readme_tool, tmp_path, capsys):
    readme = tmp_path / "README.md"
    text = (REPO / "README.md").read_text()
    start = text.index("<!-- results:compress-headline -->")
    stale = text[start:].replace("| ExecuTorch fp32 (our bundle) | ", "| ExecuTorch fp32 (our bundle) | 1", 1)  # 25.78 -> 125.78
    readme.write_text(text[:start] + stale)
    assert readme_tool.main(["--check", "--readme", str(readme)]) == 1
    diff = capsys.readouterr().out
    assert "-| ExecuTorch fp32 (our bundle) | 1" in diff and "+| ExecuTorch fp32 (our bundle) | " in diff
    assert readme_tool.main(["--readme", str(readme)]) == 0
    assert readme.read_text() == text


def test_prose_outside_the_markers_is_left_alone(readme_tool):
    results = readme_tool.Results(REPO / "tools" / "bench" / "results")
    text = (REPO / "README.md").read_text()
    outside = readme_tool.MARKER.sub("", text)
    assert readme_tool.MARKER.sub("", readme_tool.render(text, results)) == outside


def test_an_unknown_or_missing_section_is_an_error(readme_tool):
    results = readme_tool.Results(REPO / "tools" / "bench" / "results")
    text = (REPO / "README.md").read_text()
    with pytest.raises(SystemExit, match="unknown section 'nope'"):
        readme_tool.render(text + "\n<!-- results:nope -->\n<!-- /results:nope -->\n", results)
    cut = text.replace("<!-- results:boards -->", "").replace("<!-- /results:boards -->", "")
    with pytest.raises(SystemExit, match="no marked section for \\['boards'\\]"):
        readme_tool.render(cut, results)


def test_fresh_clone_times_render_with_their_host_and_load_once_measured(readme_tool, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "tools" / "bench" / "results", results)
    (results / "fresh-clone.json").unlink(missing_ok=True)  # as before the first timing
    text = (REPO / "README.md").read_text()
    before = readme_tool.render(text, readme_tool.Results(results))
    assert "Set-up time in a fresh clone: not measured yet" in before and "not timed yet in a fresh clone" in before
    doc = {"setup_s": 302.4, "suite_s": 1500.0, "main_job_s": 701.2, "host": "AMD EPYC", "isa_flags": "avx2 fma", "cores": 2,
           "load": {"setup": {"before": [0.1, 0.2, 0.3], "after": [1.9, 1.2, 0.6]},
                    "suite": {"before": [1.9, 1.2, 0.6], "after": [2.0, 1.9, 1.1]},
                    "main_job": {"before": [2.0, 1.9, 1.1], "after": [2.1, 2.0, 1.4]}},
           "date": "2026-12-01 10:00 UTC", "commit": "0123456789abcdef"}
    (results / "fresh-clone.json").write_text(json.dumps(doc))
    after = readme_tool.render(text, readme_tool.Results(results))
    assert "Set-up time in a fresh clone: not measured yet" not in after and "not timed yet in a fresh clone" not in after
    assert "set-up (`bash tools/setup.sh`) 5 min 2 s (load average 0.10 / 0.20 / 0.30 before; load average 1.90" in " ".join(
        after.split())
    assert "11 min 41 s for the main job in a fresh clone (AMD EPYC, ISA flags avx2 fma;" in " ".join(after.split())


def test_a_changed_results_file_fails_the_check(readme_tool, tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(REPO / "tools" / "bench" / "results", results)
    doc = json.loads((results / "compress-headline.json").read_text())
    doc["peers_before"]["ExecuTorch fp32 (edgenlp bundle)"]["median_ms"] = 25.21
    (results / "compress-headline.json").write_text(json.dumps(doc))
    assert readme_tool.main(["--check", "--results", str(results)]) == 1
    assert "+| ExecuTorch fp32 (our bundle) | 25.21 |" in capsys.readouterr().out
