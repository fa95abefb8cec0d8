"""Retraining-free pruning (Kwon et al., "A Fast Post-Training Pruning Framework for Transformers", NeurIPS 2022).

Four steps, no gradient step on the weights:

1. **Fisher information** of the head and neuron masks: the gradient of the
   task loss with respect to an all-ones mask, collected per batch over
   ``config.samples`` training rows (the model is the fine-tuned one, labels
   from the data).
2. **Mask search** under the size constraint: with the diagonal Fisher as the
   importance of each unit, try every number of kept heads; the budget left
   goes to the most important neurons; keep the split with the largest total
   importance.
3. **Mask rearrangement** per layer: with the count per layer fixed, choose
   which heads / neurons to drop by a greedy minimisation of the layer's
   block-diagonal Fisher term ``(1 - m)^T F (1 - m)`` (interactions included).
4. **Mask tuning**: layer by layer, the output projection columns of the kept
   heads and neurons are rescaled by least squares so the pruned layer's
   pre-norm output reconstructs the unpruned model's (ridge-damped normal
   equations over the non-padding tokens of a calibration set).

The third granularity of the paper (none here) and hidden dimensions are not
pruned by this method; sublayers with no unit left are dropped.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import nn

from edgenlp.models.encoder import EncoderClassifier
from edgenlp.prune.common import PruneData, UnitCosts, model_device, shape_size, snap_widths
from edgenlp.prune.config import FastConfig, PruneConfig
from edgenlp.prune.masks import Gates, LayerMask, MaskDict, masked_forward, shape_summary

log = logging.getLogger(__name__)


def mask_gradients(model: EncoderClassifier, data: PruneData, config: PruneConfig, *, rows: int, progress=None,
                   description: str = "fisher", gates: Gates | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-batch gradients of the loss w.r.t. head and neuron gates: ``[batches, heads]``, ``[batches, neurons]``.

    Columns run over layers in order (layer 0's heads first). ``gates`` (default
    all ones) are the point where the gradient is taken.
    """
    shape = model.shape
    gates = gates or Gates.ones(shape, device=model_device(model))
    for t in (*gates.head, *gates.neuron):
        t.requires_grad_(True)
    was = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    n_batches = max(1, math.ceil(rows / config.batch_size))
    bar = progress.add_task(description, total=n_batches, info="") if progress else None
    gh, gn = [], []
    loss_fn = nn.CrossEntropyLoss()
    try:
        for _, (ids, mask, labels) in zip(range(n_batches), data.batches(rows=rows, batch_size=config.batch_size,
                                                                          seed=config.seed)):
            loss = loss_fn(masked_forward(model, ids, mask, gates), labels)
            grads = torch.autograd.grad(loss, [*gates.head, *gates.neuron], allow_unused=True)
            L = shape.num_layers
            gh.append(torch.cat([g if g is not None else torch.zeros_like(t) for g, t in zip(grads[:L], gates.head)]))
            gn.append(torch.cat([g if g is not None else torch.zeros_like(t) for g, t in zip(grads[L:], gates.neuron)]))
            if progress:
                progress.update(bar, advance=1, info=f"loss {float(loss):.3f}")
    finally:
        for p, w in zip(model.parameters(), was):
            p.requires_grad_(w)
    return torch.stack(gh).double().cpu(), torch.stack(gn).double().cpu()


def _split(flat: torch.Tensor, sizes) -> list[torch.Tensor]:
    return list(torch.split(flat, list(sizes), dim=-1))


def search(head_imp: torch.Tensor, neuron_imp: torch.Tensor, costs: UnitCosts, budget: float, num_layers: int):
    """Kwon et al.'s Algorithm 1: the (heads, neurons) split of ``budget`` with the most importance kept.

    Returns boolean keep vectors over all heads and all neurons.
    """
    avail = budget - num_layers * costs.fixed
    hs, hi = torch.sort(head_imp, descending=True)
    ns, ni = torch.sort(neuron_imp, descending=True)
    ch = torch.cat([torch.zeros(1, dtype=hs.dtype), hs.cumsum(0)])
    cn = torch.cat([torch.zeros(1, dtype=ns.dtype), ns.cumsum(0)])
    best, best_n, best_k = -math.inf, 0, 0
    for n in range(len(hs) + 1):
        rem = avail - n * costs.head
        if rem < 0:
            break
        k = min(len(ns), int(math.floor(rem / costs.neuron + 1e-9)))
        score = float(ch[n] + cn[k])
        if score > best:
            best, best_n, best_k = score, n, k
    keep_h = torch.zeros(len(hs), dtype=torch.bool)
    keep_h[hi[:best_n]] = True
    keep_n = torch.zeros(len(ns), dtype=torch.bool)
    keep_n[ni[:best_k]] = True
    return keep_h, keep_n


def _pruned_term(fisher: torch.Tensor, pruned: torch.Tensor) -> float:
    idx = pruned.nonzero().flatten()
    return float(fisher[idx][:, idx].sum())


def rearrange(grads: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Same number kept, chosen by greedy minimisation of ``(1-m)^T F (1-m)`` with ``F = G^T G``.

    Returns the better (by that objective) of the greedy choice and ``keep``.
    """
    n, n_prune = keep.numel(), int((~keep).sum())
    if n_prune == 0 or n_prune == n:
        return keep
    fisher = grads.T @ grads
    diag = fisher.diagonal().clone()
    acc = torch.zeros(n, dtype=fisher.dtype)  # sum of F[i, j] over already pruned j
    pruned = torch.zeros(n, dtype=torch.bool)
    for _ in range(n_prune):
        cost = diag + 2 * acc
        cost[pruned] = math.inf
        j = int(torch.argmin(cost))
        pruned[j] = True
        acc += fisher[:, j]
    if _pruned_term(fisher, pruned) < _pruned_term(fisher, ~keep):
        return ~pruned
    return keep


# --------------------------------------------------------------------------- mask tuning (least squares)


def _layer_input(model: EncoderClassifier, ids, mask, index: int):
    x = model.embeddings(ids)
    bias = model.mask_bias(mask, x.dtype)
    for layer in model.layers[:index]:
        x = layer(x, bias)
    return x, bias


def _head_contributions(layer, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``[batch, seq, heads, hidden]``: each head's share of the attention output projection (no bias)."""
    b, s, _ = x.shape
    h, d = layer.num_heads, layer.head_dim
    q = layer.query(x).view(b, s, h, d).transpose(1, 2)
    k = layer.key(x).view(b, s, h, d).transpose(1, 2)
    v = layer.value(x).view(b, s, h, d).transpose(1, 2)
    ctx = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + bias, dim=-1) @ v  # [b, h, s, d]
    w = layer.attn_out.weight.view(-1, h, d)  # [hidden, h, d]
    return torch.einsum("bhsd,ohd->bsho", ctx, w)


def _solve(ata: torch.Tensor, atb: torch.Tensor) -> torch.Tensor:
    damp = 1e-3 * float(ata.diagonal().mean()) + 1e-12
    eye = torch.eye(ata.shape[0], dtype=ata.dtype, device=ata.device)
    return torch.linalg.solve(ata + damp * eye, atb + damp)  # ridge towards scale 1


@torch.no_grad()
def rescale(pruned: EncoderClassifier, teacher: EncoderClassifier, batches: list, *, progress=None) -> list[dict]:
    """Layer-wise least-squares rescaling of kept heads / neurons (in place on ``pruned``).

    Layer by layer (attention, then FFN), the scale of each kept unit's output
    column block minimises ``|| teacher pre-norm output - pruned pre-norm output ||^2``
    over the non-padding tokens of ``batches`` (each ``(ids, mask, labels)``),
    with the pruned model's own (already rescaled) inputs. Returns per-sublayer
    relative reconstruction errors before and after.
    """
    pruned.eval()
    teacher.eval()
    stats = []
    bar = progress.add_task("rescale", total=2 * len(pruned.layers), info="") if progress else None
    for i, (ps, ts) in enumerate(zip(pruned.layers, teacher.layers)):
        for part in ("attention", "ffn"):
            units = ps.num_heads if part == "attention" else ps.ffn_in.out_features
            if units == 0:
                if progress:
                    progress.update(bar, advance=1)
                continue
            dev = ps.attn_out.weight.device
            ata = torch.zeros(units, units, dtype=torch.float64, device=dev)
            atb = torch.zeros(units, dtype=torch.float64, device=dev)
            btb = 0.0
            for ids, mask, _ in batches:
                xs, bias = _layer_input(pruned, ids, mask, i)
                xt, _ = _layer_input(teacher, ids, mask, i)
                tok = mask.bool()
                if part == "attention":
                    target = (xt + ts.attention(xt, bias) - xs - ps.attn_out.bias)[tok].double()
                    a = _head_contributions(ps, xs, bias)[tok].double()  # [tok, h, hidden]
                    ata += torch.einsum("thd,tgd->hg", a, a)
                    atb += torch.einsum("thd,td->h", a, target)
                else:
                    ys = ps.attn_norm(xs + ps.attention(xs, bias))
                    yt = ts.attn_norm(xt + ts.attention(xt, bias))
                    target = (yt + ts.feed_forward(yt) - ys - ps.ffn_out.bias)[tok].double()
                    act = ps.act(ps.ffn_in(ys))[tok].double()  # [tok, k]
                    w = ps.ffn_out.weight.double()  # [hidden, k]
                    ata += (w.T @ w) * (act.T @ act)
                    atb += ((target @ w) * act).sum(0)
                btb += float((target * target).sum())
            scale = _solve(ata, atb)
            ones = torch.ones_like(scale)

            def err(m):
                return float(m @ ata @ m - 2 * m @ atb + btb) / max(btb, 1e-30)

            before, after = err(ones), err(scale)
            if after < before:
                if part == "attention":
                    cols = scale.repeat_interleave(ps.head_dim).to(ps.attn_out.weight.dtype)
                    ps.attn_out.weight.mul_(cols)
                else:
                    ps.ffn_out.weight.mul_(scale.to(ps.ffn_out.weight.dtype))
            stats.append({"layer": i, "part": part, "rel_error_before": round(before, 6),
                          "rel_error_after": round(min(before, after), 6)})
            if progress:
                progress.update(bar, advance=1, info=f"layer {i} {part} err {before:.3f}->{min(before, after):.3f}")
    return stats


# --------------------------------------------------------------------------- the method


def masks_from_keep(keep_heads: list, keep_neurons: list, shape, *, method: str, hidden=None) -> MaskDict:
    layers = []
    for kh, kn in zip(keep_heads, keep_neurons):
        heads = tuple(int(j) for j in range(len(kh)) if kh[j])
        neurons = tuple(int(j) for j in range(len(kn)) if kn[j])
        layers.append(LayerMask(heads, neurons, attention=bool(heads), ffn=bool(neurons)))
    return MaskDict(tuple(layers), shape_summary(shape), hidden, method)


def learn(model: EncoderClassifier, data: PruneData, config: FastConfig, *, teacher: EncoderClassifier | None = None,
          progress=None):
    """Masks for ``config.target_sparsity`` and the rescaled pruned model: ``(masks, pruned, extra)``.

    ``teacher`` is not read: the method scores the fine-tuned model itself.
    """
    from edgenlp.prune.surgery import apply_masks

    shape = model.shape
    gh, gn = mask_gradients(model, data, config, rows=config.samples, progress=progress)
    costs = UnitCosts.of(config, shape.head_dim, shape.hidden)
    budget = (1.0 - config.target_sparsity) * shape_size(shape, config)
    neuron_imp = (gn ** 2).sum(0)
    keep_h, keep_n = search((gh ** 2).sum(0), neuron_imp, costs, budget, shape.num_layers)
    heads_g, neurons_g = _split(gh, shape.heads), _split(gn, shape.ffn)
    per_layer_h, per_layer_n = _split(keep_h, shape.heads), _split(keep_n, shape.ffn)
    if config.ffn_multiple > 1:
        kn_lists = [k.tolist() for k in per_layer_n]
        snap_widths([k.tolist() for k in per_layer_h], kn_lists, _split(neuron_imp, shape.ffn), costs, budget,
                    config.ffn_multiple)
        per_layer_n = [torch.tensor(k, dtype=torch.bool) for k in kn_lists]
    keep_heads = [rearrange(g, k) for g, k in zip(heads_g, per_layer_h)]
    keep_neurons = [rearrange(g, k) for g, k in zip(neurons_g, per_layer_n)]
    masks = masks_from_keep(keep_heads, keep_neurons, shape, method="fast")
    pruned = apply_masks(model, masks)
    extra = {"fisher_batches": int(gh.shape[0]), "fisher_rows": min(config.samples, len(data.train))}
    if config.rescale:
        calib = []
        for _, b in zip(range(max(1, math.ceil(min(config.samples, 512) / config.batch_size))),
                        data.batches(rows=config.samples, batch_size=config.batch_size, seed=config.seed + 1)):
            calib.append(b)
        extra["rescale"] = rescale(pruned, model, calib, progress=progress)
    return masks, pruned, extra
