"""The one base class for edgenlp configs: frozen dataclasses that serialize, describe and validate themselves.

Every step config (fine-tuning, pruning, quantization, export, ...) is a frozen
dataclass with typed fields, validated in ``__post_init__`` with
:class:`ValueError` (the ``check_*`` helpers below), and derives from
:class:`Config` to get ``to_dict`` / ``from_dict`` with a ``type`` and
``version``. A field declared with :func:`knob` carries its user-facing help
(and its choices): the command line builds its options from it and the
README's option tables are rendered from those options, so a default lives in
one place::

    @dataclass(frozen=True)
    class FastConfig(PruneConfig):
        VERSION = 2
        samples: int = knob(1024, help="Training rows for the Fisher information and the rescaling.")

        def __post_init__(self) -> None:
            check_int("samples", self.samples, minimum=1)

Nested configs serialize as nested dicts and are restored by ``from_dict``
(fields whose annotation names a :class:`Config` subclass); tuples serialize as
lists and come back as tuples. A dict whose ``type`` names a subclass reads
into that subclass (``PruneConfig.from_dict({"type": "CofiConfig", ...})`` is a
:class:`CofiConfig`), and a dict written by an older schema is rewritten by the
class's :meth:`Config.upgrade` before it is read.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, ClassVar, Iterable


# --------------------------------------------------------------------------- fields


def knob(default: Any = dataclasses.MISSING, *, help: str, choices: Iterable | None = None,
         default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with the help text users see (``--help``, README option tables) and its allowed values.

    >>> @dataclass(frozen=True)                                       # doctest: +SKIP
    ... class C(Config):
    ...     target: str = knob("params", help="What the sparsity measures.", choices=("params", "flops"))
    """
    metadata = {"help": " ".join(help.split()), "choices": tuple(choices) if choices is not None else None}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_help(f: dataclasses.Field) -> str:
    """The help text a :func:`knob` field declares ('' for a plain field)."""
    return f.metadata.get("help", "") if f.metadata else ""


def field_choices(f: dataclasses.Field) -> tuple | None:
    """The allowed values a :func:`knob` field declares (None: any value its check accepts)."""
    return f.metadata.get("choices") if f.metadata else None


def field_default(f: dataclasses.Field) -> Any:
    """A field's default value (calling its factory), or :data:`dataclasses.MISSING`."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


# --------------------------------------------------------------------------- checks
# Shared by every config's __post_init__; each raises ValueError naming the field,
# the accepted values and what it got.


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(name: str, value, *, minimum: int, allow_none: bool = False) -> None:
    """An integer (not a bool) >= ``minimum``."""
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_positive(name: str, value, *, allow_none: bool = False) -> None:
    """A number > 0 (NaN and bools are refused)."""
    if value is None and allow_none:
        return
    if not _is_number(value) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def check_lr(name: str, value) -> None:
    """A learning rate: ``None`` (the default) or a finite number in (0, 1]."""
    if value is None:
        return
    if not _is_number(value) or math.isnan(value) or not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be a learning rate in (0, 1], got {value!r}")


def check_range(name: str, value, low: float, high: float | None = None, *, low_open: bool = False,
                high_open: bool = False, allow_none: bool = False) -> None:
    """A number in the interval ``[low, high]`` (``(`` / ``)`` where open; ``high`` None: no upper bound).

    The message spells the interval: ``target_sparsity must be in [0, 1), got 1.5``.
    """
    if value is None and allow_none:
        return
    ok = _is_number(value) and not math.isnan(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (
            high is None or (value < high if high_open else value <= high))
    if not ok:
        if high is None:
            raise ValueError(f"{name} must be {'>' if low_open else '>='} {low:g}, got {value!r}")
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")


def check_choice(name: str, value, choices: Iterable, *, allow_none: bool = False) -> None:
    """One of ``choices``."""
    if value is None and allow_none:
        return
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


# --------------------------------------------------------------------------- serialization


def _config_classes_in(annotation) -> list[type]:
    """Config subclasses named by a (possibly ``X | None``) annotation."""
    found = []
    for arg in (typing.get_args(annotation) or (annotation,)):
        if isinstance(arg, type) and issubclass(arg, Config):
            found.append(arg)
    return found


def _to_jsonable(value):
    if isinstance(value, Config):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    return value


def _to_tuple(value):
    if isinstance(value, list):
        return tuple(_to_tuple(v) for v in value)
    return value


def _subclasses(cls: type) -> Iterable[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


class Config:
    """``to_dict``/``from_dict`` with ``type`` and ``version`` for a frozen dataclass.

    ``VERSION`` is the schema version of the subclass; ``from_dict`` refuses a
    dict written by a newer schema and one with fields it does not know, and
    passes one written by an older schema through :meth:`upgrade` first.
    """

    VERSION: ClassVar[int] = 1

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": type(self).__name__, "version": self.VERSION}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            out[f.name] = _to_jsonable(getattr(self, f.name))
        return out

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def upgrade(cls, d: dict[str, Any]) -> dict[str, Any]:
        """Rewrite ``d``, written with schema ``d["version"] < VERSION``, into the current schema.

        The default changes nothing; a class whose schema changed overrides it
        (and may return a dict of one of its subclasses' ``type``).
        """
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        if not isinstance(d, dict):
            raise ValueError(f"expected a {cls.__name__} dict, got {type(d).__name__}")
        version = d.get("version", cls.VERSION)
        if not isinstance(version, int) or version > cls.VERSION:
            raise ValueError(f"{cls.__name__} version {version!r} is newer than this edgenlp supports ({cls.VERSION})")
        if version < cls.VERSION:
            d = cls.upgrade(dict(d))
        name = d.get("type", cls.__name__)
        target = cls if name == cls.__name__ else next((s for s in _subclasses(cls) if s.__name__ == name), None)
        if target is None:
            raise ValueError(f"expected a {cls.__name__} dict, got type {name!r}")
        fields = {f.name: f for f in dataclasses.fields(target)}  # type: ignore[arg-type]
        unknown = sorted(set(d) - set(fields) - {"type", "version"})
        if unknown:
            raise ValueError(f"{target.__name__}: unknown field(s) {', '.join(unknown)}")
        hints = typing.get_type_hints(target)
        kwargs = {}
        for name, value in d.items():
            if name not in fields:
                continue
            nested = _config_classes_in(hints.get(name))
            if isinstance(value, dict) and len(nested) == 1:
                value = nested[0].from_dict(value)
            else:
                value = _to_tuple(value)
            kwargs[name] = value
        return target(**kwargs)
