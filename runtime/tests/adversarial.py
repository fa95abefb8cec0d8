"""Strings that stress BERT normalization and WordPiece; shared by the host and qemu tests."""

ADVERSARIAL = [
    "",
    " ",
    "\t\n\r ",
    "Hello, World!",
    "Café crème brûlée, naïve façade, Ångström, Øresund, Straße, STRASSE",
    "İstanbul ıstanbul DİYARBAKIR İ i̇",  # Turkish dotted/dotless I
    "ß ẞ ﬁ ﬂ ǅ ǈ",  # sharp s, ligatures, titlecase digraphs
    "e\u0301 a\u0300\u0316 o\u0308\u0304 n\u0303",  # combining marks
    "\u0301\u0301leading marks",
    "zero\u200bwidth\u200cjoiner\u200dnon\ufeffbreaking\u2060word",
    "soft\u00adhyphen and\u00a0nbsp and\u3000ideographic\u2003em",
    "ctrl\x00nul\x01\x07bell\x1b[31mansi\x7fdel\x85nel\x0bvt\x0cff",
    "replacement \ufffd char and private \ue000 use",
    "emoji 😀👍🏽👨‍👩‍👧‍👦 🇫🇷 ❤️ 🥰 flags and ZWJ",
    "中文字符和日本語のテキスト，한국어 텍스트。",
    "𠀀𪜀𫝀𫠠 CJK extension planes",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ ！？",
    "Ελληνικά ΣΊΣΥΦΟΣ Ὀδυσσεύς, Кириллица ЁЛКА, עברית, العربية",
    "ǅungla ǈudi Ǉ ǋ",
    "ﬀ ﬃ Ⅻ ⅻ ① ㈱ ㎞",
    "a" * 100,
    "b" * 101,
    "unaffable " * 3 + "x" * 250,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "!!!???...,,,;;;:::---___'''\"\"\"```~~~",
    "$100.00 @user #hashtag http://example.com/path?q=1&r=2 a@b.c",
    "¿¡Qué!? «guillemets» „quotes“ ‘single’ — dash – en … ellipsis",
    "tab\tseparated\tvalues\nnew\nlines\r\ncrlf",
    "Ⓐⓑⓒ 𝐀𝐁𝐂 𝔄𝔅 ℌℑ",
    "ǰ ΐ ΰ և ŉ",  # lowercase expansions / special casing
    "Ꭰ Ꭱ ꭰ",  # Cherokee (case pairs added in newer Unicode)
    "\u0345 \u0130\u0307",
    "x" * 5000,
    ("word " * 400).strip(),
]
