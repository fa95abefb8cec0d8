"""CoFi pruning (Xia et al., "Structured Pruning Learns Compact and Accurate Models", ACL 2022).

Hard-concrete (L0) gates on every granularity: heads, whole attention
sublayers, FFN neurons, whole FFN sublayers and hidden dimensions (one gate
vector shared by the embeddings and every layer). The model and the gates are
trained together with distillation from the unpruned model
(:class:`~edgenlp.prune.distiller.Distiller`) plus a Lagrangian term
``l1 (s - t) + l2 (s - t)^2`` on the *expected* sparsity ``s`` of the gated
model (in encoder parameters or FLOPs), whose multipliers are trained by
gradient ascent; the target ``t`` ramps linearly from 0 over the first
``target_warmup`` of the steps. The learned gates are then made binary (the
expected number of units per group, most likely first, trimmed to the target
when still above it, filled up to it when below), the kept units' deterministic
gate values are folded into the weights (as CoFi does), surgery removes the
pruned structures, and
the small model gets a short fine-tune with the same distillation.
"""

from __future__ import annotations

import logging
import math
import time

import torch
from torch import nn

from edgenlp.models.encoder import EncoderClassifier
from edgenlp.prune.common import PruneData, UnitCosts, fit_to_budget, model_device, shape_size, size_fn, snap_widths
from edgenlp.prune.config import CofiConfig, PruneConfig
from edgenlp.prune.distiller import Distiller
from edgenlp.prune.masks import Gates, LayerMask, MaskDict, fold_gates, masked_forward, shape_summary

log = logging.getLogger(__name__)

BETA = 2.0 / 3.0  # hard-concrete temperature
LIMIT_L, LIMIT_R = -0.1, 1.1  # stretch interval
EPS = 1e-6


class HardConcrete(nn.Module):
    """``n`` hard-concrete gates (Louizos et al., 2018) with learnable ``log_alpha``."""

    def __init__(self, n: int, *, droprate_init: float) -> None:
        super().__init__()
        init = math.log(1.0 - droprate_init) - math.log(droprate_init)
        self.log_alpha = nn.Parameter(torch.full((n,), init) + 0.01 * torch.randn(n))

    def sample(self) -> torch.Tensor:
        u = torch.rand_like(self.log_alpha).clamp(EPS, 1 - EPS)
        s = torch.sigmoid((torch.log(u) - torch.log(1 - u) + self.log_alpha) / BETA)
        return (s * (LIMIT_R - LIMIT_L) + LIMIT_L).clamp(0.0, 1.0)

    def prob_nonzero(self) -> torch.Tensor:
        """P(gate > 0) for each gate (the L0 norm's expectation)."""
        return torch.sigmoid(self.log_alpha - BETA * math.log(-LIMIT_L / LIMIT_R))

    def keep(self, k: int | None = None) -> torch.Tensor:
        """Boolean keep vector: the ``k`` (default: expected number kept) gates with the largest ``log_alpha``."""
        n = self.log_alpha.numel()
        k = int(round(float(self.prob_nonzero().sum()))) if k is None else k
        out = torch.zeros(n, dtype=torch.bool)
        out[torch.topk(self.log_alpha.detach().cpu(), min(max(k, 0), n)).indices] = True
        return out


class CofiGates(nn.Module):
    """Every gate group of one model shape."""

    def __init__(self, shape, *, droprate_init: float, hidden: bool) -> None:
        super().__init__()
        self.head = nn.ModuleList(HardConcrete(h, droprate_init=droprate_init) for h in shape.heads)
        self.neuron = nn.ModuleList(HardConcrete(f, droprate_init=droprate_init) for f in shape.ffn)
        self.attn = HardConcrete(shape.num_layers, droprate_init=droprate_init)
        self.ffn = HardConcrete(shape.num_layers, droprate_init=droprate_init)
        self.hidden = HardConcrete(shape.hidden, droprate_init=droprate_init) if hidden else None
        self.shape = shape

    def sample(self) -> Gates:
        return Gates([g.sample() for g in self.head], [g.sample() for g in self.neuron], self.attn.sample(),
                     self.ffn.sample(), self.hidden.sample() if self.hidden is not None else None)

    def expected_size(self, config: PruneConfig) -> torch.Tensor:
        attn, ffn = self.attn.prob_nonzero(), self.ffn.prob_nonzero()
        heads = [g.prob_nonzero().sum() * attn[i] for i, g in enumerate(self.head)]
        neurons = [g.prob_nonzero().sum() * ffn[i] for i, g in enumerate(self.neuron)]
        hidden = self.hidden.prob_nonzero().sum() if self.hidden is not None else self.shape.hidden
        return size_fn(config, self.shape.head_dim)(hidden, heads, neurons)

    def to_masks(self, config: PruneConfig, budget: float) -> MaskDict:
        """Binary masks: expected counts, most likely units first, trimmed to ``budget`` when above it."""
        shape = self.shape
        hidden = None
        width = shape.hidden
        if self.hidden is not None:
            keep = self.hidden.keep()
            if not keep.any():
                keep[int(torch.argmax(self.hidden.log_alpha.detach().cpu()))] = True
            hidden = tuple(int(i) for i in keep.nonzero().flatten())
            width = len(hidden)
            if width == shape.hidden:
                hidden = None
        attn_on = (self.attn.prob_nonzero() > 0.5).tolist()
        ffn_on = (self.ffn.prob_nonzero() > 0.5).tolist()
        keep_heads = [g.keep().tolist() if on else [False] * g.log_alpha.numel() for g, on in zip(self.head, attn_on)]
        keep_neurons = [g.keep().tolist() if on else [False] * g.log_alpha.numel() for g, on in zip(self.neuron, ffn_on)]
        # Score = P(unit on) x P(its sublayer on); trimmed to the budget when above it, filled up to it when the
        # gates (learned short of convergence) overshoot the target.
        attn_p, ffn_p = self.attn.prob_nonzero().detach().cpu(), self.ffn.prob_nonzero().detach().cpu()
        neuron_scores = [g.prob_nonzero().detach().cpu() * ffn_p[i] + 1e-6 for i, g in enumerate(self.neuron)]
        costs = UnitCosts.of(config, shape.head_dim, width)
        fit_to_budget(keep_heads, keep_neurons, [g.prob_nonzero().detach().cpu() * attn_p[i] + 1e-6 for i, g in enumerate(self.head)],
                      neuron_scores, costs, budget, fill=True)
        snap_widths(keep_heads, keep_neurons, neuron_scores, costs, budget, config.ffn_multiple)
        layers = []
        for kh, kn in zip(keep_heads, keep_neurons):
            heads = tuple(j for j, k in enumerate(kh) if k)
            neurons = tuple(j for j, k in enumerate(kn) if k)
            layers.append(LayerMask(heads, neurons, attention=bool(heads), ffn=bool(neurons)))
        return MaskDict(tuple(layers), shape_summary(shape), hidden, "cofi")


    @torch.no_grad()
    def deterministic(self, masks: MaskDict) -> Gates:
        """CoFi's test-time gates: ``sigmoid(0.8 log_alpha / beta)`` on the units ``masks`` keep, 0 elsewhere."""
        dev = self.attn.log_alpha.device

        def soft(hc: HardConcrete) -> torch.Tensor:
            return torch.sigmoid(hc.log_alpha.detach() / BETA * 0.8)

        g = Gates.from_masks(masks, self.shape, device=dev)
        for i in range(self.shape.num_layers):
            g.head[i].mul_(soft(self.head[i]))
            g.neuron[i].mul_(soft(self.neuron[i]))
        g.attn.mul_(soft(self.attn))
        g.ffn.mul_(soft(self.ffn))
        if self.hidden is not None:
            g.hidden = (g.hidden if g.hidden is not None else torch.ones(self.shape.hidden, device=dev)) * soft(self.hidden)
        return g


class Lagrangian(nn.Module):
    """``l1 (s - t) + l2 (s - t)^2``; the multipliers are maximised (see :meth:`ascend`)."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Parameter(torch.zeros(()))
        self.l2 = nn.Parameter(torch.zeros(()))

    def forward(self, expected_sparsity: torch.Tensor, target: float) -> torch.Tensor:
        gap = expected_sparsity - target
        return self.l1 * gap + self.l2 * gap * gap

    def ascend(self) -> None:
        """Flip the multipliers' gradients so that a descent step maximises the Lagrangian over them."""
        for p in self.parameters():
            if p.grad is not None:
                p.grad.neg_()


def learn(model: EncoderClassifier, data: PruneData, config: CofiConfig, *, teacher: EncoderClassifier | None = None,
          progress=None):
    """``(masks, pruned model, extra)``: CoFi's mask learning, surgery and distilled fine-tune.

    ``model`` is not changed; ``teacher`` (default ``model``) is what the student distils from.
    """
    from edgenlp.prune.distiller import distill_finetune
    from edgenlp.prune.surgery import apply_masks

    shape = model.shape
    teacher = model if teacher is None else teacher
    student = _copy(model)
    dev = model_device(model)
    full = shape_size(shape, config)
    gates = CofiGates(shape, droprate_init=config.droprate_init, hidden=config.prune_hidden).to(dev)
    lagrangian = Lagrangian().to(dev)
    distiller = Distiller(teacher, config).to(dev)
    steps = int(math.ceil(config.epochs * data.steps_per_epoch(config.batch_size)))
    warm = max(1, int(config.target_warmup * steps))
    weights = [p for p in student.parameters() if p.numel()]
    opt = torch.optim.AdamW([{"params": weights, "lr": config.lr}, {"params": list(distiller.proj.parameters()), "lr": config.lr}],
                            weight_decay=0.0)
    opt_gates = torch.optim.AdamW([{"params": list(gates.parameters()), "lr": config.mask_lr},
                                   {"params": list(lagrangian.parameters()), "lr": config.lagrangian_lr}], weight_decay=0.0)
    student.train()
    trace = []
    t0 = time.perf_counter()
    bar = progress.add_task("cofi masks", total=steps, info="") if progress else None
    done = 0
    for step, (ids, mask, _) in zip(range(steps), data.batches(rows=config.train_limit, batch_size=config.batch_size,
                                                                seed=config.seed)):
        if config.budget_minutes is not None and time.perf_counter() - t0 > 60 * config.budget_minutes:
            log.info("cofi: budget of %.1f min reached after %d of %d steps", config.budget_minutes, step, steps)
            break
        target = config.target_sparsity * min(1.0, step / warm)
        logits, states = masked_forward(student, ids, mask, gates.sample(), hidden_states=True)
        loss, parts = distiller(logits, states, ids, mask)
        expected = 1.0 - gates.expected_size(config) / full
        lag = lagrangian(expected, target)
        (loss + lag).backward()
        expected, lag = expected.detach(), lag.detach()
        lagrangian.ascend()
        torch.nn.utils.clip_grad_norm_(weights, 1.0)
        opt.step()
        opt_gates.step()
        opt.zero_grad(set_to_none=True)
        opt_gates.zero_grad(set_to_none=True)
        done = step + 1
        if step % 10 == 0 or step == steps - 1:
            trace.append({"step": step, "target": round(target, 4), "expected_sparsity": round(float(expected), 4),
                          "lagrangian": round(float(lag), 5), "kd": round(parts["kd"], 4), "layer": round(parts["layer"], 4),
                          "lambda1": round(float(lagrangian.l1.detach()), 4), "lambda2": round(float(lagrangian.l2.detach()), 4)})
        if progress:
            progress.update(bar, advance=1, info=f"expected {float(expected):.3f} -> {target:.3f}  kd {parts['kd']:.3f}")
    mask_s = time.perf_counter() - t0
    expected_end = float(1.0 - gates.expected_size(config).detach() / full)
    masks = gates.to_masks(config, (1.0 - config.target_sparsity) * full)
    student.eval()
    fold_gates(student, gates.deterministic(masks))  # keep the learned scale of every kept unit
    pruned = apply_masks(student, masks)
    proj = distiller.proj
    if masks.hidden is not None:  # the projection now reads only the kept hidden dims
        kept = torch.tensor(masks.hidden, dtype=torch.long, device=dev)
        small = nn.Linear(len(masks.hidden), proj.out_features).to(dev)
        with torch.no_grad():
            small.weight.copy_(proj.weight[:, kept])
            small.bias.copy_(proj.bias)
        proj = small
    ft = distill_finetune(pruned, teacher, data, config, epochs=config.finetune_epochs, proj=proj, progress=progress)
    extra = {"mask_steps": done, "mask_steps_planned": steps, "mask_wall_s": round(mask_s, 2),
             "expected_sparsity_end": round(expected_end, 4), "trace": trace, "finetune": ft}
    return masks, pruned, extra


def _copy(model: EncoderClassifier) -> EncoderClassifier:
    out = EncoderClassifier(model.shape, model.num_labels, labels=model.labels)
    out.load_state_dict(model.state_dict())
    return out.to(device=model.pooler.weight.device, dtype=model.pooler.weight.dtype)
