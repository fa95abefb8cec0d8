"""``make_dynamic()``: train exits and token thresholds, calibrate them, save a dynamic model directory.

>>> res = make_dynamic(model, info, load_task("sst2"), DynamicConfig(rule="maxprob", max_drop=0.5))  # doctest: +SKIP
>>> res.save("out/sst2-dynamic")                                                                   # doctest: +SKIP
>>> dyn = load_dynamic("out/sst2-dynamic")                                                          # doctest: +SKIP

A dynamic model directory is a normal model directory (``config.json``,
``model.safetensors``: the base model, loadable by every verb as the static
model; its recipe ends with a ``dynamic`` step) plus:

- ``dynamic.json``: ``{"format": "edgenlp-dynamic", "version": 1, "spec": {DynamicSpec}, "heads":
  {"<layer>": {"hidden", "pooler_width", "num_labels", "activation", "pooling"}}}`` (``pooling``: ``cls`` or
  ``mean``; ``cls`` when absent);
- ``dynamic.safetensors``: the exit heads (``exit_heads.<layer>.pooler.weight``, ...);
- ``dynamic-report.json``: what training and calibration measured (validation curves of every rule).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from edgenlp.dynamic.calibrate import (all_rule_curves, choose, exit_curve, exit_scores, first_exit, fits, layer_flops,
                                      paired_se, static_cost)
from edgenlp.dynamic.config import DynamicConfig
from edgenlp.dynamic.model import DynamicModel, ExitHead, MaskedTrace
from edgenlp.dynamic.spec import DynamicSpec
from edgenlp.errors import EdgeNLPError

log = logging.getLogger(__name__)

DIR_FORMAT = "edgenlp-dynamic"
DIR_VERSION = 1
SPEC_FILE = "dynamic.json"
HEADS_FILE = "dynamic.safetensors"
REPORT_FILE = "dynamic-report.json"
REPORT_VERSION = 1
# With exits and learned token thresholds together, the token scale is calibrated first within this share of the drop.
TOKEN_SHARE_OF_DROP = 0.5
TOKEN_SCALES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)
TOKEN_SCALE_REFINE = 4  # bisections after the grid: the scale to 1/16 of a grid step


@dataclass
class DynamicResult:
    """``model``: the :class:`DynamicModel` (eval mode, CPU); ``info``: recipe extended; ``report``."""

    model: DynamicModel
    info: object
    report: dict

    def save(self, out_dir: str | Path) -> Path:
        """A model directory every verb takes as the static model, plus the exits and thresholds (atomic)."""
        from edgenlp.models.registry import model_dir

        out = Path(out_dir)
        with model_dir(self.model.base, self.info, out) as tmp:
            write_dynamic(tmp, self.model)
            (tmp / REPORT_FILE).write_text(json.dumps(self.report, indent=2) + "\n")
        return out


def write_dynamic(folder: Path, model: DynamicModel) -> None:
    """Write ``dynamic.json`` and ``dynamic.safetensors`` for ``model`` into ``folder``."""
    from safetensors.torch import save_file

    heads = {l: model.exit_heads[str(l)] for l in model.spec.exits[:-1]}
    meta = {"format": DIR_FORMAT, "version": DIR_VERSION, "spec": model.spec.to_dict(),
            "heads": {str(l): {"hidden": h.pooler.in_features, "pooler_width": h.pooler.out_features,
                               "num_labels": h.classifier.out_features, "activation": h.activation, "pooling": h.pooling}
                      for l, h in heads.items()}}
    tensors = {f"exit_heads.{l}.{k}": v.detach().contiguous().clone() for l, h in heads.items() for k, v in h.state_dict().items()}
    if tensors:
        save_file(tensors, str(folder / HEADS_FILE))
    (folder / SPEC_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def is_dynamic_dir(path: str | Path) -> bool:
    return (Path(path) / SPEC_FILE).is_file()


def load_dynamic(model_dir: str | Path, *, base=None) -> DynamicModel:
    """The :class:`DynamicModel` of a directory ``edgenlp dynamic`` wrote.

    ``base`` replaces the directory's own base model (e.g. the same model
    quantized). Raises :class:`EdgeNLPError` naming the file for anything
    missing or inconsistent.
    """
    folder = Path(model_dir)
    meta_file = folder / SPEC_FILE
    if not meta_file.is_file():
        raise EdgeNLPError(f"{folder}: no {SPEC_FILE} (not written by edgenlp dynamic)")
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EdgeNLPError(f"{meta_file}: unreadable ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != DIR_FORMAT or meta.get("version") != DIR_VERSION:
        raise EdgeNLPError(f"{meta_file}: not an {DIR_FORMAT} version {DIR_VERSION} file")
    try:
        spec = DynamicSpec.from_dict(meta["spec"])
    except (KeyError, TypeError, ValueError) as exc:
        raise EdgeNLPError(f"{meta_file}: invalid spec ({exc})") from None
    if base is None:
        from edgenlp.models.registry import load_model

        base, _ = load_model(folder)
    heads = {}
    tensors = {}
    if spec.exits[:-1]:
        from safetensors.torch import load_file

        try:
            tensors = load_file(str(folder / HEADS_FILE))
        except Exception as exc:
            raise EdgeNLPError(f"{folder / HEADS_FILE}: cannot read exit heads ({exc})") from None
    for l in spec.exits[:-1]:
        h = (meta.get("heads") or {}).get(str(l))
        if not isinstance(h, dict):
            raise EdgeNLPError(f"{meta_file}: no head listed for exit {l}")
        try:
            head = ExitHead(int(h["hidden"]), int(h["pooler_width"]), int(h["num_labels"]),
                            activation=h.get("activation", "tanh"), pooling=h.get("pooling", "cls"))
        except (KeyError, TypeError, ValueError) as exc:
            raise EdgeNLPError(f"{meta_file}: exit {l} is not a valid head ({exc})") from None
        state = {k[len(f"exit_heads.{l}."):]: v for k, v in tensors.items() if k.startswith(f"exit_heads.{l}.")}
        try:
            head.load_state_dict(state)
        except RuntimeError as exc:
            raise EdgeNLPError(f"{folder / HEADS_FILE}: exit {l} does not fit ({str(exc).splitlines()[0]})") from None
        heads[l] = head.eval()
    try:
        return DynamicModel(base, spec, heads).eval()
    except ValueError as exc:
        raise EdgeNLPError(f"{meta_file}: {exc}") from None


# --------------------------------------------------------------------------- data


def finetuning_rows(task, info) -> set[int] | None:
    """The training rows the recipe's last finetune step trained on, when it used a seeded subset (``train_limit``
    below the split's size); None when it used every row (or the recipe has no finetune step)."""
    ft = [s for s in info.recipe if s.type == "finetune"]
    if ft and getattr(ft[-1].config, "train_limit", None) and ft[-1].config.train_limit < len(task.train):
        return set(task.train.sample_indices(ft[-1].config.train_limit, seed=ft[-1].config.subset_seed))
    return None


def split_rows(task, info, config: DynamicConfig) -> tuple[list[int], list[int], dict]:
    """(training rows, validation rows, what was done): both carved from ``task.train``, never from dev.

    Validation rows come from the rows the fine-tuning did not train on when
    the recipe's last finetune step used a seeded subset (``train_limit``), so
    the calibration sees sentences the backbone never fitted; otherwise from
    all rows (noted in the report); with ``config.val_min_words``, only from
    rows of at least that many words (:class:`EdgeNLPError` when too few).
    With ``val_min_words`` 0 the rows are those a version-1 step drew.
    """
    import random

    n = len(task.train)
    if config.val_rows >= n:
        raise EdgeNLPError(f"--val-rows {config.val_rows} leaves no training rows (the task has {n})")
    seen = finetuning_rows(task, info)
    rng = random.Random(config.seed)
    eligible = list(range(n))
    if config.val_min_words:
        eligible = [i for i, text in enumerate(task.train.texts) if len(text.split()) >= config.val_min_words]
        if len(eligible) < config.val_rows:
            raise EdgeNLPError(f"only {len(eligible)} training rows have at least {config.val_min_words} words; lower "
                               f"--val-rows ({config.val_rows}) or --val-min-words")
    unseen = [i for i in eligible if seen is None or i not in seen]
    held_out = seen is not None and len(unseen) >= config.val_rows
    pool = unseen if held_out else eligible
    val = sorted(rng.sample(pool, config.val_rows))
    vset = set(val)
    rest = [i for i in range(n) if i not in vset]
    train = sorted(rng.sample(rest, min(len(rest), config.train_limit or len(rest))))
    note = {"train_rows": len(train), "val_rows": len(val), "val_source": "train split",
            "val_unseen_by_finetuning": held_out}
    if config.val_min_words:
        note["val_min_words"] = config.val_min_words
    if not held_out:
        log.warning("validation rows are training rows the fine-tuning also saw: calibration may be optimistic")
    return train, val, note


def check_finetuned(model, info, task) -> None:
    if tuple(model.labels) != tuple(task.labels):
        raise EdgeNLPError(f"{info.source}: the model's labels {list(model.labels)[:5]} are not task {task.name!r}'s "
                           f"{list(task.labels)[:5]}; use a model fine-tuned for this task (edgenlp finetune)")
    if not any(step.type == "finetune" for step in info.recipe):
        raise EdgeNLPError(f"{info.source}: the recipe has no finetune step; exits are distilled from a fine-tuned "
                           "model (run edgenlp finetune first)")
    if any(step.type == "dynamic" for step in info.recipe):
        raise EdgeNLPError(f"{info.source}: the model already has a dynamic step; start from the static model")


def token_layers_of(shape) -> tuple[int, ...]:
    """Layers after which tokens may drop: every layer but the last that has attention heads."""
    return tuple(i + 1 for i, h in enumerate(shape.heads[:-1]) if h > 0)


# --------------------------------------------------------------------------- the step


def trace_split(model: DynamicModel, data, *, pad_id: int, device: str = "cpu", batch_size: int = 64,
                **overrides) -> MaskedTrace:
    """:meth:`DynamicModel.masked_forward` over every row of ``data`` (row order)."""
    from edgenlp.dynamic.train import index_batches
    from edgenlp.finetune.trainer import collate

    logits: dict[int, np.ndarray] = {}
    counts = np.zeros((len(data), model.spec.num_layers), dtype=np.int64)
    for index in index_batches(data, batch_size):
        ids, mask, _ = collate(data, index, pad_id=pad_id)
        t = model.masked_forward(ids.to(device), mask.to(device), **overrides)
        for l, z in t.exit_logits.items():
            logits.setdefault(l, np.zeros((len(data), z.shape[1]), dtype=np.float32))[index] = z
        counts[index] = t.tokens
    return MaskedTrace(logits, counts)


def make_dynamic(model, info, task, config: DynamicConfig, *, device: str = "auto") -> DynamicResult:
    """Add exits and token pruning to ``model`` (fine-tuned on ``task``), calibrated on a validation split of train.

    ``model`` is not changed (a copy is trained when ``config.joint``). Raises
    :class:`EdgeNLPError` for a model not fine-tuned for the task, an exit on
    a layer the model does not have, or a split that leaves no training rows.
    """
    import copy

    from edgenlp.dynamic import train as T
    from edgenlp.finetune.trainer import encode_split, load_tokenizer
    from edgenlp.recipe import Step
    from edgenlp.utils import environment, resolve_device

    check_finetuned(model, info, task)
    L = model.shape.num_layers
    try:
        exits = config.exit_layers(L)
    except ValueError as exc:
        raise EdgeNLPError(str(exc)) from None
    token_layers = token_layers_of(model.shape) if config.tokens != "none" else ()
    if config.tokens != "none" and not token_layers:
        raise EdgeNLPError("token pruning needs a layer with attention heads before the last layer")
    if config.rule == "patience" and config.threshold is not None and config.threshold > len(exits):
        raise EdgeNLPError(f"patience {config.threshold} is more than the {len(exits)} exits")
    dev_name = resolve_device(device)
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    base = copy.deepcopy(model).float().eval().to(dev_name)
    teacher_model = model.eval() if not config.joint else copy.deepcopy(model).eval()
    tokenizer = load_tokenizer(info)
    pad_id = tokenizer.pad_token_id or 0
    train_idx, val_idx, split_note = split_rows(task, info, config)
    train = encode_split(tokenizer, task.train.take(train_idx), task.labels, max_len=config.max_seq_len)
    val = encode_split(tokenizer, task.train.take(val_idx), task.labels, max_len=config.max_seq_len)
    val_labels = np.asarray(val.labels)
    teacher = T.static_logits(teacher_model.to(dev_name), train, pad_id=pad_id, device=dev_name)
    report: dict = {"version": REPORT_VERSION, "config": config.to_dict(), "task": {**task.to_dict(), **split_note},
                    "exits": list(exits), "token_layers": list(token_layers)}

    # 1. token thresholds (learned with the backbone frozen), hardened, scale calibrated
    thresholds: tuple = ()
    if config.tokens == "ltp":
        t0 = time.perf_counter()
        learned, history = T.learn_token_thresholds(base, train, teacher, config, token_layers=token_layers,
                                                    pad_id=pad_id, device=dev_name)
        report["token_training"] = {"learned": learned, "history": history, "seconds": round(time.perf_counter() - t0, 1)}
        per_layer = dict(zip(token_layers, learned))
        thresholds = tuple(per_layer.get(l) for l in range(1, L + 1))
    spec = DynamicSpec(num_layers=L, exits=exits, rule=config.rule,
                       threshold=config.threshold if config.threshold is not None else _never(config.rule, len(exits)),
                       tokens=config.tokens, token_layers=token_layers, token_thresholds=thresholds,
                       keep_ratio=config.keep_ratio)
    dyn = DynamicModel(base, spec, {l: ExitHead.like(base, pooling=config.exit_pooling).to(dev_name)
                                    for l in exits[:-1]}).eval()

    static_trace = trace_split(dyn, val, pad_id=pad_id, device=dev_name, tokens="none")
    static_right = static_trace.exit_logits[L].argmax(-1) == val_labels  # the model before any training here
    static_acc = float(static_right.mean())
    s_cost = static_cost(dyn.shape, static_trace.tokens[:, 0], dyn.num_labels)
    report["validation"] = {"static_accuracy": static_acc, "static_flops": s_cost}

    def with_token_scale(dyn: DynamicModel, budget: float, **kw) -> tuple[DynamicModel, dict]:
        """``dyn`` with the learned thresholds scaled to the cheapest setting that fits ``budget`` on its backbone,
        and the calibration's record."""
        dyn = dyn.with_spec(replace(dyn.spec, token_thresholds=thresholds))  # the scale multiplies the learned ones
        scale, curve = _calibrate_token_scale(dyn, val, val_labels, static_right, s_cost, budget, margin_se=config.margin_se,
                                              pad_id=pad_id, device=dev_name, **kw)
        return (dyn.with_spec(replace(dyn.spec, token_thresholds=_scaled(thresholds, scale))),
                {"budget_points": budget, "margin_se": config.margin_se, "scale": scale, "curve": curve})

    if config.tokens == "ltp":
        budget = config.max_drop * (TOKEN_SHARE_OF_DROP if len(exits) > 1 else 1.0)
        # joint_token_drop: the backbone trains at the (larger) scale that costs that much on the frozen model
        first = budget if config.joint_token_drop is None else config.joint_token_drop
        dyn, report["token_calibration"] = with_token_scale(dyn, first)
        spec = dyn.spec

    # 2. exit heads: distilled from the final classifier (frozen backbone), or joint (with exits, or through the
    #    token pruning alone)
    if len(exits) > 1 or (config.joint and config.tokens != "none"):
        t0 = time.perf_counter()
        if config.joint:
            history = T.train_joint(dyn, train, teacher, config, pad_id=pad_id, device=dev_name)
        else:
            history = T.train_heads(dyn, train, teacher, config, pad_id=pad_id, device=dev_name)
        report["exit_training"] = {"mode": "joint" if config.joint else "heads (backbone frozen)", "history": history,
                                   "seconds": round(time.perf_counter() - t0, 1)}
        if config.joint:  # a new backbone is a new static model
            static_trace = trace_split(dyn, val, pad_id=pad_id, device=dev_name, tokens="none")
            report["validation"]["static_accuracy_after_joint"] = float(
                (static_trace.exit_logits[L].argmax(-1) == val_labels).mean())
        if config.joint_token_drop is not None:  # trained past the budget: the scale that fits it, on the new backbone
            dyn, report["token_calibration_after_joint"] = with_token_scale(dyn, budget, stop_early=False)

    # 3. the exit threshold
    trace = trace_split(dyn, val, pad_id=pad_id, device=dev_name)
    report["validation"]["curves"] = all_rule_curves(trace, val_labels, exits, shape=dyn.shape, static_accuracy=static_acc,
                                                     static_cost_value=s_cost)
    if config.threshold is None and len(exits) > 1:
        point = _calibrated(dyn, trace, val_labels, static_right, s_cost, config)
        dyn = dyn.with_spec(replace(dyn.spec, threshold=point.threshold))
    # the chosen point's drop is against the static model, and so is its standard error (token pruning included)
    final = exit_curve(dyn.spec.rule, trace, val_labels, exits, shape=dyn.shape, static_accuracy=static_acc,
                       static_cost=s_cost, thresholds=[dyn.spec.threshold], reference_right=static_right)[0]
    report["validation"]["chosen"] = {**final.to_dict(), "tokens_kept": [float(x) for x in trace.tokens.mean(0)],
                                      "reach": _reach(dyn.spec, trace), "within_max_drop": final.drop <= config.max_drop + 1e-9,
                                      "margin_se": config.margin_se,
                                      "fits_with_margin": fits(final.drop, final.drop_se, config.max_drop, config.margin_se)}
    dyn = dyn.cpu().eval()
    for p in dyn.parameters():
        p.requires_grad_(False)
    result = {"spec": dyn.spec.to_dict(), "validation": {k: v for k, v in report["validation"].items() if k != "curves"},
              "split": split_note}
    report.update(spec=dyn.spec.to_dict(), seconds=round(time.perf_counter() - start, 1), device=dev_name,
                  threads=torch.get_num_threads(), environment=environment())
    new_info = replace(info, recipe=(*info.recipe, Step("dynamic", config, result)))
    log.info("dynamic: exits %s, rule %s at %s, tokens %s; validation drop %.2f +- %.2f points at %.2fx the static FLOPs",
             list(exits), dyn.spec.rule, dyn.spec.threshold, dyn.spec.tokens, final.drop, final.drop_se, final.cost)
    return DynamicResult(dyn, new_info, report)


# --------------------------------------------------------------------------- the same exits on a transformed model


def recalibrate_exits(source: str | Path, base, info, task, *, id_map=None, heads=None,
                      device: str = "cpu") -> tuple[DynamicModel, dict]:
    """``(model, result)``: the exits of dynamic directory ``source`` on ``base``, their threshold calibrated on ``base``.

    ``base`` is the directory's model transformed (e.g. quantized: int8
    activations move the early exits' logits, so sentences that stopped at an
    exit on the fp32 model go on, or stop wrongly). The threshold is chosen as
    :func:`make_dynamic` chose it, within the step's ``max_drop`` of ``base``'s
    own static accuracy, on the same validation rows (:func:`split_rows` with
    the step's config, ``task`` and ``info``, the directory's recipe). A
    threshold the user fixed, and a model whose only exit is the last layer,
    are kept; the token thresholds are kept. ``id_map`` maps token ids to
    ``base``'s rows (a trimmed vocabulary's ``IdRemap.apply``). ``result``
    (plain JSON) is what a step records so that :func:`exit_threshold_of`
    reads the threshold back. ``heads`` maps the exit heads to the ones that ship (e.g. quantized like ``base``:
    :func:`edgenlp.quantize.schemes.quantize_exit_heads`), so the threshold is calibrated on what runs.
    """
    from edgenlp.finetune.trainer import Encoded, encode_split, load_tokenizer

    dynamic = [s for s in info.recipe if s.type == "dynamic"]
    if not dynamic:
        raise EdgeNLPError(f"{info.source}: the recipe has no dynamic step to calibrate again")
    config: DynamicConfig = dynamic[-1].config
    start = time.perf_counter()
    dyn = load_dynamic(source, base=base)
    if heads is not None and len(dyn.exit_heads):
        dyn = dyn.with_heads(heads(dyn.exit_heads))
    before = float(dyn.spec.threshold)
    out: dict = {"threshold_before": before, "threshold": before}
    if config.threshold is not None or len(dyn.spec.exits) < 2:
        out["kept"] = "the threshold was fixed (--threshold)" if config.threshold is not None else "no early exit"
        return dyn, out
    tokenizer = load_tokenizer(info)
    pad_id = tokenizer.pad_token_id or 0
    _, val_idx, split = split_rows(task, info, config)
    val = encode_split(tokenizer, task.train.take(val_idx), task.labels, max_len=config.max_seq_len)
    if id_map is not None:
        val, pad_id = Encoded([id_map(r) for r in val.ids], val.labels), id_map([pad_id])[0]
    labels = np.asarray(val.labels)
    L = dyn.spec.num_layers
    with torch.no_grad():
        trace = trace_split(dyn.to(device), val, pad_id=pad_id, device=device)
        static = trace if dyn.spec.tokens == "none" else trace_split(dyn, val, pad_id=pad_id, device=device, tokens="none")
    static_right = static.exit_logits[L].argmax(-1) == labels
    static_acc = float(static_right.mean())
    s_cost = static_cost(dyn.shape, static.tokens[:, 0], dyn.num_labels)
    point = _calibrated(dyn, trace, labels, static_right, s_cost, config)
    dyn = dyn.with_spec(replace(dyn.spec, threshold=point.threshold)).cpu().eval()
    out.update(threshold=float(point.threshold), val_rows=split["val_rows"], static_accuracy=static_acc,
               drop=float(point.drop), drop_se=float(point.drop_se), cost=float(point.cost),
               mean_exit_layer=float(point.mean_exit_layer),
               reach=_reach(dyn.spec, trace),
               within_max_drop=bool(point.drop <= config.max_drop + 1e-9), margin_se=config.margin_se,
               fits_with_margin=fits(point.drop, point.drop_se, config.max_drop, config.margin_se),
               seconds=round(time.perf_counter() - start, 1))
    log.info("exit threshold calibrated again: %s %.4g -> %.4g; validation drop %.2f +- %.2f points at %.2fx the static "
             "FLOPs", dyn.spec.rule, before, point.threshold, point.drop, point.drop_se, point.cost)
    return dyn, out


def exit_threshold_of(steps) -> float | None:
    """The exit threshold a step after the last ``dynamic`` step calibrated again (its result's ``exits``), else None."""
    threshold = None
    for step in steps:
        if step.type == "dynamic":
            threshold = None
        elif isinstance(step.result.get("exits"), dict) and "threshold" in step.result["exits"]:
            threshold = float(step.result["exits"]["threshold"])
    return threshold


def _calibrated(dyn: DynamicModel, trace, labels, static_right, s_cost: float, config: DynamicConfig):
    """The cheapest point of ``dyn``'s rule on ``trace`` whose drop against the static model (right per row:
    ``static_right``) fits ``config.max_drop`` with ``config.margin_se`` standard errors to spare (the most
    accurate, warned, when none does)."""
    static_right = np.asarray(static_right, dtype=bool)
    max_drop, margin = config.max_drop, config.margin_se
    points = exit_curve(dyn.spec.rule, trace, labels, dyn.spec.exits, shape=dyn.shape,
                        static_accuracy=float(static_right.mean()), static_cost=s_cost, reference_right=static_right)
    point, feasible = choose(points, max_drop, margin)
    if not feasible:
        log.warning("no %s threshold keeps the validation drop within %.2f points (with %g standard errors to spare); "
                    "using the most accurate (%.2f +- %.2f)", dyn.spec.rule, max_drop, margin, point.drop, point.drop_se)
    elif max_drop > 0 and point.drop_se > max_drop:
        log.warning("the %d validation rows measure the chosen threshold's drop to +-%.2f points (one standard "
                    "error), more than --max-drop %.2f: the threshold is mostly noise; hold out more rows (--val-rows)",
                    len(labels), point.drop_se, max_drop)
    return point


def _reach(spec: DynamicSpec, trace) -> list[float]:
    """The share of ``trace``'s sentences that run each layer at ``spec``'s threshold (the planner's expected latency)."""
    exits = spec.exits
    stop = np.asarray(exits)[first_exit(spec.rule, exit_scores(spec.rule, trace, exits), spec.threshold)]
    return [float((stop >= layer).mean()) for layer in range(1, spec.num_layers + 1)]


def _never(rule: str, num_exits: int) -> float:
    """A threshold that only stops at the last exit (a placeholder until calibration)."""
    return num_exits if rule == "patience" else (1.0 if rule == "maxprob" else 0.0)


def _scaled(thresholds: tuple, scale: float) -> tuple:
    """The learned per-layer token thresholds times ``scale`` (``None``: a layer that never drops tokens)."""
    return tuple(None if t is None else t * scale for t in thresholds)


def _calibrate_token_scale(dyn: DynamicModel, val, labels, static_right, s_cost, budget, *, margin_se: float = 0.0,
                           pad_id, device, stop_early: bool = True):
    """The cheapest scale of the learned thresholds whose drop fits ``budget`` points with ``margin_se`` standard
    errors (paired against the static model, right per row: ``static_right``) to spare: the grid
    :data:`TOKEN_SCALES`, then :data:`TOKEN_SCALE_REFINE` bisections between the cheapest scale that fits and the
    next one past it (FLOPs fall steeply between two grid scales: 0.69x -> 0.34x from 1.25 to 1.5 on IMDB at 128
    tokens). ``stop_early``: the grid stops once a scale drops a point past the budget (on a model that never trained
    with pruning, larger scales only drop more); off for a backbone trained at one scale, which may lose more with no
    pruning than at the scale it trained at (IMDB at 256 tokens: 3.4 points at scale 0, 2.1 at 1.9)."""
    base_th = dyn.spec.token_thresholds
    static_right = np.asarray(static_right, dtype=bool)
    static_acc = float(static_right.mean())
    curve = []

    def point(scale: float, *, refined: bool = False) -> dict:
        th = _scaled(base_th, scale)
        t = trace_split(dyn, val, pad_id=pad_id, device=device, thresholds=th)
        right = t.exit_logits[dyn.spec.num_layers].argmax(-1) == labels
        acc = float(right.mean())
        cost = float(layer_flops(dyn.shape, t.tokens).sum(1).mean()) / s_cost
        curve.append({"scale": scale, "accuracy": acc, "drop": 100 * (static_acc - acc),
                      "drop_se": paired_se(static_right, right), "cost": cost,
                      "tokens_kept": [float(x) for x in t.tokens.mean(0)], **({"refined": True} if refined else {})})
        log.info("token scale %.4g: drop %.2f +- %.2f points, %.2fx FLOPs", scale, curve[-1]["drop"],
                 curve[-1]["drop_se"], cost)
        return curve[-1]

    def within(c: dict) -> bool:
        return fits(c["drop"], c["drop_se"], budget, margin_se)

    def cheapest() -> dict | None:
        ok = [c for c in curve if within(c)]
        return min(ok, key=lambda c: (c["cost"], -c["accuracy"])) if ok else None

    for scale in TOKEN_SCALES:
        if point(scale)["drop"] > budget + 1.0 and stop_early:  # far past the budget: larger scales only drop more
            break
    best = cheapest()
    past = [c for c in curve if best is not None and c["scale"] > best["scale"] and not within(c)]
    if past:
        lo, hi = best["scale"], min(c["scale"] for c in past)
        for _ in range(TOKEN_SCALE_REFINE):
            mid = (lo + hi) / 2
            if within(point(mid, refined=True)):
                lo = mid
            else:
                hi = mid
        best = cheapest()
    if best is None:
        best = curve[0]
    return best["scale"], curve
