"""The one base class for edgenlp configs: frozen dataclasses that serialize.

Every step config (fine-tuning, pruning, quantization, export, ...) is a frozen
dataclass with typed fields, validated in ``__post_init__`` with
:class:`ValueError`, and derives from :class:`Config` to get ``to_dict`` /
``from_dict`` with a ``type`` and ``version``::

    @dataclass(frozen=True)
    class PruneConfig(Config):
        VERSION = 1
        target_sparsity: float = 0.5

Nested configs serialize as nested dicts and are restored by ``from_dict``
(fields whose annotation names a :class:`Config` subclass); tuples serialize as
lists and come back as tuples.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar


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


class Config:
    """``to_dict``/``from_dict`` with ``type`` and ``version`` for a frozen dataclass.

    ``VERSION`` is the schema version of the subclass; ``from_dict`` refuses a
    dict written by a newer schema and one with fields it does not know.
    """

    VERSION: ClassVar[int] = 1

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": type(self).__name__, "version": self.VERSION}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            out[f.name] = _to_jsonable(getattr(self, f.name))
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        if not isinstance(d, dict):
            raise ValueError(f"expected a {cls.__name__} dict, got {type(d).__name__}")
        if d.get("type", cls.__name__) != cls.__name__:
            raise ValueError(f"expected a {cls.__name__} dict, got type {d.get('type')!r}")
        version = d.get("version", cls.VERSION)
        if not isinstance(version, int) or version > cls.VERSION:
            raise ValueError(f"{cls.__name__} version {version!r} is newer than this edgenlp supports ({cls.VERSION})")
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(d) - set(fields) - {"type", "version"})
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}")
        hints = typing.get_type_hints(cls)
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
        return cls(**kwargs)
