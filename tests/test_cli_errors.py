"""Every user-caused error of every verb: one ``error:`` line, exit status 2, no traceback, nothing written.

To cover a new verb, add rows to :data:`CASES`: the verb's arguments with
``{placeholders}`` from :func:`inputs` (broken files and folders built once) and
a piece of the expected message. ``{out}`` is a path inside the run's own
empty folder; the test checks that the folder is still empty afterwards.
:func:`test_every_verb_has_bad_input_cases` fails for a verb with no row.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgenlp.cli import COMMANDS, main
from edgenlp.errors import ExitCode


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    message: str  # a piece of the one error line

    @property
    def verb(self) -> str:
        return self.args[0]

    @property
    def id(self) -> str:
        return " ".join(self.args).replace("{", "").replace("}", "")


def case(*args: str, message: str) -> Case:
    return Case(tuple(args), message)


CASES = [
    # models, tasks
    case("models", "extra", message="unexpected extra argument"),
    case("tasks", "--data-dir", "{file}", message="is a file"),
    # export
    case("export", "no-such-model", "--out", "{out}", message="unknown model 'no-such-model'"),
    case("export", "bert-mini", "--task", "nope", "--out", "{out}", message="unknown task 'nope'"),
    case("export", "bert-mini", "--seq-len", "1", "--out", "{out}", message="max_seq_len must be"),
    case("export", "minilm-l6", "--seq-len", "1024", "--out", "{out}", message="exceeds the model's 512 positions"),
    case("export", "bert-mini", "--buckets", "a,b", "--out", "{out}", message="expected comma-separated integers"),
    case("export", "bert-mini", "--buckets", "0,32", "--out", "{out}", message="expected integers >= 1"),
    case("export", "bert-mini", "--format", "tflite", "--out", "{out}", message="'tflite' is not one of"),
    case("export", "{model_bad_json}", "--out", "{out}", message="config.json: invalid JSON"),
    case("export", "{model_bad_config}", "--out", "{out}", message="config.json"),
    case("export", "{model_bad_weights}", "--out", "{out}", message="cannot read weights"),
    case("export", "{model_dir}", "--task", "{task_bad_quote}", "--out", "{out}", message="malformed TSV"),
    case("export", "{model_dir}", "--out", "{file}", message="is a file"),
    # run
    case("run", "{missing}", "hi", message="bundle directory not found"),
    case("run", "{model_dir}", "hi", message="not a bundle"),
    case("run", "{bundle}", "hi", "--threads", "0", message="--threads must be >= 1"),
    case("run", "{bundle}", "hi", "--threads", "two", message="'two' is not a valid integer"),
    case("run", "{bundle}", "hi", "--runtime", "tflite", message="'tflite' is not one of"),
    case("run", "{bundle_sha}", "hi", message="sha256 mismatch"),
    case("run", "{bundle_bad_pte}", "hi", message="model.pte"),
    case("run", "{bundle_bad_manifest}", "hi", message="invalid JSON"),
    case("run", "{model_bad_json}", "hi", "--runtime", "eager", message="config.json: invalid JSON"),
    # eval
    case("eval", "{bundle}", message="give --task"),
    case("eval", "{bundle}", "--data", "{tsv_unknown_label}", message="label 'maybe' is not one of the 2 known labels"),
    case("eval", "{bundle}", "--data", "{tsv_bad_quote}", message="malformed TSV"),
    case("eval", "{bundle}", "--data", "{missing}", message="file not found"),
    case("eval", "{bundle}", "--task", "{task_bad_quote}", message="malformed TSV"),
    case("eval", "{bundle}", "--task", "{tiny_task}", "--limit", "0", message="--limit"),
    case("eval", "{bundle_bad_pte}", "--task", "{tiny_task}", message="model.pte"),
    case("eval", "{bundle}", "--task", "{tiny_task}", "--runtime", "onnx", "--threads", "-1", message="--threads must be >= 1"),
    # inspect
    case("inspect", "{missing}", message="bundle directory not found"),
    case("inspect", "{bundle_sha}", message="sha256 mismatch"),
    case("inspect", "{bundle_bad_manifest}", message="invalid JSON"),
    # profile
    case("profile", "bert-mini", "--seq-len", "a,b", message="expected comma-separated integers"),
    case("profile", "bert-mini", "--seq-len", "0", message="expected integers >= 1"),
    case("profile", "bert-mini", "--seq-len", "1024", "--json-out", "{out}", message="1024"),
    case("profile", "bert-mini", "--threads", "0", message="expected integers >= 1"),
    case("profile", "bert-mini", "--runtime", "tflite", message="tflite"),
    case("profile", "bert-mini", "--batch", "0", message="batch"),
    case("profile", "bert-mini", "--runs", "0", message="runs"),
    case("profile", "no-such-model", "--json-out", "{out}", message="unknown model 'no-such-model'"),
    case("profile", "{model_bad_json}", message="config.json: invalid JSON"),
    case("profile", "{bundle_bad_pte}", "--seq-len", "32", "--runtime", "executorch", "--json-out", "{out}", message="model.pte"),
    case("profile", "{missing}", message="unknown model"),
    # finetune
    case("finetune", "{model_dir}", "--task", "{tiny_task}", "--method", "magic", "--out", "{out}", message="method"),
    case("finetune", "{model_dir}", "--task", "{tiny_task}", "--method", "learner", "--rank", "x", "--out", "{out}",
         message="--rank must be a positive integer or 'auto'"),
    case("finetune", "{model_dir}", "--task", "{tiny_task}", "--lr", "fast", "--out", "{out}", message="is not a number"),
    case("finetune", "{model_dir}", "--task", "{tiny_task}", "--epochs", "0", "--out", "{out}", message="epochs"),
    case("finetune", "{model_dir}", "--task", "{tiny_task}", "--val-rows", "0", "--out", "{out}", message="val_rows"),
    case("finetune", "{model_dir}", "--task", "{tiny_task}", "--val-rows", "100000", "--out", "{out}",
         message="too few to hold out 100000 for validation"),
    case("finetune", "{model_dir}", "--task", "{tiny_task}", "--batch-size", "-4", "--out", "{out}", message="batch_size"),
    case("finetune", "{model_dir}", "--task", "{tiny_task}", "--max-seq-len", "100000", "--out", "{out}",
         message="exceeds the model's 64 positions"),
    case("finetune", "{model_dir}", "--task", "{task_bad_quote}", "--out", "{out}", message="malformed TSV"),
    case("finetune", "{model_bad_json}", "--task", "{tiny_task}", "--out", "{out}", message="config.json: invalid JSON"),
    case("finetune", "no-such-model", "--task", "{tiny_task}", "--out", "{out}", message="unknown model"),
    case("finetune", "{model_dir}", "--out", "{out}", message="Missing option '--task'"),
    # tokenize
    case("tokenize", "{bundle}", message="no text given"),
    case("tokenize", "{bundle}", "hi", "--data", "{tsv_unknown_label}", message="not both"),
    case("tokenize", "{bundle}", "--data", "{missing}", "--runtime", "hf", message="file not found"),
    case("tokenize", "{bundle}", "--data", "{tsv_bad_quote}", "--runtime", "hf", message="malformed TSV"),
    case("tokenize", "{missing}", "hi", "--runtime", "hf", message="bundle directory not found"),
    case("tokenize", "{bundle_bad_manifest}", "hi", "--runtime", "hf", message="invalid JSON"),
    # demo
    case("demo", "--model", "no-such-model", "--task", "{tiny_task}", "--out", "{out}", message="unknown model"),
    case("demo", "--task", "nope", "--out", "{out}", message="unknown task 'nope'"),
    case("demo", "--model", "{model_dir}", "--task", "{tiny_task}", "--steps", "0", "--out", "{out}", message="steps"),
    case("demo", "--model", "{model_dir}", "--task", "{task_bad_quote}", "--out", "{out}", message="malformed TSV"),
    # distill (the vocabulary and label mismatches: tests/prune/test_recovery.py)
    case("distill", "{model_dir}", "--task", "{tiny_task}", "--out", "{out}", message="Missing option '--teacher'"),
    case("distill", "{model_dir}", "--teacher", "{missing}", "--task", "{tiny_task}", "--out", "{out}", message="unknown model"),
    case("distill", "{model_dir}", "--teacher", "{model_dir}", "--task", "{tiny_task}", "--epochs", "0", "--out", "{out}", message="epochs must be"),
    case("distill", "{model_dir}", "--teacher", "{model_dir}", "--task", "{tiny_task}", "--device", "tpu", "--out", "{out}", message="--device must be one of"),
    # sparsify
    case("sparsify", "{missing}", "--task", "{tiny_task}", "--out", "{out}", message="unknown model"),
    case("sparsify", "{model_dir}", "--task", "{tiny_task}", "--sparsity", "1.5", "--out", "{out}", message="sparsity must be"),
    case("sparsify", "{model_dir}", "--task", "{tiny_task}", "--block", "2x2", "--out", "{out}", message="2x2"),
    case("sparsify", "{model_dir}", "--teacher", "{missing}", "--task", "{tiny_task}", "--out", "{out}", message="unknown model"),
    # prune
    case("prune", "{model_dir}", "--task", "{tiny_task}", "--target-sparsity", "1.5", "--out", "{out}", message="target_sparsity must be in [0, 1)"),
    case("prune", "{model_dir}", "--task", "{tiny_task}", "--recover-epochs", "2", "--out", "{out}", message="--recover-epochs need --recover"),
    case("prune", "{model_dir}", "--task", "{tiny_task}", "--recover", "--recover-temperature", "0", "--out", "{out}", message="temperature must be"),
    case("prune", "{model_dir}", "--task", "{tiny_task}", "--target-sparsity", "-0.1", "--out", "{out}", message="target_sparsity must be in [0, 1)"),
    case("prune", "{model_dir}", "--task", "{tiny_task}", "--out", "{out}", message="the recipe has no finetune step"),
    case("prune", "{missing}", "--task", "{tiny_task}", "--out", "{out}", message="unknown model"),
    case("prune", "{model_dir}", "--task", "{tiny_task}", "--method", "fast", "--epochs", "2", "--no-hidden", "--out", "{out}",
         message="--epochs, --hidden do not apply to --method fast"),
    case("prune", "{model_dir}", "--task", "{tiny_task}", "--method", "cofi", "--droprate-init", "1.5", "--out", "{out}",
         message="droprate_init must be in (0, 1)"),
    # quantize
    case("quantize", "{model_dir}", "--scheme", "int2", "--task", "{tiny_task}", "--out", "{out}", message="'int2' is not one of"),
    case("quantize", "{model_dir}", "--scheme", "int8", "--out", "{out}", message="Missing option '--task'"),
    case("quantize", "{model_dir}", "--scheme", "mixed", "--size-mb", "0.001", "--task", "{tiny_task}", "--out", "{out}",
         message="cannot be met"),
    # targets
    case("targets", "show", "nowhere", message="unknown target 'nowhere'; known targets:"),
    case("targets", "show", "{file}", message="not valid TOML"),
    case("targets", "calibrate", "host", "--on", "bogus://x", message="--on 'bogus://x'"),
    case("targets", "calibrate", "host", "--precisions", "executorch/int2", message="--precisions 'executorch/int2': choose from"),
    case("targets", "calibrate", "host", "--merge", "{file}", message="cannot read cost table"),
    case("targets", "calibrate", "pixel-7", "--on", "qemu:cortex-a76", "--precisions", "executorch/int4",
         message="apply to host calibration only"),
    # compress
    case("compress", "--target", "nowhere", "--out", "{out}", message="unknown target 'nowhere'"),
    case("compress", "--task", "nope", "--target", "host", "--out", "{out}", message="unknown task 'nope'"),
    case("compress", "--latency-ms", "-5", "--out", "{out}", message="latency_ms must be a positive number"),
    case("compress", "--target", "{file}", "--out", "{out}", message="not valid TOML"),
    case("compress", "--model", "no-such-model", "--task", "{tiny_task}", "--target", "host", "--out", "{out}",
         message="unknown model"),
    # dynamic (exits and token pruning), and the dynamic options of run / eval
    case("dynamic", "{ft_model_dir}", "--task", "{tiny_task}", "--exits", "9", "--out", "{out}", message="exit on layer 9"),
    case("dynamic", "{ft_model_dir}", "--task", "{tiny_task}", "--exits", "a,b", "--out", "{out}",
         message="--exits must be all, none or layer numbers"),
    case("dynamic", "{ft_model_dir}", "--task", "{tiny_task}", "--threshold", "1.5", "--out", "{out}",
         message="must be in [0, 1]"),
    case("dynamic", "{ft_model_dir}", "--task", "{tiny_task}", "--rule", "patience", "--threshold", "0", "--out", "{out}",
         message="must be an integer from 1"),
    case("dynamic", "{ft_model_dir}", "--task", "{tiny_task}", "--tokens", "keep:2", "--out", "{out}",
         message="keep_ratio must be in (0, 1]"),
    case("dynamic", "{ft_model_dir}", "--task", "{tiny_task}", "--tokens", "half", "--out", "{out}", message="--tokens must be"),
    case("dynamic", "{ft_model_dir}", "--task", "{tiny_task}", "--tokens", "ltp", "--joint-token-drop", "3", "--out", "{out}",
         message="joint_token_drop trains the backbone"),
    case("dynamic", "{ft_model_dir}", "--task", "{tiny_task}", "--rule", "magic", "--out", "{out}", message="'magic'"),
    case("dynamic", "{model_dir}", "--task", "{tiny_task}", "--out", "{out}", message="no finetune step"),
    case("dynamic", "{ft_model_dir}", "--task", "{tiny_task}", "--val-rows", "100", "--out", "{out}",
         message="leaves no training rows"),
    case("export", "{dyn_model_no_heads}", "--seq-len", "32", "--out", "{out}", message="has no dynamic.json"),
    case("run", "{dyn_bundle}", "hi", "--exit-threshold", "1.5", message="--exit-threshold for rule maxprob"),
    case("run", "{dyn_bundle}", "hi", "--keep", "0", message="--keep must be in (0, 1]"),
    case("run", "{dyn_bundle}", "hi", "--static", "--keep", "0.5", message="--static runs every layer"),
    case("run", "{dyn_bundle}", "hi", "--runtime", "native", "--keep", "1.5", message="--keep must be in (0, 1]"),
    case("run", "{dyn_bundle_bad_program}", "hi", "--runtime", "native", message="manifest and program disagree"),
    case("run", "{bundle}", "hi", "--exit-threshold", "0.9", message="needs a dynamic bundle"),
    case("eval", "{bundle}", "--task", "{tiny_task}", "--keep", "0.5", message="needs a dynamic bundle"),
    case("eval", "{dyn_bundle}", "--task", "{tiny_task}", "--exit-threshold", "-1", message="must be in [0, 1]"),
    case("run", "{dyn_bundle_bad_program}", "hi", message="manifest and program disagree"),
    case("run", "{dyn_bundle_bad_layers}", "hi", message="segments must cover layers 1..3"),
    case("run", "{dyn_bundle_bad_threshold}", "hi", message="must be in [0, 1]"),

]


def _rehash(bundle: Path) -> None:
    m = json.loads((bundle / "manifest.json").read_text())
    m["files"] = {n: hashlib.sha256((bundle / n).read_bytes()).hexdigest() for n in m["files"]}
    (bundle / "manifest.json").write_text(json.dumps(m))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_bundle, tiny_model_dir, tiny_task_dir, tiny_dynamic_bundle, tiny_dynamic_dir,
           tiny_ft_dir) -> dict[str, str]:
    """Placeholder -> path: good fixtures and broken copies of them."""
    d = tmp_path_factory.mktemp("bad-inputs")
    paths = {"bundle": tiny_bundle, "model_dir": tiny_model_dir, "tiny_task": tiny_task_dir, "missing": d / "missing",
             "dyn_bundle": tiny_dynamic_bundle, "ft_model_dir": tiny_ft_dir}
    (d / "file").write_text("a file, not a folder\n")
    paths["file"] = d / "file"

    def bundle_copy(name: str) -> Path:
        paths[name] = shutil.copytree(tiny_bundle, d / name)
        return paths[name]

    b = bundle_copy("bundle_sha")
    (b / "vocab.txt").write_text((b / "vocab.txt").read_text() + "extra\n")
    b = bundle_copy("bundle_bad_pte")  # bytes flipped, sha256 updated: only the runtime can tell
    data = bytearray((b / "model.pte").read_bytes())
    for i in range(64, len(data), 997):
        data[i] ^= 0x5A
    (b / "model.pte").write_bytes(bytes(data))
    _rehash(b)
    b = bundle_copy("bundle_bad_manifest")
    (b / "manifest.json").write_text('{"format": ')

    def model_copy(name: str) -> Path:
        paths[name] = shutil.copytree(tiny_model_dir, d / name)
        return paths[name]

    (model_copy("model_bad_json") / "config.json").write_text('{"model_type": "bert", ')
    m = model_copy("model_bad_config")
    cfg = json.loads((m / "config.json").read_text())
    cfg.pop("edgenlp", None)
    cfg.pop("hidden_size", None)
    (m / "config.json").write_text(json.dumps(cfg))
    m = model_copy("model_bad_weights")
    (m / "model.safetensors").write_bytes((m / "model.safetensors").read_bytes()[:100])

    def dyn_copy(name: str, edit) -> None:  # a dynamic bundle whose manifest says something else, re-signed
        paths[name] = shutil.copytree(tiny_dynamic_bundle, d / name)
        m = json.loads((paths[name] / "manifest.json").read_text())
        edit(m["dynamic"])
        (paths[name] / "manifest.json").write_text(json.dumps(m))
        _rehash(paths[name])

    dyn_copy("dyn_bundle_bad_program", lambda dyn: dyn["segments"][1]["pte"].update({"32": "seg7_32"}))
    dyn_copy("dyn_bundle_bad_layers", lambda dyn: dyn["segments"][1].update(layers=[3, 3]))
    dyn_copy("dyn_bundle_bad_threshold", lambda dyn: (dyn["rule"].update(threshold=1.7), dyn["spec"].update(threshold=1.7)))
    paths["dyn_model_no_heads"] = shutil.copytree(tiny_dynamic_dir, d / "dyn_model_no_heads")
    (paths["dyn_model_no_heads"] / "dynamic.json").unlink()

    t = shutil.copytree(tiny_task_dir, d / "task_bad_quote")
    (t / "train.tsv").write_text('text\tlabel\n"an unclosed quote\tpos\nfine\tneg\n')
    (t / "dev.tsv").write_text('text\tlabel\n"an unclosed quote\tpos\nfine\tneg\n')
    paths["task_bad_quote"] = t
    paths["tsv_bad_quote"] = t / "dev.tsv"
    (d / "unknown_label.tsv").write_text("text\tlabel\nfine\tpos\nhmm\tmaybe\n")
    paths["tsv_unknown_label"] = d / "unknown_label.tsv"
    return {k: str(v) for k, v in paths.items()}


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_error_line_exit_2_and_writes_nothing(c: Case, inputs, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    before = {k: _tree(Path(v)) for k, v in inputs.items() if Path(v).is_dir()}
    args = [a.format(out=work / "out", **inputs) for a in c.args]
    r = CliRunner().invoke(main, args)
    lines = [l for l in r.output.splitlines() if l.strip()]
    assert r.exception is None or isinstance(r.exception, SystemExit), f"uncaught {r.exception!r}: {r.output}"
    assert r.exit_code == ExitCode.USER_ERROR, r.output
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output
    assert c.message in lines[0], lines[0]
    assert _tree(work) == [], f"left behind: {_tree(work)}"
    assert {k: _tree(Path(v)) for k, v in inputs.items() if Path(v).is_dir()} == before


def test_every_verb_has_bad_input_cases():
    covered = {c.verb for c in CASES}
    assert not set(COMMANDS) - covered, f"add rows to CASES for: {sorted(set(COMMANDS) - covered)}"
