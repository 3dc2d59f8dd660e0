"""The BM25 analyzer: one tokenisation for documents (at build) and questions (at query)."""
from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Iterable

import duckdb

from transforms.common.words import BM25_STOPWORDS

ANALYZER_VERSION = "codes-v2"  # bump when bm25_tokens changes in a way analyzer_fingerprint cannot see

# --- BM25 tokenisation (shared by documents and queries) ------------------------------
# fts's default ignore regex '(\.|[^a-z])+' deletes digits and punctuation, so
# ERR_CONN_4042 becomes "err conn" and v2.3.1 becomes "v". Instead a "compound" is
# a run of letters/digits joined by single . - _ ; we emit each part (so "ISO 27001"
# still matches) and the parts joined by '_' (one rare, high-idf term, the same for
# ISO-27001 / iso_27001 / ISO.27001). Plain ASCII words are Porter-stemmed (via
# fts's own stem(), batched and memoised) and a small stopword set is dropped;
# codes and numbers are never stemmed.
_COMPOUND = re.compile(r"[^\W_]+(?:[._\-][^\W_]+)*")
_PART = re.compile(r"[^\W_]+")
_COMBINING = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_PLAIN_WORD = re.compile(r"[a-z]+")


def analyzer_fingerprint(stemmer: str) -> str:
    """What decides the terms Analyzer(con, stemmer) gives: its version, stemmer, token patterns
    and stopwords (read when called, so a changed list is seen)."""
    parts = [ANALYZER_VERSION, stemmer, _COMPOUND.pattern, _PART.pattern, _COMBINING.pattern, _PLAIN_WORD.pattern,
             *sorted(BM25_STOPWORDS)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def bm25_tokens(text: str) -> list[str]:
    """Unstemmed normalised tokens: NFKD, accents stripped, lower-cased, codes kept."""
    text = text or ""
    if not text.isascii():  # strip accents: café -> cafe, and casefold: straße -> strasse
        text = _COMBINING.sub("", unicodedata.normalize("NFKD", text)).casefold()
    text = text.lower()
    out: list[str] = []
    for m in _COMPOUND.findall(text):
        if m.isalnum():  # plain word or number: the common case, no second regex
            if m not in BM25_STOPWORDS:
                out.append(m)
            continue
        parts = _PART.findall(m)  # a code: keep its parts and the joined form
        out.extend(parts)
        out.append("_".join(parts))
    return out


class Analyzer:
    """bm25_tokens + stemming of plain words; the one analysis both sides use."""

    def __init__(self, con: duckdb.DuckDBPyConnection, stemmer: str = "porter"):
        self.con, self.stemmer = con, stemmer
        self._stem: dict[str, str] = {}

    def _fill(self, words: Iterable[str]) -> None:
        new = sorted({w for w in words if w not in self._stem})
        if not new:
            return
        if self.stemmer == "none":
            self._stem.update((w, w) for w in new)
            return
        # the words go in as an Arrow table: a Python list bound as VARCHAR[] took ~8 s for 30k words
        import pyarrow as pa
        self.con.register("_stem_words", pa.table({"w": pa.array(new, pa.string())}))
        try:
            got = self.con.execute("SELECT w, stem(w, ?) AS s FROM _stem_words", [self.stemmer]).arrow()
            if not isinstance(got, pa.Table):  # a lazy reader: read it while the words are registered
                got = got.read_all()
        finally:
            self.con.unregister("_stem_words")
        if got.num_rows != len(new):
            raise RuntimeError(f"stemmer returned {got.num_rows} rows for {len(new)} words")
        self._stem.update(zip(got.column("w").to_pylist(), got.column("s").to_pylist()))

    def analyze(self, texts: list[str]) -> list[list[str]]:
        toks = [bm25_tokens(t) for t in texts]
        self._fill(w for ts in toks for w in ts if _PLAIN_WORD.fullmatch(w))
        st = self._stem
        # the porter stemmer maps a lone "s" (of "Python's") to "": not a term, on either side
        # (fts split the joined text on whitespace and so dropped it too)
        out = [[st.get(w, w) for w in ts] for ts in toks]
        return [[w for w in ts if w] for ts in out]
