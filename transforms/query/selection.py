"""The fitted answer selection: a page first, then its sentences, then a calibrated confidence.

Three small models, all fitted by `python -m bench.fit_answer_model` on the tune halves of the dev
sets and stored in one versioned file (answer_model.json beside this module):

- page: P(a page is a right page) from the evidence of all of its retrieved chunks (best rank,
  how many of its chunks were retrieved, best chunk and sentence cosines, BM25 coverage, words of
  the question in its title and headings, how much of it is navigation);
- sentence: P(a sentence holds what a right answer holds) from the sentence's own features
  (cosine, word overlap, its kind crossed with the question's form, a definition's term or
  description, its chunk's rank) and its page's probability;
- confidence: P(the answer is right) from the chosen page's and lead sentence's probabilities and
  the retrieval scores, mapped through an isotonic calibration, so that among answers with
  confidence about c about c are right ("right": docs/answering.md).

Everything here is a pure function of the candidates; the answerer (extract.py) composes the
answer from it. No rule here exists for one question: every number is fitted.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

MODEL_FILE = os.path.join(os.path.dirname(__file__), "answer_model.json")

FORMS = ("call", "value", "other")
KINDS = ("code", "table", "params", "nav")  # prose is the base kind

PAGE_FEATURES = (
    "inv_rank",        # 1 / the best rank of the page's chunks in the read list
    "log_chunks",      # log(1 + the page's chunks in the read list)
    "rank_mass",       # sum of 1 / rank over the page's chunks
    "best_chunk_cos",  # best chunk cosine with the question (fixed scale)
    "best_cover",      # best BM25 coverage of its chunks
    "best_sent_cos",   # best sentence cosine on the page
    "sent_cos_gap",    # that minus the best over every page (<= 0)
    "best_sent_lex",   # best idf-weighted word share of a sentence on the page
    "best_sent_mix",   # best cosine + word share of one sentence on the page
    "title_share",     # share of the question's words in the page's title and headings
    "nav_share",       # share of the page's sentences that are navigation or cross-references
    "code_share",      # share of the page's sentences that are code or signatures
)

SENTENCE_FEATURES = (
    "cos", "cos_gap", "lex_idf", "call_lex", "type", "inv_rank", "first", "log_words",
    "term", "description", "see_ref", "ident", "heading_share", "page_prob", "page_is_best",
    "page_cos_gap", "lex_gap", "cos_x_lex",
) + tuple(f"{k}_{f}" for k in KINDS for f in FORMS) + tuple(f"ident_{f}" for f in FORMS) + \
    tuple(f"description_{f}" for f in FORMS) + tuple(f"term_{f}" for f in FORMS)

SENT_DESCRIPTION = SENTENCE_FEATURES.index("description")


def structure_crossed(names: tuple) -> tuple:
    """Feature names crossed with the page's structure: each feature again on structured pages, and
    the structure itself. A page is structured when its chunks carry section headings (HTML,
    Markdown, man pages), flat when they do not (JSONL records, plain text): the same retrieval
    scores say different things about an answer on the two (one weight set fitted on both was
    under-confident on SQuAD's flat records and did not rank the documentation sets' answers)."""
    return names + tuple(f"{n}_structured" for n in names) + ("structured",)


def cross_structure(x: list, structured: float) -> np.ndarray:
    """A feature row in structure_crossed order."""
    return np.array(list(x) + [v * structured for v in x] + [structured], np.float64)


def is_structured(cands: list) -> float:
    """1.0 when any of these chunks (one page's) carries a section heading."""
    return float(any(c.heading_path is not None and len(c.heading_path) > 0 for c in cands))


# the confidence of the hand-weighted selection's answer (answer.selection: rules): what retrieval and
# the rules' evidence say about the page the answer cites and its lead sentence
_RULES_BASE = (
    "evidence", "best_chunk_cos", "best_cover", "cited_docs", "cited_inv_rank", "cited_is_top",
    "cited_log_chunks", "cited_cos", "cited_cover", "cited_title_share", "lead_code", "lead_table",
    "lead_nav", "lead_log_words",
    # how concentrated retrieval is on the cited page: its share of the first 10 chunks, the pages
    # among them, an answer citing several pages, the cosine's drop from the first chunk to the fifth
    "cited_top10_share", "log_pages_top10", "cites_several", "cos_drop5",
    # what the fitted page model says of the cited page: its probability, and its margin over the best other page
    "cited_page_prob", "cited_page_margin",
) + tuple(f"form_{f}" for f in FORMS)
RULES_CONFIDENCE_FEATURES = structure_crossed(_RULES_BASE)

_CONFIDENCE_BASE = (
    "page_prob", "page_margin", "lead_prob", "best_chunk_cos", "best_cover", "sentence_evidence",
    "lead_cos", "lead_lex", "page_inv_rank", "page_title_share",
) + tuple(f"form_{f}" for f in FORMS)
CONFIDENCE_FEATURES = structure_crossed(_CONFIDENCE_BASE)



@dataclass
class AnswerModel:
    """The fitted weights (one logistic model each) and the confidence's calibration."""
    version: str
    page_w: np.ndarray
    page_b: float
    sent_w: np.ndarray
    sent_b: float
    conf_w: np.ndarray
    conf_b: float
    calib_x: np.ndarray  # isotonic calibration: raw confidence -> share right (np.interp)
    calib_y: np.ndarray
    threshold: float  # the default answer.threshold, in confidence units
    compose: dict  # sentence_ratio: a further sentence joins at this share of the lead's probability;
    # split_ratio: a second page is cited when its probability is this share of the best page's;
    # word_budget: the most words an answer has (its lead sentence always stands)
    fitted_on: dict
    rules_w: Optional[np.ndarray] = None  # the rules' answers' confidence (RULES_CONFIDENCE_FEATURES)
    rules_b: float = 0.0
    rules_calib_x: Optional[np.ndarray] = None
    rules_calib_y: Optional[np.ndarray] = None
    digest: str = ""  # sha256 of the model file: a resumed answer job reuses shards only under the same fit
    # "listwise": the lead is the argmax over all answerable sentences of sentence logit + page_weight *
    # log P(page) (a softmax within the question); "pointwise": the best page first, then its best
    # sentence by a sigmoid (the first fit's form, still readable)
    sent_kind: str = "pointwise"
    page_weight: float = 0.0

    @classmethod
    def load(cls, path: str = MODEL_FILE) -> "AnswerModel":
        import hashlib
        with open(path, "rb") as f:
            raw = f.read()
        m = cls.from_dict(json.loads(raw), path)
        m.digest = hashlib.sha256(raw).hexdigest()[:16]
        return m

    @classmethod
    def from_dict(cls, m: dict, path: str = "the answer model") -> "AnswerModel":
        for part, names in (("page", PAGE_FEATURES), ("sentence", SENTENCE_FEATURES),
                            ("confidence", CONFIDENCE_FEATURES)):
            if tuple(m[part]["features"]) != names:
                raise ValueError(f"{path}: its {part} model was fitted on other features; refit it "
                                 f"(python -m bench.fit_answer_model)")
        return cls(version=m["version"],
                   page_w=np.asarray(m["page"]["weights"], np.float64), page_b=float(m["page"]["bias"]),
                   sent_w=np.asarray(m["sentence"]["weights"], np.float64), sent_b=float(m["sentence"]["bias"]),
                   conf_w=np.asarray(m["confidence"]["weights"], np.float64),
                   conf_b=float(m["confidence"]["bias"]),
                   calib_x=np.asarray(m["calibration"]["x"], np.float64),
                   calib_y=np.asarray(m["calibration"]["y"], np.float64),
                   threshold=float(m["threshold"]), compose=dict(m["compose"]), fitted_on=m.get("fitted_on", {}),
                   sent_kind=m["sentence"].get("kind", "pointwise"),
                   page_weight=float(m["sentence"].get("page_weight", 0.0)), **_rules_part(m, path))

    def rules_confidence(self, x: np.ndarray) -> Optional[float]:
        """Calibrated P(right) of a rules answer; None when no such calibration was fitted."""
        if self.rules_w is None:
            return None
        raw = _sigmoid(np.atleast_2d(x) @ self.rules_w + self.rules_b)
        return float(np.interp(raw, self.rules_calib_x, self.rules_calib_y)[0])

    def page_prob(self, x: np.ndarray) -> np.ndarray:
        return _sigmoid(x @ self.page_w + self.page_b)

    def sentence_prob(self, x: np.ndarray) -> np.ndarray:
        return _sigmoid(x @ self.sent_w + self.sent_b)

    def sentence_logit(self, x: np.ndarray, page_p: np.ndarray) -> np.ndarray:
        """Listwise: a sentence's score within its question (sentence and page evidence joined)."""
        return x @ self.sent_w + self.page_weight * np.log(np.maximum(page_p, 1e-9))

    def raw_confidence(self, x: np.ndarray) -> np.ndarray:
        return _sigmoid(x @ self.conf_w + self.conf_b)

    def confidence(self, x: np.ndarray) -> np.ndarray:
        raw = self.raw_confidence(np.atleast_2d(x))
        return np.interp(raw, self.calib_x, self.calib_y)


def _rules_part(m: dict, path: str) -> dict:
    r = m.get("rules_confidence")
    if not r:
        return {}
    if tuple(r["features"]) != RULES_CONFIDENCE_FEATURES:
        raise ValueError(f"{path}: its rules confidence was fitted on other features; refit it "
                         f"(python -m bench.fit_answer_model)")
    return {"rules_w": np.asarray(r["weights"], np.float64), "rules_b": float(r["bias"]),
            "rules_calib_x": np.asarray(r["calibration"]["x"], np.float64),
            "rules_calib_y": np.asarray(r["calibration"]["y"], np.float64)}


def rules_features(form: str, evidence: float, citations: list, cands: list, title_share: dict,
                   lead_traits: tuple, page_probs: Optional[dict] = None) -> np.ndarray:
    """RULES_CONFIDENCE_FEATURES of one rules answer: its evidence, the best retrieval scores, and
    the cited page's (the first citation's) rank, retrieved chunks, scores and title words;
    `title_share`: doc_id -> share of the question's words in its title and headings;
    `lead_traits`: extract.sentence_traits of the lead sentence; `page_probs`: doc_id -> the
    fitted page model's probability (none: 0)."""
    cited = [c.get("doc_id") for c in citations]
    doc = cited[0] if cited else None
    mine = [(i, c) for i, c in enumerate(cands) if c.doc_id == doc]
    ranks = [int(c.rank or i + 1) for i, c in mine] or [len(cands) + 1]
    kind, term, nav, _, logw = lead_traits
    return cross_structure([evidence, max((c.dense_cosine or 0.0) for c in cands) if cands else 0.0,
                     max((c.bm25_coverage or 0.0) for c in cands) if cands else 0.0,
                     float(len(set(cited))), 1.0 / min(ranks), float(bool(cands) and cands[0].doc_id == doc),
                     float(np.log1p(len(mine))), max(((c.dense_cosine or 0.0) for _, c in mine), default=0.0),
                     max(((c.bm25_coverage or 0.0) for _, c in mine), default=0.0), title_share.get(doc, 0.0),
                     float(kind == "code" or term), float(kind in ("table", "params")), float(kind == "nav" or nav),
                     logw, *concentration(doc, cited, cands), *page_evidence(doc, page_probs or {})] + form_onehot(form),
                     is_structured([c for _, c in mine]))


def page_evidence(doc, page_probs: dict) -> list[float]:
    """cited_page_prob, cited_page_margin (RULES_CONFIDENCE_FEATURES)."""
    mine = page_probs.get(doc, 0.0)
    others = [v for d, v in page_probs.items() if d != doc]
    return [mine, mine - max(others, default=0.0)]


def concentration(doc, cited: list, cands: list) -> list[float]:
    """cited_top10_share, log_pages_top10, cites_several, cos_drop5 (RULES_CONFIDENCE_FEATURES)."""
    top = [c.doc_id for c in cands[:10]]
    if not top:
        return [0.0, 0.0, float(len(set(cited)) > 1), 0.0]
    cos = [c.dense_cosine or 0.0 for c in cands[:5]]
    return [top.count(doc) / 10, float(np.log(len(set(top)))), float(len(set(cited)) > 1), cos[0] - cos[-1]]


@functools.lru_cache(maxsize=4)
def load_model(name: str = os.path.basename(MODEL_FILE)) -> AnswerModel:
    """A fitted model shipped beside this module, by file name (an embedding profile's)."""
    return AnswerModel.load(os.path.join(os.path.dirname(MODEL_FILE), os.path.basename(name)))


def default_model() -> AnswerModel:
    return load_model(os.path.basename(MODEL_FILE))  # the same cache entry the profiles' name gives


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))


def form_onehot(form: str) -> list[float]:
    return [float(form == f) for f in FORMS]


def points_elsewhere(traits: tuple) -> bool:
    """Navigation, a "See ..." cross-reference, a table of contents' line or a wordless fragment
    (extract.sentence_traits): it may be retrieved, but it never answers."""
    kind, _, see, _, _ = traits
    return kind == "nav" or see


def share(qwords: set[str], words: set[str]) -> float:
    return len(qwords & words) / len(qwords) if qwords else 0.0


@dataclass
class Scored:
    """One question's candidates under the model: pages and sentences with their probabilities."""
    flat: list  # (candidate index, sentence)
    mat: np.ndarray  # the sentences' unit vectors
    docs: list  # page doc_ids, in first-seen order
    page_of: np.ndarray  # per sentence: its page's index in docs
    page_x: np.ndarray
    page_p: np.ndarray
    sent_x: np.ndarray
    sent_p: np.ndarray
    conf_x: Optional[np.ndarray] = None  # of the best page's lead sentence
    lead: Optional[int] = None  # index into flat
    best_page: Optional[int] = None
    can_answer: Optional[np.ndarray] = None  # per sentence: not navigation nor a cross-reference


def score_candidates(model: AnswerModel, form: str, qwords: set[str], cands: list, flat: list,
                     cos: np.ndarray, mat: np.ndarray, lex: np.ndarray, call_lex: np.ndarray,
                     type_hit: np.ndarray, described: np.ndarray, traits: list, head_words: list) -> Scored:
    """Page and sentence probabilities for one question's read candidates (`flat`: their
    sentences, with cosines, idf word shares, call word shares, answer-type hits, which are a
    call's description, and each sentence's traits: kind, a term line, a "See ..." reference,
    names something in code form, log words), `head_words` each candidate's title and heading
    words, and the confidence features of the best page's lead sentence."""
    n = len(flat)
    docs: list = []
    doc_index: dict = {}
    for c in cands:
        if c.doc_id not in doc_index:
            doc_index[c.doc_id] = len(docs)
            docs.append(c.doc_id)
    cand_page = np.array([doc_index[c.doc_id] for c in cands], np.int64)
    page_of = np.array([cand_page[ci] for ci, _ in flat], np.int64) if n else np.zeros(0, np.int64)
    kinds = [t[0] for t in traits]
    nav = np.array([points_elsewhere(t) for t in traits], np.float64)
    code = np.array([k == "code" or t[1] for k, t in zip(kinds, traits)], np.float64)
    cand_head_share = np.array([share(qwords, w) for w in head_words], np.float64)
    best_sent_all = float(cos.max()) if n else 0.0
    P = len(docs)
    px = np.zeros((P, len(PAGE_FEATURES)), np.float64)
    for p in range(P):
        members = np.flatnonzero(cand_page == p)
        ranks = np.array([int(cands[i].rank or i + 1) for i in members], np.float64)
        on = page_of == p
        px[p] = [1.0 / ranks.min(), np.log1p(len(members)), float((1.0 / ranks).sum()),
                 max((cands[i].dense_cosine or 0.0) for i in members),
                 max((cands[i].bm25_coverage or 0.0) for i in members),
                 float(cos[on].max()) if on.any() else 0.0,
                 (float(cos[on].max()) - best_sent_all) if on.any() else -1.0,
                 float(lex[on].max()) if on.any() else 0.0,
                 float((cos[on] + lex[on]).max()) if on.any() else 0.0,
                 float(cand_head_share[members].max()),
                 float(nav[on].mean()) if on.any() else 0.0,
                 float(code[on].mean()) if on.any() else 0.0]
    page_p = model.page_prob(px) if P else np.zeros(0)
    # navigation, "See ..." cross-references, tables of contents and index pages never answer
    # (they may still be retrieved): a page with nothing else is never chosen
    can_answer = nav == 0
    for p in range(P):
        if not (can_answer & (page_of == p)).any():
            page_p[p] = 0.0
    best_page = int(np.argmax(page_p)) if P and page_p.max() > 0 else None
    fo = form_onehot(form)
    page_best_cos = px[:, 5] if P else np.zeros(0)
    best_lex = float(lex.max()) if n else 0.0
    sx = np.zeros((n, len(SENTENCE_FEATURES)), np.float64)
    for i, ((ci, s), t) in enumerate(zip(flat, traits)):
        kind, term, see, ident, logw = t
        first = i == 0 or flat[i - 1][0] != ci
        after_term = (not first) and traits[i - 1][1] and not term
        description = float(bool(described[i]) or after_term)
        # a definition is read with its term: the description of json.dumps(...) names json.dumps
        # as much as the signature line does ("Serialize obj to a JSON formatted str.")
        ident = ident or bool(description)
        row = [float(cos[i]), float(cos[i]) - best_sent_all, float(lex[i]), float(call_lex[i]), float(type_hit[i]),
               1.0 / int(cands[ci].rank or ci + 1), float(first), logw, float(term), description, float(see),
               float(ident), float(cand_head_share[ci]), float(page_p[page_of[i]]),
               float(page_of[i] == best_page), float(cos[i]) - page_best_cos[page_of[i]], float(lex[i]) - best_lex,
               float(cos[i]) * float(lex[i])]
        row += [float(kind == k) * f for k in KINDS for f in fo]
        row += [float(ident) * f for f in fo] + [description * f for f in fo] + [float(term) * f for f in fo]
        sx[i] = row
    if model.sent_kind == "listwise":
        sent_p = listwise_probs(model, sx, page_p[page_of] if n else np.zeros(0), can_answer)
        if n and sent_p.max() > 0:
            best_page = int(page_of[int(np.argmax(sent_p))])  # the page of the best sentence-and-page score
    else:
        sent_p = np.where(can_answer, model.sentence_prob(sx), 0.0) if n else np.zeros(0)
    out = Scored(flat, mat, docs, page_of, px, page_p, sx, sent_p, best_page=best_page, can_answer=can_answer)
    if n and best_page is not None:
        on = np.flatnonzero(page_of == best_page)
        if len(on):
            lead = int(on[np.argmax(sent_p[on])])
            out.lead = lead
            others = np.delete(page_p, best_page)
            out.conf_x = cross_structure([page_p[best_page], page_p[best_page] - (others.max() if len(others) else 0.0),
                                          sent_p[lead], px[best_page, 3], max(px[:, 4]),
                                          float((cos + 0.5 * lex).max()), float(cos[lead]), float(lex[lead]),
                                          px[best_page, 0], px[best_page, PAGE_FEATURES.index("title_share")]] + fo,
                                         is_structured([cands[i] for i in np.flatnonzero(cand_page == best_page)]))
    return out


def listwise_probs(model: AnswerModel, sx: np.ndarray, page_p: np.ndarray, can_answer: np.ndarray) -> np.ndarray:
    """Softmax of the joint logit over the sentences that may answer (0 for the others)."""
    ok = can_answer & (page_p > 0)
    out = np.zeros(len(sx))
    if not ok.any():
        return out
    z = model.sentence_logit(sx[ok], page_p[ok])
    e = np.exp(z - z.max())
    out[ok] = e / e.sum()
    return out
