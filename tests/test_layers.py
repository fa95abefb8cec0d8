"""The layer contract (pyproject.toml, ``[tool.importlinter]``): no module imports a higher layer.

import-linter (grimp) sees every import, module-level or inside a function,
so a lazy upward import breaks the contract too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [m.strip() for layer in contract["layers"] for m in layer.replace(":", "|").split("|")]


def test_every_top_level_module_has_a_layer():
    """A new package or module must be placed in the contract, or it would escape it."""
    pkg = REPO / "edgenlp"
    modules = {f"edgenlp.{p.stem}" for p in pkg.glob("*.py") if p.stem != "__init__"}
    modules |= {f"edgenlp.{p.name}" for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    layered = set(_layers())
    assert modules - layered == set(), "modules without a layer in pyproject.toml's [tool.importlinter]"
    assert layered - modules == set(), "layers naming modules that do not exist"


def test_layer_contract_holds():
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.is_file(), "import-linter is not installed (pip install -e '.[test]')"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml"), "--no-cache"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_lazy_exports_are_not_shadowed_by_submodules():
    """A package that loads its names on first use must not name a submodule like an export:
    once the submodule is imported, the import system sets the package attribute to the module and
    ``from pkg import name`` returns the module instead of the function (order-dependent failures)."""
    clashes = []
    for init in sorted((REPO / "edgenlp").rglob("__init__.py")):
        text = init.read_text()
        if "_EXPORTS" not in text:
            continue
        namespace: dict = {}
        start = text.index("_EXPORTS = {")
        exec(text[start:text.index("}", start) + 1], namespace)  # the literal table only
        submodules = {p.stem for p in init.parent.glob("*.py")} | {p.name for p in init.parent.iterdir() if p.is_dir()}
        clashes += [f"{init.parent.name}.{n}" for n in namespace["_EXPORTS"] if n in submodules]
    assert clashes == []
