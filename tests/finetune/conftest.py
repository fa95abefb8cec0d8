"""Fixtures for fine-tuning tests: a synthetic sentiment task a 2-layer model can learn in seconds."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from edgenlp_testing import write_task_dir

POSITIVE = ("good", "great", "fine", "lovely", "superb", "happy")
NEGATIVE = ("bad", "awful", "poor", "sad", "boring", "ugly")
FILLER = ("the", "film", "was", "a", "movie", "plot", "and", "very", "really", "story")


def _rows(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(("neg", "pos"))
        words = [rng.choice(FILLER) for _ in range(rng.randint(2, 6))]
        words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label == "pos" else NEGATIVE))
        rows.append((" ".join(words), label))
    return rows


@pytest.fixture(scope="session")
def synth_task_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("synth")
    return write_task_dir(d, train=_rows(192, 1), dev=_rows(64, 2))


@pytest.fixture(scope="session")
def synth_task(synth_task_dir):
    from edgenlp.data.tasks import load_task

    return load_task(synth_task_dir)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models train fastest on one thread, and a busy machine does not stall them on thread barriers."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
