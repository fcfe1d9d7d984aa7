#!/usr/bin/env python3
"""Word-vocabulary fixtures: tests/fixtures/words/.

A WikiText-style text (written here from a fixed seed: headings `= = Title = =`, `@-@`, `@,@`,
`@.@`, `<unk>`, blank lines), a vocabulary built from it by Hugging Face's TransfoXLTokenizer
(transformers 4.37.2) the way the original code's `Vocab` builds one (special `<eos>` first, then
symbols by frequency), and the token ids of a held-out text.

The ids are what the original `Vocab.encode_file(path, ordered=True, add_eos=True)` gives: per
line as Python reads a text file, `line.strip()`, `.lower()` when the vocabulary is lower-case,
`.split()`, `+ ['<eos>']`, each symbol looked up with the tokenizer's `_convert_token_to_id`
(`<unk>` for words it lacks). (HF's own `tokenize` adds Moses pre-tokenization, which the
original code does not have, so it is not used for the ids.)

Files:
  train.txt, heldout.txt    the texts (heldout has words the vocabulary lacks, upper case,
                            CRLF and CR line ends, a tab, U+001F and U+00A0 as spaces)
  vocab.pkl                 `save_pretrained`'s pickle, 300 symbols (the size of the
                            `adaptive_div2` model, which the tests give it to), case-sensitive
  vocab.txt                 the same symbols, one per line (the original code's vocab_file)
  heldout.ids.txt           the held-out text's ids with that vocabulary
  lower/vocab.pkl           a lower-casing vocabulary of every word of train.txt
  lower/heldout.ids.txt     the held-out ids with it
  lower/cache.pt            that vocabulary as the original code caches its corpus:
                            `torch.save` of a `data_utils.Corpus` whose `vocab` is a
                            `utils.vocabulary.Vocab` (ZIP layout); lower/legacy/cache.pt the same
                            in torch.save's legacy layout (whose storage keys are memory
                            addresses: the one file a rerun does not write byte for byte)

The corpus classes are stand-ins with the original code's module and class names and attribute
names (`Vocab`: special, min_freq, max_size, lower_case, delimiter, vocab_file, counter,
idx2sym, sym2idx; `Corpus`: dataset, vocab, train, valid, test), as its `utils/vocabulary.py`
and `data_utils.py` define them; the original code itself is not used.

Run with the pinned requirements (and sacremoses, which TransfoXLTokenizer needs):
    python tools/reference/make_vocab_fixtures.py
"""

import os
import random
import sys
import types
from collections import Counter, OrderedDict

import torch
from transformers import TransfoXLTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "words")
VOCAB_SIZE = 300  # n_token of tests/fixtures/adaptive_div2

COMMON = """the of and in to a was is for on as with by he that at from his it an were are which
this also be or had first one their its new after but who not they have her she two been other
when there all during more into time would only most over city may year between under where
some however while these many than both through school later such made before around states
river north south east west early game season team album song film war army church station
road line village family music town built known called became several part three world people
since king house water great small long high old year years began until being about against
north island county near league club band series history member used main number public four
government century later second large population work area government court""".split()

SYLLABLES = "ka lo mi ne ru sa ta vo zi be da fe gu hi jo ki la mo nu pe ri so tu ve".split()


def pseudo_word(rng):
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))


def words_by_rank(rng):
    """Common words, then invented ones: a Zipf-like ranking for the sampler."""
    words = list(dict.fromkeys(COMMON))
    seen = set(words)
    while len(words) < 700:
        word = pseudo_word(rng)
        if word not in seen:
            seen.add(word)
            words.append(word.capitalize() if rng.random() < 0.2 else word)
    # a few words with letters beyond ASCII
    return words + ["café", "Zürich", "naïve", "Ørsted"]


def sentence(rng, words, weights):
    n = rng.randint(6, 18)
    out = []
    for _ in range(n):
        word = rng.choices(words, cum_weights=weights)[0]
        r = rng.random()
        if r < 0.03:
            out += [str(rng.randint(1, 99)), "@,@", str(rng.randint(100, 999))]
        elif r < 0.05:
            out += [str(rng.randint(1, 9)), "@.@", str(rng.randint(0, 9))]
        elif r < 0.08:
            out += [word, "@-@", words[rng.randint(0, 60)]]
        elif r < 0.10:
            out.append("<unk>")
        else:
            out.append(word)
        if rng.random() < 0.08:
            out.append(",")
    out[0] = out[0].capitalize()
    return " ".join(out) + " ."


def zipf(words):
    total, cumulative = 0.0, []
    for rank in range(len(words)):
        total += 1.0 / (rank + 8)
        cumulative.append(total)
    return cumulative


def article(rng, words, paragraphs):
    lines = [" = " + " ".join(w.capitalize() for w in rng.sample(words[:200], 2)) + " = ", ""]
    for p in range(paragraphs):
        if p and rng.random() < 0.5:
            lines += [" = = " + words[rng.randint(0, 150)].capitalize() + " = = ", ""]
        lines += [" " + " ".join(sentence(rng, words, zipf(words)) for _ in range(rng.randint(2, 4))) + " ", ""]
    return lines


def original_symbols(line, lower_case):
    """The original code's `Vocab.tokenize(line, add_eos=True)`."""
    line = line.strip()
    if lower_case:
        line = line.lower()
    return line.split() + ["<eos>"]


def read_lines(path):
    with open(path, "r", encoding="utf-8") as f:  # universal newlines, as the original reads
        return list(f)


def build(train_path, lower_case, max_size):
    tok = TransfoXLTokenizer(special=["<eos>"], lower_case=lower_case, max_size=max_size)
    tok.count_sents([original_symbols(line, lower_case)[:-1] for line in read_lines(train_path)])
    tok.build_vocab()
    return tok


def encode(tok, path, lower_case):
    ids = []
    for line in read_lines(path):
        ids += [tok._convert_token_to_id(s) for s in original_symbols(line, lower_case)]
    return ids


def write_ids(path, ids):
    with open(path, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")


def corpus_classes():
    """Modules `utils.vocabulary` and `data_utils` with stand-in `Vocab` and `Corpus` classes."""
    utils = types.ModuleType("utils")
    vocabulary = types.ModuleType("utils.vocabulary")
    data_utils = types.ModuleType("data_utils")

    class Vocab:
        pass

    class Corpus:
        pass

    Vocab.__module__, Vocab.__qualname__ = "utils.vocabulary", "Vocab"
    Corpus.__module__, Corpus.__qualname__ = "data_utils", "Corpus"
    vocabulary.Vocab = Vocab
    utils.vocabulary = vocabulary
    data_utils.Corpus = Corpus
    sys.modules.update({"utils": utils, "utils.vocabulary": vocabulary, "data_utils": data_utils})
    return Vocab, Corpus


def save_corpus(tok, train_ids, path, legacy):
    Vocab, Corpus = corpus_classes()
    vocab = Vocab()
    vocab.special = list(tok.special)
    vocab.min_freq, vocab.max_size = tok.min_freq, tok.max_size
    vocab.lower_case, vocab.delimiter, vocab.vocab_file = tok.lower_case, None, None
    vocab.counter = Counter(tok.counter)
    vocab.idx2sym = list(tok.idx2sym)
    vocab.sym2idx = OrderedDict(tok.sym2idx)
    vocab.eos_idx = tok.sym2idx["<eos>"]
    corpus = Corpus()
    corpus.dataset = "wt103"
    corpus.vocab = vocab
    corpus.train = torch.LongTensor(train_ids)
    corpus.valid = torch.LongTensor(train_ids[:64])
    corpus.test = torch.LongTensor(train_ids[64:128])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(corpus, path, _use_new_zipfile_serialization=not legacy)


def main():
    rng = random.Random(12)
    words = words_by_rank(rng)
    os.makedirs(os.path.join(OUT, "lower"), exist_ok=True)
    train_lines = []
    for _ in range(24):
        train_lines += article(rng, words, rng.randint(2, 4))
    train = os.path.join(OUT, "train.txt")
    with open(train, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(train_lines) + "\n")
    held = article(rng, words, 3)
    held[2] = held[2].upper()  # a shouted paragraph: unknown unless lower-cased
    held[6] = "\t" + held[6].replace(" ", "\u00a0", 3).replace(" ", "\x1f", 2)
    heldout = os.path.join(OUT, "heldout.txt")
    with open(heldout, "w", encoding="utf-8", newline="") as f:
        f.write("\r\n".join(held[:4]) + "\r" + "\n".join(held[4:]) + "\n")

    # `<eos>` plus the 299 most frequent symbols.
    tok = build(train, lower_case=False, max_size=VOCAB_SIZE - 1)
    assert len(tok.idx2sym) == VOCAB_SIZE, len(tok.idx2sym)
    assert "<unk>" in tok.sym2idx
    tok.save_pretrained(OUT)
    for extra in ["special_tokens_map.json", "tokenizer_config.json", "added_tokens.json"]:
        path = os.path.join(OUT, extra)
        if os.path.exists(path):
            os.remove(path)
    with open(os.path.join(OUT, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(s + "\n" for s in tok.idx2sym))
    ids = encode(tok, heldout, lower_case=False)
    write_ids(os.path.join(OUT, "heldout.ids.txt"), ids)

    lower = build(train, lower_case=True, max_size=None)
    lower_dir = os.path.join(OUT, "lower")
    lower.save_pretrained(lower_dir)
    for extra in ["special_tokens_map.json", "tokenizer_config.json", "added_tokens.json"]:
        path = os.path.join(lower_dir, extra)
        if os.path.exists(path):
            os.remove(path)
    lower_ids = encode(lower, heldout, lower_case=True)
    write_ids(os.path.join(lower_dir, "heldout.ids.txt"), lower_ids)
    train_ids = encode(lower, train, lower_case=True)
    save_corpus(lower, train_ids, os.path.join(lower_dir, "cache.pt"), legacy=False)
    save_corpus(lower, train_ids, os.path.join(lower_dir, "legacy", "cache.pt"), legacy=True)

    unk = tok.sym2idx["<unk>"]
    print(
        f"vocabulary {len(tok.idx2sym)} symbols; held-out {len(ids)} tokens, "
        f"{ids.count(unk)} <unk>; lower-case vocabulary {len(lower.idx2sym)}, "
        f"{lower_ids.count(lower.sym2idx['<unk>'])} <unk>",
        file=sys.stderr,
    )


if __name__ == "__main__":
    # The pickles hold sets (in the tokenizer's Moses state): fix str hashing so that a rerun
    # writes the same bytes.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    main()
