"""Happy paths of the commands the README advertises, through the CLI (click's runner), on tiny models.

One test per advertised spelling that no other test runs end to end: each
checks what the command wrote (the manifest, the report JSON), not only its
exit status. Bad inputs live in test_cli_errors.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgenlp.cli import main
from edgenlp_testing import write_task_dir


def invoke(*args):
    r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


def last_json(output: str):
    """The JSON document a verb printed last (progress lines may precede it)."""
    for start in (i for i, ch in enumerate(output) if ch in "[{"):
        try:
            return json.loads(output[start:])
        except ValueError:
            continue
    raise AssertionError(f"no JSON in output: {output!r}")


# A small task whose dev words all occur in training (so a trimmed vocabulary keeps them): one sentiment word per row.
WORDS = {"pos": ("good", "great", "lovely", "superb"), "neg": ("bad", "awful", "poor", "boring")}
FILLER = ("the", "film", "was", "a", "really", "plot")


def _rows(n: int, offset: int) -> list[tuple[str, str]]:
    rows = []
    for i in range(n):
        label = ("neg", "pos")[i % 2]
        word = WORDS[label][(i // 2 + offset) % 4]
        rows.append((f"{FILLER[i % 6]} {FILLER[(i + offset) % 6]} {word}", label))
    return rows


@pytest.fixture(scope="module")
def word_task(tmp_path_factory) -> Path:
    return write_task_dir(tmp_path_factory.mktemp("word-task"), train=_rows(32, 0), dev=_rows(8, 1))


# --------------------------------------------------------------------------- tasks


def test_tasks_lists_builtins_and_where_their_data_is(tmp_path, word_task):
    import shutil

    shutil.copytree(word_task, tmp_path / "sst2")
    out = invoke("tasks", "--data-dir", tmp_path).output
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip() and not line.startswith("Your own")}
    assert set(lines) >= {"sst2", "banking77"}
    assert f"[{tmp_path / 'sst2'}: ok]" in lines["sst2"]
    assert f"[{tmp_path / 'banking77'}: missing]" in lines["banking77"]


# --------------------------------------------------------------------------- finetune, prune


@pytest.fixture(scope="module")
def learner_auto(tmp_path_factory, tiny_model_dir, word_task) -> Path:
    """`finetune --method learner --rank auto --no-early-stop` on the tiny model, 2 epochs of 4 steps."""
    out = tmp_path_factory.mktemp("ft") / "learner"
    invoke("finetune", tiny_model_dir, "--task", word_task, "--method", "learner", "--rank", "auto", "--no-early-stop",
           "--epochs", "2", "--priming-steps", "2", "--batch-size", "8", "--max-seq-len", "16", "--threads", "1",
           "--out", out, "-q")
    return out


def test_finetune_rank_auto_no_early_stop(learner_auto):
    report = json.loads((learner_auto / "finetune.json").read_text())
    assert report["method"] == "learner" and report["config"]["learner"]["rank"] == "auto"
    # --rank auto: a rank per Learner (6 per layer + pooler), chosen from priming within the fixed rank's parameter budget
    ranks, auto = report["learner"]["ranks"], report["learner"]["rank_auto"]
    assert len(ranks) == 2 * 6 + 1 and set(ranks) == set(auto["captured"]) and min(ranks.values()) >= 1, ranks
    assert auto["params"] <= auto["budget"], auto
    # --no-early-stop: every planned epoch ran, and the last one is what was kept
    stop = report["early_stop"]
    assert stop["enabled"] is False and stop["epochs_run"] == report["epochs_planned"] == len(report["dev_per_epoch"]) == 2, stop
    assert report["dev"] == report["dev_last_epoch"]
    # the saved model is the base architecture (Learners merged): every other verb loads it
    from edgenlp.models.registry import load_model

    _, info = load_model(learner_auto)
    assert [s.type for s in info.recipe] == ["finetune"]


def test_prune_ffn_multiple(learner_auto, word_task, tmp_path):
    out = tmp_path / "pruned"
    invoke("prune", learner_auto, "--task", word_task, "--method", "fast", "--target-sparsity", "0.5", "--samples", "16",
           "--ffn-multiple", "32", "--threads", "1", "--out", out, "-q")
    report = json.loads((out / "prune.json").read_text())
    full = 128  # the tiny model's FFN width
    widths = report["shape"]["ffn"]
    assert report["config"]["ffn_multiple"] == 32 and widths != [full] * len(widths), report["shape"]  # something was pruned
    assert all(w % 32 == 0 or w == full for w in widths), widths  # 0 counts as a multiple
    from edgenlp.models.registry import load_model

    model, info = load_model(out)
    assert [layer.ffn_in.out_features for layer in model.layers] == widths
    assert [s.type for s in info.recipe] == ["finetune", "prune"]


# --------------------------------------------------------------------------- export, quantize


def test_export_quant_int8_embeddings(tiny_model_dir, tiny_task_dir, tmp_path):
    from edgenlp.bundle import Bundle

    out = tmp_path / "q8"
    # model.pte only: the quantized ONNX path has its own tests (tests/quantize/test_every_path.py)
    invoke("export", tiny_model_dir, "--task", tiny_task_dir, "--quant", "int8", "--quant-embeddings", "int8",
           "--format", "pte", "--seq-len", "16", "--buckets", "16", "--out", out)
    b = Bundle.open(out)
    assert (out / "model.pte").is_file() and not (out / "model.onnx").exists()
    assert set(b.manifest["parity"]) == {"executorch"} and all(p["passed"] for p in b.manifest["parity"].values())
    q = b.manifest["quantization"]
    assert set(q["linears"].values()) == {8} and q["embeddings"] == "int8", q
    assert [s["step"] for s in b.manifest["applied"]][-2:] == ["quantize", "export"]
    for runtime in ("executorch",):  # and the bundle runs
        r = invoke("run", out, "a joy to watch", "--runtime", runtime, "--json")
        assert last_json(r.output)[0]["label"] in b.labels


def test_quantize_mixed_trim_vocab_max_drop_size_mb(tiny_model_dir, word_task, tmp_path):
    from edgenlp.bundle import Bundle

    out = tmp_path / "qmix"
    size_mb = 0.09  # all linears int8 + the trimmed int4 table take 0.098 MB: some linears must go to 4 bits
    invoke("quantize", tiny_model_dir, "--scheme", "mixed", "--size-mb", size_mb, "--max-drop", "50", "--trim-vocab",
           "--embeddings", "int4", "--task", word_task, "--format", "pte", "--seq-len", "16", "--buckets", "16", "--out", out)
    b = Bundle.open(out)
    report = json.loads((out / "quantize.json").read_text())
    bits = b.manifest["quantization"]["linears"]
    assert bits == report["final_bits"] and 4 in bits.values() and set(bits.values()) <= {4, 8, 32}, bits
    guard = report["guard"]
    assert guard["max_drop"] == 50 and guard["attempts"][-1]["predicted_weight_bytes"] <= size_mb * 1e6, guard
    assert guard["final_drop"] <= 50
    kept = json.loads((out / "vocab_map.json").read_text())["kept"]
    assert len(kept) < 100 and b.manifest["tokenizer"]["id_map"], len(kept)  # --trim-vocab: the task's words + specials


# `compress` on the command line: tests/compress/test_compress_e2e.py resumes its run through the CLI.


# --------------------------------------------------------------------------- targets calibrate


@pytest.mark.slow  # minutes of real ExecuTorch programs; tests/targets/test_costmodel.py measures a grid in CI
def test_targets_calibrate_host_on_a_tiny_grid(tmp_path, monkeypatch):
    """`targets calibrate host` end to end on two tiny shapes; `targets show host` then uses this machine's table."""
    from edgenlp.models.encoder import EncoderShape
    from edgenlp.targets import calibrate

    tiny = dict(family="bert", vocab_size=500, hidden=64, head_dim=32, max_positions=128)
    monkeypatch.setattr(calibrate, "MINILM", tiny)
    monkeypatch.setattr(calibrate, "REFERENCE", ((2, 2), (128, 128)))
    monkeypatch.setattr(calibrate, "grid_shapes", lambda grid=None: [EncoderShape(heads=(2, 1), ffn=(128, 64), **tiny),
                                                                     EncoderShape(heads=(1, 2, 0), ffn=(64, 0, 128), **tiny)])
    monkeypatch.setenv("EDGENLP_CACHE_DIR", str(tmp_path / "cache"))
    assert last_json(invoke("targets", "show", "host", "--json").output)["cost_model"] != "calibrated"
    out = tmp_path / "host.measured.json"
    r = invoke("targets", "calibrate", "host", "--shapes", "2", "--runs", "3", "--threads", "1",
               "--precisions", "executorch/fp32", "--out", out)
    table = json.loads(out.read_text())
    from edgenlp.targets.costmodel import host_table_path

    assert host_table_path().is_file() and json.loads(host_table_path().read_text()) == table
    obs = table["observations"]
    # 2 shapes x 2 lengths (32, 128) x 1 thread, each with every component of the profile
    assert len(obs) == 4 and {(o["runtime"], o["precision"], o["threads"]) for o in obs} == {("executorch", "fp32", 1)}
    assert sorted({o["seq_len"] for o in obs}) == [32, 128] and all(set(o["components"]) >= {"attn_qkv", "ffn"} for o in obs)
    assert f"{len(obs)} observations" in r.output and all(o["total_ms"] > 0 for o in obs)
    # the cost model now reads this machine's table
    assert last_json(invoke("targets", "show", "host", "--json").output)["cost_model"] == "calibrated"


# --------------------------------------------------------------------------- the native runtime from the CLI


@pytest.mark.native
def test_run_and_eval_with_the_native_runtime(tiny_bundle, tiny_task_dir):
    from edgenlp.run.native import library_path

    if not library_path().is_file():
        pytest.skip("native runtime not built (bash runtime/build.sh)")
    texts = ("a joy to watch", "tedious")
    got = {rt: last_json(invoke("run", tiny_bundle, *texts, "--runtime", rt, "--json").output) for rt in ("native", "executorch")}
    assert [x["label"] for x in got["native"]] == [x["label"] for x in got["executorch"]]
    for n, e in zip(got["native"], got["executorch"]):
        assert max(abs(n["probs"][k] - e["probs"][k]) for k in e["probs"]) < 1e-4
    reports = {rt: last_json(invoke("eval", tiny_bundle, "--task", tiny_task_dir, "--runtime", rt, "--json").output)
               for rt in ("native", "executorch")}
    assert reports["native"]["runtime"] == "native" and reports["executorch"]["runtime"] == "executorch"
    assert reports["native"]["n"] == 3 and reports["native"]["accuracy"] == reports["executorch"]["accuracy"]
