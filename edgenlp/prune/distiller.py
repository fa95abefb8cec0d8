"""Distillation from the unpruned fine-tuned model: logits (KL with temperature) and hidden states.

Hidden-state distillation follows CoFi's dynamic layer matching: a few teacher
layers (evenly spaced, the last included) are each matched, at every step, to
the student layer whose (linearly projected) hidden states are closest in mean
squared error over the non-padding tokens; the loss is the sum of the matched
errors. The projection ``W_layer`` starts as the identity and is trained. With a
fixed ``layer_map`` (recovery distillation, :mod:`edgenlp.prune.recovery`: the
surgery knows which teacher layer each student layer came from) the loss is the
sum of the errors of those pairs instead.
"""

from __future__ import annotations

import logging
import math
import time

import torch
from torch import nn
from torch.nn import functional as F

from edgenlp.models.encoder import EncoderClassifier
from edgenlp.prune.common import PruneData
from edgenlp.prune.config import PruneConfig
from edgenlp.prune.masks import Gates, masked_forward

log = logging.getLogger(__name__)


def teacher_layers(num_layers: int) -> tuple[int, ...]:
    """Indices into the hidden-state list (0 = embeddings) of the teacher layers distilled."""
    n = max(1, min(4, num_layers // 2))
    return tuple(round(num_layers * (k + 1) / n) for k in range(n))


@torch.no_grad()
def forward_states(model: EncoderClassifier, ids: torch.Tensor, mask: torch.Tensor):
    """Logits and hidden states (embedding output, then every layer's output) of a plain model."""
    x = model.embeddings(ids)
    bias = model.mask_bias(mask, x.dtype)
    states = [x]
    for layer in model.layers:
        x = layer(x, bias)
        states.append(x)
    logits = model.classifier(model.head_dropout(model.pooler_act(model.pooler(x[:, 0]))))
    return logits, states


class Distiller(nn.Module):
    """Distillation loss against a frozen ``teacher``; ``proj`` maps student hidden states to the teacher's."""

    def __init__(self, teacher: EncoderClassifier, config: PruneConfig, *, student_hidden: int | None = None,
                 proj: nn.Module | None = None, layer_map: tuple[tuple[int, int], ...] | None = None) -> None:
        """``config`` supplies ``temperature``, ``kd_weight`` and ``layer_weight``; ``layer_map``: fixed
        ``(student, teacher)`` hidden-state index pairs (0 = embeddings) instead of dynamic matching."""
        super().__init__()
        self.teacher = [teacher.eval()]  # a list: not a submodule, its weights are not trained
        self.config = config
        self.layers = teacher_layers(teacher.shape.num_layers)
        self.layer_map = layer_map
        d_t = teacher.shape.hidden
        if proj is None:
            proj = nn.Linear(student_hidden or d_t, d_t)
            with torch.no_grad():
                proj.weight.zero_()
                proj.weight[: min(proj.in_features, d_t), : min(proj.in_features, d_t)] = torch.eye(min(proj.in_features, d_t))
                proj.bias.zero_()
        self.proj = proj

    def forward(self, logits: torch.Tensor, states: list[torch.Tensor], ids: torch.Tensor, mask: torch.Tensor):
        """``(loss, parts)`` for student ``logits`` and hidden ``states``."""
        t_logits, t_states = forward_states(self.teacher[0], ids, mask)
        cfg = self.config
        T = cfg.temperature
        kd = F.kl_div(F.log_softmax(logits / T, -1), F.softmax(t_logits / T, -1), reduction="batchmean") * T * T
        tok = mask.bool()
        layer_loss = logits.new_zeros(())
        matched = []
        if self.layer_map is not None:
            for s, t in self.layer_map:
                layer_loss = layer_loss + F.mse_loss(self.proj(states[s][tok]), t_states[t][tok])
            loss = cfg.kd_weight * kd + cfg.layer_weight * layer_loss
            return loss, {"kd": float(kd.detach()), "layer": float(layer_loss.detach()), "matched": [s for s, _ in self.layer_map]}
        student = [self.proj(s[tok]) for s in states[1:]]
        for t in self.layers:
            target = t_states[t][tok]
            errs = torch.stack([F.mse_loss(s, target) for s in student])
            j = int(torch.argmin(errs.detach()))
            matched.append(j + 1)
            layer_loss = layer_loss + errs[j]
        loss = cfg.kd_weight * kd + cfg.layer_weight * layer_loss
        return loss, {"kd": float(kd.detach()), "layer": float(layer_loss.detach()), "matched": matched}


def distill_finetune(model: EncoderClassifier, teacher: EncoderClassifier, data: PruneData, config: PruneConfig, *,
                     epochs: float, proj: nn.Linear | None = None, progress=None) -> dict:
    """Fine-tune a (pruned, plain) ``model`` in place with the distillation loss; returns a summary."""
    steps = int(math.ceil(epochs * data.steps_per_epoch(config.batch_size)))
    if steps <= 0:
        return {"steps": 0}
    dev = next(model.parameters()).device
    distiller = Distiller(teacher, config, student_hidden=model.shape.hidden, proj=proj).to(dev)
    params = [p for p in model.parameters() if p.numel()]
    opt = torch.optim.AdamW([{"params": params, "lr": config.lr},
                             {"params": list(distiller.proj.parameters()), "lr": config.lr}], weight_decay=0.0)
    warmup = max(1, int(0.1 * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup)))
    gates = Gates.ones(model.shape, device=dev)
    model.train()
    bar = progress.add_task("distill fine-tune", total=steps, info="") if progress else None
    t0, losses = time.perf_counter(), []
    for step, (ids, mask, _) in zip(range(steps), data.batches(rows=config.train_limit, batch_size=config.batch_size,
                                                                seed=config.seed + 7)):
        logits, states = masked_forward(model, ids, mask, gates, hidden_states=True)
        loss, parts = distiller(logits, states, ids, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if progress:
            progress.update(bar, advance=1, info=f"kd {parts['kd']:.3f} layer {parts['layer']:.3f}")
    model.eval()
    return {"steps": steps, "wall_s": round(time.perf_counter() - t0, 2),
            "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 5)}
