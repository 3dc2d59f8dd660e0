"""A planted corpus for the near-duplicate detector: distinct documents, near-copies of some
of them (known groups), and hard negatives that share boilerplate or half a body.

Made here, deterministically, from a seeded generator: Zipf-distributed pseudo-words (so
common words repeat across documents, as in real text), sentences, paragraphs, a shared
header/footer for some "sites".
"""
from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field

SYLLABLES = ("ka lo mi ne ra tu se pa do li ve no sa ri te mo ga bu fi ke la po di "
             "an er in on us el ar or is en al").split()
STOP = ("the of and to in a is that for it as with was on be by this are or from at an "
        "which not have has but can all its one you more will if their been may".split())


@dataclass
class Planted:
    docs: dict[str, str]  # doc_id -> text
    groups: list[set[str]]  # each planted near-duplicate group (original + its copies)
    kinds: dict[str, str] = field(default_factory=dict)  # copy doc_id -> how it was made
    negatives: list[tuple[str, str]] = field(default_factory=list)  # hard negative pairs


class _Gen:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        vocab: set[str] = set()
        while len(vocab) < 6000:
            vocab.add("".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(1, 4))))
        self.vocab = sorted(vocab)
        weights = [1.0 / (i + 10) for i in range(len(self.vocab))]  # Zipf-like
        self.cum = list(itertools.accumulate(weights))

    def word(self) -> str:
        if self.rng.random() < 0.35:
            return self.rng.choice(STOP)
        return self.rng.choices(self.vocab, cum_weights=self.cum)[0]

    def sentence(self) -> str:
        words = [self.word() for _ in range(self.rng.randint(6, 22))]
        if self.rng.random() < 0.2:
            words.insert(self.rng.randrange(len(words)), str(self.rng.randint(1, 2048)))
        s = " ".join(words)
        return s[0].upper() + s[1:] + self.rng.choice([".", ".", ".", ";", ":", "?"])

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(2, 6)))

    def body(self, min_words: int, max_words: int) -> str:
        target = self.rng.randint(min_words, max_words)
        paras: list[str] = []
        while sum(len(p.split()) for p in paras) < target:
            paras.append(self.paragraph())
        return "\n\n".join(paras)


def _edit_words(rng: random.Random, gen: _Gen, text: str, n: int) -> str:
    words = text.split(" ")
    for _ in range(n):
        i = rng.randrange(len(words))
        words[i] = gen.word()
    return " ".join(words)


def _reflow(rng: random.Random, text: str) -> str:
    """Same words, different whitespace and line breaks (a re-export)."""
    words = text.split()
    out, line = [], []
    width = rng.randint(40, 90)
    for w in words:
        line.append(w)
        if sum(len(x) + 1 for x in line) > width:
            out.append(("  " if rng.random() < 0.3 else " ").join(line))
            line = []
    out.append(" ".join(line))
    return "\n".join(out) + "\n"


def planted_corpus(seed: int = 13, n_distinct: int = 200, n_copies: int = 60,
                   n_negatives: int = 40) -> Planted:
    gen = _Gen(seed)
    rng = random.Random(seed + 1)
    # (header, footer) boilerplate per site: navigation and a copyright/contact block
    sites = [(" ".join(gen.sentence() for _ in range(1)), " ".join(gen.sentence() for _ in range(2)))
             for _ in range(5)]
    docs: dict[str, str] = {}
    site_of: dict[str, int] = {}
    bodies: dict[str, str] = {}
    for i in range(n_distinct):
        doc_id = f"d{rng.getrandbits(48):012x}"
        body = gen.body(250, 1500)
        s = i % 6  # five sites with boilerplate, one without
        bodies[doc_id] = body
        if s < 5:
            header, footer = sites[s]
            docs[doc_id] = f"{header}\n\n{body}\n\n{footer}"
            site_of[doc_id] = s
        else:
            docs[doc_id] = body
    originals = sorted(docs)
    groups: dict[str, set[str]] = {}
    kinds: dict[str, str] = {}
    kinds_cycle = ["footer", "edit", "reflow", "edit+reflow", "appended_line", "footer+edit"]
    for c in range(n_copies):
        orig = rng.choice(originals)
        text = docs[orig]
        kind = kinds_cycle[c % len(kinds_cycle)]
        if "footer" in kind:
            # the site footer replaced by a new, short one (a re-hosted copy)
            if orig in site_of:
                text = text[: text.rfind("\n\n")] + "\n\n" + gen.sentence()
            else:
                text = text + "\n\n" + gen.sentence()
        if "edit" in kind:
            n_words = len(text.split())
            text = _edit_words(rng, gen, text, max(1, min(3, n_words // 150)))
        if "reflow" in kind:
            text = _reflow(rng, text)
        if kind == "appended_line":
            text = f"Last updated {rng.randint(2001, 2024)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}\n" + text
        copy_id = f"c{rng.getrandbits(48):012x}"
        docs[copy_id] = text
        kinds[copy_id] = kind
        groups.setdefault(orig, {orig}).add(copy_id)
    negatives: list[tuple[str, str]] = []
    for n in range(n_negatives):
        orig = rng.choice(originals)
        if n % 2 == 0 and orig in site_of:
            # same site boilerplate, a different body of similar length
            header, footer = sites[site_of[orig]]
            text = f"{header}\n\n{gen.body(100, 250)}\n\n{footer}"
        else:
            # the first half (or three quarters) of the body kept, the rest rewritten (v1 vs v2)
            paras = re.split(r"\n\n", bodies[orig])
            half = max(1, len(paras) // 2 if n % 4 == 1 else (3 * len(paras)) // 4)
            text = "\n\n".join(paras[:half] + [gen.paragraph() for _ in range(len(paras) - half + 1)])
        neg_id = f"n{rng.getrandbits(48):012x}"
        docs[neg_id] = text
        negatives.append((orig, neg_id))
    return Planted(docs=docs, groups=list(groups.values()), kinds=kinds, negatives=negatives)


def same_cluster_pairs(rep_of: dict[str, str], ids) -> set[tuple[str, str]]:
    """Unordered pairs of documents that share a representative."""
    clusters: dict[str, list[str]] = {}
    for d in ids:
        clusters.setdefault(rep_of.get(d, d), []).append(d)
    pairs = set()
    for members in clusters.values():
        members.sort()
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                pairs.add((members[i], members[j]))
    return pairs


def group_pairs(groups: list[set[str]]) -> set[tuple[str, str]]:
    pairs = set()
    for g in groups:
        m = sorted(g)
        for i in range(len(m)):
            for j in range(i + 1, len(m)):
                pairs.add((m[i], m[j]))
    return pairs
