"""Generate runtime/src/unicode_tables.cpp from Python's ``unicodedata``.

The native WordPiece tokenizer follows the Hugging Face ``tokenizers``
BertNormalizer + BertPreTokenizer. Per input code point it needs:

* ``drop``:   removed by clean_text (NUL, U+FFFD, categories Cc/Cf/Co/Cs (not Cn)
              except tab, newline and carriage return);
* ``space``:  Unicode White_Space (turned into a plain space, then split on);
* ``cjk``:    CJK ideographs that BERT surrounds with spaces;
* ``punct``:  ASCII punctuation (33-47, 58-64, 91-96, 123-126) and Unicode P*;
* ``mark``:   nonspacing marks (Mn), stripped after NFD when accents are stripped;
* the canonical decomposition (full NFD) of a code point;
* the full lowercase mapping of a code point (may be several code points).

Category tables are written as sorted ``[first, last]`` ranges. The two
mappings are written as runs ``(first, count, stride, delta)`` for one-to-one
maps plus an explicit list for one-to-many maps, which keeps the file small.

Run from the repository root (the output is checked in)::

    .venv/bin/python runtime/tools/gen_unicode_tables.py

About 1,800 code points are classified differently by the Rust crates behind
``tokenizers`` (older category tables, newer case tables) than by Python's
Unicode database (``unicodedata`` of Python 3.11 follows Unicode 14.0). When
``tokenizers`` is importable the tables are corrected to its behaviour, code
point by code point, so the native tokenizer reproduces the Hugging Face ids
exactly; the header of the generated file records how many entries changed. ``--check-hf`` compares the
reference pipeline implemented here with ``BertTokenizerFast`` on every code
point and prints the differences.
"""

from __future__ import annotations

import argparse
import logging
import sys
import unicodedata
from pathlib import Path

log = logging.getLogger("gen_unicode_tables")

MAX_CP = 0x110000
OUT = Path(__file__).resolve().parents[1] / "src" / "unicode_tables.cpp"


def is_cjk(cp: int) -> bool:
    # BERT's _is_chinese_char ranges. tokenizers has 0x2B920 where BERT has 0x2B820;
    # the correction pass below picks that up.
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


_WHITE_SPACE = {
    0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680,
    *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
}


class Tables:
    """Per code point properties; Python's unicodedata, corrected to tokenizers where they differ."""

    def __init__(self, *, use_hf: bool) -> None:
        self.drop = [False] * MAX_CP
        self.space = [False] * MAX_CP
        self.punct = [False] * MAX_CP
        self.mark = [False] * MAX_CP
        self.cjk = [is_cjk(cp) for cp in range(MAX_CP)]
        self.nfd: dict[int, list[int]] = {}
        self.lower: dict[int, list[int]] = {}
        for cp in range(MAX_CP):
            if 0xD800 <= cp <= 0xDFFF:
                self.drop[cp] = True  # never reaches the tokenizer: invalid UTF-8
                continue
            ch = chr(cp)
            cat = unicodedata.category(ch)
            self.drop[cp] = cp == 0 or cp == 0xFFFD or (cp not in (9, 10, 13) and cat in ("Cc", "Cf", "Co", "Cs"))
            self.space[cp] = cp in _WHITE_SPACE
            self.punct[cp] = (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
                              or cat.startswith("P"))
            self.mark[cp] = cat == "Mn"
            d = [ord(c) for c in unicodedata.normalize("NFD", ch)]
            if d != [cp]:
                self.nfd[cp] = d
            lo = [ord(c) for c in ch.lower()]
            if lo != [cp]:
                self.lower[cp] = lo
        self.corrections: dict[str, int] = {}
        if use_hf:
            self._correct_from_hf()

    def _correct_from_hf(self) -> None:
        # The Rust crates behind `tokenizers` carry older Unicode tables than
        # Python 3.11 (for categories) and newer ones (Rust std, for case and
        # White_Space). Ask them directly so the native ids match exactly.
        from tokenizers import normalizers, pre_tokenizers

        clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                           strip_accents=False, lowercase=False)
        strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                           strip_accents=True, lowercase=False)
        nfd = normalizers.NFD()
        lower = normalizers.Lowercase()
        chinese = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                             strip_accents=False, lowercase=False)
        pre = pre_tokenizers.BertPreTokenizer()
        fixes = {"cjk": 0, "drop": 0, "space": 0, "punct": 0, "mark": 0, "nfd": 0, "lower": 0}
        for cp in range(MAX_CP):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            ch = chr(cp)
            drop = clean.normalize_str(f"a{ch}b") == "ab"
            words = [w for w, _ in pre.pre_tokenize_str(f"a{ch}b")]
            space = words == ["a", "b"]
            punct = words == ["a", ch, "b"]
            d = [ord(c) for c in nfd.normalize_str(ch)]
            mark = d == [cp] and strip.normalize_str(ch) == ""
            lo = [ord(c) for c in lower.normalize_str(ch)]
            cjk = chinese.normalize_str(ch) == f" {ch} "
            for name, value in (("cjk", cjk), ("drop", drop), ("space", space), ("punct", punct), ("mark", mark)):
                table = getattr(self, name)
                if table[cp] != value:
                    table[cp] = value
                    fixes[name] += 1
            for name, value in (("nfd", d), ("lower", lo)):
                table = getattr(self, name)
                if table.get(cp, [cp]) != value:
                    fixes[name] += 1
                    if value == [cp]:
                        table.pop(cp, None)
                    else:
                        table[cp] = value
        self.corrections = fixes


def reference_normalize(t: Tables, text: str) -> str:
    """The BertNormalizer pipeline (lowercase, strip accents) over the tables, in plain Python."""
    out: list[str] = []
    for ch in text:
        cp = ord(ch)
        if t.drop[cp]:
            continue
        if t.space[cp]:
            out.append(" ")
            continue
        cjk = t.cjk[cp]
        if cjk:
            out.append(" ")
        for d in t.nfd.get(cp, [cp]):
            if t.mark[d]:
                continue
            out.extend(chr(x) for x in t.lower.get(d, [d]))
        if cjk:
            out.append(" ")
    return "".join(out)


def ranges(flags) -> list[tuple[int, int]]:
    result: list[tuple[int, int]] = []
    start = None
    for cp in range(MAX_CP):
        if flags[cp]:
            if start is None:
                start = cp
        elif start is not None:
            result.append((start, cp - 1))
            start = None
    if start is not None:
        result.append((start, MAX_CP - 1))
    return result


def mapping_tables(mapping: dict[int, list[int]], *, skip=lambda cp: False):
    """Split a code point map into one-to-one runs and one-to-many entries."""
    singles: list[tuple[int, int]] = []
    multis: list[tuple[int, list[int]]] = []
    for cp in sorted(mapping):
        m = mapping[cp]
        if skip(cp):
            continue
        if len(m) == 1:
            singles.append((cp, m[0] - cp))
        else:
            multis.append((cp, m))
    runs: list[tuple[int, int, int, int]] = []
    i = 0
    while i < len(singles):
        cp, delta = singles[i]
        best_count, best_stride = 1, 1
        for stride in (1, 2):
            j = i + 1
            count = 1
            while j < len(singles) and singles[j][0] == cp + count * stride and singles[j][1] == delta:
                count += 1
                j += 1
            if count > best_count:
                best_count, best_stride = count, stride
        runs.append((cp, best_count, best_stride, delta))
        i += best_count
    return runs, multis


def wrap(items: list[str], width: int = 100) -> str:
    """Join items with commas, breaking lines between items only."""
    lines: list[str] = []
    cur = ""
    for item in items:
        piece = item + ","
        if cur and len(cur) + len(piece) > width:
            lines.append(cur)
            cur = ""
        cur += piece
    if cur:
        lines.append(cur)
    return "\n    ".join(lines)


def emit_ranges(name: str, rs: list[tuple[int, int]]) -> str:
    joined = wrap([f"{{0x{a:X},0x{b:X}}}" for a, b in rs])
    return (
        f"const Range k{name}[] = {{\n    {joined}}};\n"
        f"const std::size_t k{name}Count = sizeof(k{name}) / sizeof(k{name}[0]);\n"
    )


def emit_mapping(name: str, runs, multis) -> str:
    joined = wrap([f"{{0x{a:X},{n},{s},{d}}}" for a, n, s, d in runs])
    pool: list[int] = []
    entries = []
    for cp, m in multis:
        entries.append((cp, len(pool), len(m)))
        pool.extend(m)
    assert len(pool) < 1 << 16 and all(n < 1 << 8 for _, _, n in entries), "widen MapMulti"
    assert all(n < 1 << 16 for _, n, _, _ in runs), "widen MapRun"
    pool_lines = wrap([f"0x{x:X}" for x in pool])
    ent_lines = wrap([f"{{0x{a:X},{o},{n}}}" for a, o, n in entries])
    return (
        f"const MapRun k{name}Runs[] = {{\n    {joined}}};\n"
        f"const std::size_t k{name}RunCount = sizeof(k{name}Runs) / sizeof(k{name}Runs[0]);\n"
        f"const char32_t k{name}Pool[] = {{\n    {pool_lines}}};\n"
        f"const MapMulti k{name}Multi[] = {{\n    {ent_lines}}};\n"
        f"const std::size_t k{name}MultiCount = sizeof(k{name}Multi) / sizeof(k{name}Multi[0]);\n"
    )


def is_hangul_syllable(cp: int) -> bool:
    # Decomposed arithmetically in unicode.cpp instead of 11,172 table entries.
    return 0xAC00 <= cp <= 0xD7A3


def generate(t: Tables) -> str:
    fixes = ", ".join(f"{k} {v}" for k, v in t.corrections.items()) or "none (tokenizers not installed)"
    parts = [
        "// Generated by runtime/tools/gen_unicode_tables.py from Python unicodedata "
        f"(Unicode {unicodedata.unidata_version}),\n"
        f"// corrected to the Hugging Face tokenizers crates where they differ: {fixes}.\n"
        "// Do not edit.\n",
        '#include "unicode_tables.h"\n\nnamespace edgenlp::unicode::tables {\n\n',
        emit_ranges("Drop", ranges(t.drop)),
        emit_ranges("Space", ranges(t.space)),
        emit_ranges("Cjk", ranges(t.cjk)),
        emit_ranges("Punct", ranges(t.punct)),
        emit_ranges("Mark", ranges(t.mark)),
        emit_mapping("Nfd", *mapping_tables(t.nfd, skip=is_hangul_syllable)),
        emit_mapping("Lower", *mapping_tables(t.lower)),
        "\n}  // namespace edgenlp::unicode::tables\n",
    ]
    return "".join(parts)


def check_hf(t: Tables, vocab: Path) -> int:
    """Compare reference_normalize + BERT splitting with BertTokenizerFast per code point."""
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast(str(vocab), do_lower_case=True)
    norm = tok.backend_tokenizer.normalizer
    pre = tok.backend_tokenizer.pre_tokenizer
    diffs = 0
    for cp in range(MAX_CP):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        s = f"a{chr(cp)}b"
        hf = norm.normalize_str(s)
        mine = reference_normalize(t, s)
        hf_split = [w for w, _ in pre.pre_tokenize_str(hf)]
        mine_split = _split(t, mine)
        if hf != mine or hf_split != mine_split:
            diffs += 1
            if diffs <= 50:
                log.warning("U+%04X %s: hf=%r/%r mine=%r/%r", cp, unicodedata.category(chr(cp)),
                            hf, hf_split, mine, mine_split)
    log.warning("%d code points differ", diffs)
    return diffs


def _split(t: Tables, text: str) -> list[str]:
    words: list[str] = []
    cur = ""
    for ch in text:
        cp = ord(ch)
        if t.space[cp]:
            if cur:
                words.append(cur)
            cur = ""
        elif t.punct[cp]:
            if cur:
                words.append(cur)
            words.append(ch)
            cur = ""
        else:
            cur += ch
    if cur:
        words.append(cur)
    return words


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check-hf", type=Path, metavar="VOCAB", help="compare with BertTokenizerFast and exit")
    ap.add_argument("--no-hf", action="store_true", help="plain unicodedata tables, no tokenizers corrections")
    args = ap.parse_args(argv)
    tables = Tables(use_hf=not args.no_hf)
    if args.check_hf:
        return 1 if check_hf(tables, args.check_hf) else 0
    text = generate(tables)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    log.info("wrote %s (%d bytes)", args.out, len(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
