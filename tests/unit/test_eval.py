"""Evaluation metrics on hand-made rankings, and the labels of a folder corpus."""
from __future__ import annotations

import math

import pytest

from transforms.evaluation import metrics as M

# --- metrics on hand-made rankings ----------------------------------------------------------------


def test_ndcg_graded_gains_trec_definition():
    qrels = {"b": 2, "d": 1, "e": 3, "x": 0}
    dcg = 2 / math.log2(3) + 1 / math.log2(5)  # b at rank 2, d at rank 4; gain = grade
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)  # e, b, d; x (grade 0) is not relevant
    assert M.ndcg_at_k(["a", "b", "c", "d"], qrels, 10) == pytest.approx(dcg / idcg)
    assert M.ndcg_at_k(["e", "b", "d"], qrels, 10) == pytest.approx(1.0)
    assert M.ndcg_at_k(["a", "c"], qrels, 10) == 0.0
    # the cutoff: only rank 1 counts at k=1
    assert M.ndcg_at_k(["b", "e"], qrels, 1) == pytest.approx(2 / 3)
    assert M.metric_fn("ndcg@10")(["a", "b", "c", "d"], qrels) == pytest.approx(dcg / idcg)


def test_recall_mrr_and_first_rank():
    qrels = {"b": 2, "d": 1, "e": 3, "x": 0}
    ranked = ["a", "b", "x", "d", "f"]
    assert M.recall_at_k(ranked, qrels, 1) == 0.0
    assert M.recall_at_k(ranked, qrels, 2) == pytest.approx(1 / 3)
    assert M.recall_at_k(ranked, qrels, 5) == pytest.approx(2 / 3)
    assert M.mrr_at_k(ranked, qrels, 10) == 0.5
    assert M.mrr_at_k(ranked, qrels, 1) == 0.0
    assert M.first_relevant_rank(ranked, qrels) == 2
    assert M.first_relevant_rank(["x", "a"], qrels) is None
    assert M.metric_fn("recall@5")(ranked, qrels) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        M.metric_fn("precision@3")


def test_chunk_to_document_ranking_and_answer_helpers():
    assert M.dedupe_first(["d1", "d1", "d2", "d1", "d3"]) == ["d1", "d2", "d3"]
    assert M.contains_span("It  was the DENVER\nBroncos. [1]", ["Carolina", "Denver Broncos"])
    assert not M.contains_span("the Panthers", ["Denver Broncos"])
    assert M.citation_precision(["d1", "d1", "d2"], {"d1"}) == 0.5
    assert M.citation_precision([], {"d1"}) is None
    assert M.auc([0.9, 0.8], [0.1, 0.8]) == pytest.approx(0.875)
    best = M.best_threshold(M.threshold_sweep([0.7, 0.8, 0.9], [0.2, 0.3, 0.75]))
    assert best["threshold"] == pytest.approx(0.31) and best["balanced_accuracy"] == pytest.approx(5 / 6)


def test_doc_labels_by_path_for_a_folder_corpus(tmp_path):
    """A docs/ corpus: qrels name files by path (the documents' key); a copy of the same
    content is one indexed document that every copy's path names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from transforms.evaluation.datasets import DocLabels

    (tmp_path / "documents").mkdir()
    rows = [{"doc_id": "d1", "key": "man/ls.1", "source_uri": "/data/docs/man/ls.1", "source_uris": ["/data/docs/man/ls.1"]},
            {"doc_id": "d2", "key": "git/a.html", "source_uri": "/data/docs/git/a.html",
             "source_uris": ["/data/docs/git/a.html", "/data/docs/mirror/git/a.html"]}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "documents" / "part-0.parquet")
    labels = DocLabels(str(tmp_path), {"man/ls.1", "mirror/git/a.html", "gone.txt"})
    assert labels.by_key
    assert labels.doc_qrels({"man/ls.1": 1, "mirror/git/a.html": 2, "gone.txt": 1}) == \
        {"d1": 1, "d2": 2, ("missing", "gone.txt"): 1}
    # the missing judged file still counts against recall
    assert M.recall_at_k(["d1", "d2"], labels.doc_qrels({"man/ls.1": 1, "gone.txt": 1}), 10) == 0.5
