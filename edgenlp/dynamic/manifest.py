"""The ``dynamic`` section of a bundle manifest, parsed and checked (the format is documented in :mod:`edgenlp.bundle`)."""

from __future__ import annotations

from dataclasses import dataclass

from edgenlp.errors import BundleError

DYNAMIC_VERSION = 1


def onnx_output_names(outputs) -> list[str]:
    """A segment's ONNX output names: its outputs, ``hidden`` spelled ``hidden_out`` (ONNX names are single-assignment)."""
    return ["hidden_out" if o == "hidden" else o for o in outputs]


@dataclass(frozen=True)
class SegmentEntry:
    """One segment of a dynamic bundle: 1-based ``layers`` (first, last), its outputs and where it lives."""

    index: int
    layers: tuple[int, int]
    exit: bool
    tokens: bool
    pte: dict
    onnx: str | None

    @property
    def last_layer(self) -> int:
        return self.layers[1]

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("hidden",) + (("logits",) if self.exit else ()) + (("importance",) if self.tokens else ())


@dataclass(frozen=True)
class DynamicEntry:
    """The ``dynamic`` section of a manifest, parsed and checked (see the module docstring)."""

    spec: object  # edgenlp.dynamic.spec.DynamicSpec
    hidden: int
    num_labels: int
    buckets: tuple[int, ...]
    embedding_pte: dict
    embedding_onnx: str | None
    segments: tuple[SegmentEntry, ...]
    mask_bias: float

    @classmethod
    def from_manifest(cls, manifest: dict, *, where: str = "manifest.json") -> "DynamicEntry":
        from edgenlp.dynamic.rules import threshold_range
        from edgenlp.dynamic.spec import DynamicSpec

        d = manifest.get("dynamic")

        def bad(msg: str):
            return BundleError(f"{where}: dynamic: {msg}")

        if not isinstance(d, dict):
            raise bad("must be an object")
        if d.get("version") != DYNAMIC_VERSION:
            raise bad(f"version {d.get('version')!r} is not supported (expected {DYNAMIC_VERSION})")
        try:
            spec = DynamicSpec.from_dict(d.get("spec"))
        except (ValueError, TypeError) as exc:
            raise bad(f"invalid spec ({exc})") from None
        shape = (manifest.get("model") or {}).get("shape") or {}
        L = spec.num_layers
        if d.get("num_layers") != L or (shape.get("num_layers") not in (None, L)):
            raise bad(f"num_layers {d.get('num_layers')!r} disagrees with the spec ({L}) or the model ({shape.get('num_layers')})")
        hidden, labels = d.get("hidden"), d.get("num_labels")
        if not isinstance(hidden, int) or hidden < 1 or shape.get("hidden") not in (None, hidden):
            raise bad(f"hidden {hidden!r} disagrees with the model's {shape.get('hidden')}")
        if not isinstance(labels, int) or labels != len(manifest.get("labels", [])):
            raise bad(f"num_labels {labels!r} is not the {len(manifest.get('labels', []))} labels")
        buckets = d.get("buckets")
        if (not isinstance(buckets, list) or not buckets or not all(isinstance(b, int) and b >= 2 for b in buckets)
                or buckets != sorted(set(buckets))):
            raise bad(f"buckets must be ascending sequence lengths >= 2, got {buckets!r}")
        has_pte, has_onnx = "pte" in manifest.get("artifacts", {}), "onnx" in manifest.get("artifacts", {})
        files = manifest.get("files", {})

        def methods(entry, what):
            m = entry.get("pte") if isinstance(entry, dict) else None
            if not has_pte:
                return {}
            if not isinstance(m, dict) or sorted(int(k) for k in m) != buckets or not all(isinstance(v, str) for v in m.values()):
                raise bad(f"{what}: pte must name one method per bucket {buckets}, got {m!r}")
            return {int(k): v for k, v in m.items()}

        def onnx_file(entry, what):
            f = entry.get("onnx") if isinstance(entry, dict) else None
            if not has_onnx:
                return None
            if not isinstance(f, str) or f not in files:
                raise bad(f"{what}: onnx file {f!r} is not a listed bundle file")
            return f

        emb = d.get("embedding")
        emb_pte, emb_onnx = methods(emb, "embedding"), onnx_file(emb, "embedding")
        segs, expect = [], 1
        raw = d.get("segments")
        if not isinstance(raw, list) or not raw:
            raise bad("segments must be a non-empty list")
        for k, s in enumerate(raw):
            if not isinstance(s, dict):
                raise bad(f"segment {k} must be an object")
            layers = s.get("layers")
            if (not isinstance(layers, list) or len(layers) != 2 or not all(isinstance(x, int) for x in layers)
                    or layers[0] != expect or layers[1] < layers[0] or layers[1] > L):
                raise bad(f"segment {k} covers layers {layers!r}; segments must cover layers 1..{L} in order "
                          f"(this one should start at layer {expect})")
            last = layers[1]
            exit_, tokens = bool(s.get("exit")), bool(s.get("tokens"))
            if exit_ != (last in spec.exits) or tokens != (last in spec.token_layers):
                raise bad(f"segment {k} (layers {layers[0]}-{last}): exit={exit_}, tokens={tokens} disagree with the "
                          f"spec's exits {list(spec.exits)} and token layers {list(spec.token_layers)}")
            if any(l in spec.exits or l in spec.token_layers for l in range(layers[0], last)):
                raise bad(f"segment {k} (layers {layers[0]}-{last}) runs past an exit or token layer")
            entry = SegmentEntry(k, (layers[0], last), exit_, tokens, methods(s, f"segment {k}"), onnx_file(s, f"segment {k}"))
            if "outputs" in s and list(s["outputs"]) != list(entry.outputs):
                raise bad(f"segment {k}: outputs {s['outputs']!r} should be {list(entry.outputs)}")
            segs.append(entry)
            expect = last + 1
        if expect != L + 1:
            raise bad(f"segments end at layer {expect - 1}, the model has {L}")
        names = [m for e in (emb_pte, *[s.pte for s in segs]) for m in e.values()]
        if len(names) != len(set(names)):
            raise bad("a pte method is listed twice")
        rule = d.get("rule") or {}
        if rule.get("name") != spec.rule or rule.get("threshold") != spec.threshold:
            raise bad(f"rule {rule!r} disagrees with the spec ({spec.rule} at {spec.threshold})")
        lo, hi = threshold_range(spec.rule, len(spec.exits))
        if list(rule.get("range", [])) != [lo, hi]:
            raise bad(f"rule range {rule.get('range')!r} should be {[lo, hi]}")
        mask_bias = d.get("mask_bias")
        if not isinstance(mask_bias, (int, float)) or mask_bias > -1e4:
            raise bad(f"mask_bias must be a large negative number, got {mask_bias!r}")
        return cls(spec, hidden, labels, tuple(buckets), emb_pte, emb_onnx, tuple(segs), float(mask_bias))
