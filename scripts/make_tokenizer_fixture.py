#!/usr/bin/env python3
"""Write the byte-level BPE test fixtures of tests/engine/data/test_tokenizer.cpp with the
Python `tokenizers` package, the reference the C++ tokenizer (engine/data/tokenizer.cpp) must match.

In tests/engine/data/fixtures/:
    tokenizer_corpus.txt   (input)  the text the tokenizer is trained on
    tokenizer_cases.txt    (input)  the texts to encode: each line, then the whole file
    tokenizer.json         (output) trained exactly as scripts/prepare_tokens.py trains (its
                                    train_tokenizer), vocabulary VOCAB, end-of-text token
    tokenizer_cases.json   (output) per case: the text, its ids, and its ids with the
                                    pre-tokenizer's add_prefix_space set to true

Usage:
    pip install tokenizers
    python3 scripts/make_tokenizer_fixture.py
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "engine", "data", "fixtures")
VOCAB = 400
EOT = "<|endoftext|>"

sys.path.insert(0, HERE)
from prepare_tokens import train_tokenizer  # noqa: E402


def main():
    from tokenizers import Tokenizer, pre_tokenizers

    corpus = os.path.join(FIXTURES, "tokenizer_corpus.txt")
    tok = train_tokenizer([corpus], VOCAB, 2, [EOT])
    tok.save(os.path.join(FIXTURES, "tokenizer.json"))

    spaced = Tokenizer.from_str(tok.to_str())
    spaced.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)

    with open(os.path.join(FIXTURES, "tokenizer_cases.txt"), encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    cases = []
    for t in lines + [text]:
        ids = tok.encode(t, add_special_tokens=False).ids
        if tok.decode(ids, skip_special_tokens=False) != t:
            raise SystemExit(f"make_tokenizer_fixture: {t!r} does not decode back to itself")
        cases.append({"text": t, "ids": ids, "ids_prefix_space": spaced.encode(t, add_special_tokens=False).ids})

    out = os.path.join(FIXTURES, "tokenizer_cases.json")
    with open(out, "w", encoding="utf-8") as f:
        f.write('{"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"make_tokenizer_fixture: vocabulary {tok.get_vocab_size()}, {len(cases)} cases -> {os.path.normpath(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
