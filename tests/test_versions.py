"""One release version across the C API, the Java API, the Python package and CHANGELOG.md."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import edgenlp
from edgenlp.bundle import FORMAT_VERSION

REPO = Path(__file__).resolve().parents[1]
HEADER = (REPO / "runtime/include/edgenlp.h").read_text()
JAVA = (REPO / "runtime/java/src/main/java/org/edgenlp/EdgeNlp.java").read_text()


def _define(name: str) -> int:
    return int(re.search(rf"^#define {name} (\d+)$", HEADER, re.M).group(1))


C_VERSION = ".".join(str(_define(f"EDGENLP_VERSION_{p}")) for p in ("MAJOR", "MINOR", "PATCH"))


def test_python_java_and_c_carry_one_version():
    assert edgenlp.__version__ == C_VERSION
    assert re.search(r'public static final String VERSION = "([^"]+)";', JAVA).group(1) == C_VERSION
    assert int(re.search(r"public static final int ABI_VERSION = (\d+);", JAVA).group(1)) == _define("EDGENLP_ABI_VERSION")


def test_package_metadata_takes_the_version():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    if "version" in project:
        assert project["version"] == C_VERSION
    else:  # dynamic: read from edgenlp.__version__ by the build backend
        assert "version" in project["dynamic"]


def test_bundle_format_and_changelog():
    assert _define("EDGENLP_BUNDLE_FORMAT_VERSION") == FORMAT_VERSION
    changelog = (REPO / "CHANGELOG.md").read_text()
    top = re.search(r"^## (\S+)\n\n(.*?)\n", changelog, re.M)
    assert top.group(1) == C_VERSION, "CHANGELOG.md's newest entry is not the current version"
    assert f"format_version` {FORMAT_VERSION}" in top.group(2) and f"ABI level {_define('EDGENLP_ABI_VERSION')}" in top.group(2)


def test_abi_table_lists_every_level():
    """The header's ABI table has one row per level up to EDGENLP_ABI_VERSION."""
    rows = [int(m) for m in re.findall(r"^ \*   (\d+) {2,}\d+\.\d+\.\d+ ", HEADER, re.M)]
    assert rows == list(range(1, _define("EDGENLP_ABI_VERSION") + 1))
