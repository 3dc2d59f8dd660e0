"""bench/studies/ann_vs_exact.py at a tiny size: random unit vectors (no source index, no model).
No timings asserted."""
import numpy as np

from bench.studies.ann_vs_exact import measure, recall_at_k, table
from configs.schema import HnswConfig


def test_one_row_at_2000_vectors(tmp_path):
    rng = np.random.default_rng(3)
    v = rng.standard_normal((2000, 384)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    q = v[:20] + 0.02 * rng.standard_normal((20, 384)).astype(np.float32)  # near rows 0..19
    db = str(tmp_path / "hnsw.duckdb")
    row = measure(v, q, HnswConfig(), db, log=lambda *_: None)
    assert {"chunks", "exact_qps", "hnsw_qps", "hnsw_build_s", "hnsw_recall_at_10", "exact_vs_hnsw",
            "settings"} <= set(row)
    assert row["chunks"] == 2000 and row["questions"] == 20
    assert row["settings"]["plan_uses_hnsw_index"] is True  # vss loaded: an index scan, not a full scan
    assert row["hnsw_recall_at_10"] >= 0.95
    assert row["exact_vs_hnsw"] > 0 and row["exact_qps"] > 0 and row["hnsw_qps"] > 0
    assert not (tmp_path / "hnsw.duckdb").exists()  # the index file is removed after
    md = table([row], "python -m bench.studies.ann_vs_exact --sizes 2000")
    assert md.splitlines()[0] == "`python -m bench.studies.ann_vs_exact --sizes 2000`"


def test_recall_counts_the_exact_top_k_found():
    exact = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]])
    assert recall_at_k(exact, exact) == 1.0
    assert recall_at_k(exact, np.array([[0, 1, 2, 3, 4, 10, 11, 12, 13, -1]])) == 0.5
