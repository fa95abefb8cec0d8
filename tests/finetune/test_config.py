"""Config validation, serialization and the CLI's one-line errors."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from edgenlp.finetune.config import FarConfig, FinetuneConfig, LearnerConfig

BAD_CONFIGS = [
    (lambda: LearnerConfig(rank=0), "rank must be an integer >= 1"),
    (lambda: LearnerConfig(rank=-3), "rank must be an integer >= 1"),
    (lambda: LearnerConfig(rank="big"), "rank must be an integer >= 1"),
    (lambda: LearnerConfig(ranks=(("layers.*.ffn_in", 0),)), "rank for 'layers.*.ffn_in'"),
    (lambda: LearnerConfig(targets=("query", "lm_head")), "targets must be a non-empty subset"),
    (lambda: LearnerConfig(priming_epochs=-1), "priming_epochs must be >= 0"),
    (lambda: LearnerConfig(energy=1.5), "energy must be in"),
    (lambda: LearnerConfig(rank="auto", priming_epochs=0), "needs priming"),
    (lambda: FarConfig(keep=0.0), "keep must be in (0, 1]"),
    (lambda: FarConfig(keep=1.01), "keep must be in (0, 1]"),
    (lambda: FarConfig(priming_fraction=1.0), "priming_fraction must be in (0, 1)"),
    (lambda: FinetuneConfig(method="lora"), "method must be one of"),
    (lambda: FinetuneConfig(epochs=0), "epochs must be an integer >= 1"),
    (lambda: FinetuneConfig(batch_size=0), "batch_size"),
    (lambda: FinetuneConfig(lr=-1.0), "lr must be a learning rate in (0, 1]"),
    (lambda: FinetuneConfig(lr=0.0), "lr must be a learning rate in (0, 1]"),
    (lambda: FinetuneConfig(lr=float("nan")), "lr must be a learning rate in (0, 1]"),
    (lambda: FinetuneConfig(lr=5.0), "lr must be a learning rate in (0, 1]"),
    (lambda: FinetuneConfig(head_lr=0), "head_lr must be a learning rate in (0, 1]"),
    (lambda: FinetuneConfig(head_lr=True), "head_lr must be a learning rate in (0, 1]"),
    (lambda: LearnerConfig(priming_lr=-1e-5), "priming_lr must be a learning rate in (0, 1]"),
    (lambda: FinetuneConfig(epochs=-2), "epochs must be an integer >= 1"),
    (lambda: FinetuneConfig(epochs=1.5), "epochs must be an integer >= 1"),
    (lambda: FinetuneConfig(patience=0), "patience must be an integer >= 1"),
    (lambda: FinetuneConfig(early_stop="yes"), "early_stop must be True or False"),
    (lambda: FinetuneConfig(method="full", learner=LearnerConfig()), "use method='learner'"),
]


@pytest.mark.parametrize("make, message", BAD_CONFIGS)
def test_bad_config_raises_value_error(make, message):
    with pytest.raises(ValueError, match=None) as info:
        make()
    assert message in str(info.value)


@pytest.mark.parametrize(
    "config",
    [
        FinetuneConfig(),
        FinetuneConfig(method="learner", learner=LearnerConfig(rank=8, ranks=(("pooler", 4),), priming_steps=3)),
        FinetuneConfig(method="learner", learner=LearnerConfig(rank="auto", energy=0.8, budget=1000)),
        FinetuneConfig(method="far", far=FarConfig(keep=0.25)),
        FinetuneConfig(method="bitfit", lr=1e-4, max_steps=10),
        FinetuneConfig(method="full", epochs=2, head_lr=1e-3, early_stop=False, patience=3),
    ],
)
def test_config_round_trips_through_dict(config):
    d = config.to_dict()
    assert d["type"] == "FinetuneConfig" and d["version"] == 3 and d["resolved_lr"] == config.resolved_lr
    assert d["resolved_head_lr"] == config.resolved_head_lr
    if config.learner is not None:
        assert d["learner"]["type"] == "LearnerConfig"
    assert FinetuneConfig.from_dict(d) == config


def test_version_1_dicts_read_back_as_what_they_ran():
    """Version 1 trained the head at the body's rate for 3 epochs and kept the last epoch."""
    old = {"type": "FinetuneConfig", "version": 1, "method": "full", "epochs": 1, "lr": None, "resolved_lr": 5e-5}
    cfg = FinetuneConfig.from_dict(old)
    assert (cfg.epochs, cfg.resolved_lr, cfg.resolved_head_lr, cfg.early_stop) == (1, 5e-5, 5e-5, False)
    no_epochs = FinetuneConfig.from_dict({"type": "FinetuneConfig", "version": 1, "method": "bitfit", "lr": 1e-4})
    assert (no_epochs.epochs, no_epochs.resolved_head_lr) == (3, 1e-4)
    assert FinetuneConfig().head_lr is None and FinetuneConfig().resolved_head_lr == 2e-3


def test_version_2_dicts_keep_the_body_rate_they_ran_with():
    """Version 2 ran full fine-tuning's unset body rate at 5e-5; version 3's default is 1.6e-4."""
    assert FinetuneConfig().resolved_lr == 1.6e-4 and FinetuneConfig(method="far").resolved_lr == 5e-5
    v2 = {"type": "FinetuneConfig", "version": 2, "method": "full", "epochs": 1, "lr": None}
    assert FinetuneConfig.from_dict(v2).resolved_lr == 5e-5
    assert FinetuneConfig.from_dict({**v2, "method": "learner"}).resolved_lr == 1e-3
    assert FinetuneConfig.from_dict({**v2, "lr": 3e-4}).resolved_lr == 3e-4  # a rate that was set is kept
    assert FinetuneConfig.from_dict({**v2, "version": 3}).resolved_lr == 1.6e-4


def test_method_defaults_fill_in_their_config():
    assert FinetuneConfig(method="learner").learner == LearnerConfig()
    assert FinetuneConfig(method="far").far == FarConfig(keep=0.1, priming_fraction=0.1)
    assert LearnerConfig(priming_epochs=0.5).priming_steps_for(10) == 5
    assert LearnerConfig(priming_steps=7).priming_steps_for(10) == 7


CLI_ERRORS = [
    (["--method", "learner", "--rank", "0"], "rank must be an integer >= 1"),
    (["--method", "learner", "--rank", "x"], "--rank must be a positive integer or 'auto'"),
    (["--method", "far", "--far-keep", "1.5"], "keep must be in (0, 1]"),
    (["--method", "far", "--far-keep", "0"], "keep must be in (0, 1]"),
    (["--method", "sgd"], "method must be one of"),
    (["--method", "full", "--rank", "8"], "--rank only apply to --method learner"),
    (["--lr", "0"], "lr must be a learning rate in (0, 1]"),
    (["--lr", "-1e-4"], "lr must be a learning rate in (0, 1]"),
    (["--lr", "nan"], "lr must be a learning rate in (0, 1]"),
    (["--lr", "head=3"], "head_lr must be a learning rate in (0, 1]"),
    (["--lr", "head=fast"], "--lr 'head=fast': 'fast' is not a number"),
    (["--lr", "tail=1e-3"], "unknown parameter group 'tail' (groups: body, head, priming)"),
    (["--lr", "=1e-3"], "unknown parameter group ''"),
    (["--lr", "priming=1e-4"], "--priming-lr only apply to --method learner"),
    (["--method", "learner", "--lr", "priming=0"], "priming_lr must be a learning rate in (0, 1]"),
    (["--epochs", "0"], "epochs must be an integer >= 1"),
    (["--epochs", "-3"], "epochs must be an integer >= 1"),
    (["--patience", "0"], "patience must be an integer >= 1"),
    (["--device", "tpu"], "--device must be one of auto, cpu, cuda"),
]


@pytest.mark.parametrize("args, message", CLI_ERRORS)
def test_cli_bad_arguments_exit_2_with_one_line(args, message, tmp_path, synth_task_dir):
    from edgenlp.cli import main

    result = CliRunner().invoke(main, ["finetune", "bert-mini", "--task", str(synth_task_dir), "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 2, result.output
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output
    assert not (tmp_path / "o").exists()
