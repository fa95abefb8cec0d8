"""Option types shared by the command-line verbs and the benchmark scripts.

One parser for comma-separated integers (``--threads 1,2``, ``--seq-len 32,128``,
``--buckets 16,32,64``)::

    @click.option("--seq-len", type=IntList(minimum=1), default="128")
    parse_int_list("32, 128")          # (32, 128)
    argparse: ap.add_argument("--threads", type=parse_int_list, default="1,2")

A bad value is a click usage error, which ``edgenlp`` prints as one ``error:``
line with exit status 2.
"""

from __future__ import annotations

import click


def _parse_list(text: str, cast, what: str) -> tuple:
    """``text`` split at commas and each part ``cast``; ValueError naming ``what`` for an empty list or a bad part."""
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise ValueError(f"expected comma-separated {what}, got {text!r}")
    try:
        return tuple(cast(p) for p in parts if p)
    except ValueError:
        raise ValueError(f"expected comma-separated {what}, got {text!r}") from None


def parse_int_list(text: str, *, minimum: int = 1) -> tuple[int, ...]:
    """``"1, 2"`` -> ``(1, 2)``; raises ValueError for an empty list, a non-integer or a value below ``minimum``."""
    values = _parse_list(text, int, "integers")
    low = [v for v in values if v < minimum]
    if low:
        raise ValueError(f"expected integers >= {minimum}, got {low[0]} in {text!r}")
    return values


class IntList(click.ParamType):
    """A click type for comma-separated integers, each at least ``minimum``; converts to a tuple."""

    name = "ints"

    def __init__(self, *, minimum: int = 1) -> None:
        self.minimum = minimum

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            return parse_int_list(value, minimum=self.minimum)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def parse_float_list(text: str) -> tuple[float, ...]:
    """``"0.6, 0.9"`` -> ``(0.6, 0.9)``; raises ValueError for an empty list or a value that is not a number."""
    values = _parse_list(text, float, "numbers")
    if any(v != v for v in values):
        raise ValueError(f"expected comma-separated numbers, got {text!r}")
    return values


class FloatList(click.ParamType):
    """A click type for comma-separated numbers; converts to a tuple."""

    name = "numbers"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            return parse_float_list(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class ChoiceList(click.ParamType):
    """A click type for comma-separated names, each one of ``choices`` (any name when None); converts to a tuple.

    ``all_name`` (e.g. ``both``) stands for every choice.

    >>> ChoiceList(("query", "key", "value")).convert("query, value", None, None)
    ('query', 'value')
    """

    name = "names"

    def __init__(self, choices=None, *, all_name: str | None = None) -> None:
        self.choices = tuple(choices) if choices is not None else None
        self.all_name = all_name  # a name that stands for every choice (``--format both``)

    def get_metavar(self, param, ctx=None) -> str:
        if not self.choices:
            return "NAMES"
        return "[" + "|".join(self.choices + ((self.all_name,) if self.all_name else ())) + "],..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        if self.all_name is not None and str(value).strip() == self.all_name:
            return self.choices
        names = tuple(p.strip() for p in str(value).split(",") if p.strip())
        if not names:
            self.fail(f"expected comma-separated names, got {value!r}", param, ctx)
        bad = [n for n in names if self.choices is not None and n not in self.choices]
        if bad:
            self.fail(f"{bad[0]!r} is not one of {', '.join(self.choices)}", param, ctx)
        return names
