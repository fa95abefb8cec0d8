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


def parse_int_list(text: str, *, minimum: int = 1) -> tuple[int, ...]:
    """``"1, 2"`` -> ``(1, 2)``; raises ValueError for an empty list, a non-integer or a value below ``minimum``."""
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise ValueError(f"expected comma-separated integers, got {text!r}")
    try:
        values = tuple(int(p) for p in parts if p)
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None
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
