"""``DynamicSpec``: what a dynamic model decides with (no torch: bundles and runtimes read it too)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgenlp.config import Config
from edgenlp.dynamic.rules import RULES, TOKEN_MODES, check_keep_ratio, check_threshold


@dataclass(frozen=True)
class DynamicSpec(Config):
    """What a dynamic model decides with: exits, exit rule and threshold, token pruning.

    ``exits`` are layer numbers (1-based) with an exit, the last layer
    (the model's own classifier) included. ``token_thresholds`` has one entry
    per layer: the ``ltp`` threshold applied after that layer, or None where
    tokens never drop (the last layer, a layer without attention heads).
    ``token_layers`` are the layers after which tokens may drop.
    """

    num_layers: int
    exits: tuple[int, ...]
    rule: str = "maxprob"
    threshold: float = 1.0
    tokens: str = "none"
    token_layers: tuple[int, ...] = ()
    token_thresholds: tuple[float | None, ...] = ()
    keep_ratio: float = 1.0

    def __post_init__(self) -> None:
        L = self.num_layers
        if not isinstance(L, int) or L < 1:
            raise ValueError(f"num_layers must be >= 1, got {L!r}")
        exits = tuple(int(e) for e in self.exits)
        if not exits or list(exits) != sorted(set(exits)) or exits[0] < 1 or exits[-1] != L:
            raise ValueError(f"exits must be ascending layer numbers in 1..{L} ending at {L}, got {list(exits)}")
        object.__setattr__(self, "exits", exits)
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        object.__setattr__(self, "threshold", check_threshold(self.rule, self.threshold, num_exits=len(exits)))
        if self.tokens not in TOKEN_MODES:
            raise ValueError(f"tokens must be one of {', '.join(TOKEN_MODES)}, got {self.tokens!r}")
        layers = tuple(int(t) for t in self.token_layers)
        if any(not 1 <= t < L for t in layers) or list(layers) != sorted(set(layers)):
            raise ValueError(f"token_layers must be ascending layer numbers in 1..{L - 1}, got {list(layers)}")
        if self.tokens == "none" and layers:
            raise ValueError("token_layers given but tokens is 'none'")
        object.__setattr__(self, "token_layers", layers)
        check_keep_ratio(self.keep_ratio, name="keep_ratio")
        th = tuple(None if t is None else float(t) for t in self.token_thresholds)
        if self.tokens == "ltp":
            if len(th) != L or any((t is None) != (i + 1 not in layers) for i, t in enumerate(th)):
                raise ValueError(f"token_thresholds must list {L} values, a number exactly at the token layers {list(layers)}")
            if any(t is not None and (math.isnan(t) or t < 0) for t in th):
                raise ValueError(f"token thresholds must be >= 0, got {list(th)}")
        elif th and any(t is not None for t in th):
            raise ValueError(f"token_thresholds are for tokens='ltp', got tokens={self.tokens!r}")
        object.__setattr__(self, "token_thresholds", th)

    @property
    def segment_ends(self) -> tuple[int, ...]:
        """Layer numbers where a segment ends: every exit and every token layer (the last layer included)."""
        return tuple(sorted(set(self.exits) | set(self.token_layers)))

    def segment_layers(self) -> list[tuple[int, ...]]:
        """0-based layer indices of each segment, in order."""
        out, start = [], 0
        for end in self.segment_ends:
            out.append(tuple(range(start, end)))
            start = end
        return out
