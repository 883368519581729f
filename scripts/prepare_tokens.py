#!/usr/bin/env python3
"""Turn text files into llm.c token shards for the trainer's "tokens" data source.

A byte-level BPE tokenizer (GPT-2 style: every byte is a token, so any UTF-8 text encodes)
is trained on the input text with the `tokenizers` package, or loaded from an existing
tokenizer.json; the text is encoded and written as llm.c shards, and the tokenizer is saved
as tokenizer.json beside them so the tokens can be decoded later.

Usage:
    pip install tokenizers
    python3 scripts/prepare_tokens.py corpus/ notes.txt --out data/corpus --vocab-size 8192
    python3 scripts/prepare_tokens.py more.txt --out data/more --tokenizer data/corpus/tokenizer.json

Inputs are files or folders (every regular file below a folder, sorted by path, hidden ones
skipped). Each file is one document; documents are separated by the end-of-text token
(--eot, default "<|endoftext|>", placed before each document as llm.c does; --no-eot to
leave it out). Output:
    OUT/PREFIX_000000.bin, OUT/PREFIX_000001.bin, ...   shards of at most --shard-tokens tokens
    OUT/tokenizer.json                                  the tokenizer used
Shard layout (karpathy/llm.c dev/data/data_common.py): int32 header[256] with
header[0] = 20240520 (magic), header[1] = 1 (version), header[2] = token count, then the
tokens as little-endian uint16 (so the vocabulary must be at most 65536).

The trainer's config then reads them with
    "data": {"source": "tokens", "path": "OUT/PREFIX_*.bin", "val_fraction": 0.05}
and the model's vocab_size set to at least the vocabulary size this script prints; the
trainer splits off the tail of every shard as validation data.
"""

import argparse
import array
import os
import struct
import sys

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
MAX_VOCAB = 1 << 16
CHUNK_CHARS = 1 << 20  # text is encoded in pieces of about this many characters


class UserError(Exception):
    pass


def list_inputs(inputs):
    files = []
    for path in inputs:
        if os.path.isdir(path):
            found = []
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found.extend(os.path.join(root, n) for n in names if not n.startswith("."))
            found = sorted(f for f in found if os.path.isfile(f))
            if not found:
                raise UserError(f"input folder '{path}' holds no files")
            files.extend(found)
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise UserError(f"input '{path}' does not exist")
    return files


def read_text(path):
    try:
        with open(path, "r", encoding="utf-8", errors="strict") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise UserError(f"'{path}' is not valid UTF-8 (byte {e.start}): {e.reason}") from None
    except OSError as e:
        raise UserError(f"cannot read '{path}': {e.strerror}") from None


def chunks(text):
    """Pieces of at most about CHUNK_CHARS characters that encode to exactly the tokens of
    the whole text. A piece ends where a non-space character meets a space character: no
    piece of GPT-2's pre-tokenizer pattern (which the byte-level tokenizer uses) runs from a
    non-space character into a space, so the pre-tokenizer cuts there too. A text without
    such a place in CHUNK_CHARS characters is cut where the limit falls."""
    start = 0
    while start < len(text):
        end = min(len(text), start + CHUNK_CHARS)
        if end < len(text):
            cut = end
            while cut > start + 1 and not (text[cut].isspace() and not text[cut - 1].isspace()):
                cut -= 1
            if cut > start + 1:
                end = cut
        yield text[start:end]
        start = end


def train_tokenizer(files, vocab_size, min_frequency, special_tokens):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def texts():
        for path in files:
            yield from chunks(read_text(path))

    tok.train_from_iterator(texts(), trainer=trainer)
    return tok


def write_shard(path, tokens):
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, len(tokens)
    data = array.array("H", tokens)
    if sys.byteorder != "little":
        data.byteswap()
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", *header))
        f.write(data.tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Encode text files into llm.c token shards with a byte-level BPE tokenizer.",
        epilog="See the module docstring (top of this file) for the shard layout and the trainer config.",
    )
    parser.add_argument("inputs", nargs="+", help="text files or folders (UTF-8)")
    parser.add_argument("--out", required=True, help="output folder for the shards and tokenizer.json")
    parser.add_argument("--prefix", default="tokens", help="shard file name prefix (default: tokens)")
    parser.add_argument("--tokenizer", help="use this tokenizer.json instead of training one")
    parser.add_argument("--vocab-size", type=int, default=8192,
                        help="vocabulary of the trained tokenizer, 257..65536 (default: 8192)")
    parser.add_argument("--min-frequency", type=int, default=2,
                        help="a merge must occur this often to be learnt (default: 2)")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000,
                        help="tokens per shard at most (default: 100000000, as llm.c)")
    parser.add_argument("--eot", default="<|endoftext|>", help="document separator token (default: <|endoftext|>)")
    parser.add_argument("--no-eot", action="store_true", help="do not separate documents")
    args = parser.parse_args(argv)

    try:
        import tokenizers  # noqa: F401
    except ImportError:
        print("prepare_tokens: the Python package 'tokenizers' is missing: pip install tokenizers", file=sys.stderr)
        return 2

    try:
        if args.shard_tokens < 1:
            raise UserError(f"--shard-tokens {args.shard_tokens} must be >= 1")
        files = list_inputs(args.inputs)
        total_chars = sum(os.path.getsize(f) for f in files)
        if total_chars == 0:
            raise UserError("the inputs hold no text (all files are empty)")
        os.makedirs(args.out, exist_ok=True)

        from tokenizers import Tokenizer

        if args.tokenizer:
            try:
                tok = Tokenizer.from_file(args.tokenizer)
            except Exception as e:  # tokenizers raises its own Exception subclass
                raise UserError(f"cannot load tokenizer '{args.tokenizer}': {e}") from None
        else:
            if not 257 <= args.vocab_size <= MAX_VOCAB:
                raise UserError(f"--vocab-size {args.vocab_size} is outside 257..{MAX_VOCAB} (uint16 tokens)")
            tok = train_tokenizer(files, args.vocab_size, args.min_frequency, [] if args.no_eot else [args.eot])
        vocab = tok.get_vocab_size(with_added_tokens=True)
        if vocab > MAX_VOCAB:
            raise UserError(f"the tokenizer has {vocab} tokens; llm.c shards hold uint16 tokens (at most {MAX_VOCAB})")
        eot_id = None
        if not args.no_eot:
            eot_id = tok.token_to_id(args.eot)
            if eot_id is None:
                raise UserError(f"the tokenizer has no token '{args.eot}' to separate documents (--eot, or --no-eot)")

        shard_paths = []
        shard_sizes = []
        pending = []

        def flush(final):
            while len(pending) >= args.shard_tokens or (final and pending):
                part = pending[: args.shard_tokens]
                del pending[: args.shard_tokens]
                path = os.path.join(args.out, f"{args.prefix}_{len(shard_paths):06d}.bin")
                write_shard(path, part)
                shard_paths.append(path)
                shard_sizes.append(len(part))

        for path in files:
            if eot_id is not None:
                pending.append(eot_id)
            for enc in tok.encode_batch(list(chunks(read_text(path))), add_special_tokens=False):
                pending.extend(enc.ids)
            flush(False)
        flush(True)
        total_tokens = sum(shard_sizes)
        tok_path = os.path.join(args.out, "tokenizer.json")
        tok.save(tok_path)
    except UserError as e:
        print(f"prepare_tokens: {e}", file=sys.stderr)
        return 1

    print(f"prepare_tokens: {len(files)} file(s), {total_chars} bytes -> {total_tokens} tokens "
          f"({total_chars / max(total_tokens, 1):.2f} bytes/token) in {len(shard_paths)} shard(s)")
    print(f"prepare_tokens: vocabulary {vocab} tokens; tokenizer saved to {tok_path}")
    print(f'prepare_tokens: config: "data": {{"source": "tokens", "path": '
          f'"{os.path.join(args.out, args.prefix)}_*.bin"}}, model vocab_size >= {vocab}')
    return 0


if __name__ == "__main__":
    sys.exit(main())
