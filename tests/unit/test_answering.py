"""Fusion, reranking, citation checking and answering (extractive + generator clients)."""
from __future__ import annotations

import json
import shutil

from dataclasses import replace

import numpy as np
import pytest

from transforms.query.answer import EXTRACTIVE_NOT_FOUND, SYSTEM_PROMPT, AnswerResult, BedrockClient, GeneratorAnswerer, build_prompt
from transforms.query.extract import SentenceAnswerer
from transforms.query.cite import check_citations, parse_citations
from transforms.query.records import Candidate
from transforms.query.fuse import rrf_fuse
from transforms.query.rerank import (NoReranker, OnnxCrossEncoderReranker, SentenceEmbeddingReranker,
                               VectorCache, make_reranker, relevance_logit)
from transforms.model.tokens import default_tokenizer_path


def cand(i, text, context, title, rank):
    return Candidate(chunk_id=f"c{i}", doc_id=f"d{i}", text=text, context=context,
                     title=title, source_uri=f"s3://docs/{title}.html", score=1.0 / (60 + rank),
                     rank=rank)


CHUNKS = [
    cand(1, "json.dumps(obj) serializes obj to a JSON formatted str. The arguments have the "
            "same meaning as in dump(). Keys in key/value pairs of JSON are always of the type str.",
         "json — JSON encoder and decoder › Basic Usage", "json", 1),
    cand(2, "Path objects provide many methods for filesystem work. Path.mkdir(parents=True) "
            "creates any missing parent directories of the path. If exist_ok is true, "
            "FileExistsError is not raised when the directory already exists.",
         "pathlib — Object-oriented filesystem paths › Methods", "pathlib", 2),
    cand(3, "os.remove(path) removes the file path. If the path is a directory, an OSError is "
            "raised. Use rmdir() to remove directories.",
         "os — Miscellaneous operating system interfaces › Files and Directories", "os", 3),
]


@pytest.fixture(scope="module")
def embedder():
    from transforms.ingest.embed import Embedder, default_model_spec
    return Embedder(default_model_spec())


class CountingEmbedder:
    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def encode(self, texts):
        self.calls += 1
        return self.inner.encode(texts)


# --- fusion ----------------------------------------------------------------------------

def test_rrf_exact_order_and_scores():
    fused = rrf_fuse({"dense": ["a", "b", "c"], "bm25": ["b", "c", "d"]}, k=60)
    assert [i for i, _ in fused] == ["b", "c", "a", "d"]
    expected = {"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 63 + 1 / 62, "d": 1 / 63}
    for i, s in fused:
        assert s == pytest.approx(expected[i], abs=1e-15)
    assert rrf_fuse({"dense": ["a", "b", "c"], "bm25": ["b", "c", "d"]}, top_n=2) == fused[:2]


def test_rrf_weights_change_order():
    fused = rrf_fuse({"dense": ["a", "b", "c"], "bm25": ["b", "c", "d"]}, k=60,
                     weights={"dense": 1.0, "bm25": 3.0})
    assert [i for i, _ in fused] == ["b", "c", "d", "a"]
    assert dict(fused)["d"] == pytest.approx(3 / 63)
    # A ranker with weight 0 contributes nothing.
    assert [i for i, _ in rrf_fuse({"x": ["a", "b"], "y": ["b"]}, weights={"y": 0.0})] == ["a", "b"]


def test_rrf_ties_are_deterministic():
    # Same score, same best rank -> id order; float-order sums still tie.
    assert [i for i, _ in rrf_fuse({"x": ["b", "a"], "y": ["a", "b"]})] == ["a", "b"]
    assert [i for i, _ in rrf_fuse({"x": ["a", "b", "c"], "y": ["c", "b", "a"]})] == ["a", "c", "b"]
    # Same score, different best rank: the better single rank wins over the id.
    fillers = [f"f{j:02d}" for j in range(61)]
    fused = dict(rrf_fuse({"x": ["z"], "y": fillers + ["a"]}, weights={"y": 2.0}))
    assert fused["z"] == pytest.approx(fused["a"])
    order = [i for i, _ in rrf_fuse({"x": ["z"], "y": fillers + ["a"]}, weights={"y": 2.0})]
    assert order.index("z") < order.index("a")
    # A repeat inside one list counts once, at its best rank.
    assert dict(rrf_fuse({"x": ["a", "a", "b"]}))["a"] == pytest.approx(1 / 61)


# --- citations -------------------------------------------------------------------------

def test_parse_citations():
    assert parse_citations("A [1][3]. B [2, 3]. Code list[0] is not one.") == [1, 3, 2]


def test_check_citations_valid_and_missing():
    ok = check_citations("Use Path.mkdir [2]. JSON keys are str [1, 3].", CHUNKS)
    assert ok.ok and ok.answer == "Use Path.mkdir [2]. JSON keys are str [1, 3]."
    assert [c["n"] for c in ok.citations] == [2, 1, 3]
    assert ok.citations[0] == {"n": 2, "doc_id": "d2", "chunk_id": "c2",
                               "source": "s3://docs/pathlib.html", "title": "pathlib",
                               "quote": None, "quotes": []}

    bad = check_citations("Use Path.mkdir [2]. It also sends email [7]. Both [1, 7].", CHUNKS)
    assert bad.answer == "Use Path.mkdir [2]. It also sends email. Both [1]."
    assert bad.n_invalid == 2 and all("[7]" in r for r in bad.invalid)
    assert [c["n"] for c in bad.citations] == [2, 1]


def test_check_citations_quotes():
    # Claimed quotes (dict): normalised match passes, an invented one voids its source.
    res = check_citations("Parents are created [2]. Directories raise [3].", CHUNKS,
                          quotes={2: "creates  ANY missing parent\ndirectories",
                                  3: "os.remove deletes directories recursively"})
    assert res.answer == "Parents are created [2]. Directories raise."
    assert res.n_invalid == 1 and "source [3]" in res.invalid[0]
    assert res.citations[0]["quote"] == "creates  ANY missing parent\ndirectories"
    # Inline quotes bind to the marker right after them.
    res = check_citations('It "creates any missing parent directories" [2] and '
                          '\u201cdeletes your home directory\u201d [2].', CHUNKS)
    assert res.answer == ('It "creates any missing parent directories" [2] and '
                          '\u201cdeletes your home directory\u201d.')
    assert res.n_invalid == 1
    assert res.citations[0]["quotes"] == ["creates any missing parent directories"]
    # An invented quote for a source no marker cites still counts.
    assert check_citations("No markers.", CHUNKS, quotes={1: "made up"}).n_invalid == 1


# --- extractive answerer ---------------------------------------------------------------

def assert_grounded(r: AnswerResult, cands):
    assert r.n_invalid_citations == 0
    by_id = {c.chunk_id: c for c in cands}
    sources = [by_id[c["chunk_id"]] for c in sorted(r.citations, key=lambda c: c["n"])]
    assert check_citations(r.answer, sources).ok
    for c in r.citations:
        for q in c["quotes"]:
            assert q in by_id[c["chunk_id"]].text


def test_extractive_answers_from_chunk_2_and_not_found(embedder):
    counting = CountingEmbedder(embedder)
    ans = SentenceAnswerer(counting, max_sentences=2)  # chunks without stored vectors: embedded here
    qs = ["How do I create missing parent directories with pathlib?",
          "Who won the 1998 football world cup?"]
    found, missing = ans.answer(qs, [CHUNKS, CHUNKS])
    assert counting.calls == 1  # the whole batch in one encode call
    assert found.status == "answered"
    assert found.answer.startswith(
        "Path.mkdir(parents=True) creates any missing parent directories of the path. [1]")
    assert found.citations[0]["chunk_id"] == "c2" and found.citations[0]["n"] == 1
    assert found.evidence_score > 0.6
    assert_grounded(found, CHUNKS)
    assert missing.status == "not_found" and missing.answer == EXTRACTIVE_NOT_FOUND
    assert missing.citations == [] and missing.evidence_score < ans.p.threshold


def test_extractive_numbers_chunks_and_strips_footnotes(embedder):
    cands = [cand(7, "Rivers flow downhill.[4] The Nile is the longest river in Africa.[12]",
                  "Rivers", "rivers", 1),
             cand(8, "The Nile flows north through Egypt into the Mediterranean Sea.", "Nile",
                  "nile", 2)]
    r, = SentenceAnswerer(embedder, max_sentences=3, gap=0.5).answer(
        ["Which direction does the Nile flow?"], [cands])
    assert r.status == "answered"
    assert parse_citations(r.answer) == [1, 2]
    assert "[4]" not in r.answer and "[12]" not in r.answer
    assert r.citations[0]["chunk_id"] == "c8"  # the strongest sentence comes first
    assert_grounded(r, cands)


# --- rerankers -------------------------------------------------------------------------

RERANK_CHUNKS = [
    cand(1, "The logging module defines functions and classes for event logging. Handlers "
            "send log records to destinations.", "logging › Overview", "logging", 1),
    cand(2, "A subprocess can be started with subprocess.run. It waits for the command to "
            "complete.", "subprocess › Using run", "subprocess", 2),
    cand(3, "The tempfile module creates temporary files and directories.",
         "tempfile › Overview", "tempfile", 3),
    cand(4, "The shutil module offers high-level file operations. Many historical details "
            "apply to older platforms. shutil.copytree(src, dst) recursively copies an entire "
            "directory tree rooted at src to a directory named dst.",
         "shutil › Directory operations", "shutil", 4),
    cand(5, "The glob module finds pathnames matching a pattern.", "glob › Overview", "glob", 5),
]


def test_embedding_reranker_moves_the_right_chunk_up(embedder):
    counting = CountingEmbedder(embedder)
    cache = VectorCache()
    rr = SentenceEmbeddingReranker(counting)
    q = ["How do I recursively copy a whole directory tree?", "How can I log events?"]
    out = rr.rerank(q, [RERANK_CHUNKS, RERANK_CHUNKS], cache=cache)
    assert counting.calls == 1
    ranks = {c.chunk_id: c.rank for c in out[0]}
    assert ranks["c4"] < 4
    top = out[0][0]
    assert None not in (top.rerank_score, top.first_stage_rank, top.first_stage_score)
    assert [c.rank for c in out[0]] == [1, 2, 3, 4, 5]
    assert out[1][0].chunk_id == "c1"
    assert RERANK_CHUNKS[3].rank == 4  # inputs are not changed
    # Rerank order alone puts it first; the answerer then reuses the cached vectors.
    only = SentenceEmbeddingReranker(counting, first_stage_weight=0.0).rerank(q[:1], [RERANK_CHUNKS],
                                                                               cache=cache)
    assert only[0][0].chunk_id == "c4"
    r, = SentenceAnswerer(counting).answer(q[:1], only, cache=cache)
    assert counting.calls == 1
    assert "copytree" in r.answer and r.citations[0]["chunk_id"] == "c4"
    blend = SentenceEmbeddingReranker(embedder, fusion="blend", top_sentences=2, chunk_weight=0.5)
    assert blend.rerank(q[:1], [RERANK_CHUNKS])[0][0].chunk_id == "c4"


def test_make_reranker_and_none(embedder):
    assert isinstance(make_reranker("embedding", embedder=embedder), SentenceEmbeddingReranker)
    none = make_reranker("none")
    assert isinstance(none, NoReranker)
    out = none.rerank(["q"], [list(reversed(RERANK_CHUNKS))])[0]
    assert [c.chunk_id for c in out] == ["c1", "c2", "c3", "c4", "c5"]
    with pytest.raises(ValueError):
        make_reranker("bogus")


# A stand-in cross-encoder with the exported model's interface (input_ids, attention_mask,
# token_type_ids -> logits): logit = number of TARGET word pieces in the passage segment
# (token type 1, attention 1), so the expected order is known without running a model.
TARGET = "python"


def build_cross_encoder(model_dir, with_token_types=True, out_shape="b1"):
    import onnx  # in the test extra: a real ONNX graph is built here
    from onnx import TensorProto, helper, numpy_helper
    from tokenizers import Tokenizer

    shutil.copy(default_tokenizer_path(), model_dir / "tokenizer.json")
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    target = tok.token_to_id(TARGET)
    table = np.zeros(tok.get_vocab_size(), dtype=np.float32)
    table[target] = 1.0
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
              for n in (["input_ids", "attention_mask"] +
                        (["token_type_ids"] if with_token_types else []))]
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["hit"]),
             helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["hit", "maskf"], ["x0"])]
    last = "x0"
    if with_token_types:
        nodes += [helper.make_node("Cast", ["token_type_ids"], ["typef"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["x0", "typef"], ["x1"])]
        last = "x1"
    keep = 0 if out_shape == "b" else 1
    nodes.append(helper.make_node("ReduceSum", [last, "axes"], ["count" if out_shape == "b2"
                                                               else "logits"], keepdims=keep))
    if out_shape == "b2":  # (batch, 2): [-count, count] -> log-odds 2*count
        nodes += [helper.make_node("Neg", ["count"], ["neg"]),
                  helper.make_node("Concat", ["neg", "count"], ["logits"], axis=1)]
    dims = {"b": ["batch"], "b1": ["batch", 1], "b2": ["batch", 2]}[out_shape]
    graph = helper.make_graph(
        nodes, "tiny_cross_encoder", inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, dims)],
        initializer=[numpy_helper.from_array(table, "table"),
                     numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(model_dir / "model.onnx"))
    (model_dir / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    return target


CE_CANDS = [cand(1, "Snakes are reptiles.", "", "a", 1),
            cand(2, "python is a language.", "", "b", 2),
            cand(3, "python code, python tools, python.", "", "c", 3),
            cand(4, "I like python and python.", "", "d", 4)]


def test_cross_encoder_feeds(tmp_path):
    target = build_cross_encoder(tmp_path)
    ce = OnnxCrossEncoderReranker(str(tmp_path), batch_size=8)
    feeds = ce.feeds([("what is python", "python python is great"), ("hi", "a much longer passage here, with more words in it")])
    assert set(feeds) == {i.name for i in ce.session.get_inputs()}
    ids, mask, types = feeds["input_ids"], feeds["attention_mask"], feeds["token_type_ids"]
    assert ids.dtype == mask.dtype == types.dtype == np.int64
    assert ids.shape == mask.shape == types.shape and ids.shape[0] == 2
    toks = [ce.tokenizer.id_to_token(int(i)) for i in ids[0][mask[0] == 1]]
    assert toks == ["[CLS]", "what", "is", "python", "[SEP]", "python", "python", "is", "great",
                    "[SEP]"]
    assert types[0][mask[0] == 1].tolist() == [0] * 5 + [1] * 5
    assert mask[0].sum() < ids.shape[1] and (ids[0][mask[0] == 0] == 0).all()  # padded
    assert (types[0][mask[0] == 0] == 0).all()
    assert ids[0].tolist().count(target) == 3
    # The graph sees only passage tokens: 2 in the first pair.
    assert ce.session.run(None, feeds)[0][:, 0].tolist() == [2.0, 0.0]


def test_cross_encoder_orders_by_logit_and_truncates(tmp_path):
    build_cross_encoder(tmp_path)
    ce = make_reranker("cross_encoder", model_dir=str(tmp_path), batch_size=2, max_length=16)
    q = "python python python python?"  # question tokens must not count (token type 0)
    out = ce.rerank([q, "snakes"], [CE_CANDS, CE_CANDS[:2]])
    assert [c.chunk_id for c in out[0]] == ["c3", "c4", "c2", "c1"]
    assert [c.rerank_score for c in out[0]] == [3.0, 2.0, 1.0, 0.0]
    assert [c.rank for c in out[0]] == [1, 2, 3, 4]
    assert [c.chunk_id for c in out[1]] == ["c2", "c1"]
    # longest_first truncation to 16: [CLS] python [SEP] + 12 passage pieces + [SEP].
    long_passage = " ".join(["python"] * 40)
    assert ce.score_pairs([("python", long_passage)]).tolist() == [12.0]


@pytest.mark.parametrize("with_types,shape", [(False, "b"), (True, "b2")])
def test_cross_encoder_output_shapes(tmp_path, with_types, shape):
    build_cross_encoder(tmp_path, with_token_types=with_types, out_shape=shape)
    ce = OnnxCrossEncoderReranker(str(tmp_path))
    assert ("token_type_ids" in ce.feeds([("a", "b")])) == with_types
    out = ce.rerank(["snakes"], [CE_CANDS])[0]
    assert [c.chunk_id for c in out] == ["c3", "c4", "c2", "c1"]
    with pytest.raises(ValueError):
        relevance_logit(np.zeros((2, 3)), 2)


# --- generator: OpenAI-compatible over a local HTTP server, Bedrock with a stub ---------


def test_bedrock_client_converse():
    class Stub:
        def __init__(self):
            self.kwargs = None

        def converse(self, **kwargs):
            self.kwargs = kwargs
            return {"output": {"message": {"role": "assistant",
                                           "content": [{"text": "JSON keys are str [1]"},
                                                       {"text": " [3]."}]}}}

    stub = Stub()
    client = BedrockClient("anthropic.claude-x", region="eu-west-1", max_tokens=256, client=stub)
    r, = GeneratorAnswerer(client, max_sources=2).answer(["json keys?"], [CHUNKS])
    assert r.answer == "JSON keys are str [1]." and r.n_invalid_citations == 1
    assert stub.kwargs["modelId"] == "anthropic.claude-x"
    assert stub.kwargs["system"] == [{"text": SYSTEM_PROMPT}]
    assert stub.kwargs["inferenceConfig"] == {"maxTokens": 256, "temperature": 0}
    text = stub.kwargs["messages"][0]["content"][0]["text"]
    assert text == build_prompt("json keys?", CHUNKS[:2])[1] and '<source id="3"' not in text


def test_chunk_weight_uses_stored_embeddings(embedder):
    stored = embedder.encode([f"{c.context}\n{c.text}" for c in RERANK_CHUNKS])
    cands = [replace(c, embedding=v.tolist()) for c, v in zip(RERANK_CHUNKS, stored)]
    cache = VectorCache()
    rr = SentenceEmbeddingReranker(embedder, chunk_weight=1.0, first_stage_weight=0.0)
    q = "How do I recursively copy a whole directory tree?"
    with_stored = rr.rerank([q], [cands], cache=cache)[0]
    assert f"{cands[0].context}\n{cands[0].text}" not in cache  # not embedded again
    recomputed = rr.rerank([q], [RERANK_CHUNKS])[0]
    assert [c.chunk_id for c in with_stored] == [c.chunk_id for c in recomputed]
    assert with_stored[0].chunk_id == "c4"


def test_sentence_kinds_question_forms_and_restatements():
    from transforms.common.words import content_words
    from transforms.query.extract import kind_fits, question_form, restates, sentence_kind
    assert sentence_kind("| Python | JSON |\n|---|---|\n| dict | object |") == "table"
    assert sentence_kind("021 | 17 | 11 | DC1 (device control 1) | 121 | 81") == "table"
    assert sentence_kind("fnmatch.fnmatch(filename, pattern)") == "code"
    assert sentence_kind("--version\nPrint the version number of ldd.") == "code"
    assert sentence_kind("$ echo '{}' | python -m json.tool") == "code"  # a pipe, not a table
    assert sentence_kind("Source code: Lib/json/__init__.py") == "nav"
    assert sentence_kind("ls(1), sh(1), stat(2), glob(7)") == "nav"
    assert sentence_kind("from __future__ import annotations was previously scheduled to become mandatory.") == "prose"
    assert sentence_kind("Schedules repeated execution of callback every delay milliseconds.") == "prose"
    # Node's parameter lists: what a value question may ask (what does it return), no "how do I" answer
    assert sentence_kind("- callback {Function} The function to call when the timer elapses.\n"
                         "- ...args {any} Optional arguments") == "params"
    assert sentence_kind("- path {string}\n- Returns: {string}") == "params"
    assert sentence_kind("- ; for Windows\n- : for POSIX") == "prose"  # a list, no parameters
    assert kind_fits("params", "value") and not kind_fits("params", "call")
    assert question_form("How do I serialize a Python object to a JSON formatted string?") == "call"
    assert question_form("Which Python function tests whether a filename matches?") == "call"
    assert question_form("What is the octal code of the ASCII character A?") == "value"
    assert question_form("Why is /var specified separately?") == "other"
    assert not kind_fits("table", "call") and kind_fits("table", "value") and kind_fits("code", "call")
    assert not kind_fits("nav", "value") and kind_fits("prose", "other")
    a = content_words("Test whether the filename string matches the pattern string, returning True or False.")
    b = content_words("Test whether filename matches pattern, returning True or False; the comparison is "
                      "case-sensitive and does not apply os.path.normcase().")
    assert restates(a, b, 0.8) and not restates(a, content_words("Return a random URL-safe text string."), 0.8)


def test_call_questions_match_identifier_parts_and_read_further_definitions(embedder):
    from transforms.common.words import content_words
    from transforms.query.extract import SentenceAnswerer, SentenceParams, call_words, loose_overlap
    assert {"named", "temporary", "file"} <= call_words(">>> f = NamedTemporaryFile(delete=False)")
    assert {"set", "interval", "token", "urlsafe"} <= call_words("setInterval() and secrets.token_urlsafe()")
    q = content_words("How do I serialize a Python object to a JSON formatted string?")
    assert loose_overlap(q, content_words("Serialize obj to a JSON formatted str.")) == \
        {"serialize", "object", "json", "formatted", "string"}  # obj, str: abbreviations
    assert loose_overlap(content_words("reconfigure the locale"), content_words("dpkg-reconfigure locales")) == \
        {"reconfigure", "locale"}
    assert loose_overlap({"string"}, {"stream", "st"}) == set()  # neither starts the other; 3 letters at least
    top = [cand(1, "When serializing to JSON, beware any such limitations in applications that may consume "
                   "your JSON.", "json › Implementation Limitations", "json", 1)]
    further = [cand(2, "json.dumps(obj, *, skipkeys=False)\n\nSerialize obj to a JSON formatted str using this "
                       "conversion table.", "json › Basic Usage", "json", 2),
               cand(3, "Serializing a Python object to a JSON formatted string is common in web services.",
                    "blog", "blog", 3)]  # no definition: not read from a further chunk
    question = "How do I serialize a Python object to a JSON formatted string?"
    params = dict(max_sentences=2, top_chunks=1, threshold=0.0, form_filter=True, lexical_weight=0.7,
                  call_lexical=True)
    near, = SentenceAnswerer(embedder, None, SentenceParams(**params)).answer([question], [top + further])
    far, = SentenceAnswerer(embedder, None, SentenceParams(call_chunks=3, **params)).answer([question], [top + further])
    assert near.answer.startswith("When serializing to JSON"), near.answer
    assert far.answer.startswith("json.dumps(obj, *, skipkeys=False) [1] Serialize obj to a JSON formatted str"), far.answer
    assert "web services" not in far.answer and far.evidence_score == near.evidence_score
    assert far.citations[0]["chunk_id"] == "c2"


def test_a_call_answer_leads_with_its_signature_heading_or_the_man_pages_synopsis(embedder):
    from dataclasses import replace as _replace
    from transforms.query.cite import check_citations
    from transforms.query.extract import SentenceAnswerer, SentenceParams, heading_term
    params = dict(max_sentences=2, top_chunks=2, threshold=0.0, form_filter=True)
    # Markdown API docs: the call is only in the section's heading
    timers = _replace(cand(1, "- callback {Function} The function to call.\n\nSchedules repeated execution of "
                              "callback every delay milliseconds.", "Timers › setInterval", "timers", 1),
                      heading_path=["Timers", "`setInterval(callback[, delay[, ...args]])`"])
    assert heading_term(timers) == "setInterval(callback[, delay[, ...args]])"
    assert heading_term(_replace(timers, heading_path=["Timers", "Class: Timeout"])) is None
    q = "How do I run a callback repeatedly every few milliseconds in Node.js?"
    rec, = SentenceAnswerer(embedder, None, SentenceParams(**params)).answer([q], [[timers]])
    assert rec.answer.startswith("setInterval(callback[, delay[, ...args]]) [1] Schedules repeated"), rec.answer
    assert rec.n_invalid_citations == 0 and rec.citations[0]["quotes"][0] == "setInterval(callback[, delay[, ...args]])"
    # the heading is quotable from its own chunk only, never from another one's
    other = _replace(timers, heading_path=["Timers"])
    assert check_citations("setInterval(callback[, delay[, ...args]]) [1]", [other],
                           {1: "setInterval(callback[, delay[, ...args]])"}).n_invalid == 1
    # not for a value question, nor when the rule is off
    rec, = SentenceAnswerer(embedder, None, SentenceParams(**params)).answer(
        ["What does setInterval schedule?"], [[timers]])
    assert rec.answer.startswith("Schedules repeated"), rec.answer
    rec, = SentenceAnswerer(embedder, None, SentenceParams(**{**params, "form_filter": False})).answer([q], [[timers]])
    assert rec.answer.startswith("Schedules repeated"), rec.answer
    # a man page: the NAME line's term is the page's SYNOPSIS, when that chunk was retrieved
    name = _replace(cand(1, "git-add - Add file contents to the index", "git-add(1) › NAME", "git-add", 1),
                    doc_id="git-add", heading_path=["git-add(1)", "NAME"])
    synopsis = _replace(cand(2, "[verse]\n'git add' [--verbose | -v] [--] [<pathspec>...]", "git-add(1) › SYNOPSIS",
                             "git-add", 2), doc_id="git-add", heading_path=["git-add(1)", "SYNOPSIS"])
    q = "How do I add file contents to the git index?"
    rec, = SentenceAnswerer(embedder, None, SentenceParams(**params)).answer([q], [[name, synopsis]])
    assert rec.answer.startswith("'git add' [--verbose | -v] [--] [<pathspec>...] [1] git-add - Add file"), rec.answer
    assert [c["chunk_id"] for c in rec.citations] == ["c2", "c1"] and rec.n_invalid_citations == 0
    alone, = SentenceAnswerer(embedder, None, SentenceParams(**params)).answer(
        [q], [[name, _replace(synopsis, doc_id="git-commit")]])  # another page's synopsis is no term
    assert alone.answer.startswith("git-add - Add file contents"), alone.answer


def test_a_call_questions_descriptions_are_picked_past_parameter_lists_and_capped(embedder):
    from dataclasses import replace as _replace
    from transforms.query.extract import SentenceAnswerer, SentenceParams, definitions
    # Node's docs: a signature heading, its parameter list, then the description
    basename = _replace(cand(1, "- path {string}\n- suffix {string} An optional suffix to remove\n- Returns: {string}\n\n"
                                "The path.basename() method returns the last portion of a path.\n\n"
                                "Trailing directory separators are ignored.", "Path › path.basename", "path", 1),
                        heading_path=["Path", "`path.basename(path[, suffix])`"])
    fnmatch = cand(2, "fnmatch.fnmatch(filename, pattern)\n\nTest whether the filename string matches the pattern "
                      "string.\n\nPatterns are Unix shell style.", "fnmatch", "fnmatch", 2)
    prose = cand(3, "The path module provides utilities for working with paths.", "Path", "path", 3)
    cands = [basename, fnmatch, prose]
    a = SentenceAnswerer(embedder, None, SentenceParams(call_definitions_alone=1))
    flat = a.pairs(cands)
    picked = [s for (_, s), m in zip(flat, definitions(flat, cands)) if m]
    assert picked == ["The path.basename() method returns the last portion of a path.",
                      "Test whether the filename string matches the pattern string."], flat
    q = "How do I get the last portion of a path?"
    # the cap keeps the description sharing most of the question's words; value questions: none
    assert a.alone_pairs(q, cands) == [(0, picked[0])]
    assert len(SentenceAnswerer(embedder, None, SentenceParams(call_definitions_alone=8)).alone_pairs(q, cands)) == 2
    assert a.alone_pairs("What is the last portion of a path?", cands) == []
    assert SentenceAnswerer(embedder, None, SentenceParams()).alone_pairs(q, cands) == []  # 0: off


def test_a_call_answer_leads_with_the_call_a_picked_sentence_describes(embedder):
    from dataclasses import replace as _replace
    from transforms.query.extract import SentenceAnswerer, SentenceParams
    # the module's intro holds a code line too; a picked sentence describes isAbsolute (under its
    # signature heading), so it leads, after that heading, not "const path = require('node:path');"
    intro = cand(1, "The node:path module provides utilities for working with file and directory paths.\n\n"
                    "const path = require('node:path');", "Path", "path", 1)
    heading = _replace(cand(2, "- path {string}\n- Returns: {boolean}\n\nThe path.isAbsolute() method determines if "
                               "path is an absolute path.", "Path › isAbsolute", "path", 2),
                       heading_path=["Path", "`path.isAbsolute(path)`"])
    params = dict(max_sentences=4, top_chunks=2, threshold=0.0, gap=2.0, form_filter=True, lexical_weight=0.7,
                  call_lexical=True)
    a = SentenceAnswerer(embedder, None, SentenceParams(**params))
    for q in ("How do I check whether a path is absolute?",  # the description scores best
              "How do I check whether a path is absolute in Node.js?"):  # the require line does ("node")
        rec, = a.answer([q], [[intro, heading]])
        assert rec.answer.startswith("path.isAbsolute(path) [1] The path.isAbsolute() method determines"), rec.answer
        assert rec.n_invalid_citations == 0
    # a best sentence that describes no call: the picked code line leads, as before
    rec, = a.answer(["How do I use the path module in Node.js?"], [[intro]])
    assert rec.answer.startswith("const path = require('node:path'); [1]"), rec.answer


def test_a_value_question_looked_up_in_a_table_is_answered_by_its_row_under_its_header(embedder):
    from transforms.query.extract import SentenceAnswerer, SentenceParams
    params = dict(max_sentences=2, top_chunks=2, threshold=0.0, form_filter=True)
    # ascii(7): the table is printed twice side by side; the row of "A" starts with SOH's half
    table = cand(1, "The following table contains the 128 ASCII characters.\n\n"
                    "Oct | Dec | Hex | Char | Oct | Dec | Hex | Char\n"
                    "000 | 0 | 00 | NUL '\\0' (null character) | 100 | 64 | 40 | @\n"
                    "001 | 1 | 01 | SOH (start of heading) | 101 | 65 | 41 | A", "ascii(7) › DESCRIPTION", "ascii", 1)
    name = cand(2, "ascii - ASCII character set encoded in octal, decimal, and hexadecimal", "ascii(7) › NAME", "ascii", 2)
    answerer = SentenceAnswerer(embedder, None, SentenceParams(**params))
    rec, = answerer.answer(["What is the octal code of the ASCII character A?"], [[table, name]])
    # the row's half that holds the key ("A"), under the header's half: both quoted, checked
    assert rec.answer.startswith("Oct | Dec | Hex | Char: 101 | 65 | 41 | A [1]"), rec.answer
    assert rec.n_invalid_citations == 0 and rec.citations[0]["quotes"][:2] == ["Oct | Dec | Hex | Char", "101 | 65 | 41 | A"]
    rec, = answerer.answer(["What is the hex code of SOH?"], [[table, name]])
    assert rec.answer.startswith("Oct | Dec | Hex | Char: 001 | 1 | 01 | SOH (start of heading) [1]"), rec.answer
    # no lookup: no column named, the article "a" is no key, a call question, the rule off
    for q, p in [("Which letter follows A in the alphabet?", params), ("What is a character set?", params),
                 ("How do I print the octal code of A?", params),
                 ("What is the octal code of the ASCII character A?", {**params, "form_filter": False})]:
        rec, = SentenceAnswerer(embedder, None, SentenceParams(**p)).answer([q], [[table, name]])
        assert "Char: " not in rec.answer, (q, rec.answer)  # the whole table may be picked, no lookup


def test_cross_references_and_navigation_never_answer(embedder):
    # the rules' selection: a "See ..." pointer or a table of contents' line scores high on the
    # question's own words, but it never answers; retrieved alone, the answer is "not found"
    q = "How do I cache method calls?"
    see = cand(1, "See How do I cache method calls? in the FAQ.", "Programming FAQ › Contents", "faq", 1)
    toc = cand(2, "How do I cache method calls? ........ 12", "Programming FAQ › Contents", "faq", 2)
    body = cand(3, "functools.cache decorates a method so that repeated calls with the same arguments "
                   "return the stored result.", "functools › cache", "functools", 3)
    ans = SentenceAnswerer(embedder, max_sentences=2, threshold=-1.0)
    with_body, alone = ans.answer([q, q], [[see, toc, body], [see, toc]])
    assert with_body.status == "answered" and "functools.cache" in with_body.answer
    assert "See How" not in with_body.answer and "....." not in with_body.answer
    assert alone.status == "not_found" and alone.answer == EXTRACTIVE_NOT_FOUND
