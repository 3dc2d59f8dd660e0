"""Extractive answers from sentence vectors stored at index time (no model call per sentence).

`SentenceAnswerer` answers with source sentences, strongest first, each followed by its [n];
every citation is checked in code. A sentence of the top chunks scores its cosine to the
question + lexical_weight x the question's (idf-weighted) word share + type_weight when it holds
the kind of span asked for + rank_weight / chunk rank. Sentences are picked by MMR while they
score within `gap` of the best (same_source_bonus for the best one's chunk), near-duplicates
(dup_sim) and restatements (restate_overlap) dropped; with form_filter, table rows, code and
navigation text answer only the questions that ask for them, and a call question leads with its
call. Below `threshold` the evidence (the best sentence score, or with `evidence_model` the
probability that the chunks answer the question) gives "not found". A chunk of an index without
sentence vectors has its sentences embedded when answering (VectorCache). The answer job's
SentenceParams come from the config and the profile's fit (answer_params.py); the dataclass
defaults are the bare answerer unit tests and studies start from (docs/answering.md).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from transforms.common.words import ANSWER_STOPWORDS, content_words
from transforms.query.answer import EXTRACTIVE_NOT_FOUND, AnswerResult
from transforms.query.cite import cite_sentences, normalize_for_match
from transforms.query.conflicts import find_conflicts
from transforms.query.records import Candidate
from transforms.query.rerank import VectorCache, candidate_sentences
from transforms.ingest.sentvec import SentenceStore
from transforms.query.selection import SENT_DESCRIPTION, points_elsewhere

_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})s?\b")
_MONTH = re.compile(r"\b(january|february|march|april|may|june|july|august|september|october|november|december)\b", re.I)
_NUMBER = re.compile(r"\b\d[\d,.]*\b|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
                     r"hundred|thousand|million|billion|dozen)\b", re.I)
_PERCENT = re.compile(r"\d\s*(%|percent\b)", re.I)
_CAPWORD = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")


def answer_type(question: str) -> str | None:
    """What kind of span the question asks for, from its wh-word: year | number | percent | name."""
    q = question.lower().strip()
    if re.match(r"(in |on )?(what|which) (year|century|decade|date|month|day)\b|when\b", q):
        return "year"
    if re.match(r"(what|which) percent|what percentage", q):
        return "percent"
    if re.match(r"how (many|much|long|old|far|large|big|high|tall)\b|what (is|was) the (number|population|size)", q):
        return "number"
    if re.match(r"(who|whom|whose)\b|(what|which) (person|company|team|city|country|organization|state|group|band|university|school|man|woman|player)\b", q):
        return "name"
    return None


def type_match(kind: str | None, sentence: str, question_words: set[str]) -> float:
    """1.0 when the sentence holds a span of the asked kind (a new name, not one in the question)."""
    if kind == "year":
        return float(bool(_YEAR.search(sentence) or _MONTH.search(sentence)))
    if kind == "percent":
        return float(bool(_PERCENT.search(sentence)))
    if kind == "number":
        return float(bool(_NUMBER.search(sentence)))
    if kind == "name":
        return float(any(m.group(0).lower() not in question_words for m in _CAPWORD.finditer(sentence)))
    return 0.0


# What a sentence is, besides prose: a table row, a code listing (an interpreter or shell
# prompt, a code line, a bare signature, an option term, a synopsis) or navigation text. Such
# text shares many of the question's words (a conversion table names every type) without
# answering it, so it is a candidate only when the question asks for what it holds.
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$", re.M)
_BRACKETED = re.compile(r"\[[^\[\]]*\]|\{[^{}]*\}")  # [-v | --verbose], {string|number}: not cells
_PROMPT = re.compile(r"^\s*(>>>|\.\.\. |\$ |# |% )", re.M)
_CODE_LINE = re.compile(r"^\s*(//|(import|from) [\w.]+( import [\w*]+(, ?[\w*]+)*)?\s*$|(const|let|var) \w+ =|def \w+\()|[;{]\s*$",
                        re.M)
_SIGNATURE = re.compile(r"^\s*(class\s+)?[A-Za-z_][\w.]*\(.*\)\s*$")  # json.dumps(obj, *, ...) alone
_OPTION_TERM = re.compile(r"^\s*-{1,2}[A-Za-z][\w-]*(,\s*-{1,2}[A-Za-z][\w-]*)*(\s*[=<\[]\S*)?\s*$", re.M)
_SYNOPSIS = re.compile(r"\[-{1,2}\w|\[\w+\]\.\.\.")  # git add [--verbose | -v]; ldd [option]...
_NAV = re.compile(r"^(source code|see also|table of contents|previous topic|next topic|navigation)\b:?(\s+\S+){0,2}$"
                  r"|\.{5,}"  # a table of contents' leaders
                  r"|^([\w.+-]+\(\d\w*\),?\s*)+$", re.I)  # a man page's SEE ALSO list: ls(1), sh(1), ...


# an API doc's parameter list item: "- path {string}", "- ...args {any} Optional arguments", "- Returns: {string}"
_PARAM_ITEM = re.compile(r"\s*[-*+]\s+((\.{3})?[\w.$]+\s+\{[^}\n]+\}|Returns:?\s*\{)")


def is_param_list(s: str) -> bool:
    """At least half of the sentence's lines are parameter list items."""
    lines = [ln for ln in s.split("\n") if ln.strip()]
    items = sum(bool(_PARAM_ITEM.match(ln)) for ln in lines)
    return items > 0 and 2 * items >= len(lines)


@functools.lru_cache(maxsize=50_000)  # the same chunks come back for many questions
def sentence_kind(s: str) -> str:
    """table | code | params | nav | prose."""
    first = s.lstrip().split("\n", 1)[0]
    if _NAV.search(s.strip()) and (len(s.split()) <= 12 or "(" in s):
        return "nav"
    if _PROMPT.search(s):  # before tables: a shell pipe is no table cell
        return "code"
    cells = s
    while True:
        c2 = _BRACKETED.sub("", cells)
        if c2 == cells:
            break
        cells = c2
    if _TABLE_ROW.search(s) or cells.count(" | ") >= 2:
        return "table"
    if is_param_list(s):
        return "params"
    if (_CODE_LINE.search(s) or _SIGNATURE.match(first) or _OPTION_TERM.match(first)
            or _SYNOPSIS.search(first)):
        return "code"
    return "prose"


_HOW_TO = re.compile(r"(how (do|can|could|should|would|might) (i|we|you|one)|how to)\b")
_WHICH_CALL = re.compile(r"(which|what) (\w+ ){0,2}(function|method|command|call|class|module|option|flag|"
                         r"program|utility|tool|api|syntax)s?\b")
_VALUE = re.compile(r"(what|which|who|whom|when|where|how (many|much|long|old|far|large|big|high))\b")


def question_form(question: str) -> str:
    """call (how do I ..., which function ...) | value (what, which, who, when, how many ...) | other."""
    q = question.lower().strip()
    if _HOW_TO.match(q) or _WHICH_CALL.match(q):
        return "call"
    if _VALUE.match(q):
        return "value"
    return "other"


def kind_fits(kind: str, form: str) -> bool:
    """Tables and parameter lists answer value questions (what does it return), code answers call
    questions, navigation text answers none."""
    return kind == "prose" or (kind in ("table", "params") and form == "value") or (kind == "code" and form == "call")


def is_term(s: str) -> bool:
    """A definition's term: a bare signature, option or synopsis line (API docs put the
    description right after it: "fnmatch.fnmatch(filename, pattern)" / "Test whether ...")."""
    first = s.lstrip().split("\n", 1)[0]
    return bool(_SIGNATURE.match(first) or _OPTION_TERM.match(first) or _SYNOPSIS.search(first))


def _own_heading(c: Candidate) -> str:
    """The last heading of a chunk's heading path (its own section), or ""."""
    path = list(c.heading_path) if c.heading_path is not None else []
    return str(path[-1]).strip() if path else ""


def heading_term(c: Candidate) -> Optional[str]:
    """The call a chunk documents when its own heading is a bare signature (Markdown API docs:
    "### `setInterval(callback[, delay[, ...args]])`", then the description), else None."""
    h = _own_heading(c).strip("`").strip()
    return h if h and _SIGNATURE.match(h) else None


_LIST_ITEM = re.compile(r"^\s*[-*+]\s")


def is_description(s: str) -> bool:
    """Prose that describes: no parameter list (kind params: "- path {string}\n- Returns: {string}",
    which Node's docs put between a signature heading and its description), nor another bare list."""
    lines = [ln for ln in s.split("\n") if ln.strip()]
    return sentence_kind(s) == "prose" and not (lines and all(_LIST_ITEM.match(ln) for ln in lines))


def definitions(flat: list[tuple[int, str]], cands: list[Candidate]) -> np.ndarray:
    """Which sentences are a call's description: the sentence after a term line in its chunk
    ("fnmatch.fnmatch(filename, pattern)" / "Test whether ..."), or a chunk's first description
    when its own heading is a signature (Markdown API docs)."""
    first: dict[int, int] = {}
    for i, (ci, s) in enumerate(flat):
        if ci not in first and heading_term(cands[ci]) and is_description(s):
            first[ci] = i
    return np.array([(i > 0 and flat[i - 1][0] == ci and is_term(flat[i - 1][1]) and not is_term(s))
                     or first.get(ci) == i for i, (ci, s) in enumerate(flat)], bool)


def is_name_line(c: Candidate) -> bool:
    """A man page's NAME section ("git-add - Add file contents to the index"): the page's
    definition, whose term is its SYNOPSIS."""
    return _own_heading(c).upper() == "NAME"


def synopsis_of(c: Candidate, cands: list[Candidate]) -> Optional[tuple[int, str]]:
    """(candidate index, first sentence) of the SYNOPSIS chunk of c's document, when retrieved."""
    for ci, o in enumerate(cands):
        if o.doc_id == c.doc_id and _own_heading(o).upper() == "SYNOPSIS":
            ss = candidate_sentences(o)
            if ss:  # past an AsciiDoc block attribute line ("[verse]"): the synopsis itself
                m = _BLOCK_ATTR.match(ss[0])
                return ci, ss[0][m.end():] if m and ss[0][m.end():].strip() else ss[0]
    return None


_BLOCK_ATTR = re.compile(r"\[[a-z][\w,=\" -]*\]\s*\n\s*")


def table_rows(s: str) -> list[list[str]]:
    """The rows of a table sentence (one per line, cells " | "-separated), as cell lists."""
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in s.split("\n")
            if " | " in line]


_KEY = re.compile(r"[^\s?!.,;:\"'()]+(?:\.[^\s?!.,;:\"'()]+)*")


def question_keys(question: str) -> set[str]:
    """The question's tokens a table row may be keyed by, as written (case kept): every word
    but the lower-case function words ("a" is an article, "A" may be the character asked for)."""
    return {t for t in _KEY.findall(question) if t not in ANSWER_STOPWORDS}


def lookup(keys: set[str], qwords: set[str], header: list[str], row: list[str]) -> Optional[tuple[str, str]]:
    """(header cells, row cells), each as written in the source, when `row` answers a value
    question as a lookup: one of its cells is a term of the question (`keys`, question_keys) and a
    column of the header is named by a word of the question (`qwords`: "octal" -> Oct). A header
    that repeats its columns (a table printed as two tables side by side) gives the half holding
    the key."""
    if len(row) != len(header):
        return None
    hit = next((i for i, c in enumerate(row)
                if c in keys or ((w := c.split()) and len(w[0]) > 1 and w[0] in keys)), None)
    if hit is None:
        return None
    n = len(header)
    period = next((p for p in range(1, n) if n % p == 0 and all(header[i] == header[i % p] for i in range(n))), n)
    lo = hit // period * period
    heads, cells = header[lo:lo + period], row[lo:lo + period]
    if not loose_overlap(qwords, content_words(" ".join(heads))):
        return None
    return " | ".join(heads), " | ".join(cells)


_IDENT_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def call_words(text: str) -> set[str]:
    """content_words plus the parts of compound identifiers: code names a thing by joining its
    words (NamedTemporaryFile, token_urlsafe, setInterval), which a question spells apart."""
    words = content_words(text)
    for ident in re.findall(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]*|[A-Z][a-z]+[A-Z][A-Za-z0-9]*",
                            text):
        words |= content_words(" ".join(_IDENT_PART.findall(ident)))
    return words


# a cross-reference ("See How do I ...?") or a table of contents' line ("json ..... 8.10")
_SEE = re.compile(r"^\s*(see( also)?|cf\.|refer to)\b|\.{5,}", re.I)
# a name in code form: a call (f(), json.dumps(...)), a dotted, :: or _ joined name, a $ or % variable
_IDENT = re.compile(r"\b[A-Za-z_][\w]*\(|\b\w+(?:(?:\.|::)\w+)+\b|\b[a-z]+_\w+\b|(?<!\w)[$%@][A-Za-z_]\w*|\b[a-z]+[A-Z]\w*\b")


@functools.lru_cache(maxsize=200_000)
def sentence_traits(s: str) -> tuple[str, bool, bool, bool, float]:
    """(kind, is a term line, a "See ..." cross-reference, names something in code form, log words)
    of one sentence (the selection model's inputs), cached by text: the same chunks come back for
    many questions."""
    # a fragment with no word in it (a page number left by a table of contents) reads as navigation
    return (sentence_kind(s), is_term(s), bool(_SEE.search(s) or not re.search(r"[A-Za-z]{2}", s)),
            bool(_IDENT.search(s)),
            float(np.log1p(len(s.split()))))


@functools.lru_cache(maxsize=50_000)
def _heading_words(title: str, headings: tuple) -> frozenset:
    return frozenset(call_words(" ".join((title,) + headings)))


def heading_words(c: Candidate) -> frozenset:
    """A chunk's title and heading words (a call's name, a module's name), cached by text: the same
    chunks come back for many questions."""
    return _heading_words(str(c.title or ""), tuple(str(h) for h in (c.heading_path if c.heading_path is not None
                                                                      else [])))


@functools.lru_cache(maxsize=200_000)
def _sentence_words(s: str) -> tuple[frozenset, frozenset, frozenset]:
    """A sentence's content words, its call words, and every 3+ letter prefix of its call words
    (loose_overlap by set lookups), cached by text: the same chunks come back for many questions."""
    cw = call_words(s)
    return (frozenset(content_words(s)), frozenset(cw),
            frozenset(w[:k] for w in cw if len(w) >= 3 for k in range(3, len(w) + 1)))


def loose_overlap(qwords: set[str], words: set[str]) -> set[str]:
    """The question's words a sentence holds, a word also matching when one is the start of the
    other (3 letters at least): API docs abbreviate (str, obj, dict) and inflect (locales,
    repeated) the words a call question uses (string, object, locale, repeatedly)."""
    out = qwords & words
    for t in qwords - out:
        if any(len(w) >= 3 and len(t) >= 3 and (t.startswith(w) or w.startswith(t)) for w in words):
            out.add(t)
    return out


def restates(a: set[str], b: set[str], overlap: float) -> bool:
    """b says what a says: the shorter one's content words are (nearly) all in the other."""
    n = min(len(a), len(b))
    return n > 0 and len(a & b) / n >= overlap


@dataclass
class SentenceParams:
    """The extractive answerer's settings. The answer job sets every field from its one home,
    the config's answer section or the embedding profile's fit (answer_params.answer_params);
    these defaults are the bare answerer (most refinements off) that unit tests and studies
    start from, never read by the answer job."""
    max_sentences: int = 3
    top_chunks: int = 5
    threshold: float = 0.55
    gap: float = 0.12  # keep sentences scoring within this of the best
    conflict_gap: float = 0.15  # rivals within this of the best are read for competing values
    lexical_weight: float = 0.15
    rank_weight: float = 0.0  # bonus rank_weight / chunk rank (1 for the top chunk)
    mmr_lambda: float = 1.0  # 1: pure relevance order; < 1 penalises redundancy with picked sentences
    dup_sim: float = 0.95  # a sentence this close to a picked one is a near-duplicate: dropped
    type_weight: float = 0.0  # bonus when the sentence holds the kind of span the question asks for
    same_source_bonus: float = 0.0  # after the first pick, favour sentences of already-cited chunks
    # tables, code and navigation text are candidates only for the questions they answer (kind_fits)
    form_filter: bool = False
    # a sentence whose content words are this share of a picked one's (or the reverse) restates it: dropped
    restate_overlap: float = 0.0  # 0: off
    # call questions (question_form "call"): the lexical share counts identifier parts and a
    # word's abbreviations and inflections (call_words, loose_overlap); selection only
    call_lexical: bool = False
    # call questions also read the definitions (a term line, then its description) of the
    # candidates after top_chunks, up to this many chunks; 0: off. Selection only: the evidence
    # is read from the top_chunks
    call_chunks: int = 0
    # a call question scores up to this many descriptions of calls (`definitions`, those sharing
    # most of its words) by their own vectors; 0: off
    call_definitions_alone: int = 0
    # The evidence score (compared with `threshold`) is max(cosine + evidence_lexical_weight * lexical):
    # kept apart from the selection score so that selection can lean on words without making
    # unanswerable questions (whose distractors share the question's words) look answerable.
    evidence_lexical_weight: Optional[float] = 0.15  # None: the selection score itself
    # (w_sentence, w_cosine, w_bm25_coverage, bias) of the logistic evidence
    # model (fitted per embedding model: profiles.ScoreFit); None: the sentence evidence alone, compared with `threshold`
    evidence_model: Optional[tuple] = None
    # the fitted selection (selection.AnswerModel): a page, then its sentences, and a calibrated
    # confidence compared with `threshold`; None: the hand-weighted score above
    answer_model: Optional[object] = None
    read_chunks: int = 20  # with answer_model: the read list's chunks whose pages and sentences are scored
    # with the hand-weighted selection: the model whose rules calibration gives each answer a confidence
    confidence_model: Optional[object] = None
    # with the hand-weighted selection and confidence_model: the page is chosen first, by that
    # model's page and sentence scores over the read list, and the rules pick sentences from it
    page_first: bool = False


_SET_ASIDE = -1e9  # the score of a sentence that may not answer this question


class SentenceAnswerer:
    def __init__(self, embedder, store: Optional[SentenceStore] = None,
                 params: Optional[SentenceParams] = None, **overrides):
        self.embedder = embedder
        self.store = store
        p = params or SentenceParams()
        for k, v in overrides.items():
            if not hasattr(p, k):
                raise TypeError(f"unknown SentenceAnswerer parameter {k!r}")
            setattr(p, k, v)
        self.p = p
        self.idf: Optional[dict[str, float]] = None
        self.idf_max = 0.0
        self.fallback_sentences = 0  # sentences embedded at answer time (chunks without stored vectors)

    # the Answerer protocol
    def answer(self, questions: list[str], candidates: list[list[Candidate]],
               cache: Optional[VectorCache] = None, qvecs: Optional[np.ndarray] = None) -> list[AnswerResult]:
        if len(questions) != len(candidates):
            raise ValueError(f"{len(questions)} questions but {len(candidates)} candidate lists")
        p = self.p
        if p.answer_model is not None:  # the fitted selection reads the head of the list, nothing else
            tops = [list(c[:p.read_chunks]) for c in candidates]
            more = [[] for _ in candidates]
        else:
            tops = [list(c[:p.top_chunks]) for c in candidates]
            more = [list(c[p.top_chunks:p.call_chunks]) if p.call_chunks and question_form(q) == "call" else []
                    for q, c in zip(questions, candidates)]
        need, alone = [], []
        rules_model = p.answer_model is None and p.confidence_model is not None
        page_first = p.page_first and rules_model
        # the fitted model's page scores (a page chosen first, the rules' confidence) read the read
        # list, and a call question's further chunks
        reads = [list(c[:max(p.read_chunks, len(t) + len(m))]) for c, t, m in zip(candidates, tops, more)] \
            if rules_model else [t + m for t, m in zip(tops, more)]
        for q, cands in zip(questions, reads):
            for c in cands:  # sentences of chunks the index has no vectors for
                if not self._stored(c):
                    need.extend(candidate_sentences(c))
            if p.answer_model is None:
                alone.extend(s for _, s in self.alone_pairs(q, cands))
        queries = [] if qvecs is not None else list(questions)
        if need or queries or alone:  # the batch's texts in one model call
            cache = cache if cache is not None else VectorCache()
            self.fallback_sentences += len({t for t in need if t not in cache})
            cache.ensure(self.embedder, need + alone, queries=queries)
        if qvecs is None:
            qvecs = cache.query_matrix(self.embedder, list(questions))
        out = []
        for q, qv, cands, extra, read in zip(questions, qvecs, tops, more, candidates):
            try:
                head, sc = None, None
                if page_first:
                    head = cands
                    cands, extra, sc = self.page_chunks(q, np.asarray(qv, np.float32), list(read), cache, cands, extra)
                res = self._answer_one(q, np.asarray(qv, np.float32), cands, cache, extra, head,
                                       sentences_of=self.scored_sentences(sc, read[:p.read_chunks],
                                                                          np.asarray(qv, np.float32), head, cands)
                                       if sc is not None else None)
                if p.answer_model is None and p.confidence_model is not None and res.status == "answered":
                    res.confidence = self.rules_confidence(q, res, list(read[:p.read_chunks]), qv, cache, sc)
                out.append(res)
            except Exception as e:  # one bad record must not sink the batch
                out.append(AnswerResult("", "error", error=f"{type(e).__name__}: {e}"))
        return out

    def page_chunks(self, question: str, qv: np.ndarray, read: list[Candidate], cache, tops: list[Candidate],
                    more: list[Candidate]) -> tuple[list[Candidate], list[Candidate], object]:
        """A page before its sentences, for the hand-weighted selection: the page the fitted model
        (confidence_model) chooses from the evidence of all its chunks in the read list, and that
        page's chunks in the places the rules read (`tops`, `more`: the head, and a call
        question's further definitions), unchanged when the model chooses no page; and the model's
        scores (selection.Scored)."""
        p = self.p
        head = read[:p.read_chunks]
        sc = self.fitted_scores(question, qv, head, cache, model=p.confidence_model)
        if sc.best_page is None:
            return tops, more, sc
        page = sc.docs[sc.best_page]
        mine = [c for c in head if c.doc_id == page][:p.top_chunks]
        further = [c for c in read[:p.call_chunks] if c.doc_id == page and c not in mine] if more else []
        return mine, further, sc

    @staticmethod
    def scored_sentences(sc, scored: list[Candidate], qv: np.ndarray, *lists: list[Candidate]):
        """For each list of chunks among `scored` (those `sc`, a selection.Scored, was made from),
        its (pairs, cosines, vectors) as `sentences` would give them, sliced from sc instead of
        read again; None for a list that holds another chunk or another order."""
        pos = {c.chunk_id: ci for ci, c in enumerate(scored)}
        out = []
        for cands in lists:
            at = [pos.get(c.chunk_id) for c in cands]
            if any(a is None for a in at) or at != sorted(at):
                out.append(None)
                continue
            new = {a: k for k, a in enumerate(at)}
            rows = [i for i, (ci, _) in enumerate(sc.flat) if ci in new]
            mat = sc.mat[rows]
            out.append(([(new[sc.flat[i][0]], sc.flat[i][1]) for i in rows], mat @ qv, mat))
        return out

    def rules_features(self, question: str, res: AnswerResult, read: list[Candidate], qv: np.ndarray,
                       cache=None, sc=None) -> np.ndarray:
        """selection.RULES_CONFIDENCE_FEATURES of a rules answer over the head of its ranked list;
        `sc`: the fitted model's scores of that list when already made (a page chosen first)."""
        from transforms.query.selection import rules_features
        if sc is None:
            sc = self.fitted_scores(question, np.asarray(qv, np.float32), read, cache, model=self.p.confidence_model)
        qwords = content_words(question)
        shares: dict = {}
        for c in read:
            if c.doc_id not in shares:
                shares[c.doc_id] = len(qwords & heading_words(c)) / len(qwords) if qwords else 0.0
        lead = (res.citations[0].get("quote") if res.citations else None) or res.answer
        return rules_features(question_form(question), float(res.evidence_score), res.citations, read, shares,
                              sentence_traits(str(lead)), dict(zip(sc.docs, map(float, sc.page_p))))

    def rules_confidence(self, question: str, res: AnswerResult, read: list[Candidate], qv: np.ndarray,
                         cache=None, sc=None) -> Optional[float]:
        """The calibrated probability that a rules answer is right (selection.AnswerModel)."""
        return self.p.confidence_model.rules_confidence(self.rules_features(question, res, read, qv, cache, sc))

    def set_idf(self, texts) -> None:
        """Weigh the lexical term by inverse document frequency over `texts` (the chunks)."""
        df: dict[str, int] = {}
        n = 0
        for t in texts:
            n += 1
            for w in content_words(t or ""):
                df[w] = df.get(w, 0) + 1
        self.idf = {w: float(np.log((n + 1) / (c + 0.5))) for w, c in df.items()}
        self.idf_max = float(np.log((n + 1) / 0.5))

    def _stored(self, c: Candidate) -> bool:
        no = c.chunk_no
        return self.store is not None and no is not None and bool(self.store.has_vectors[int(no)])

    def _sentences_of(self, c: Candidate) -> tuple[list[str], Optional[range]]:
        """A chunk's sentences and, when the index stored their vectors, their store rows."""
        if self._stored(c):
            r, text = self.store.rows(int(c.chunk_no)), c.text or ""
            return [text[s:e] for s, e in zip(self.store.start[r], self.store.end[r])], r
        return candidate_sentences(c), None

    def pairs(self, cands: list[Candidate]) -> list[tuple[int, str]]:
        """(candidate index, sentence) pairs, in the order `sentences` gives them."""
        return [(ci, s) for ci, c in enumerate(cands) for s in self._sentences_of(c)[0]]

    def alone_mask(self, question: str, flat: list[tuple[int, str]], described: np.ndarray) -> np.ndarray:
        """Of a call question's descriptions (`described`: `definitions`), those it scores by their
        own vectors: up to call_definitions_alone, those sharing most of its words (a bounded cost)."""
        n = self.p.call_definitions_alone
        mask = described
        if mask.sum() > n:
            qwords = content_words(question)
            share = {int(i): len(loose_overlap(qwords, call_words(flat[i][1]))) for i in np.flatnonzero(mask)}
            mask = np.zeros(len(flat), bool)
            mask[sorted(share, key=lambda i: -share[i])[:n]] = True
        return mask

    def alone_pairs(self, question: str, cands: list[Candidate]) -> list[tuple[int, str]]:
        if not self.p.call_definitions_alone or question_form(question) != "call":
            return []
        flat = self.pairs(cands)
        return [f for f, m in zip(flat, self.alone_mask(question, flat, definitions(flat, cands))) if m]

    def sentences(self, qv: np.ndarray, cands: list[Candidate], cache) -> tuple[list[tuple[int, str]], np.ndarray, np.ndarray]:
        """(candidate index, sentence) pairs, their cosines with qv, and their unit vectors."""
        flat: list[tuple[int, str]] = []
        vecs = []
        for ci, c in enumerate(cands):
            ss, r = self._sentences_of(c)
            if ss:
                flat.extend((ci, s) for s in ss)
                vecs.append(cache.matrix(ss) if r is None
                            else self.store.vec[r].astype(np.float32) * self.store.inv_norm[r][:, None])
        if not flat:
            return flat, np.zeros(0, np.float32), np.zeros((0, len(qv)), np.float32)
        mat = np.concatenate(vecs)
        return flat, mat @ qv, mat

    def definitions_alone(self, question: str, qv: np.ndarray, flat, mat: np.ndarray, described: np.ndarray,
                          cache) -> tuple[np.ndarray, np.ndarray]:
        """(cosines, vectors) with a call's description scored by its own vector: it names its
        subject ("The path.basename() method returns ..."), while its late-chunked vector also
        holds the rest of the section (examples, platform notes), which drowns what the call
        does. `answer` embeds the batch's descriptions in one call; the cache keeps them."""
        mask = self.alone_mask(question, flat, described)
        if mask.any():
            texts = [s for (_, s), m in zip(flat, mask) if m]
            cache = cache if cache is not None else VectorCache()
            cache.ensure(self.embedder, texts)
            mat = mat.copy()
            mat[mask] = cache.matrix(texts)
        return mat @ qv, mat

    def score(self, question: str, qv: np.ndarray, cands: list[Candidate], cache=None, sentences=None):
        """(pairs, scores, vectors): every candidate sentence's score for this question, from
        `sentences` ((pairs, cosines, vectors) of these candidates) when given."""
        p = self.p
        flat, cos, mat = sentences if sentences is not None else self.sentences(qv, cands, cache)
        if not flat:
            return flat, cos, mat
        score = cos.astype(np.float64)
        self._evidence = None
        qwords = content_words(question)
        if qwords and (p.lexical_weight or p.evidence_lexical_weight):
            words = [qwords & content_words(s) for _, s in flat]
            plain = np.array([len(w) for w in words], np.float64) / len(qwords)
            if self.idf is None:
                lex = plain
            else:  # rare words (names, numbers, terms) count more than common ones
                w = {t: self.idf.get(t, self.idf_max) for t in qwords}
                total = sum(w.values())
                lex = np.array([sum(w[t] for t in ws) for ws in words], np.float64) / total
            if p.evidence_lexical_weight is not None:
                self._evidence = float((cos + p.evidence_lexical_weight * lex).max())
            if p.call_lexical and question_form(question) == "call":  # after the evidence: selection only
                words = [loose_overlap(qwords, call_words(s)) for _, s in flat]
                w = {t: 1.0 for t in qwords} if self.idf is None else {t: self.idf.get(t, self.idf_max) for t in qwords}
                total = sum(w.values())
                lex = np.array([sum(w[t] for t in ws) for ws in words], np.float64) / total
            score = score + p.lexical_weight * lex
        elif p.evidence_lexical_weight is not None and len(cos):
            self._evidence = float(cos.max())
        if p.type_weight:
            kind = answer_type(question)
            if kind:
                qw = content_words(question)
                score = score + p.type_weight * np.array([type_match(kind, s, qw) for _, s in flat])
        if p.rank_weight:
            ranks = np.array([int(cands[ci].rank or ci + 1) for ci, _ in flat], np.float64)
            score = score + p.rank_weight / ranks
        if p.form_filter:
            if self._evidence is None:  # the evidence is read before sentences are set aside
                self._evidence = float(score.max())
            form = question_form(question)
            fits = np.array([kind_fits(sentence_kind(s), form) for _, s in flat])
            if fits.any():  # never set every sentence aside
                score = np.where(fits, score, _SET_ASIDE)
        # navigation and "See ..." cross-references never answer, whatever else is retrieved
        pointers = np.array([points_elsewhere(sentence_traits(s)) for _, s in flat])
        return flat, np.where(pointers, _SET_ASIDE, score), mat

    def select(self, flat, score: np.ndarray, mat: np.ndarray, question: Optional[str] = None,
               described: Optional[np.ndarray] = None) -> list[int]:
        """Indices of the picked sentences, strongest first (MMR, near-duplicates and restatements
        dropped); with `question` and form_filter, a call question's answer leads with its call:
        the best picked sentence that describes a call (`described`, `definitions`) after its
        term, else a picked code line."""
        p = self.p
        best = float(score.max())
        if p.same_source_bonus:  # a second sentence from the cited chunk costs no extra citation
            top_chunk = flat[int(np.argmax(score))][0]
            score = score + p.same_source_bonus * np.array([ci == top_chunk for ci, _ in flat], np.float64)
            best = float(score.max())
        floor = best - p.gap
        eligible = [i for i in np.argsort(-score, kind="stable") if score[i] >= floor]
        picked: list[int] = []
        seen: set[str] = set()
        while eligible and len(picked) < p.max_sentences:
            if picked:
                sim = mat[eligible] @ mat[picked].T
                red = sim.max(axis=1)
                mmr = p.mmr_lambda * score[eligible] - (1 - p.mmr_lambda) * red
                j = int(np.argmax(mmr))
            else:
                red, j = None, 0
            i = eligible.pop(j)
            if red is not None and red[j] >= p.dup_sim:
                continue
            key = normalize_for_match(flat[i][1])
            if key in seen:
                continue
            if p.restate_overlap and picked:
                words = content_words(flat[i][1])
                if any(restates(content_words(flat[k][1]), words, p.restate_overlap) for k in picked):
                    continue
            seen.add(key)
            picked.append(i)
        if question is not None and p.form_filter and picked and question_form(question) == "call":
            # "how do I ...": the answer leads with the call or command; when the lead is the
            # description of a definition, its term (the sentence before it) is that call
            calls = [i for i in picked if sentence_kind(flat[i][1]) == "code"]
            described_first = next((i for i in picked if described is not None and described[i]), None)
            if described_first is not None:  # a picked description of a call leads the prose
                picked.remove(described_first)
                picked.insert(0, described_first)
            lead = picked[0]
            if (p.max_sentences > 1 and lead > 0 and flat[lead - 1][0] == flat[lead][0]
                    and is_term(flat[lead - 1][1])):
                # the lead describes a call: its term is the call, not another code line picked
                # ("const path = require('node:path');" from the module's intro)
                calls = [lead - 1]
                picked = [i for i in picked if i != lead - 1][:p.max_sentences - 1]
            elif described is not None and described[lead]:
                calls = []  # a signature heading's description: lead_term leads with the heading
            elif calls:
                picked.remove(calls[0])
            if calls:
                picked.insert(0, calls[0])
        return picked

    def lead_term(self, pairs: list[tuple[int, str]], cands: list[Candidate], question: str) -> list[tuple[int, str]]:
        """A call question's answer whose lead is no call yet leads with its definition's term
        from the chunk's structure: the chunk's signature heading (Markdown API docs), or, for a
        man page's NAME line, the first line of the page's SYNOPSIS when that chunk was retrieved."""
        p = self.p
        if (not pairs or not p.form_filter or p.max_sentences < 2 or question_form(question) != "call"
                or sentence_kind(pairs[0][1]) == "code" or is_term(pairs[0][1])):
            return pairs
        ci = pairs[0][0]
        head = heading_term(cands[ci])
        term = (ci, head) if head else (synopsis_of(cands[ci], cands) if is_name_line(cands[ci]) else None)
        if term is None or any(normalize_for_match(term[1]) == normalize_for_match(s) for _, s in pairs):
            return pairs
        return [term] + pairs[:p.max_sentences - 1]

    def table_lookup(self, pairs: list[tuple[int, str]], flat, score: np.ndarray, n: int,
                     question: str) -> list:
        """A value question answered by a table row leads with that row under its header
        (`lookup`): a table sentence scores as one block (0.75 for a 128-row table against 1.30
        for the page's NAME line), while the question names its row and column. Rows of the top
        chunks only; the header is the table's first line in the same sentence."""
        p = self.p
        if not p.form_filter or question_form(question) != "value":
            return pairs
        keys, qwords = None, None  # read off the question once, when a table is there
        for i in np.argsort(-score, kind="stable"):
            ci, s = flat[i]
            if ci >= n or score[i] <= _SET_ASIDE or " | " not in s or sentence_kind(s) != "table":
                continue
            rows = table_rows(s)
            if len(rows) < 2 or any(ch.isdigit() for h in rows[0] for ch in h):  # a header has no numbers
                continue
            if keys is None:
                keys, qwords = question_keys(question), content_words(question)
            for row in rows[1:]:
                found = lookup(keys, qwords, rows[0], row)
                if found:
                    rest = [(cj, t) for cj, t in pairs if (cj, t) != (ci, s)]
                    return [(ci, found)] + rest[:p.max_sentences - 1]
        return pairs

    def evidence_features(self, sentence_evidence: float, cands: list[Candidate]) -> np.ndarray:
        """The evidence model's inputs; a chunk without fixed-scale scores counts 0 there."""
        cos = max((c.dense_cosine for c in cands if c.dense_cosine is not None), default=0.0)
        bm = max((c.bm25_coverage for c in cands if c.bm25_coverage is not None), default=0.0)
        return np.array([sentence_evidence, cos, bm], np.float64)

    def evidence(self, sentence_evidence: float, cands: list[Candidate]) -> float:
        m = self.p.evidence_model
        if m is None:
            return sentence_evidence
        z = float(self.evidence_features(sentence_evidence, cands) @ np.asarray(m[:3]) + m[3])
        return 1.0 / (1.0 + np.exp(-z))

    def word_shares(self, question: str, flat) -> tuple[np.ndarray, np.ndarray]:
        """Per sentence: the idf-weighted share of the question's content words it holds, and the
        same over identifier parts, abbreviations and inflections (call_words, loose_overlap)."""
        qwords = content_words(question)
        if not qwords or not flat:
            return np.zeros(len(flat)), np.zeros(len(flat))
        w = {t: (1.0 if self.idf is None else self.idf.get(t, self.idf_max)) for t in qwords}
        total = sum(w.values()) or 1.0
        # a question word matches loosely when it is a sentence word, starts one, or one starts it
        heads = {t: [t[:k] for k in range(3, len(t))] for t in qwords if len(t) >= 3}
        lex, loose = np.zeros(len(flat)), np.zeros(len(flat))
        for i, (_, s) in enumerate(flat):
            words, cwords, prefixes = _sentence_words(s)
            lex[i] = sum(w[t] for t in qwords if t in words)
            loose[i] = sum(w[t] for t in qwords if t in cwords or
                           (t in heads and (t in prefixes or any(h in cwords for h in heads[t]))))
        return lex / total, loose / total

    def fitted_scores(self, question: str, qv: np.ndarray, cands: list[Candidate], cache, model=None):
        """selection.Scored for one question's read candidates under the fitted model (`model`, else
        answer_model)."""
        from transforms.query.selection import score_candidates
        if cache is None and not all(self._stored(c) for c in cands):  # sentences the index holds no vectors for
            cache = VectorCache()
            cache.ensure(self.embedder, [s for c in cands if not self._stored(c) for s in candidate_sentences(c)])
        flat, cos, mat = self.sentences(qv, cands, cache)
        lex, loose = self.word_shares(question, flat)
        kind = answer_type(question)
        qw = content_words(question)
        type_hit = np.array([type_match(kind, s, qw) if kind else 0.0 for _, s in flat])
        described = definitions(flat, cands) if flat else np.zeros(0, bool)
        traits = [sentence_traits(s) for _, s in flat]
        head_words = [heading_words(c) for c in cands]
        return score_candidates(model or self.p.answer_model, question_form(question), qw, cands, flat,
                                cos, mat, lex, loose, type_hit, described, traits, head_words)

    def _answer_fitted(self, question: str, qv: np.ndarray, cands: list[Candidate], cache) -> AnswerResult:
        """A page first (the evidence of all its retrieved chunks), then its sentences, by the
        fitted model; a second page only when the evidence is split; a calibrated confidence."""
        return self.compose(self.fitted_scores(question, qv, cands, cache), cands)

    def compose(self, sc, cands: list[Candidate], compose: Optional[dict] = None) -> AnswerResult:
        """The answer from one question's scored candidates (selection.Scored)."""
        m, p = self.p.answer_model, self.p
        if sc.lead is None:
            return AnswerResult(EXTRACTIVE_NOT_FOUND, "not_found", confidence=0.0)
        confidence = float(m.confidence(sc.conf_x)[0])
        evidence = float(sc.page_p[sc.best_page])  # P(the chosen page is a right page): the page model's
        if not np.isfinite(confidence) or confidence < p.threshold:
            return AnswerResult(EXTRACTIVE_NOT_FOUND, "not_found", evidence_score=evidence, confidence=confidence)
        flat, sp, mat = sc.flat, sc.sent_p, sc.mat
        lead = sc.lead
        compose = compose or m.compose
        picked = [lead]
        keys = {normalize_for_match(flat[lead][1])}
        order = [i for i in np.argsort(-sp, kind="stable") if sc.page_of[i] == sc.best_page and i != lead]
        budget = compose.get("word_budget", 10 ** 6) - len(flat[lead][1].split())
        for i in order:
            if len(picked) >= p.max_sentences or sp[i] < compose["sentence_ratio"] * sp[lead]:
                break
            key = normalize_for_match(flat[i][1])
            words = len(flat[i][1].split())
            if key in keys or words > budget or float((mat[picked] @ mat[i]).max()) >= p.dup_sim:
                continue
            budget -= words
            keys.add(key)
            picked.append(i)
        # a definition's term leads its description (API docs: the signature, then what it does)
        ci = flat[lead][0]
        if lead > 0 and flat[lead - 1][0] == ci and is_term(flat[lead - 1][1]) and not is_term(flat[lead][1]):
            picked = [lead - 1] + [i for i in picked if i != lead - 1][:p.max_sentences - 1]
        pairs = [flat[i] for i in picked]
        head = heading_term(cands[ci])
        if head and not is_term(pairs[0][1]) and sc.sent_x[lead, SENT_DESCRIPTION] > 0:
            pairs = [(ci, head)] + pairs[:p.max_sentences - 1]
        # the evidence is split: a second page's best sentence joins when that page is nearly as likely
        if len(sc.docs) > 1:
            second = max((i for i in range(len(sc.docs)) if i != sc.best_page), key=lambda i: sc.page_p[i])
            on = np.flatnonzero(sc.page_of == second)
            if len(on) and sc.page_p[second] >= compose["split_ratio"] * sc.page_p[sc.best_page]:
                j = int(on[np.argmax(sp[on])])
                if (sp[j] >= compose["sentence_ratio"] * sp[lead] and len(flat[j][1].split()) <= budget
                        and float((mat[picked] @ mat[j]).max()) < p.dup_sim):
                    pairs = pairs[:max(1, p.max_sentences - 1)] + [flat[j]]
        check = cite_sentences(pairs, cands)
        return AnswerResult(check.answer, "answered", check.citations, check.n_invalid,
                            evidence_score=evidence, confidence=confidence)

    def _answer_one(self, question: str, qv: np.ndarray, cands: list[Candidate], cache,
                    extra: Optional[list[Candidate]] = None, head: Optional[list[Candidate]] = None,
                    sentences_of: Optional[list] = None) -> AnswerResult:
        """`head`: the chunks whose evidence decides "not found" when they are not `cands` (a page
        chosen first: its chunks answer, the head of the list says whether anything does);
        `sentences_of`: the sentences of `head` and `cands` when already read (scored_sentences)."""
        pre_head, pre_cands = sentences_of or (None, None)
        if self.p.answer_model is not None:
            return self._answer_fitted(question, qv, cands + list(extra or []), cache)
        apart = head is not None and head != cands  # a page chosen first: its chunks are not the head's
        if apart:
            hflat, hscore, _ = self.score(question, qv, head, cache, sentences=pre_head)
            if not hflat:
                return AnswerResult(EXTRACTIVE_NOT_FOUND, "not_found")
            evidence = self.evidence(self._evidence if self._evidence is not None else float(hscore.max()), head)
            flat, score, mat = self.score(question, qv, cands, cache, sentences=pre_cands)
        else:
            flat, score, mat = self.score(question, qv, cands, cache, sentences=pre_cands)
            if not flat:
                return AnswerResult(EXTRACTIVE_NOT_FOUND, "not_found")
            evidence = self.evidence(self._evidence if self._evidence is not None else float(score.max()), cands)
        if not flat:
            return AnswerResult(EXTRACTIVE_NOT_FOUND, "not_found", evidence_score=evidence)
        if evidence < self.p.threshold:
            return AnswerResult(EXTRACTIVE_NOT_FOUND, "not_found", evidence_score=evidence)
        n_top = len(cands)  # the top chunks; extra ones are read for definitions only
        described = None  # a call question's descriptions of calls (`definitions`)
        if question_form(question) == "call":
            alone = bool(self.p.call_definitions_alone)
            if not (extra or alone):
                described = definitions(flat, cands)
            else:
                # A call question's answer is often a definition further down the list: API docs
                # give each call a short section (term line, then its description) that shares few
                # words with the question beside the module's prose. Of the further chunks, only
                # such descriptions are candidates.
                cands = cands + list(extra or [])
                flat, cos, mat = self.sentences(qv, cands, cache)
                described = definitions(flat, cands)
                if alone:  # selection only: the evidence above was read from late-chunked vectors
                    cos, mat = self.definitions_alone(question, qv, flat, mat, described, cache)
                flat, score, mat = self.score(question, qv, cands, cache, sentences=(flat, cos, mat))
                top = np.array([ci < n_top for ci, _ in flat], bool)
                score = np.where(top | described, score, _SET_ASIDE)
        if float(score.max()) <= _SET_ASIDE:  # nothing retrieved may answer (navigation alone)
            return AnswerResult(EXTRACTIVE_NOT_FOUND, "not_found", evidence_score=evidence)
        picked = self.select(flat, score, mat, question, described)
        pairs = self.table_lookup(self.lead_term([flat[i] for i in picked], cands, question),
                                  flat, score, n_top, question)
        check = cite_sentences(pairs, cands)
        # rivals: the other sentences as strong as an answer sentence could have been
        conflicts = []
        if self.p.conflict_gap > 0:
            best = max(float(score.max()), float(hscore.max())) if apart else float(score.max())
            floor = best - self.p.conflict_gap
            rivals = [flat[i] for i in np.argsort(-score, kind="stable") if score[i] >= floor and i not in picked]
            pool = cands
            if apart:  # a page chosen first: the other top sources still compete
                pool = list(cands) + [c for c in head if c not in cands]
                said = {flat[i][1] for i in picked}
                rivals += [(pool.index(head[ci]), s) for (ci, s), v in zip(hflat, hscore)
                           if v >= floor and head[ci] not in cands and s not in said]
            conflicts = find_conflicts(content_words(question), [flat[i] for i in picked], rivals, pool,
                                       content_words)
        return AnswerResult(check.answer, "answered", check.citations, check.n_invalid,
                            evidence_score=evidence, conflicts=conflicts)
