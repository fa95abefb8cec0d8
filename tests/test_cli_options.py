"""Command-line options come from the configs: ``--help`` shows their defaults, the README shows ``--help``.

Each check reads the truth on its own side: the defaults from the config
dataclasses' fields (or the API function's signature), the shown defaults
from the real ``--help`` output, the README from the file.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
import typing
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from edgenlp.cli import COMMANDS, main
from edgenlp.cli.options import OPTION_TABLES, ConfigOption, SignatureOption, markdown_table, option_table_sections

README = Path(__file__).resolve().parents[1] / "README.md"

# Options whose verb shows another default than the config's, on purpose.
DEFAULT_EXCEPTIONS = {
    ("export", "--quant"),  # no quantization unless asked (QuantizeConfig.scheme defaults to int8 once asked)
    ("profile", "--runtime"),  # eager for a model, the bundle's formats for a bundle
}
# Config fields a verb sets another way than through an option of their own.
FIELDS_WITHOUT_OPTION = {
    ("finetune", "FinetuneConfig", "lr"), ("finetune", "FinetuneConfig", "head_lr"),  # --lr [GROUP=]LR
    ("finetune", "FinetuneConfig", "learner"), ("finetune", "FinetuneConfig", "far"),  # their own options
    ("quantize", "QuantizeConfig", "layer_bits"), ("export", "QuantizeConfig", "layer_bits"),  # chosen by mixed/guard
    ("quantize", "ExportConfig", "parity_tolerance"), ("quantize", "ExportConfig", "parity_samples"),  # the guard's
    # a candidate build takes the cores and GPUs of the stage it replaces; a local Ray instance takes the machine's
    ("compress", "ExecutorConfig", "cpus_per_task"), ("compress", "ExecutorConfig", "gpus_per_task"),
    ("compress", "ExecutorConfig", "ray_cpus"),
    *(("prune", "DistillConfig", f) for f in ("batch_size", "max_seq_len", "train_limit", "seed", "threads")),  # --recover: the pruning's
}  # fmt: skip
LEGACY_JSON_FILE = {"finetune", "prune", "profile"}  # took --json FILE; the spelling is deprecated


def _commands() -> list[tuple[tuple[str, ...], click.Command]]:
    out = []
    for verb in sorted(COMMANDS):
        cmd = main.get_command(click.Context(main), verb)
        out.append(((verb,), cmd))
        if isinstance(cmd, click.Group):
            out += [((verb, name), sub) for name, sub in sorted(cmd.commands.items())]
    return out


COMMAND_LIST = _commands()
IDS = [" ".join(path) for path, _ in COMMAND_LIST]


def _help_lines(path: tuple[str, ...]) -> list[str]:
    r = CliRunner().invoke(main, [*path, "--help"], terminal_width=2000, max_content_width=2000)
    assert r.exit_code == 0, r.output
    return r.output.splitlines()


def _shown_in_help(lines: list[str], param: click.Option) -> str | None:
    """The ``[default: X]`` on ``param``'s line of the ``--help`` text (None: no default shown)."""
    first = param.opts[0]
    starts = [i for i, l in enumerate(lines) if l.strip() and l.split()[0].rstrip(",") == first]
    assert len(starts) == 1, (first, starts)
    text = lines[starts[0]]
    for line in lines[starts[0] + 1:]:  # a long first column puts the help on the next line
        if not line.startswith("      ") or not line.strip():
            break
        text += " " + line.strip()
    m = re.search(r"\[([^\[\]]*)\]\s*$", text)
    if not m:
        return None
    parts = [p[len("default: "):] for p in m.group(1).split("; ") if p.startswith("default: ")]
    return parts[0] if parts else None


def _unwrap(annotation):
    """``X | None`` -> ``X``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1
    return args[0] if optional else annotation


def _parse(text: str, annotation, param: click.Option):
    """``text`` as shown by ``--help`` read back as a value of ``annotation``."""
    ann = _unwrap(annotation)
    if ann is bool:
        names = {param.opts[0].lstrip("-"): True, param.secondary_opts[0].lstrip("-"): False}
        return names[text]
    if ann in (int, float, str):
        return ann(text)
    if typing.get_origin(ann) is tuple:
        item = typing.get_args(ann)[0]
        return tuple(item(x.strip()) for x in text.split(","))
    raise AssertionError(f"no parser for {annotation!r}")


def _expected(param) -> list[tuple[str, object, object]]:
    """``[(label, default, annotation)]`` of the field(s) ``param`` sets."""
    if isinstance(param, SignatureOption):
        default = inspect.signature(param.func).parameters[param.field].default
        annotation = tuple[type(default[0]), ...] if isinstance(default, tuple) else type(default)
        return [("", default, annotation)]
    out = []
    for cls in param.configs:
        f = {f.name: f for f in dataclasses.fields(cls)}[param.field]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out.append((getattr(cls, "method", "") or cls.__name__, default, typing.get_type_hints(cls)[param.field]))
    return out


@pytest.mark.parametrize("path, cmd", COMMAND_LIST, ids=IDS)
def test_help_shows_the_config_defaults(path, cmd):
    lines = _help_lines(path)
    bound = [p for p in cmd.params if isinstance(p, (ConfigOption, SignatureOption))]
    exceptions = set()
    for p in bound:
        shown = _shown_in_help(lines, p)
        expected = _expected(p)
        overridden = isinstance(p, ConfigOption) and p.spelling is not None and "default" in _overrides(p.spelling)
        if overridden:
            exceptions.add((path[0], p.opts[0]))
            assert shown is None or shown == str(p.spelling.default), (p.opts, shown)
            continue
        defaults = {d if not isinstance(d, list) else tuple(d) for _, d, _ in expected}
        if len(defaults) == 1:
            (label, default, annotation), = expected[:1]
            if default is None or default == ():  # nothing to show
                assert shown is None, (p.opts, shown)
            else:
                assert shown is not None, f"{p.opts[0]}: no default shown, config has {default!r}"
                assert _parse(shown, annotation, p) == default, (p.opts, shown, default)
        else:  # one default per method: "(cofi 1, fast 0, importance 0)"
            assert shown is not None and shown.startswith("(") and shown.endswith(")"), (p.opts, shown)
            per = dict(item.rsplit(" ", 1) for item in shown[1:-1].split(", "))
            assert set(per) == {label for label, _, _ in expected}, (p.opts, per)
            for label, default, annotation in expected:
                assert _parse(per[label], annotation, p) == default, (p.opts, label, per[label], default)
    assert exceptions <= DEFAULT_EXCEPTIONS, exceptions - DEFAULT_EXCEPTIONS


def _overrides(spelling) -> set[str]:
    """The Spelling attributes a verb set (those different from Spelling()'s)."""
    base = type(spelling)()
    return {f.name for f in dataclasses.fields(spelling) if getattr(spelling, f.name) != getattr(base, f.name)}


def test_every_listed_default_exception_exists():
    seen = set()
    for path, cmd in COMMAND_LIST:
        for p in cmd.params:
            if isinstance(p, ConfigOption) and p.spelling is not None and "default" in _overrides(p.spelling):
                seen.add((path[0], p.opts[0]))
    assert seen == DEFAULT_EXCEPTIONS


@pytest.mark.parametrize("verb", ["finetune", "prune", "distill", "sparsify", "quantize", "export", "profile", "compress"])
def test_every_config_field_is_an_option(verb):
    cmd = dict(COMMAND_LIST)[(verb,)]
    bound = [p for p in cmd.params if isinstance(p, ConfigOption)]
    classes = {c for p in bound for c in p.configs}
    have = {(c.__name__, p.field) for p in bound for c in p.configs}
    missing = {(verb, c.__name__, f.name) for c in classes for f in dataclasses.fields(c)
               if (c.__name__, f.name) not in have}
    assert missing == {x for x in FIELDS_WITHOUT_OPTION if x[0] == verb}


def test_the_readme_option_tables_are_what_the_options_render():
    sections = option_table_sections(README.read_text())
    assert set(OPTION_TABLES) <= set(sections), f"README lacks <!-- options:VERB --> for {set(OPTION_TABLES) - set(sections)}"
    for verb in sections:
        assert sections[verb] == markdown_table(verb), f"README's {verb} options differ from `edgenlp {verb} --help`"


def test_a_table_row_holds_the_shown_default_and_the_field():
    table = markdown_table("prune")
    row = next(l for l in table.splitlines() if l.startswith("| `--finetune-epochs`"))
    assert "`(cofi 1, fast 0, importance 0)`" in row and "Sets `finetune_epochs`." in row
    row = next(l for l in table.splitlines() if l.startswith("| `--epochs`"))
    assert "| `2.0` |" in row and "(cofi)" in row and "Sets `CofiConfig.epochs`." in row
    row = next(l for l in table.splitlines() if l.startswith("| `--hidden` / `--no-hidden`"))
    assert "| `hidden` |" in row and "(cofi)" in row


# --------------------------------------------------------------------------- --json


@pytest.mark.parametrize("path, cmd", COMMAND_LIST, ids=IDS)
def test_json_means_print_to_stdout_on_every_verb(path, cmd):
    for p in cmd.params:
        if "--json" in p.opts:
            assert p.name == "as_json"
            assert p.is_flag != (path[0] in LEGACY_JSON_FILE), (path, p.is_flag)  # a value only where FILE was taken
        if "--json-out" in p.opts:
            assert p.name == "json_out" and not p.is_flag
    if path[0] in LEGACY_JSON_FILE:
        assert {"as_json", "json_out"} <= {p.name for p in cmd.params}


def _profile(args, tiny_model_dir):
    return CliRunner().invoke(main, ["profile", str(tiny_model_dir), "--seq-len", "8", "--runs", "1", "--warmup", "0",
                                     *map(str, args)])


def test_legacy_json_file_keeps_writing_with_one_deprecation_line(tmp_path, tiny_model_dir):
    out = tmp_path / "p.json"
    r = _profile(["--json", out], tiny_model_dir)
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["seq_len"] == 8
    warnings = [l for l in r.stderr.splitlines() if "deprecated" in l]
    assert len(warnings) == 1 and "--json-out" in warnings[0], r.stderr
    assert "total" in r.stdout  # the tables, as before


def test_json_prints_the_document_and_json_out_writes_it(tmp_path, tiny_model_dir):
    r = _profile(["--json"], tiny_model_dir)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["seq_len"] == 8 and "deprecated" not in r.stderr
    out = tmp_path / "q.json"
    r = _profile(["--json-out", out], tiny_model_dir)
    assert r.exit_code == 0 and json.loads(out.read_text())["seq_len"] == 8 and "deprecated" not in r.output


def test_json_on_run_leaves_the_texts_alone(tiny_bundle):
    r = CliRunner().invoke(main, ["run", str(tiny_bundle), "--json", "a joy to watch", "tedious"])
    assert r.exit_code == 0, r.output
    assert [x["text"] for x in json.loads(r.stdout)] == ["a joy to watch", "tedious"]
