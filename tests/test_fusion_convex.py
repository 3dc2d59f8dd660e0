"""Score-aware (convex) fusion."""
from __future__ import annotations

import numpy as np
import pytest

from transforms.query.fuse import convex_fuse, normalise


def test_normalise_kinds():
    ref = np.array([3.0, 2.0, 1.0])
    np.testing.assert_allclose(normalise(np.array([3.0, 1.0, 0.0]), ref, "minmax"), [1.0, 0.0, -0.5])
    np.testing.assert_allclose(normalise(ref, ref, "max"), [1.0, 2 / 3, 1 / 3])
    z = normalise(ref, ref, "zscore")
    assert abs(z.mean()) < 1e-12 and abs(z.std() - 1) < 1e-12
    np.testing.assert_allclose(normalise(np.array([5.0]), np.array([2.0, 2.0]), "minmax"), [1.0])


def test_convex_uses_scores_not_ranks():
    # BM25 is sure about chunk 7 (far ahead); dense mildly prefers 1 over 7.
    dense_ids, dense_s = [1, 7, 2], [0.80, 0.79, 0.50]
    bm_ids, bm_s = [7, 1, 3], [20.0, 5.0, 4.0]
    fused = convex_fuse(dense_ids, dense_s, bm_ids, bm_s, alpha=0.5)
    assert [c for c, _ in fused][:2] == [7, 1]
    # alpha 1: dense only (missing scores floor to the list's minimum)
    assert [c for c, _ in convex_fuse(dense_ids, dense_s, bm_ids, bm_s, alpha=1.0)][:3] == [1, 7, 2]
    # -1 padding and -inf are ignored; top_n cuts
    f = convex_fuse([1, -1], [0.9, -np.inf], [2, -1], [3.0, -np.inf], top_n=1)
    assert len(f) == 1


def test_convex_fill_scores_missing_side_exactly():
    calls = []

    def dfill(c):
        calls.append(list(c))
        return np.full(len(c), 0.79)

    fused = convex_fuse([1, 2], [0.8, 0.5], [3, 1], [10.0, 2.0], alpha=0.5, dense_fill=dfill)
    assert calls == [[3]]  # only chunk 3 lacked a dense score
    assert fused[0][0] == 3  # nearly the best cosine and the best BM25


def test_ties_break_by_chunk_no():
    f = convex_fuse([5, 4], [0.5, 0.5], [], [], alpha=1.0)
    assert [c for c, _ in f] == [4, 5]


def test_bound_norm_keeps_scores_on_a_fixed_scale():
    # cosine as is, BM25 over its bound: a weak BM25 list is not stretched to 0..1
    f = convex_fuse([1, 2], [0.6, 0.5], [2, 1], [1.0, 0.5], alpha=0.8, norm="bound", bm25_bound=10.0)
    assert f[0][0] == 1 and np.isclose(f[0][1], 0.8 * 0.6 + 0.2 * 0.05)
    assert np.isclose(f[1][1], 0.8 * 0.5 + 0.2 * 0.1)
    # the same lists min-max normalised put chunk 2 first (BM25's 1.0 vs 0.5 becomes 1 vs 0)
    assert convex_fuse([1, 2], [0.6, 0.5], [2, 1], [1.0, 0.5], alpha=0.4)[0][0] == 2
    # no BM25 bound (no known query term): dense alone decides
    assert [c for c, _ in convex_fuse([1, 2], [0.6, 0.5], [], [], alpha=0.8, norm="bound")] == [1, 2]


def test_floor_norm_gives_a_model_with_compressed_cosines_the_same_fused_order():
    # e5's cosines all sit near 1, MiniLM's spread: with "bound" the same alpha gives the dense
    # side less say for the compressed model; "floor" measures each cosine above the list's last hit
    rng = np.random.default_rng(0)
    ids = np.arange(40)
    spread = np.sort(rng.uniform(0.1, 0.7, 40))[::-1]
    compressed = 1 - 0.3 * (1 - spread)  # the same order and gaps, squeezed towards 1
    bm_ids = rng.permutation(40)[:30]
    bm_s = rng.uniform(0, 12, 30)
    fill = {int(i): float(s) for i, s in zip(bm_ids, bm_s)}

    def order(cos, norm):
        cos_of = dict(zip(ids.tolist(), cos.tolist()))
        return [c for c, _ in convex_fuse(ids, cos, bm_ids, bm_s, alpha=0.7, norm=norm, bm25_bound=15.0,
                                          dense_fill=lambda cs: np.array([cos_of[int(c)] for c in cs]),
                                          bm25_fill=lambda cs: np.array([fill.get(int(c), 0.0) for c in cs]))]
    assert order(spread, "floor") == order(compressed, "floor")
    assert order(spread, "bound") != order(compressed, "bound")
    top = convex_fuse([5, 6], [0.9, 0.8], [], [], alpha=1.0, norm="floor", bm25_bound=1.0)
    assert [round(s, 6) for _, s in top] == [0.5, 0.0]  # (0.9 - 0.8) / (1 - 0.8); the floor itself is 0


def test_the_dense_weight_follows_the_dense_lists_lead():
    from transforms.query.fuse import LEAD_FULL, adaptive_alpha, dense_lead
    flat = np.full(10, 0.5)
    clear = np.array([0.9] + [0.5] * 9)  # (0.9 - 0.5) / (1 - 0.5) = 0.8 >= LEAD_FULL
    assert dense_lead(flat) == 0.0 and dense_lead(clear) == pytest.approx(0.8)
    assert adaptive_alpha(0.85, 0.4, flat) == pytest.approx(0.4)
    assert adaptive_alpha(0.85, 0.4, clear) == pytest.approx(0.85)
    half = np.array([0.5 + 0.5 * LEAD_FULL / 2] + [0.5] * 9)
    assert adaptive_alpha(0.85, 0.4, half) == pytest.approx(0.625)
    assert adaptive_alpha(0.82, None, flat) == 0.82  # unset: a fixed weight
    # a flat dense list (0.51 .. 0.50) lets BM25 decide; the fixed weight keeps dense's first
    cos = 0.5 + np.linspace(0, 0.01, 10)[::-1]
    kw = dict(alpha=0.85, norm="bound", bm25_bound=10.0, bm25_fill=lambda cs: np.zeros(len(cs)))
    assert convex_fuse(ids := np.arange(10), cos, [9], [0.5], **kw)[0][0] == 0
    assert convex_fuse(ids, cos, [9], [0.5], alpha_min=0.4, **kw)[0][0] == 9
    assert convex_fuse(ids, clear, [9], [0.5], alpha_min=0.4, **kw)[0][0] == 0  # a clear dense lead stays
