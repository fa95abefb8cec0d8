"""``edgenlp tokenize``: print the token ids of texts, from the native or the Hugging Face tokenizer."""

from __future__ import annotations

import json
import logging

import click

from edgenlp.cli.options import json_options
from edgenlp.errors import EdgeNLPError

log = logging.getLogger(__name__)


def tokenize_texts(bundle: str, texts: list[str], *, runtime: str) -> list[list[int]]:
    """Ids per text ([CLS] ... [SEP], truncated to the bundle's max_seq_len)."""
    if runtime == "native":
        from edgenlp.run.native import native_tokenize

        return native_tokenize(bundle, texts)
    from edgenlp.bundle import Bundle
    from edgenlp.models.tokenizer import token_ids

    b = Bundle.open(bundle)
    return token_ids(b.tokenizer, texts, max_len=b.max_seq_len)


@click.command("tokenize")
@click.argument("bundle", type=click.Path(file_okay=False))
@click.argument("texts", nargs=-1)
@click.option("--runtime", type=click.Choice(["native", "hf"]), default="native", show_default=True,
              help="native: libedgenlp's C++ tokenizer; hf: the Hugging Face fast tokenizer.")
@click.option("--data", "data", type=click.Path(dir_okay=False), help="Tokenize the text column of a TSV file.")
@json_options(file=False, help="One JSON object per text: {text, ids}.")
def tokenize_cmd(bundle: str, texts: tuple[str, ...], runtime: str, data: str | None, as_json: bool) -> None:
    """Print the token ids of TEXT... (or of every row of --data FILE.tsv).

    \b
    Examples:
      edgenlp tokenize out/minilm-sst2 "a gripping, funny film"
      edgenlp tokenize out/minilm-sst2 --runtime hf --data dev.tsv --json
    """
    if data and texts:
        raise EdgeNLPError("give TEXT arguments or --data FILE.tsv, not both")
    if data:
        from edgenlp.data.tasks import read_tsv

        items = list(read_tsv(data).texts)
    else:
        items = list(texts)
    if not items:
        raise EdgeNLPError("no text given: pass TEXT... or --data FILE.tsv")
    ids = tokenize_texts(bundle, items, runtime=runtime)
    for text, row in zip(items, ids):
        if as_json:
            click.echo(json.dumps({"text": text, "ids": row}, ensure_ascii=False))
        else:
            click.echo(" ".join(str(i) for i in row))
