"""Tiny fine-tuned models for the pruning tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgenlp_testing import tiny_model


def finetuned_tiny(**overrides):
    """A tiny model whose recipe says it was fine-tuned (pruning refuses models that were not)."""
    from dataclasses import replace

    from edgenlp.finetune.config import FinetuneConfig
    from edgenlp.recipe import Step

    model, info = tiny_model(**overrides)
    return model, replace(info, recipe=(Step("finetune", FinetuneConfig(), {"dev": {"accuracy": 0.5}}),))


@pytest.fixture(scope="session")
def make_finetuned():
    """``make_finetuned(**shape_overrides) -> (model, info)`` with a finetune step in the recipe."""
    return finetuned_tiny


@pytest.fixture(scope="session")
def finetuned_tiny_dir(tmp_path_factory) -> Path:
    from edgenlp.models.registry import save_pretrained

    model, info = finetuned_tiny(num_layers=3)
    return save_pretrained(model, info, tmp_path_factory.mktemp("prune-models") / "tiny-ft")
