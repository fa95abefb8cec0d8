"""What each fine-tuning method trains, phase by phase.

A method is a class registered in :data:`METHOD_TYPES` under its name. Built
for one run, it lists its :class:`Phase` objects (how many steps, and what to
train: ``enter()`` switches ``requires_grad`` and returns optimizer parameter
groups) and, after training, ``finish()`` returns the model to plain
``nn.Linear`` layers and a dict for the report. The trainer knows nothing
about any one method.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

from edgenlp.errors import EdgeNLPError
from edgenlp.finetune import far as far_mod
from edgenlp.finetune import learner as learner_mod
from edgenlp.finetune.config import ATTENTION_LINEARS, FinetuneConfig, default_head_lr, learner_schedule
from edgenlp.finetune.rank import choose_ranks, svd_factors
from edgenlp.models.encoder import EncoderClassifier

log = logging.getLogger(__name__)


@dataclass
class Phase:
    name: str
    steps: int
    enter: Callable[[], list[dict]]  # sets requires_grad; returns AdamW parameter groups


def param_groups(params: Iterable[nn.Parameter], *, lr: float, weight_decay: float, name: str = "body") -> list[dict]:
    """AdamW groups: matrices decay, vectors (biases, norms) do not; each group remembers its name and base lr."""
    params = list(params)
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = []
    if decay:
        groups.append({"params": decay, "lr": lr, "base_lr": lr, "weight_decay": weight_decay, "name": name})
    if no_decay:
        groups.append({"params": no_decay, "lr": lr, "base_lr": lr, "weight_decay": 0.0, "name": name})
    return groups


def head_parameters(model: EncoderClassifier) -> list[nn.Parameter]:
    """The task head: the classifier and the pooler feeding it (Learner factors on the pooler included)."""
    return list(model.classifier.parameters()) + list(model.pooler.parameters())


def split_head(model: EncoderClassifier, params: Iterable[nn.Parameter], *, lr: float, head_lr: float,
               weight_decay: float, name: str = "body") -> list[dict]:
    """Groups for ``params``: the head's at ``head_lr`` (group ``"head"``), the rest at ``lr`` (group ``name``)."""
    head = {id(p) for p in head_parameters(model)}
    params = list(params)
    return (param_groups([p for p in params if id(p) not in head], lr=lr, weight_decay=weight_decay, name=name)
            + param_groups([p for p in params if id(p) in head], lr=head_lr, weight_decay=weight_decay, name="head"))


@torch.no_grad()
def plain_state_dict(model: EncoderClassifier) -> dict[str, torch.Tensor]:
    """The weights ``model`` would have as a plain model (Learners merged, FAR layers folded), as copies.

    ``model`` itself is not changed; this is what early stopping keeps as the
    best checkpoint, whatever phase the run is in.
    """
    import copy

    clone = copy.deepcopy(model)
    learner_mod.merge_and_unload(clone, safe=False)
    for layer in clone.layers:
        far_mod.fold_back(layer)
    return {k: v.detach().clone() for k, v in clone.state_dict().items()}


def train_only(model: nn.Module, params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
    """Freeze every parameter of ``model`` except ``params`` (deduplicated, model order kept)."""
    wanted = {id(p) for p in params}
    out = []
    for p in model.parameters():
        p.requires_grad_(id(p) in wanted)
        if id(p) in wanted:
            out.append(p)
    return out


class Method:
    """Base: one phase training whatever :meth:`trainable` returns."""

    name = ""

    def __init__(self, model: EncoderClassifier, config: FinetuneConfig, *, total_steps: int, steps_per_epoch: int) -> None:
        self.model = model
        self.config = config
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.lr = config.resolved_lr
        # the head's rate follows the task's budget unless set (default_head_lr)
        self.head_lr = config.head_lr if config.head_lr is not None else \
            default_head_lr(classes=len(model.labels), total_steps=total_steps)

    def trainable(self) -> list[nn.Parameter]:
        raise NotImplementedError

    def phases(self) -> list[Phase]:
        return [Phase("train", self.total_steps, self._enter_single)]

    def _enter_single(self) -> list[dict]:
        params = train_only(self.model, self.trainable())
        return self._groups(params)

    def _groups(self, params: Iterable[nn.Parameter]) -> list[dict]:
        return split_head(self.model, params, lr=self.lr, head_lr=self.head_lr, weight_decay=self.config.weight_decay)

    def finish(self) -> dict:
        return {}


class FullMethod(Method):
    """Every parameter trains (the reference)."""

    name = "full"

    def trainable(self) -> list[nn.Parameter]:
        return list(self.model.parameters())


class FreezeFfnMethod(Method):
    """Everything but the FFN linears trains."""

    name = "freeze-ffn"

    def trainable(self) -> list[nn.Parameter]:
        frozen = {id(p) for layer in self.model.layers for m in (layer.ffn_in, layer.ffn_out) for p in m.parameters()}
        return [p for p in self.model.parameters() if id(p) not in frozen]


class BitFitMethod(Method):
    """Only bias terms (linears and layer norms) and the new classifier head train."""

    name = "bitfit"

    def trainable(self) -> list[nn.Parameter]:
        head = {id(p) for p in self.model.classifier.parameters()}
        return [p for n, p in self.model.named_parameters() if n.endswith(".bias") or id(p) in head]


class LearnerMethod(Method):
    """Learners on the targets, primed with the attention weights, then Learners alone.

    With ``rank="auto"`` priming trains the targeted weights themselves; at the
    switch each change ``dW`` is split into its top-``r`` part, which becomes
    the Learner's start (truncated SVD), and the rest, which stays in the
    frozen weight, so the model computes the same function across the switch.
    """

    name = "learner"

    def __init__(self, model: EncoderClassifier, config: FinetuneConfig, *, total_steps: int, steps_per_epoch: int) -> None:
        super().__init__(model, config, total_steps=total_steps, steps_per_epoch=steps_per_epoch)
        self.lcfg = config.learner
        assert self.lcfg is not None
        self.paths = learner_mod.target_names(model, self.lcfg.targets)
        hidden = model.shape.hidden
        self.schedule = learner_schedule(classes=len(model.labels), steps_per_epoch=steps_per_epoch, total_steps=total_steps)
        self.fixed_ranks = {p: learner_mod.rank_for(p, self.lcfg, hidden, self.schedule.rank_divisor) for p in self.paths}
        self.priming_lr = self.lcfg.priming_lr if self.lcfg.priming_lr is not None else self.schedule.priming_lr
        self.bitfit = self.lcfg.bitfit if self.lcfg.bitfit is not None else self.schedule.bitfit
        self.probe_steps = self.lcfg.probe_steps_for(steps_per_epoch, self.schedule)
        self.priming_steps = self.lcfg.priming_steps_for(steps_per_epoch, self.schedule)
        if self.lcfg.rank == "auto" and self.priming_steps == 0 and total_steps > 1:
            self.priming_steps = 1  # rank auto measures the weight change while priming
        if self.probe_steps + self.priming_steps >= total_steps:
            raise EdgeNLPError(
                f"probing and priming ({self.probe_steps} + {self.priming_steps} steps) must end before the run does "
                f"({total_steps} steps); lower --probe-epochs/--priming-epochs/--priming-steps or raise --epochs/--max-steps"
            )
        self.auto = self.lcfg.rank == "auto"
        self.rank_info: dict = {}
        self.before: dict[str, torch.Tensor] = {}
        if self.auto:
            self.before = {p: model.get_submodule(p).weight.detach().clone() for p in self.paths}
        else:
            learner_mod.add_learners(model, self.fixed_ranks, seed=config.seed)

    def _budget(self) -> int:
        if self.lcfg.budget is not None:
            return self.lcfg.budget
        return sum(learner_mod.learner_param_cost(self.model.get_submodule(p), r) for p, r in self.fixed_ranks.items())

    def _attention_params(self) -> list[nn.Parameter]:
        out = []
        for layer in self.model.layers:
            for part in ATTENTION_LINEARS:
                m = getattr(layer, part)
                base = m.base_layer if isinstance(m, learner_mod.LearnerLinear) else m
                out += list(base.parameters())
        return out

    def _learner_params(self) -> list[nn.Parameter]:
        return [p for m in learner_mod.learners(self.model).values() for p in m.learner_parameters()]

    def _bitfit_params(self) -> list[nn.Parameter]:
        """Every bias and layer norm outside the head (``LearnerConfig.bitfit``); empty when it is off."""
        if not self.bitfit:
            return []
        head = {id(p) for p in head_parameters(self.model)}
        out = []
        for module in self.model.modules():
            if isinstance(module, learner_mod.LearnerLinear):
                continue  # its base_layer is visited on its own
            if isinstance(module, nn.LayerNorm):
                out += [p for p in module.parameters(recurse=False)]
            elif isinstance(module, nn.Linear) and module.bias is not None:
                out.append(module.bias)
        return [p for p in out if id(p) not in head]

    def phases(self) -> list[Phase]:
        phases = []
        if self.probe_steps:
            phases.append(Phase("probe", self.probe_steps, self._enter_probe))
        if self.priming_steps:
            phases.append(Phase("priming", self.priming_steps, self._enter_priming))
        phases.append(Phase("learners", self.total_steps - self.probe_steps - self.priming_steps, self._enter_learners))
        return phases

    def _enter_probe(self) -> list[dict]:
        """Linear probing: the classifier (and the pooler feeding it) alone, on the frozen pretrained body."""
        return self._groups(train_only(self.model, head_parameters(self.model)))

    def _enter_priming(self) -> list[dict]:
        wd = self.config.weight_decay
        head = list(self.model.classifier.parameters())
        if self.auto:  # the targeted weights themselves, so their change can be measured
            primed = [p for path in self.paths for p in self.model.get_submodule(path).parameters()]
            fast = head
        else:
            primed = self._attention_params()
            primed_ids = {id(p) for p in primed}  # attention biases already train with priming
            fast = self._learner_params() + head + [p for p in self._bitfit_params() if id(p) not in primed_ids]
        train_only(self.model, primed + fast)
        heads = {id(p) for p in head_parameters(self.model)}
        # primed pooler weights (rank auto) belong to the head and train at its rate
        primed_body = [p for p in primed if id(p) not in heads]
        fast += [p for p in primed if id(p) in heads]
        return param_groups(primed_body, lr=self.priming_lr, weight_decay=wd, name="priming") + self._groups(fast)

    def _enter_learners(self) -> list[dict]:
        if self.auto and not learner_mod.learners(self.model):
            self._learners_from_priming()
        params = train_only(self.model, self._learner_params() + list(self.model.classifier.parameters())
                            + self._bitfit_params())
        return self._groups(params)

    @torch.no_grad()
    def _learners_from_priming(self) -> None:
        deltas = {p: self.model.get_submodule(p).weight.detach() - self.before[p] for p in self.paths}
        if not self.priming_steps:  # rank auto with no priming is rejected by LearnerConfig; keep a clear guard
            raise EdgeNLPError("rank 'auto' needs priming steps")
        ranks, info = choose_ranks(deltas, energy=self.lcfg.energy, budget=self._budget())
        init = {}
        for path, r in ranks.items():
            p1, p2 = svd_factors(deltas[path], r)
            init[path] = (p1, p2)
            self.model.get_submodule(path).weight.sub_((p1 @ p2).t())  # the top-r part moves into the Learner
        learner_mod.add_learners(self.model, ranks, seed=self.config.seed, init=init)
        self.rank_info = info
        self.before = {}
        log.info("rank auto: %s", ", ".join(f"{p}={r}" for p, r in ranks.items()))

    def finish(self) -> dict:
        layers = learner_mod.learners(self.model)
        ranks = {p: m.rank for p, m in layers.items()}
        params = sum(sum(x.numel() for x in m.learner_parameters()) for m in layers.values())
        learner_mod.merge_and_unload(self.model, safe=True)
        out = {"ranks": ranks, "learner_params": params, "priming_steps": self.priming_steps, "probe_steps": self.probe_steps,
               "bitfit": self.bitfit, "schedule": self.schedule.to_dict()}
        if self.auto:
            out["rank_auto"] = {k: v for k, v in self.rank_info.items() if k != "captured"}
            out["rank_auto"]["captured"] = {p: round(v, 4) for p, v in self.rank_info.get("captured", {}).items()}
        return out


class FarMethod(Method):
    """Prime everything, then train only the most-moved FFN neurons (plus everything outside the FFNs)."""

    name = "far"

    def __init__(self, model: EncoderClassifier, config: FinetuneConfig, *, total_steps: int, steps_per_epoch: int) -> None:
        super().__init__(model, config, total_steps=total_steps, steps_per_epoch=steps_per_epoch)
        self.fcfg = config.far
        assert self.fcfg is not None
        self.priming_steps = max(1, int(round(self.fcfg.priming_fraction * total_steps)))
        if self.priming_steps >= total_steps:
            raise EdgeNLPError(f"FAR needs more than {self.priming_steps} steps (priming alone takes that); raise --max-steps")
        self.before = [(l.ffn_in.weight.detach().clone(), l.ffn_out.weight.detach().clone()) for l in model.layers]
        self.kept: list[int] = []

    def phases(self) -> list[Phase]:
        return [Phase("priming", self.priming_steps, self._enter_single),
                Phase("reconfigured", self.total_steps - self.priming_steps, self._enter_reconfigured)]

    def trainable(self) -> list[nn.Parameter]:
        return list(self.model.parameters())

    @torch.no_grad()
    def _reconfigure(self) -> None:
        for layer, (w_in0, w_out0) in zip(self.model.layers, self.before):
            if layer.ffn_in.out_features == 0:
                self.kept.append(0)
                continue
            scores = far_mod.neuron_scores(w_in0, layer.ffn_in.weight, w_out0, layer.ffn_out.weight)
            keep = far_mod.select_neurons(scores, self.fcfg.keep)
            far_mod.reconfigure(layer, keep)
            self.kept.append(len(keep))
        self.before = []

    def _enter_reconfigured(self) -> list[dict]:
        self._reconfigure()
        params = [p for p in self.model.parameters() if p.requires_grad]
        return self._groups(params)

    def finish(self) -> dict:
        for layer in self.model.layers:
            far_mod.fold_back(layer)
        return {"kept_neurons": self.kept, "priming_steps": self.priming_steps}


METHOD_TYPES: dict[str, type[Method]] = {m.name: m for m in (FullMethod, FreezeFfnMethod, BitFitMethod, LearnerMethod, FarMethod)}
