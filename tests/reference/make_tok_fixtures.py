#!/usr/bin/env python3
"""make_tok_fixtures.py — writes tests/fixtures/tok/expected.json: the token ids that the reference
libraries give for a set of texts, which tests/unit/test_tokenizer.c compares with ours (v2125).

  gpt2: tiktoken with GPT-2's ranks (assets/tokenizers/gpt2.tiktoken.gz) and GPT-2's pattern,
        encode_ordinary (special-token text is plain text), <|endoftext|> = 50256.
  bpe:  the `tokenizers` library (Hugging Face) loading tests/fixtures/tok/kjv1024/tokenizer.json,
        a byte-level BPE that OUR trainer wrote (`gen tokenizer train data/kjv.txt --vocab 1024`),
        so this also checks that the file we write is what `tokenizers` reads.
Texts: excerpts of both corpora (data/kjv.txt, Debian's fortunes), contractions, whitespace runs,
unicode (accents, CJK, emoji with ZWJ, combining marks, unicode spaces), digits, punctuation.
When data/kjv.txt exists it also records the count and an FNV-1a-64 of the ids (int32 LE) of the
whole corpus under both tokenizers, and the xxh3 of the trained file (determinism check).

Run (PyPI only here, never in CI):
  python3 -m venv /tmp/tbvenv && /tmp/tbvenv/bin/pip install tiktoken tokenizers
  build/generator/gen tokenizer train data/kjv.txt --vocab 1024 -o tests/fixtures/tok/kjv1024
  /tmp/tbvenv/bin/python tests/reference/make_tok_fixtures.py
"""
import base64, gzip, json, os, sys

import tiktoken
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def gpt2():
    ranks = {}
    with gzip.open(os.path.join(ROOT, "assets/tokenizers/gpt2.tiktoken.gz"), "rb") as f:
        for line in f:
            if line.strip():
                b, r = line.split()
                ranks[base64.b64decode(b)] = int(r)
    return tiktoken.Encoding(name="gpt2_fixture", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


def fnv(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little", signed=True):
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def main():
    enc = gpt2()
    hf = Tokenizer.from_file(os.path.join(ROOT, "tests/fixtures/tok/kjv1024/tokenizer.json"))
    cases = []
    kjv_path = os.path.join(ROOT, "data/kjv.txt")
    if os.path.exists(kjv_path):
        kjv = open(kjv_path, encoding="utf-8").read()
        for i, (a, n) in enumerate([(0, 400), (len(kjv) // 2, 600), (len(kjv) - 500, 500)]):
            cases.append(("kjv_%d" % i, kjv[a:a + n]))
    fdir = "/usr/share/games/fortunes"
    for name in ("fortunes", "computers", "linux"):
        p = os.path.join(fdir, name)
        if os.path.exists(p):
            t = open(p, encoding="utf-8", errors="replace").read()
            cases.append(("fortune_" + name, t[:700]))
    cases += [
        ("contractions", "I'm sure you're right: they've gone, he'll stay, she'd know, it's DON'T WON'T can't 'tis 'S'"),
        ("whitespace", "  two leading\tand\t\ttabs\n\n\nthree newlines   trailing   \n   \n  x  "),
        ("only_spaces", "     "),
        ("newlines", "\n\n\n"),
        ("crlf", "line one\r\nline two\r\n"),
        ("accents", "Héllo wörld, façade naïve coöperate — Ærøskøbing"),
        ("cjk", "日本語のテキストと中文字符，한국어 문장。"),
        ("emoji", "ok 👍🏽 family 👨\u200d👩\u200d👧 flags 🇫🇷🇩🇪 done"),
        ("combining", "e\u0301 a\u0308 n\u0303 Z\u0351\u0352"),
        ("unicode_spaces", "a\u00a0b\u3000c\u2028d\u2003e \u00a0 f"),
        ("digits", "12345 3.14159 1,000,000 0x1F 2024-05-21 ٣٤٥ ½"),
        ("punct", "!!!???... --- (([[{{}}]])) @#$%^&*_+= ~`|\\/<>"),
        ("code", "def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n"),
        ("mixed", "The year 1611's King James Bible: \"In the beginning\"—Genesis 1:1."),
        ("eot_text", "before <|endoftext|> after"),
    ]
    out = {"note": "written by tests/reference/make_tok_fixtures.py (tiktoken %s, tokenizers %s)" %
           (tiktoken.__version__, __import__("tokenizers").__version__),
           "gpt2": "assets/tokenizers/gpt2.tiktoken.gz", "bpe": "tests/fixtures/tok/kjv1024/tokenizer.json",
           "cases": []}
    for name, text in cases:
        c = {"name": name, "text": text, "gpt2": enc.encode_ordinary(text)}
        # `tokenizers` splits added special tokens out of the text; our encoding is ordinary
        c["bpe"] = None if "<|endoftext|>" in text else hf.encode(text, add_special_tokens=False).ids
        cases_ok = hf.decode(c["bpe"]) == text if c["bpe"] is not None else True
        assert cases_ok, name
        out["cases"].append(c)
    if os.path.exists(kjv_path):
        g = enc.encode_ordinary(kjv)
        b = hf.encode(kjv, add_special_tokens=False).ids
        out["kjv"] = {"bytes": len(kjv.encode("utf-8")), "gpt2_tokens": len(g), "gpt2_fnv": fnv(g),
                      "bpe_tokens": len(b), "bpe_fnv": fnv(b)}
    with open(os.path.join(ROOT, "tests/fixtures/tok/expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print("wrote tests/fixtures/tok/expected.json: %d cases" % len(out["cases"]))


if __name__ == "__main__":
    sys.exit(main())
