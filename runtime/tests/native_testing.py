"""Helpers for the native runtime tests (importable: runtime/tests is on pytest's pythonpath)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[1]
REPO = RUNTIME.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from edgenlp_testing import exclusive  # noqa: E402  (tests/ is on pytest's pythonpath too)
from make_test_bundle import MINILM_VOCAB, write_bundle  # noqa: E402

HOST_BUILD = RUNTIME / "build" / "x86_64"
from edgenlp.data.tasks import default_data_dir  # noqa: E402

DATA = default_data_dir()  # $EDGENLP_DATA_DIR or ../shared/data, as the CLI finds it

# Texts for the quantized-bundle tests (unicode, punctuation, one long enough for a 128 bucket).
SENTENCES = [
    "it 's a charming and often affecting journey . ",
    "unflinchingly bleak and desperate ",
    "Hello, World! A naïve café-goer's résumé (2nd edition) — 中文 😀",
    "It's not THAT bad... is it?!",
    "word " * 40,
]


def build(*args: str) -> Path:
    """Run runtime/build.sh with args; return the build dir it printed.

    One build at a time across test processes: two makes in one build tree would race.
    """
    if shutil.which("cmake") is None or shutil.which("g++") is None:
        pytest.skip("cmake/g++ missing: run `bash runtime/setup_deps.sh --host`")
    env = dict(os.environ, PYTHON=os.environ.get("PYTHON", sys.executable))  # the interpreter running the tests
    with exclusive(RUNTIME / "build" / ".test-build.lock"):
        proc = subprocess.run(["bash", str(RUNTIME / "build.sh"), *args], capture_output=True, text=True, timeout=900,
                              env=env)
    if proc.returncode != 0:
        raise AssertionError(f"runtime/build.sh {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def unpack(archive: Path, dest: Path) -> Path:
    """Unpack an SDK archive (build.sh --package) into dest; return its top directory."""
    import tarfile

    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="tar")
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    return top


def hf_ids(tok, texts, *, max_len: int) -> list[list[int]]:
    return tok(list(texts), truncation=True, max_length=max_len)["input_ids"]


CACHE = REPO / ".cache" / "native-test-bundles"


def cached_bundle(name: str, **kwargs) -> Path:
    """write_bundle(**kwargs) once per content: reused across sessions from .cache/ (lowering takes minutes).

    The key covers the generating sources, the arguments and the torch /
    executorch / torchao versions, so any change rebuilds.
    """
    from importlib.metadata import version

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for src in ("make_test_bundle.py", "quant_programs.py"):
        h.update((here / src).read_bytes())
    h.update(repr(sorted(kwargs.items())).encode())
    h.update(" ".join(version(p) for p in ("torch", "executorch", "torchao")).encode())
    out = CACHE / f"{name}-{h.hexdigest()[:16]}"
    with exclusive(CACHE / f".{out.name}.lock"):  # another test process may be writing the same bundle
        if not (out / "manifest.json").is_file():
            write_bundle(out, **kwargs)
    return out


def trim_ids(texts, tok) -> list[int]:
    """A trimmed vocabulary for ``texts``: the special tokens, then every id they use (sorted)."""
    specials = [tok.convert_tokens_to_ids(t) for t in (tok.pad_token, tok.unk_token, tok.cls_token, tok.sep_token)]
    used = {i for row in tok(list(texts))["input_ids"] for i in row}
    return specials + sorted(used - set(specials))
