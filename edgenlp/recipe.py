"""The recipe: the typed, replayable list of steps applied to a model.

Every step that changes a model (``finetune``, ``prune``, ``distill``,
``quantize``, ``export``) is recorded as a :class:`Step`: the step ``type``, its frozen config
(a :class:`edgenlp.config.Config`) and what was measured when it ran
(``result``, plain JSON). The built-in step types and their config classes are
listed in one place, :data:`STEP_CONFIGS` (imported on first use); a plugin
adds its own with :func:`register_step`::

    register_step("my-step", MyStepConfig)

A step's config is an instance of the registered class or of a subclass (the
``prune`` step takes :class:`~edgenlp.prune.config.CofiConfig`,
``FastConfig`` or ``ImportanceConfig``, all ``PruneConfig``), and a
serialized recipe is read back into configs with :func:`recipe_from_list`
(the registered class's ``from_dict`` picks the subclass named by the dict's
``type`` and upgrades dicts an older edgenlp wrote);
an unknown step type or a config written by a newer edgenlp is a clear
:class:`RecipeError`. The recipe travels in a model directory's ``config.json``
(``edgenlp.applied``) and in a bundle's ``manifest.json`` (``applied``).

Serialized form of one step::

    {"step": "finetune", "version": 1, "config": {"type": "FinetuneConfig", ...}, "result": {...}}

``version`` is the config class's ``VERSION``; a step written with an older one is
read through the class's :meth:`~edgenlp.config.Config.upgrade`. A step's config may implement two
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


# The one place the built-in steps are registered: step type -> "module:ClassName" of
# its config. Modules are imported on first use, so that reading a recipe imports
# only the config modules its steps name (and no torch).
STEP_CONFIGS: dict[str, str] = {
    "finetune": "edgenlp.finetune.config:FinetuneConfig",
    "export": "edgenlp.export.api:ExportConfig",
    "prune": "edgenlp.prune.config:PruneConfig",
    "distill": "edgenlp.prune.config:DistillConfig",
    "sparsify": "edgenlp.prune.config:SparsifyConfig",
    "quantize": "edgenlp.quantize.config:QuantizeConfig",
    "dynamic": "edgenlp.dynamic.config:DynamicConfig",
}
_REGISTRY: dict[str, type[Config]] = {}


def register_step(step_type: str, config_cls: type[Config]) -> type[Config]:
    """Register ``config_cls`` as the config of a plugin's step ``step_type`` (built-in steps: :data:`STEP_CONFIGS`)."""
    if not (isinstance(config_cls, type) and issubclass(config_cls, Config)):
        raise TypeError(f"{config_cls!r} is not an edgenlp Config class")
    known = _REGISTRY.get(step_type)
    if known is not None and known is not config_cls:
        raise ValueError(f"step type {step_type!r} is already registered to {known.__name__}")
    _REGISTRY[step_type] = config_cls
    return config_cls


def step_config_class(step_type: str) -> type[Config]:
    """The config class registered for ``step_type`` (importing built-in stages lazily)."""
    if step_type not in _REGISTRY and step_type in STEP_CONFIGS:
        module, _, name = STEP_CONFIGS[step_type].partition(":")
        register_step(step_type, getattr(importlib.import_module(module), name))
    try:
        return _REGISTRY[step_type]
    except KeyError:
        known = ", ".join(sorted(set(_REGISTRY) | set(STEP_CONFIGS)))
        raise RecipeError(f"unknown recipe step {step_type!r}; known steps: {known}") from None


def step_types() -> tuple[str, ...]:
    return tuple(sorted(set(_REGISTRY) | set(STEP_CONFIGS)))


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
    ``runtime_tolerance`` overrides the tolerance per runtime name. With
    ``relative`` the tolerance scales with the reference's largest |logit|
    (at least 1).

    Two further bounds may widen the tolerance, each with its reason
    (:meth:`bound`, recorded in the manifest):

    - ``rounding_reference`` (model -> the reference with its activations left
      unrounded, :func:`edgenlp.quantize.rounding.without_activation_rounding`):
      a kernel that quantizes activations its own way lands about
      sqrt(2) times the reference's own activation-rounding error away from
      it (two independent roundings of the same values). That error is
      measured on the model and the sentences being checked, so the bound
      follows the model (large logits, many classes), not the size of the
      logits. Two limits, both applied: the max |diff| may reach
      ``rounding_factor`` x the reference's max rounding error (the heavy
      tail of single sentences), and the RMS |diff| over all sentences and
      classes ``rms_factor`` x the rounding error's RMS (a systematic defect
      moves every sentence: a wrong scale, a permuted or transposed weight, a
      dropped bias, a wrong int4 group size). ``runtime_rounding_factor``
      overrides the max factor per runtime.
    - ``quant_error_fraction`` (needs ``compare_fp32``): a lowering error up to
      that fraction of the reference's distance to fp32 passes (the earlier
      quantized policy; kept for configs that still name it).
      ``runtime_quant_error_factor`` sets such a multiple (any size) per
      runtime: ONNX Runtime quantizes the fp32 model with its own tools, so its
      distance to the reference holds a second quantization error.
    """

    name: str
    tolerance: float
    reference: Callable[[Any], Any] | None = None  # model -> eager reference model; None = the model itself
    compare_fp32: bool = False
    fp32_reference: Callable[[Any], Any] | None = None  # model -> the fp32 model it came from (None = the model itself)
    runtime_tolerance: tuple[tuple[str, float], ...] = ()
    relative: bool = False
    quant_error_fraction: float | None = None
    rounding_reference: Callable[[Any], Any] | None = None  # model -> the reference without activation rounding
    rounding_factor: float | None = None
    runtime_rounding_factor: tuple[tuple[str, float], ...] = ()
    rounding_note: str = ""  # why rounding_factor has its value (measured ratios), recorded with the bound
    rms_factor: float | None = None  # RMS |diff| limit, x the reference's RMS activation-rounding error
    runtime_quant_error_factor: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if not self.tolerance > 0 or any(not t > 0 for _, t in self.runtime_tolerance):
            raise ValueError(f"tolerances must be > 0, got {self.tolerance}, {self.runtime_tolerance}")
        if self.quant_error_fraction is not None and not (0 < self.quant_error_fraction < 1 and self.compare_fp32):
            raise ValueError(f"quant_error_fraction must be in (0, 1) and needs compare_fp32, got {self.quant_error_fraction}")
        if (self.rounding_reference is None) != (self.rounding_factor is None):
            raise ValueError("rounding_reference and rounding_factor go together")
        if self.rounding_factor is not None and (not self.rounding_factor > 0
                                                 or any(not f > 0 for _, f in self.runtime_rounding_factor)):
            raise ValueError(f"rounding factors must be > 0, got {self.rounding_factor}, {self.runtime_rounding_factor}")
        if self.rms_factor is not None and not (self.rms_factor > 0 and self.rounding_reference is not None):
            raise ValueError(f"rms_factor must be > 0 and needs rounding_reference, got {self.rms_factor}")
        if any(not f > 0 for _, f in self.runtime_quant_error_factor) or (self.runtime_quant_error_factor
                                                                         and not self.compare_fp32):
            raise ValueError(f"runtime_quant_error_factor must be > 0 and needs compare_fp32, got {self.runtime_quant_error_factor}")

    def bound(self, runtime: str, *, reference_scale: float = 1.0, quant_error: float | None = None,
              rounding_error: float | None = None, rounding_rms: float | None = None) -> dict[str, Any]:
        """The max |logit diff| allowed for ``runtime``, which term set it, and why.

        ``reference_scale`` is the reference's largest |logit| (used when
        ``relative``); ``quant_error`` the reference's max |logit diff| to the
        fp32 model (used with ``quant_error_fraction``); ``rounding_error`` the
        reference's max |logit diff| to its ``rounding_reference`` (used with
        ``rounding_factor``), ``rounding_rms`` its RMS over sentences and
        classes (used with ``rms_factor``). Returns ``{"tolerance", "applied",
        "why", "terms"}`` and, with ``rms_factor``, ``rms_limit`` (the RMS
        |diff| allowed, gated alongside the max) with ``rms_why``.
        """
        floor = dict(self.runtime_tolerance).get(runtime, self.tolerance)
        terms: dict[str, Any] = {"absolute": floor}
        candidates = {}
        if self.relative:
            floor *= max(1.0, float(reference_scale))
            terms.update(relative=True, reference_scale=round(float(reference_scale), 6))
            candidates["relative"] = (floor, f"{terms['absolute']:g} x the reference's largest |logit| "
                                             f"({float(reference_scale):.3g}): the kernels' fp32 arithmetic")
        else:
            candidates["absolute"] = (floor, f"{floor:g} absolute: the kernels' fp32 arithmetic")
        if self.quant_error_fraction is not None and quant_error is not None:
            t = self.quant_error_fraction * float(quant_error)
            terms.update(quant_error=float(quant_error), quant_error_fraction=self.quant_error_fraction)
            candidates["quant-error-fraction"] = (t, f"{self.quant_error_fraction:g} x the reference's distance to fp32 "
                                                     f"({float(quant_error):.3g})")
        qfactor = dict(self.runtime_quant_error_factor).get(runtime)
        if qfactor is not None and quant_error is not None:
            terms.update(quant_error=float(quant_error), quant_error_factor=qfactor)
            return self._pick(terms, {**candidates, "quant-error-multiple": (
                qfactor * float(quant_error), f"{qfactor:g} x the reference's distance to fp32 ({float(quant_error):.3g}): "
                                              f"{runtime} quantizes the fp32 model with its own tools")})
        if self.rounding_factor is not None and rounding_error is not None:
            factor = dict(self.runtime_rounding_factor).get(runtime, self.rounding_factor)
            t = factor * float(rounding_error)
            terms.update(activation_rounding_error=float(rounding_error), rounding_factor=factor)
            candidates["activation-rounding"] = (
                t, f"{factor:g} x the reference's own activation-rounding error ({float(rounding_error):.3g}, measured on "
                   f"these sentences): a kernel that rounds activations its own way lands within it"
                   + (f"; {self.rounding_note}" if self.rounding_note else ""))
        out = self._pick(terms, candidates)
        if self.rms_factor is not None and rounding_rms is not None:
            terms.update(activation_rounding_rms=float(rounding_rms), rms_factor=self.rms_factor)
            out["rms_limit"] = max(self.rms_factor * float(rounding_rms), floor)
            out["rms_why"] = (f"{self.rms_factor:g} x the reference's RMS activation-rounding error ({float(rounding_rms):.3g}): "
                              f"another kernel's rounding lands ~1.4x away; a systematic lowering defect moves every sentence")
        return out

    @staticmethod
    def _pick(terms: dict, candidates: dict) -> dict[str, Any]:
        applied = max(candidates, key=lambda k: candidates[k][0])
        tol, why = candidates[applied]
        return {"tolerance": float(tol), "applied": applied, "why": why, "terms": terms}

    def tolerance_for(self, runtime: str, *, reference_scale: float = 1.0, quant_error: float | None = None,
                      rounding_error: float | None = None) -> float:
        """The max |logit diff| allowed for ``runtime`` (:meth:`bound`'s ``tolerance``)."""
        return self.bound(runtime, reference_scale=reference_scale, quant_error=quant_error,
                          rounding_error=rounding_error)["tolerance"]

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
