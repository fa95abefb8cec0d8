"""Command-line options built from config fields, and the options every verb shares.

A verb that builds a config declares its options with :func:`config_options`:
one option per field of the config class(es), its type from the annotation,
its default and help from the field (:func:`edgenlp.config.knob`), so a
default lives only in the config. :func:`given` then returns the fields the
user set (the rest keep the config's own defaults)::

    @click.command("prune")
    @config_options(CofiConfig, FastConfig, ImportanceConfig, spellings={"mask_file": Spelling(name="masks")})
    @click.pass_context
    def prune_cmd(ctx, **_):
        config = build_config(METHOD_CONFIGS[method], given(ctx))

Several classes (one per method) give one option per field; a field only some
of them have says so in its help (``(cofi) Mask-learning epochs.``), and a
default that differs between them is shown per method. :class:`Spelling`
keeps a verb's established flag name (``--seq-len`` for ``max_seq_len``) or
type where the generated one would not do; the table is the whole mapping
from flags to fields. The shared options (task and data, output, threads,
device, ``--json``) are declared once here.

:func:`markdown_table` renders a verb's options as the README's tables
(sections ``<!-- options:VERB -->`` ... ``<!-- /options:VERB -->``,
:func:`rewrite_option_tables`); a test keeps README, ``--help`` and the
configs equal.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import click

from edgenlp.cli.types import ChoiceList, FloatList, IntList
from edgenlp.config import Config, field_choices, field_default, field_help

_KEEP = object()  # Spelling field not overridden


@dataclass(frozen=True)
class Spelling:
    """How one verb spells a config field where the generated option would not do.

    ``name`` is the flag without its dashes (``"seq-len"``; default: the
    field's name with dashes, after the group's prefix). ``type`` replaces the
    click type derived from the annotation, ``multiple`` makes the option
    repeatable, ``help`` replaces the field's help where the verb reads it
    differently, and ``default`` replaces the shown default where the verb's
    differs from the config's (e.g. ``export --quant``: no quantization unless
    given); the README test lists every such exception.
    """

    name: str | None = None
    type: Any = None
    multiple: bool = False
    help: str | None = None
    default: Any = _KEEP
    metavar: str | None = None


class ConfigOption(click.Option):
    """A click option bound to field ``field`` of the config class(es) ``configs`` (group ``group``)."""

    def __init__(self, *args, field: str, group: str, configs: tuple[type, ...], spelling: Spelling | None, **kw) -> None:
        super().__init__(*args, **kw)
        self.field = field
        self.group = group
        self.configs = configs
        self.spelling = spelling


def _unwrap_optional(annotation):
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _is_config(annotation) -> bool:
    annotation = _unwrap_optional(annotation)
    return isinstance(annotation, type) and issubclass(annotation, Config)


def _click_type(owner: type, name: str, annotation, choices):
    """The click type of a field: bool (flag), int, float, str (a choice where the field lists them), tuples as comma lists."""
    ann = _unwrap_optional(annotation)
    if ann is bool:
        return bool
    if ann is int:
        return click.INT
    if ann is float:
        return click.FLOAT
    if ann is str:
        return click.Choice(list(choices)) if choices else click.STRING
    if typing.get_origin(ann) is tuple:
        args = typing.get_args(ann)
        if args == (int, Ellipsis):
            return IntList()
        if args == (str, Ellipsis):
            return ChoiceList(choices)
        if args == (float, Ellipsis):
            return FloatList()
    raise TypeError(f"{owner.__name__}.{name}: no command-line type for {annotation!r}; give the verb a Spelling(type=...)")


def _fields(cls: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(cls))


def _label(cls: type) -> str:
    return getattr(cls, "method", "") or cls.__name__


def format_value(value: Any) -> str:
    """How a default reads on the command line (``5e-05``, ``query,key``, ``params``)."""
    if isinstance(value, (tuple, list)):
        return ",".join(format_value(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def config_options(*classes: type, group: str = "", prefix: str = "", label: str = "",
                   spellings: dict[str, Spelling] | None = None, exclude: Iterable[str] = ()) -> Callable:
    """A decorator adding one option per field of ``classes`` (nested configs and ``exclude`` left out).

    ``group`` keeps the options of one config apart from another's on the same
    verb (their parameter names start with ``group_``; :func:`given` reads one
    group); ``prefix`` starts their flags (``far-`` -> ``--far-keep``) and
    ``label`` their help (``(far) ...``).
    """
    spellings = dict(spellings or {})
    exclude = set(exclude)
    names: list[str] = []
    owners: dict[str, list[type]] = {}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in _fields(cls):
            if f.name in exclude or _is_config(hints[f.name]):
                continue
            if f.name not in owners:
                names.append(f.name)
                owners[f.name] = []
            owners[f.name].append(cls)
    unknown = set(spellings) - set(names)
    if unknown:
        raise TypeError(f"spellings for fields that get no option: {sorted(unknown)}")
    options = [_option(name, tuple(owners[name]), classes, group=group, prefix=prefix, label=label,
                       spelling=spellings.get(name)) for name in names]

    def deco(f):
        for o in reversed(options):  # as stacked click.option decorators would add them
            if isinstance(f, click.Command):
                f.params.append(o)
            else:
                f.__click_params__ = getattr(f, "__click_params__", [])
                f.__click_params__.append(o)
        return f

    return deco


def _option(name: str, owners: tuple[type, ...], classes: tuple[type, ...], *, group: str, prefix: str, label: str,
            spelling: Spelling | None) -> ConfigOption:
    first = owners[0]
    fld = {f.name: f for f in _fields(first)}[name]
    annotation = typing.get_type_hints(first)[name]
    sp = spelling or Spelling()
    flag = sp.name or prefix + name.replace("_", "-")
    param = f"{group}_{name}" if group else name
    helps = {_label(c): field_help({f.name: f for f in _fields(c)}[name]) for c in owners}
    if len(set(helps.values())) == 1:
        help_text = field_help(fld)
    else:  # the methods read the field differently
        help_text = "; ".join(f"{m}: {h.rstrip('.')}" for m, h in helps.items()) + "."
    if sp.help is not None:
        help_text = sp.help
    if len(owners) < len(classes):
        help_text = f"({', '.join(_label(c) for c in owners)}) {help_text}"
    elif label:
        help_text = f"({label}) {help_text}"
    defaults = [field_default({f.name: f for f in _fields(c)}[name]) for c in owners]
    if sp.default is not _KEEP:
        default, show = sp.default, sp.default is not None
    elif all(d == defaults[0] for d in defaults):
        default, show = defaults[0], defaults[0] is not None
    else:  # a default per method: shown per method, the config applies its own
        default, show = None, ", ".join(f"{_label(c)} {format_value(d)}" for c, d in zip(owners, defaults))
    ctype = sp.type if sp.type is not None else _click_type(first, name, annotation, field_choices(fld))
    kw: dict[str, Any] = dict(field=name, group=group, configs=owners, spelling=spelling, help=help_text,
                              show_default=show)
    if ctype is bool:
        decls = [f"--{flag}/--no-{flag}", param]
        return ConfigOption(decls, default=default, **kw)
    return ConfigOption([f"--{flag}", param], type=ctype, default=default, multiple=sp.multiple, metavar=sp.metavar, **kw)


def given(ctx: click.Context, group: str = "") -> dict[str, Any]:
    """``{field: value}`` of the config options of ``group`` that the user set (the rest keep the config's defaults)."""
    out = {}
    for p in ctx.command.params:
        if isinstance(p, ConfigOption) and p.group == group and p.name in ctx.params:
            if ctx.get_parameter_source(p.name) is not click.core.ParameterSource.DEFAULT:
                out[p.field] = ctx.params[p.name]
    return out


def flags_of(ctx: click.Context, fields: Iterable[str], group: str = "") -> list[str]:
    """The flags (``--rank``) of the given fields of ``group``, in the command's order."""
    wanted = set(fields)
    return [p.opts[0] for p in ctx.command.params
            if isinstance(p, ConfigOption) and p.group == group and p.field in wanted]


def build_config(cls: type, fields: dict[str, Any]):
    """``cls(**fields)``; a value the config refuses is a one-line user error."""
    from edgenlp.errors import EdgeNLPError

    try:
        return cls(**fields)
    except ValueError as exc:
        raise EdgeNLPError(f"invalid option: {exc}") from None


class SignatureOption(click.Option):
    """A click option whose default is keyword ``name`` of API function ``func`` (verbs without a config)."""

    def __init__(self, *args, func: Callable, field: str, **kw) -> None:
        super().__init__(*args, **kw)
        self.func = func
        self.field = field


def signature_option(func: Callable, name: str, *decls: str, **kw) -> Callable:
    """``click.option(*decls, **kw)`` with the default of ``func``'s keyword ``name`` (shown in ``--help``)."""
    default = inspect.signature(func).parameters[name].default
    if default is inspect.Parameter.empty:
        raise TypeError(f"{func.__name__}() has no default for {name!r}")
    kw.setdefault("show_default", default is not None)
    return click.option(*decls, cls=SignatureOption, func=func, field=name, default=default, **kw)


# --------------------------------------------------------------------------- shared options


def _decorate(f, options):
    for o in reversed(options):
        f = o(f)
    return f


TASK_HELP = "Built-in task (see `edgenlp tasks`) or a folder with train.tsv and dev.tsv."


def task_option(*, required: bool = True, help: str = TASK_HELP, default: str | None = None) -> Callable:
    """``--task``."""
    kw = {} if default is None else {"default": default, "show_default": True}  # (click: a given default satisfies required)
    return click.option("--task", required=required, help=help, **kw)


def data_dir_option(f):
    """``--data-dir``."""
    return click.option("--data-dir", type=click.Path(file_okay=False), default=None,
                        help="Folder holding the built-in task folders (default: the shared data folder).")(f)


def task_options(*, required: bool = True, help: str = TASK_HELP) -> Callable:
    """``--task`` and ``--data-dir``."""
    return lambda f: _decorate(f, [task_option(required=required, help=help), data_dir_option])


def out_option(help: str, *, default: str | None = None) -> Callable:
    """``--out DIR`` (required unless given a default)."""
    kw = {"required": True} if default is None else {"default": default, "show_default": True}
    return click.option("--out", "out_dir", type=click.Path(file_okay=False), help=help, **kw)


def threads_option(help: str, *, default: Any = None, many: bool = False) -> Callable:
    """``--threads``: one count, or a comma-separated list with ``many``."""
    if many:
        return click.option("--threads", type=IntList(), default=default, show_default=format_value(default), help=help)
    return click.option("--threads", type=int, default=default, show_default=default is not None, help=help)


def device_option(help: str = "Where training runs: auto (CUDA when present), cpu or cuda; export, evaluation and "
                              "latency use the CPU.") -> Callable:
    from edgenlp.utils import DEVICES

    return click.option("--device", default=DEVICES[0], show_default=True, metavar="|".join(DEVICES), help=help)


def init_seed_option(f):
    """``--seed`` of weights a checkpoint lacks (``load_model``'s; e.g. a new classifier head)."""
    return click.option("--seed", type=int, default=0, show_default=True,
                        help="Seed for weights a checkpoint lacks (e.g. a new classifier head).")(f)


def quiet_option(f):
    return click.option("-q", "--quiet", is_flag=True, help="No progress (a bar on a terminal, a line every 30 s in a log).")(f)


JSON_HELP = "Print the result as JSON on stdout."
JSON_DEPRECATION = ("warning: --json FILE is deprecated and goes away in the next release; use --json-out FILE "
                    "(--json alone prints the JSON to stdout)")


class _LegacyJsonFile(str):
    """The value of ``--json FILE`` (the old spelling of ``--json-out FILE``)."""


def _json_callback(ctx, param, value):
    if value is None or value is False:
        return False
    if value is True or value == "-":
        return True
    click.echo(JSON_DEPRECATION, err=True)
    return _LegacyJsonFile(value)


def json_options(*, file: bool = True, legacy_file: bool = False, help: str = JSON_HELP) -> Callable:
    """``--json`` (the result as JSON on stdout) and, with ``file``, ``--json-out FILE``.

    ``legacy_file``: the verb once took ``--json FILE``; that spelling keeps
    writing FILE for a release, with a one-line deprecation warning. Only
    verbs without variadic arguments may take it (``--json`` then takes an
    optional value). Read both with :func:`json_request`.
    """
    if legacy_file:
        as_json = click.option("--json", "as_json", is_flag=False, flag_value="-", default=None, metavar="",
                               callback=_json_callback, help=help + " (--json FILE: deprecated, use --json-out.)")
    else:
        as_json = click.option("--json", "as_json", is_flag=True, help=help)
    opts = [as_json]
    if file:
        opts.append(click.option("--json-out", "json_out", default=None, type=click.Path(dir_okay=False),
                                 help="Also write the result as JSON to this file."))
    return lambda f: _decorate(f, opts)


def json_request(as_json, json_out: str | None = None) -> tuple[bool, str | None]:
    """``(print JSON to stdout, file to write it to)`` from :func:`json_options`' two values."""
    if isinstance(as_json, _LegacyJsonFile):
        return False, json_out or str(as_json)
    return bool(as_json), json_out


def emit_json(doc: Any, *, stdout: bool, out_file: str | None) -> None:
    """Write ``doc`` to ``out_file`` (atomically) and/or print it."""
    if out_file:
        from edgenlp.utils import atomic_write_json

        atomic_write_json(out_file, doc)
    if stdout:
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))


# --------------------------------------------------------------------------- README tables

OPTION_TABLES = ("finetune", "prune", "distill", "sparsify", "quantize", "export", "profile", "compress")


def _verb(command: str) -> click.Command:
    from edgenlp.cli import COMMANDS

    import importlib

    module, attr, _ = COMMANDS[command]
    return getattr(importlib.import_module(module), attr)


def shown_default(param: click.Parameter, ctx: click.Context) -> str | None:
    """The default ``--help`` shows for ``param`` (None: none shown)."""
    record = param.get_help_record(ctx)
    if record is None:
        return None
    m = re.search(r"\[([^\[\]]*)\]\s*$", record[1])
    if not m:
        return None
    for part in m.group(1).split("; "):
        if part.startswith("default: "):
            return part[len("default: "):]
    return None


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown_table(command: str) -> str:
    """The options of ``edgenlp COMMAND`` as a markdown table: flags, default (as ``--help`` shows it), meaning."""
    cmd = _verb(command)
    ctx = click.Context(cmd, info_name=command)
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for p in cmd.params:
        if not isinstance(p, click.Option) or p.hidden:
            continue
        flags = " / ".join(f"`{o}`" for o in (*p.opts, *p.secondary_opts))
        default = shown_default(p, ctx)
        meaning = p.help or ""
        if p.required:
            meaning += " Required."
        if isinstance(p, ConfigOption):
            meaning += f" Sets `{p.configs[0].__name__}.{p.field}`." if len(p.configs) == 1 else f" Sets `{p.field}`."
        rows.append(f"| {flags} | {_cell(f'`{default}`') if default is not None else ''} | {_cell(meaning)} |")
    return "\n".join(rows) + "\n"


_SECTION = re.compile(r"(<!-- options:(?P<verb>[\w-]+) -->\n)(?P<body>.*?)(<!-- /options:(?P=verb) -->)", re.S)


def rewrite_option_tables(text: str) -> str:
    """``text`` (the README) with every ``<!-- options:VERB -->`` section replaced by :func:`markdown_table`."""
    return _SECTION.sub(lambda m: m.group(1) + markdown_table(m.group("verb")) + m.group(4), text)


def option_table_sections(text: str) -> dict[str, str]:
    """``{verb: table text}`` of the marked option sections in ``text``."""
    return {m.group("verb"): m.group("body") for m in _SECTION.finditer(text)}
