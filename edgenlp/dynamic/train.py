"""Training exit heads and token thresholds by distillation from the static model.

- :func:`learn_token_thresholds`: one threshold per layer on the token
  importance, learned through a soft mask (``sigmoid((importance - theta) / T)``,
  multiplied into a running keep weight that enters later layers' attention as
  ``log(weight)``, so weight 0 is exactly a dropped token) with the backbone
  frozen. Loss: distillation of the unpruned model's logits plus
  ``token_lambda`` x the mean fraction of tokens kept. The thresholds are then
  used hard (:func:`edgenlp.dynamic.rules.keep_tokens`).
- :func:`train_heads`: with the backbone frozen, the ``[CLS]`` states at every
  exit are computed once (under the hard token pruning the model will run
  with) and the heads are trained on them, which costs one forward pass over
  the data plus seconds. The final classifier is untouched.
- :func:`train_joint`: every exit's distillation loss through the whole
  masked model, backbone included (``DynamicConfig.joint``).
"""

from __future__ import annotations

import logging
import math
import random

import numpy as np
import torch
import torch.nn.functional as F

from edgenlp.dynamic.config import DynamicConfig
from edgenlp.dynamic.model import DynamicModel, attend, final_logits, weighted_importance
from edgenlp.finetune.trainer import Encoded, collate
from edgenlp.models.encoder import MASK_BIAS, EncoderClassifier

log = logging.getLogger(__name__)


def index_batches(data: Encoded, batch_size: int, *, seed: int | None = None) -> list[list[int]]:
    """Row indices in batches: shuffled with ``seed``, else grouped by length (less padding)."""
    order = list(range(len(data)))
    if seed is None:
        order.sort(key=lambda i: len(data.ids[i]))
    else:
        random.Random(seed).shuffle(order)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@torch.no_grad()
def static_logits(model: EncoderClassifier, data: Encoded, *, pad_id: int, batch_size: int = 64,
                  device: str = "cpu") -> torch.Tensor:
    """``[N, C]`` logits of the static model (every layer, every token), in row order."""
    model.eval()
    out = torch.zeros(len(data), model.num_labels)
    for index in index_batches(data, batch_size):
        ids, mask, _ = collate(data, index, pad_id=pad_id)
        out[index] = model(ids.to(device), mask.to(device)).float().cpu()
    return out


def distill_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher || student) at ``temperature``, scaled by its square (Hinton et al.)."""
    t = temperature
    return F.kl_div(F.log_softmax(student / t, -1), F.log_softmax(teacher / t, -1), log_target=True,
                    reduction="batchmean") * (t * t)


def _frozen(model: torch.nn.Module):
    flags = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    return flags


def _restore(model: torch.nn.Module, flags) -> None:
    for p, f in zip(model.parameters(), flags):
        p.requires_grad_(f)


# --------------------------------------------------------------------------- token thresholds


def soft_pass(base: EncoderClassifier, ids: torch.Tensor, mask: torch.Tensor, theta: torch.Tensor,
              token_layers: tuple[int, ...], temperature: float):
    """Final logits and the mean kept fraction after each token layer, with soft token masks.

    The keep weight ``w`` of every token starts at 1 (0 for padding); after a
    token layer ``l`` it is multiplied by ``sigmoid((importance - theta_l) / T)``
    (1 for the first and last real token). Attention adds ``log(w)`` to each
    key and weighs each query by ``w`` in the importance, so a weight of 0 is a
    dropped token, as in the hard model.
    """
    b, s = ids.shape
    x = base.embeddings(ids)
    real = mask.bool()
    w = real.to(x.dtype)
    protect = torch.zeros_like(real)
    protect[:, 0] = True
    protect[torch.arange(b), mask.sum(1) - 1] = True
    fractions = []
    slot = {layer: j for j, layer in enumerate(token_layers)}
    for i, layer in enumerate(base.layers):
        bias = torch.where(real, torch.log(w.clamp_min(1e-6)), torch.full_like(w, MASK_BIAS))
        x, probs = attend(layer, x, bias.view(b, 1, 1, s))
        if i + 1 in slot:
            imp = weighted_importance(probs, w)
            m = torch.sigmoid((imp - theta[slot[i + 1]]) / temperature)
            w = w * torch.where(protect, torch.ones_like(m), m)
            fractions.append(w.sum(1) / real.sum(1))
    frac = torch.stack(fractions, 1).mean(0) if fractions else torch.zeros(0)
    return final_logits(base, x), frac


def learn_token_thresholds(base: EncoderClassifier, data: Encoded, teacher: torch.Tensor, config: DynamicConfig, *,
                           token_layers: tuple[int, ...], pad_id: int, device: str = "cpu") -> tuple[list[float], list[dict]]:
    """Per token layer, the threshold the soft mask learned (>= 0), and the training history."""
    theta = torch.zeros(len(token_layers), device=device, requires_grad=True)
    opt = torch.optim.Adam([theta], lr=config.token_lr)
    flags = _frozen(base)
    base.eval()
    history = []
    steps = max(1, math.ceil(config.token_epochs * len(data) / config.batch_size))
    step = 0
    try:
        epoch = 0
        while step < steps:
            for index in index_batches(data, config.batch_size, seed=config.seed + epoch):
                if step >= steps:
                    break
                ids, mask, _ = collate(data, index, pad_id=pad_id)
                logits, frac = soft_pass(base, ids.to(device), mask.to(device), theta, token_layers, config.token_temperature)
                kd = distill_loss(logits, teacher[index].to(device), config.temperature)
                loss = kd + config.token_lambda * frac.mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                with torch.no_grad():
                    theta.clamp_(min=0.0)
                step += 1
                if step % 25 == 0 or step == steps:
                    history.append({"step": step, "kd": round(float(kd.detach()), 5), "kept": [round(float(f), 4) for f in frac.detach()],
                                    "thresholds": [round(float(t), 4) for t in theta.detach()]})
                    log.info("token thresholds step %d/%d: kd %.4f, kept %s", step, steps, history[-1]["kd"],
                             history[-1]["kept"])
            epoch += 1
    finally:
        _restore(base, flags)
    return [float(t) for t in theta.detach().cpu()], history


# --------------------------------------------------------------------------- exit heads


@torch.no_grad()
def exit_features(model: DynamicModel, data: Encoded, *, pad_id: int, batch_size: int = 64,
                  device: str = "cpu") -> dict[int, torch.Tensor]:
    """``{exit layer: [N, H]}`` pooled features at every early exit (its head's pooling: the [CLS] hidden state or the
    mean over the tokens the layer processed), under the model's hard token pruning."""
    spec = model.spec
    model.eval()
    out = {l: torch.zeros(len(data), model.shape.hidden) for l in spec.exits[:-1]}
    for index in index_batches(data, batch_size):
        ids, mask, _ = collate(data, index, pad_id=pad_id)
        _, _, feats, _, _ = model.masked_pass(ids.to(device), mask.to(device), tokens=spec.tokens,
                                              thresholds=spec.token_thresholds, keep_ratio=spec.keep_ratio)
        for l in out:
            out[l][index] = feats[l].float().cpu()
    return out


def _head_loss(logits, teacher, labels, config: DynamicConfig):
    loss = distill_loss(logits, teacher, config.temperature)
    if config.label_weight:
        loss = loss + config.label_weight * F.cross_entropy(logits, labels)
    return loss


def train_heads(model: DynamicModel, data: Encoded, teacher: torch.Tensor, config: DynamicConfig, *, pad_id: int,
                device: str = "cpu") -> list[dict]:
    """Train every early exit head on frozen pooled features (the backbone and final classifier untouched)."""
    feats = exit_features(model, data, pad_id=pad_id, device=device)
    labels = torch.tensor(data.labels, dtype=torch.long)
    heads = {l: model.exit_heads[str(l)] for l in feats}
    params = [p for h in heads.values() for p in h.parameters()]
    if not params:
        return []
    for h in heads.values():
        h.train()
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.01)
    steps = max(1, math.ceil(config.epochs * len(data) / config.batch_size))
    history, step, epoch = [], 0, 0
    gen = torch.Generator().manual_seed(config.seed)
    while step < steps:
        order = torch.randperm(len(data), generator=gen)
        sums, batches = {l: 0.0 for l in heads}, 0
        for start in range(0, len(data), config.batch_size):
            if step >= steps:
                break
            index = order[start : start + config.batch_size]
            t = teacher[index].to(device)
            losses = [_head_loss(h.classify(feats[l][index].to(device)), t, labels[index].to(device), config)
                      for l, h in heads.items()]
            loss = torch.stack(losses).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            batches += 1
            for l, x in zip(heads, losses):
                sums[l] += float(x.detach())
        epoch += 1
        history.append({"epoch": epoch, "loss_per_exit": {l: round(sums[l] / max(1, batches), 5) for l in heads}})
        log.info("exit heads epoch %d: loss per exit %s", epoch, history[-1]["loss_per_exit"])
    for h in heads.values():
        h.eval()
    return history


def train_joint(model: DynamicModel, data: Encoded, teacher: torch.Tensor, config: DynamicConfig, *, pad_id: int,
                device: str = "cpu") -> list[dict]:
    """Train the backbone and every exit together: mean of every exit's distillation loss (final included)."""
    spec = model.spec
    head_params = list(model.exit_heads.parameters())
    head_ids = {id(p) for p in head_params}
    body = [p for p in model.base.parameters() if id(p) not in head_ids]
    for p in model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW([{"params": body, "lr": config.backbone_lr}, {"params": head_params, "lr": config.lr}],
                            weight_decay=0.01)
    labels = torch.tensor(data.labels, dtype=torch.long)
    steps = max(1, math.ceil(config.epochs * len(data) / config.batch_size))
    history, step, epoch = [], 0, 0
    model.train()
    try:
        while step < steps:
            total = 0.0
            batches = index_batches(data, config.batch_size, seed=config.seed + epoch)
            for index in batches:
                if step >= steps:
                    break
                ids, mask, _ = collate(data, index, pad_id=pad_id)
                logits, _, _, _, _ = model.masked_pass(ids.to(device), mask.to(device), tokens=spec.tokens,
                                                       thresholds=spec.token_thresholds, keep_ratio=spec.keep_ratio)
                t = teacher[index].to(device)
                loss = torch.stack([_head_loss(z, t, labels[index].to(device), config) for z in logits.values()]).mean()
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
                opt.step()
                total += float(loss.detach())
                step += 1
            epoch += 1
            history.append({"epoch": epoch, "loss": round(total / max(1, len(batches)), 5)})
            log.info("joint epoch %d: loss %.4f", epoch, history[-1]["loss"])
    finally:
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
    return history


def kept_fraction(counts: np.ndarray) -> list[float]:
    """Mean tokens each layer processed, as a fraction of the sentence's length."""
    return [float(x) for x in (counts / counts[:, :1]).mean(0)]
