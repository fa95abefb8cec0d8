"""Our encoder against transformers, loading/saving, shapes and padding invariance."""

import pytest
import torch

from edgenlp_testing import tiny_model
from edgenlp.errors import EdgeNLPError
from edgenlp.models.encoder import EncoderClassifier, EncoderShape
from edgenlp.models.registry import NAMED_MODELS, load_model, save_pretrained


def inputs(batch=2, seq=12, vocab=1000, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if batch > 1:
        mask[1, seq // 2 :] = 0
    return ids, mask


@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_matches_transformers_after_save(tmp_path, family):
    """save_pretrained writes a directory transformers loads; logits agree to 1e-5."""
    from transformers import AutoModelForSequenceClassification

    model, info = tiny_model(family=family, labels=("a", "b", "c"))
    save_pretrained(model, info, tmp_path / "m")
    hf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "m", attn_implementation="eager").eval()
    ids, mask = inputs()
    with torch.no_grad():
        ours = model(ids, mask)
        theirs = hf(input_ids=ids, attention_mask=mask).logits
    assert (ours - theirs).abs().max().item() < 1e-5
    reloaded, info2 = load_model(tmp_path / "m")
    assert reloaded.labels == ("a", "b", "c")
    with torch.no_grad():
        assert torch.equal(reloaded(ids, mask), ours)


@pytest.mark.minilm
def test_minilm_loads_pretrained_and_matches_transformers():
    from transformers import BertModel

    model, info = load_model("minilm-l6", labels=("0", "1"))
    assert info.pretrained and model.shape.num_layers == 6 and model.shape.hidden == 384
    hf = BertModel.from_pretrained(info.source, attn_implementation="eager").eval()
    ids, mask = inputs(vocab=30522)
    with torch.no_grad():
        ours = model.encode(ids, mask)
        theirs = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    valid = mask.bool()
    assert (ours[valid] - theirs[valid]).abs().max().item() < 1e-4


def test_new_head_when_labels_differ(tmp_path):
    model, info = tiny_model(labels=("x", "y"))
    save_pretrained(model, info, tmp_path / "m")
    same, _ = load_model(tmp_path / "m", labels=("x", "y"))
    other, _ = load_model(tmp_path / "m", labels=("p", "q", "r"))
    assert torch.equal(same.classifier.weight, model.classifier.weight)
    assert other.num_labels == 3 and other.labels == ("p", "q", "r")


def test_padding_does_not_change_logits():
    model, _ = tiny_model()
    ids, _ = inputs(batch=1, seq=7)
    alone = model(ids, torch.ones_like(ids))
    padded = torch.cat([ids, torch.zeros(1, 9, dtype=torch.int64)], 1)
    mask = torch.cat([torch.ones(1, 7), torch.zeros(1, 9)], 1).long()
    assert (model(padded, mask) - alone).abs().max().item() < 1e-5


def test_uneven_shape_including_empty_layer_equals_the_masked_uniform_model():
    """Pruned == masked: an uneven model (2, 4, 0 heads; 16, 64, 0 FFN neurons) built from the leading heads and
    neurons of a uniform model gives the uniform model's logits once the dropped heads' and neurons' output
    columns are zeroed there (an empty sublayer leaves only its output bias, as a fully masked one does)."""
    heads, ffn, head_dim = (2, 4, 0), (16, 64, 0), 8
    full = EncoderClassifier(EncoderShape(family="bert", vocab_size=100, hidden=32, heads=(4,) * 3, head_dim=head_dim,
                                          ffn=(64,) * 3, max_positions=32), 3).init_weights(std=0.2, seed=0).eval()
    shape = EncoderShape(family="bert", vocab_size=100, hidden=32, heads=heads, head_dim=head_dim, ffn=ffn, max_positions=32)
    pruned = EncoderClassifier(shape, 3).eval()
    assert [layer.query.out_features for layer in pruned.layers] == [16, 32, 0]
    ids = torch.randint(1, 100, (2, 10), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 10, dtype=torch.int64)
    mask[1, 6:] = 0
    unmasked = full(ids, mask)
    source = full.state_dict()
    pruned.load_state_dict({k: source[k][tuple(slice(0, n) for n in v.shape)] for k, v in pruned.state_dict().items()})
    with torch.no_grad():
        for layer, h, f in zip(full.layers, heads, ffn):
            layer.attn_out.weight[:, h * head_dim :] = 0
            layer.ffn_out.weight[:, f:] = 0
    want = full(ids, mask)
    got = pruned(ids, mask)
    assert got.shape == (2, 3)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (unmasked - got).abs().max() > 1e-3  # the dropped heads and neurons did contribute


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(family="gpt"), "family must be one of"),
        (dict(heads=(2,), ffn=(8, 8)), "disagree"),
        (dict(activation="swish"), "activation must be one of"),
        (dict(dropout=1.5), "dropout"),
    ],
)
def test_shape_validation(kwargs, message):
    base = dict(family="bert", vocab_size=10, hidden=8, heads=(2,), head_dim=4, ffn=(8,))
    with pytest.raises(ValueError, match=message):
        EncoderShape(**{**base, **kwargs})


def test_reference_shapes_and_unknown_model():
    assert NAMED_MODELS["bert-base"].shape.heads == (12,) * 12
    model, info = load_model("bert-mini", labels=("0", "1"))
    assert not info.pretrained and model.shape.hidden == 256
    with pytest.raises(EdgeNLPError, match="unknown model 'no-such-model'"):
        load_model("no-such-model")


def test_tokenizer_uses_the_vocabulary():
    """Ids are line numbers of vocab.txt (a tokenizer built with an empty vocab maps everything to [UNK])."""
    from edgenlp.models.registry import default_vocab_file
    from edgenlp.models.tokenizer import build_tokenizer, encode

    tok = build_tokenizer(default_vocab_file())
    vocab = default_vocab_file().read_text(encoding="utf-8").splitlines()
    ids, mask = encode(tok, ["Hello there, café!", "ok"], max_len=16)
    assert [vocab[i] for i in ids[0][mask[0] == 1]] == ["[CLS]", "hello", "there", ",", "cafe", "!", "[SEP]"]
    assert ids.shape == (2, 7) and mask[1].tolist() == [1, 1, 1, 0, 0, 0, 0]
