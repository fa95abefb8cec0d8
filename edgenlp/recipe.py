"""The recipe: the typed, replayable list of steps applied to a model.

Every step that changes a model (``finetune``, ``prune``, ``quantize``,
``export``) is recorded as a :class:`Step`: the step ``type``, its frozen config
(a :class:`edgenlp.config.Config`) and what was measured when it ran
(``result``, plain JSON). Step types are registered with their config class::

    register_step("prune", PruneConfig)

and a serialized recipe is read back into configs with :func:`recipe_from_list`;
an unknown step type or a config written by a newer edgenlp is a clear
:class:`RecipeError`. The recipe travels in a model directory's ``config.json``
(``edgenlp.applied``) and in a bundle's ``manifest.json`` (``applied``).

Serialized form of one step::

    {"step": "finetune", "version": 1, "config": {"type": "FinetuneConfig", ...}, "result": {...}}

``version`` is the config class's ``VERSION``. A step's config may implement two
hooks that downstream stages read instead of guessing from names:

- ``parity_policy(self) -> ParityPolicy``: how ``export`` checks the lowered
  program (reference model and tolerance); the last step that defines one wins,
  fp32 parity otherwise (:data:`FP32_PARITY`).
- ``weight_storage(self) -> dict[str, StorageMarker]``: how the weights ship
  (module name -> marker, ``"*"`` for every linear), read by the profiler.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from edgenlp.config import Config
from edgenlp.errors import EdgeNLPError


class RecipeError(EdgeNLPError):
    """A recipe that cannot be read back: unknown step, newer version, bad config."""


# step type -> "module:ClassName" of its config. Modules are imported on first
# use so that reading a recipe does not import every stage.
_BUILTIN_STEPS: dict[str, str] = {
    "finetune": "edgenlp.finetune.config:FinetuneConfig",
    "export": "edgenlp.export.api:ExportConfig",
    "prune": "edgenlp.prune.config:PruneConfig",
    "quantize": "edgenlp.quantize.config:QuantizeConfig",
}
_REGISTRY: dict[str, type[Config]] = {}


def register_step(step_type: str, config_cls: type[Config]) -> type[Config]:
    """Register ``config_cls`` as the config of step ``step_type`` (usable as a decorator factory target)."""
    if not (isinstance(config_cls, type) and issubclass(config_cls, Config)):
        raise TypeError(f"{config_cls!r} is not an edgenlp Config class")
    known = _REGISTRY.get(step_type)
    if known is not None and known is not config_cls:
        raise ValueError(f"step type {step_type!r} is already registered to {known.__name__}")
    _REGISTRY[step_type] = config_cls
    return config_cls


def step_config_class(step_type: str) -> type[Config]:
    """The config class registered for ``step_type`` (importing built-in stages lazily)."""
    if step_type not in _REGISTRY and step_type in _BUILTIN_STEPS:
        module, _, name = _BUILTIN_STEPS[step_type].partition(":")
        register_step(step_type, getattr(importlib.import_module(module), name))
    try:
        return _REGISTRY[step_type]
    except KeyError:
        known = ", ".join(sorted(set(_REGISTRY) | set(_BUILTIN_STEPS)))
        raise RecipeError(f"unknown recipe step {step_type!r}; known steps: {known}") from None


def step_types() -> tuple[str, ...]:
    return tuple(sorted(set(_REGISTRY) | set(_BUILTIN_STEPS)))


@dataclass(frozen=True)
class Step:
    """One applied step: its type, its config, and what was measured when it ran."""

    type: str
    config: Config
    result: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cls = step_config_class(self.type)
        if not isinstance(self.config, cls):
            raise ValueError(f"step {self.type!r} takes a {cls.__name__}, got {type(self.config).__name__}")
        if not isinstance(self.result, dict):
            raise ValueError(f"step result must be a dict, got {type(self.result).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.type, "version": self.config.VERSION, "config": self.config.to_dict(), "result": dict(self.result)}

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "recipe") -> "Step":
        if not isinstance(d, dict) or not isinstance(d.get("step"), str):
            raise RecipeError(f"{where}: a step must be an object with a 'step' name, got {str(d)[:60]!r}")
        step_type = d["step"]
        config_cls = step_config_class(step_type)
        version = d.get("version")
        if not isinstance(version, int):
            raise RecipeError(f"{where}: step {step_type!r} has no integer 'version'")
        if version > config_cls.VERSION:
            raise RecipeError(
                f"{where}: step {step_type!r} was written by a newer edgenlp (version {version}, this one reads up to "
                f"{config_cls.VERSION}); upgrade edgenlp"
            )
        try:
            config = config_cls.from_dict(d.get("config", {}))
        except (ValueError, TypeError) as exc:
            raise RecipeError(f"{where}: step {step_type!r} has an invalid config ({exc})") from exc
        result = d.get("result", {})
        if not isinstance(result, dict):
            raise RecipeError(f"{where}: step {step_type!r} result must be an object")
        return cls(step_type, config, result)


Recipe = tuple[Step, ...]


def recipe_to_list(recipe: Iterable[Step]) -> list[dict[str, Any]]:
    return [s.to_dict() for s in recipe]


def recipe_from_list(items: Any, *, where: str = "recipe") -> Recipe:
    """Read a serialized recipe back into typed steps (raises :class:`RecipeError`)."""
    if items is None:
        return ()
    if not isinstance(items, list):
        raise RecipeError(f"{where}: the recipe must be a list of steps")
    return tuple(Step.from_dict(d, where=f"{where}[{i}]") for i, d in enumerate(items))


# --------------------------------------------------------------------------- hooks


@dataclass(frozen=True)
class ParityPolicy:
    """How export checks a lowered program against eager PyTorch.

    ``reference`` builds the eager model the lowered program must match from
    the model being lowered (None: that model itself, e.g. a quantized model,
    which runs eagerly as its kernels' reference); ``tolerance`` bounds the
    max |logit difference| against it. ``compare_fp32`` also reports the
    difference and argmax agreement against the fp32 model ``fp32_reference``
    returns (the error the step itself introduces), without gating on it.
    ``runtime_tolerance`` overrides the tolerance per runtime name (e.g. ONNX
    Runtime quantizes activations its own way, so its distance to a
    fake-quantized reference is larger than XNNPACK's). With ``relative`` the
    tolerance scales with the reference's largest |logit| (at least 1): a
    quantized lowering's rounding differences grow with the activations'
    range, so a model with logits of 6 may differ 6x more than one with
    logits of 1 for the same correct kernels. With ``quant_error_fraction``
    (needs ``compare_fp32``) a lowering error of at most that fraction of the
    reference's own distance to fp32 (the emulated quantization error) also
    passes: an eager emulation of dynamically quantized kernels differs from
    them by rounding (which activations land on which side of a step), so its
    distance to the kernels grows with the quantization error itself, while a
    program that stayed fp32 sits at exactly that distance (ratio 1) and a
    broken one far beyond it.
    """

    name: str
    tolerance: float
    reference: Callable[[Any], Any] | None = None  # model -> eager reference model; None = the model itself
    compare_fp32: bool = False
    fp32_reference: Callable[[Any], Any] | None = None  # model -> the fp32 model it came from (None = the model itself)
    runtime_tolerance: tuple[tuple[str, float], ...] = ()
    relative: bool = False
    quant_error_fraction: float | None = None

    def __post_init__(self) -> None:
        if not self.tolerance > 0 or any(not t > 0 for _, t in self.runtime_tolerance):
            raise ValueError(f"tolerances must be > 0, got {self.tolerance}, {self.runtime_tolerance}")
        if self.quant_error_fraction is not None and not (0 < self.quant_error_fraction < 1 and self.compare_fp32):
            raise ValueError(f"quant_error_fraction must be in (0, 1) and needs compare_fp32, got {self.quant_error_fraction}")

    def tolerance_for(self, runtime: str, *, reference_scale: float = 1.0, quant_error: float | None = None) -> float:
        """The max |logit diff| allowed for ``runtime``.

        ``reference_scale`` is the reference's largest |logit| (used when
        ``relative``); ``quant_error`` the reference's max |logit diff| to the
        fp32 model (used when ``quant_error_fraction`` is set).
        """
        tol = dict(self.runtime_tolerance).get(runtime, self.tolerance)
        if self.relative:
            tol *= max(1.0, float(reference_scale))
        if self.quant_error_fraction is not None and quant_error is not None:
            tol = max(tol, self.quant_error_fraction * float(quant_error))
        return tol

    def reference_model(self, model):
        return model if self.reference is None else self.reference(model)

    def fp32_model(self, model):
        return model if self.fp32_reference is None else self.fp32_reference(model)


FP32_PARITY = ParityPolicy("fp32", 1e-4)


def parity_policy(recipe: Iterable[Step], *, default: ParityPolicy = FP32_PARITY) -> ParityPolicy:
    """The parity policy of a recipe: the last step's that defines one, else ``default``."""
    policy = default
    for step in recipe:
        hook = getattr(step.config, "parity_policy", None)
        if hook is not None:
            got = hook()
            if got is not None:
                policy = got
    return policy


def weight_storage(recipe: Iterable[Step]) -> dict:
    """Module name (``"*"``: every linear) -> StorageMarker, from the steps that define ``weight_storage``."""
    out: dict = {}
    for step in recipe:
        hook = getattr(step.config, "weight_storage", None)
        if hook is not None:
            out.update(hook() or {})
    return out
