"""Embedding profiles: pooling and prefixes on the right side, the namespace, pinned files,
and an index answered only with the profile that built it.

bge-small, e5-small and minilm-q8 come from `make models` (a prerequisite of `make test`)."""
import json
import shutil

import numpy as np
import pytest

from transforms.ingest.embed import Embedder, ModelFileError, model_spec_from_config
from transforms.ingest.profiles import BGE_QUERY_INSTRUCTION
from tests.unit.test_profiles import config, spec_of

QUESTION = "How do I serialize a Python object to a JSON formatted string?"
PASSAGE = "json.dumps serializes obj to a JSON formatted str."


@pytest.fixture(scope="module")
def bge(tmp_path_factory):
    return Embedder(spec_of(tmp_path_factory.mktemp("bge"), profile="bge-small"))


@pytest.fixture(scope="module")
def e5(tmp_path_factory):
    return Embedder(spec_of(tmp_path_factory.mktemp("e5"), profile="e5-small"))


def token_states(embedder, text):
    hidden, mask = embedder.forward([embedder.tokenizer.encode(text, add_special_tokens=True)])
    return hidden[0], mask[0]


def unit(v):
    return v / np.linalg.norm(v)


# --- namespace and config ---------------------------------------------------------------


def test_named_profiles_have_their_own_namespaces(tmp_path):
    names = {spec_of(tmp_path, profile=p).namespace for p in ("minilm", "minilm-q8", "bge-small", "e5-small")}
    assert len(names) == 4


# --- pooling and prefixes ---------------------------------------------------------------

def test_bge_pools_cls_and_prefixes_questions_only(bge):
    assert bge.spec.pooling == "cls" and bge.spec.passage_prefix == ""
    hidden, _ = token_states(bge, BGE_QUERY_INSTRUCTION + QUESTION)
    np.testing.assert_allclose(bge.encode_queries([QUESTION])[0], unit(hidden[0]), atol=1e-5)
    hidden, _ = token_states(bge, PASSAGE)
    np.testing.assert_allclose(bge.encode([PASSAGE])[0], unit(hidden[0]), atol=1e-5)
    assert abs(float(unit(hidden.mean(axis=0)) @ unit(hidden[0]))) < 0.999  # CLS is not the mean


def test_e5_pools_mean_with_query_and_passage_prefixes(e5):
    for text, encoded, prefix in ((QUESTION, e5.encode_queries([QUESTION])[0], "query: "),
                                  (PASSAGE, e5.encode([PASSAGE])[0], "passage: ")):
        hidden, _ = token_states(e5, prefix + text)
        np.testing.assert_allclose(encoded, unit(hidden.mean(axis=0)), atol=1e-5)


def test_a_question_ranks_its_passage_first(bge, e5):
    passages = [PASSAGE, "Penguins live in the southern hemisphere.", "The glob module finds pathnames."]
    for emb in (bge, e5):
        assert int(np.argmax(emb.encode(passages) @ emb.encode_queries([QUESTION])[0])) == 0


@pytest.mark.parametrize("name", ["bge", "e5"])
def test_late_sentence_vectors_follow_the_profile(name, request):
    """Chunk vector = Embedder.encode (prefix, pooling); sentence vector = the mean of the token
    states over the sentence, found past the passage prefix."""
    from transforms.ingest.sentvec import chunk_sentence_vectors
    emb = request.getfixturevalue(name)
    context, text = "json — JSON encoder", "First sentence about JSON. Second one about dumps."
    chunk, spans, vecs = chunk_sentence_vectors(emb, [f"{context}\n{text}"], [text])
    np.testing.assert_allclose(chunk[0], emb.encode([f"{context}\n{text}"])[0], atol=1e-5)
    full = emb.prefixed([f"{context}\n{text}"], "passage")[0]
    enc = emb.tokenizer.encode(full, add_special_tokens=True)
    hidden, _ = emb.forward([enc])
    start = len(full) - len(text) + spans[0][1][0]  # the second sentence in the prefixed string
    rows = [t for t, (s, e) in enumerate(enc.offsets) if enc.sequence_ids[t] is not None and s >= start
            and e > s]
    np.testing.assert_allclose(vecs[0][1], unit(hidden[0, rows].mean(axis=0)), atol=1e-5)


# --- pinned files -----------------------------------------------------------------------

def test_a_model_file_with_another_sha256_is_refused(tmp_path, monkeypatch):
    from transforms.ingest.profiles import model_dir
    good = model_dir("e5-small")
    monkeypatch.setenv("RAGBEAM_CACHE", str(tmp_path / "cache"))
    bad = model_dir("e5-small")
    bad.mkdir(parents=True)
    shutil.copy(good / "tokenizer.json", bad / "tokenizer.json")
    (bad / "model.onnx").write_bytes(b"not the pinned model")
    with pytest.raises(ModelFileError, match="has sha256 .*expected 7d9092cb"):
        Embedder(spec_of(tmp_path, profile="e5-small"))


def test_requantized_minilm_runs_int8_kernels_and_keeps_the_vectors(tmp_path):
    import onnx
    q8 = spec_of(tmp_path, profile="minilm-q8")
    ops = {n.op_type for n in onnx.load(q8.model_path).graph.node}
    assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops
    texts = [QUESTION, PASSAGE, "Penguins live in the southern hemisphere."]
    cos = (Embedder(q8).encode(texts) * Embedder(spec_of(tmp_path)).encode(texts)).sum(axis=1)
    assert cos.min() > 0.97


# --- an index answered only with its own profile ----------------------------------------

@pytest.fixture(scope="module")
def bge_index(tmp_path_factory):
    from tests.conftest import copy_corpus
    from pipelines.index import run_index
    base = tmp_path_factory.mktemp("bge-index")
    corpus = copy_corpus(base / "corpus", ["python/library/json.html", "python/library/glob.html",
                                           "records/faq.jsonl"])
    cfg = config(base, {"profile": "bge-small"})
    run_index(cfg, str(corpus), str(base / "index"), progress=False, log=lambda *_: None)
    return base / "index", cfg


def test_an_index_built_with_bge_is_answered_with_bge(bge_index):
    from transforms.index import publish
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question
    index_dir, cfg = bge_index
    version = publish.resolve_index(str(index_dir))
    with open(f"{version}/manifest.json", encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["model"]["profile"] == "bge-small" and manifest["model"]["pooling"] == "cls"
    assert manifest["model"]["query_prefix"] == BGE_QUERY_INSTRUCTION
    engine = QAEngine(version, cfg, model_spec_from_config(cfg))
    try:
        rec, = engine.answer_batch([Question("q", QUESTION)], top_k=5)
    finally:
        engine.close()
    assert rec.retrieved and rec.retrieved[0]["source"].endswith("json.html")


@pytest.mark.parametrize("embed, match", [({}, "model"), ({"profile": "bge-small", "query_prefix": ""},
                                                          "profile bge-small.*query_prefix")])
def test_answering_with_another_profile_is_refused(bge_index, tmp_path, embed, match):
    from transforms.index import publish
    from transforms.query.engine import IndexMismatchError, QAEngine
    index_dir, _ = bge_index
    cfg = config(tmp_path, embed)
    with pytest.raises(IndexMismatchError, match=match):
        QAEngine(publish.resolve_index(str(index_dir)), cfg, model_spec_from_config(cfg))


def test_answer_time_vectors_embed_questions_as_questions(e5):
    """Sentences embedded at answer time (VectorCache) get the passage prefix, the questions
    in the same batch the query prefix, even when a sentence has the question's words."""
    from transforms.query.rerank import VectorCache
    cache = VectorCache()
    cache.ensure(e5, [PASSAGE, QUESTION], queries=[QUESTION])
    assert cache.encode_calls == 2
    np.testing.assert_allclose(cache.query_matrix(e5, [QUESTION])[0], e5.encode_queries([QUESTION])[0], atol=1e-5)
    # int8 activations are quantized per batch, so the reference is the same batch
    np.testing.assert_allclose(cache.matrix([QUESTION])[0], e5.encode([PASSAGE, QUESTION])[1], atol=1e-5)
    assert float(cache.matrix([QUESTION])[0] @ cache.query_matrix(e5, [QUESTION])[0]) < 0.99
