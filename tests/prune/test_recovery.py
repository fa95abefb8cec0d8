"""Recovery distillation: it moves a pruned student towards its teacher, its step round-trips, its CLI refuses bad pairs."""

from __future__ import annotations

import json
import random

import pytest
import torch
from click.testing import CliRunner

from edgenlp.cli import main
from edgenlp.data.tasks import load_task
from edgenlp.prune import DistillConfig, LayerMask, MaskDict, apply_masks, distill
from edgenlp.prune.recovery import hidden_projection, layer_map, teacher_kl
from edgenlp_testing import write_task_dir

FAST = dict(batch_size=8, lr=2e-3, threads=1, max_seq_len=16)  # a few big steps on a tiny model: seconds


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    """48 short training rows (enough batches for the student to move), 12 dev rows."""
    rng = random.Random(0)
    words = "good bad fine awful great dull funny boring joy tedious".split()
    rows = [(" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))), rng.choice(["neg", "pos"])) for _ in range(60)]
    return write_task_dir(tmp_path_factory.mktemp("recovery-task"), train=rows[:48], dev=rows[48:])


@pytest.fixture(scope="module")
def task(task_dir):
    return load_task(task_dir)


def half_masks(shape, *, hidden: bool) -> MaskDict:
    """Keep every other head and neuron of each layer (and every other hidden dimension with ``hidden``)."""
    layers = tuple(LayerMask(tuple(range(0, h, 2)), tuple(range(0, f, 2))) for h, f in zip(shape.heads, shape.ffn))
    full = MaskDict.full(shape, method="test")
    return MaskDict(layers, full.model, tuple(range(0, shape.hidden, 2)) if hidden else None, "test")


@pytest.mark.parametrize("hidden", [False, True], ids=["heads+neurons", "hidden-dims"])
def test_recovery_lowers_the_kl_to_the_teacher(hidden, task, make_finetuned):
    teacher, info = make_finetuned(num_layers=2)
    masks = half_masks(teacher.shape, hidden=hidden)
    student = apply_masks(teacher, masks)
    before = {k: v.clone() for k, v in student.state_dict().items()}
    res = distill(student, info, teacher, task, DistillConfig(epochs=4, **FAST), teacher_info=info, masks=masks,
                  device="cpu")
    r = res.report
    assert r["kl_after"] < 0.7 * r["kl_before"], (r["kl_before"], r["kl_after"])
    assert r["steps"] == r["steps_planned"] == 4 * 6 and r["stopped"] is None
    assert r["projection"] == ("kept-dims" if hidden else "identity")
    assert r["layer_map"] == [[1, 1], [2, 2]]
    # the inputs are not changed, the result is what the report measured
    assert all(torch.equal(v, before[k]) for k, v in student.state_dict().items())
    from edgenlp.finetune.trainer import encode_split, load_tokenizer

    dev = encode_split(load_tokenizer(info), task.dev, task.labels, max_len=16)
    assert teacher_kl(res.model, teacher, dev) == pytest.approx(r["kl_after"], rel=1e-4, abs=1e-6)
    assert [s.type for s in res.info.recipe] == ["finetune", "distill"]


def test_the_layer_map_and_the_kept_dims_projection():
    assert layer_map(6, 6) == tuple((i, i) for i in range(1, 7))
    assert layer_map(3, 6) == ((1, 2), (2, 4), (3, 6))
    kept = (1, 4, 5)
    proj = hidden_projection(3, 7, kept)
    x = torch.randn(5, 3)
    y = proj(x)
    assert torch.equal(y[:, list(kept)], x) and torch.all(y[:, [0, 2, 3, 6]] == 0)  # each kept dim back in its place
    assert isinstance(hidden_projection(7, 7), torch.nn.Identity)
    with pytest.raises(ValueError):
        hidden_projection(3, 7, (1, 9, 2))


def test_the_distill_step_round_trips(tmp_path, task, make_finetuned):
    from edgenlp.models.registry import load_model
    from edgenlp.recipe import Step, recipe_from_list, recipe_to_list

    cfg = DistillConfig(epochs=0.5, max_steps=2, budget_minutes=3.5, temperature=3.0, layer_weight=0.25, **FAST)
    step = Step("distill", cfg, {"kl_after": 0.1})
    again = recipe_from_list(json.loads(json.dumps(recipe_to_list([step]))))
    assert again == (step,) and type(again[0].config) is DistillConfig
    # through a saved model directory
    teacher, info = make_finetuned(num_layers=2)
    student = apply_masks(teacher, half_masks(teacher.shape, hidden=False))
    res = distill(student, info, teacher, task, cfg, device="cpu")
    out = res.save(tmp_path / "d")
    _, loaded = load_model(out)
    assert [s.type for s in loaded.recipe] == ["finetune", "distill"] and loaded.recipe[-1].config == cfg
    assert json.loads((out / "distill.json").read_text())["steps"] == 2


def test_the_budget_is_the_steps_where_max_steps_is_set():
    """The prior keys a recovered row by the budget: with ``max_steps`` set, the steps are the length of the run and
    epochs (set however high a task's size needs) do not part two rows; without it, the epochs are the length."""
    from edgenlp.prune.config import DistillConfig

    a, b = DistillConfig(max_steps=1200, epochs=2.0, lr=2e-4), DistillConfig(max_steps=1200, epochs=5.0, lr=2e-4, seed=7)
    assert a.budget() == b.budget() and "epochs" not in a.budget() and a.budget()["max_steps"] == 1200
    assert DistillConfig(max_steps=300, lr=2e-4).budget() != a.budget()
    assert DistillConfig(epochs=2.0).budget()["epochs"] == 2.0 != DistillConfig(epochs=3.0).budget()["epochs"]


@pytest.mark.parametrize("field, value", [("epochs", 0), ("lr", -1.0), ("temperature", 0), ("batch_size", 0),
                                          ("warmup_fraction", 1.0), ("budget_minutes", 0), ("max_steps", 0)])
def test_the_config_refuses_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        DistillConfig(**{field: value})
    with pytest.raises(ValueError, match="not all be 0"):
        DistillConfig(kd_weight=0.0, layer_weight=0.0)


# --------------------------------------------------------------------------- command line


def _save(model, info, path):
    from edgenlp.models.registry import save_pretrained

    return save_pretrained(model, info, path)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, make_finetuned):
    """Saved teacher, its half-pruned student (with masks.json), a teacher with other labels and one with another vocabulary."""
    from dataclasses import replace

    finetuned_tiny = make_finetuned
    root = tmp_path_factory.mktemp("recovery-models")
    teacher, info = finetuned_tiny(num_layers=2)
    masks = half_masks(teacher.shape, hidden=False)
    student_dir = _save(apply_masks(teacher, masks), replace(info, shape=masks.pruned_shape(teacher.shape)), root / "student")
    (student_dir / "masks.json").write_text(json.dumps(masks.to_dict()))
    other_labels, oinfo = finetuned_tiny(num_layers=2, labels=("a", "b", "c"))
    other_vocab, vinfo = finetuned_tiny(num_layers=2, vocab_size=500)
    return {"teacher": _save(teacher, info, root / "teacher"), "student": student_dir,
            "labels": _save(other_labels, oinfo, root / "labels"), "vocab": _save(other_vocab, vinfo, root / "vocab"),
            "masks": student_dir / "masks.json"}


def _run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.mark.parametrize("case", ["no-teacher", "missing-teacher", "vocab", "labels", "bad-option"])
def test_distill_refuses_bad_input_with_one_error_line(case, model_dirs, task_dir, tmp_path):
    out = tmp_path / "out"
    base = ["distill", str(model_dirs["student"]), "--task", str(task_dir), "--out", str(out), "--threads", "1"]
    args = {"no-teacher": base,
            "missing-teacher": [*base, "--teacher", str(tmp_path / "nope")],
            "vocab": [*base, "--teacher", str(model_dirs["vocab"])],
            "labels": [*base, "--teacher", str(model_dirs["labels"])],
            "bad-option": [*base, "--teacher", str(model_dirs["teacher"]), "--temperature", "0"]}[case]
    r = _run(args)
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert {"no-teacher": "--teacher", "missing-teacher": "nope", "vocab": "vocabulary", "labels": "labels",
            "bad-option": "temperature"}[case] in lines[0]
    assert not out.exists() and not list(tmp_path.glob(".out*"))  # nothing written, not even a temporary folder


def test_distill_and_prune_recover_on_the_command_line(model_dirs, task_dir, tmp_path):
    r = _run(["distill", str(model_dirs["student"]), "--teacher", str(model_dirs["teacher"]), "--task", str(task_dir),
              "--max-steps", "2", "--batch-size", "8", "--threads", "1", "--device", "cpu", "--out", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "d" / "distill.json").read_text())
    assert report["steps"] == 2 and report["projection"] == "identity"
    # prune (here: the saved masks, no learning) then distil from the model it pruned; the recipe records both
    r = _run(["prune", str(model_dirs["teacher"]), "--task", str(task_dir), "--masks", str(model_dirs["masks"]),
              "--recover", "--recover-max-steps", "3", "--batch-size", "8", "--threads", "1", "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    pr = json.loads((tmp_path / "p" / "prune.json").read_text())
    assert pr["recovery"]["steps"] == 3 and pr["recovery"]["config"]["batch_size"] == 8
    assert "dev_pruned" in pr and pr["dev_after"] != {} and "recovered from" in r.output
    cfg = json.loads((tmp_path / "p" / "config.json").read_text())
    assert [s["step"] for s in cfg["edgenlp"]["applied"]] == ["finetune", "prune", "distill"]
    r = _run(["prune", str(model_dirs["teacher"]), "--task", str(task_dir), "--recover-epochs", "2",
              "--out", str(tmp_path / "q")])
    assert r.exit_code == 2 and "--recover-epochs need --recover" in r.output and not (tmp_path / "q").exists()
