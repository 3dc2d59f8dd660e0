"""Near-duplicate detection (transforms/neardup.py) on a planted corpus made in the test."""
from __future__ import annotations

import random

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.planted_corpus import group_pairs, planted_corpus, same_cluster_pairs
from transforms.ingest.neardup import (DocSignature, LiveSignature, NearDup, NearDupSettings, acl_key,
                                cluster_bucket, cluster_group, estimate_jaccard,
                                find_near_duplicates, hand_over, live_signatures, lsh_params,
                                match_against_index, near_duplicates_table, representatives,
                                shingles, signature, signature_from_bytes, signature_record,
                                signature_table, signature_to_bytes)
from transforms.records import Document, Section

SETTINGS = NearDupSettings()


@pytest.fixture(scope="module")
def planted():
    corpus = planted_corpus()
    sigs = {d: signature(t, SETTINGS) for d, t in corpus.docs.items()}
    assert all(s is not None for s in sigs.values())
    return corpus, sigs


def _score(corpus, rows):
    pred = same_cluster_pairs(representatives(rows), corpus.docs)
    true = group_pairs(corpus.groups)
    tp = len(pred & true)
    return tp / max(1, len(pred)), tp / len(true)


def test_planted_precision_and_recall(planted, capsys):
    corpus, sigs = planted
    rows = find_near_duplicates([DocSignature(d, "", s) for d, s in sigs.items()], SETTINGS)
    precision, recall = _score(corpus, rows)
    with capsys.disabled():
        print(f"\nplanted corpus ({len(corpus.docs)} docs, {sum(len(g) - 1 for g in corpus.groups)} "
              f"near-copies, {len(corpus.negatives)} hard negatives): precision {precision:.3f}, "
              f"recall {recall:.3f}, {len(rows)} merged")
    # measured: precision 1.000, recall 0.973 (k=3, 128 permutations, threshold 0.9)
    assert precision >= 0.95 and recall >= 0.95
    rep = representatives(rows)
    for orig, neg in corpus.negatives:  # boilerplate-sharing and half-rewritten docs stay apart
        assert rep.get(neg, neg) != rep.get(orig, orig)
    for r in rows:  # every member is within the threshold of its own representative
        assert r.similarity >= SETTINGS.threshold
        assert r.member not in {x.member for x in rows if x.member == r.representative}


def test_representatives_do_not_depend_on_input_order(planted):
    _, sigs = planted
    items = [DocSignature(d, "", s) for d, s in sigs.items()]
    first = find_near_duplicates(items, SETTINGS)
    for seed in range(3):
        random.Random(seed).shuffle(items)
        assert find_near_duplicates(items, SETTINGS) == first


def test_different_acls_are_never_merged(planted):
    corpus, sigs = planted
    acls = {}
    for i, g in enumerate(corpus.groups):  # the copies of every other group go to a restricted folder
        for d in g:
            acls[d] = ["hr", "staff"] if (i % 2 and d not in corpus.kinds) else []
    rows = find_near_duplicates([DocSignature(d, acl_key(acls.get(d, [])), s) for d, s in sigs.items()],
                                SETTINGS)
    for r in rows:
        assert acl_key(acls.get(r.member, [])) == acl_key(acls.get(r.representative, []))
    assert acl_key(["staff", "hr", "hr"]) == acl_key(["hr", "staff"]) != acl_key([])


def test_whitespace_case_and_punctuation_do_not_matter():
    text = "The quick brown fox, jumps over the lazy dog. " * 10 + " ".join(map(str, range(40)))
    messy = text.upper().replace(" ", "  \n").replace(",", "")
    assert np.array_equal(signature(text), signature(messy))
    assert signature("too short to judge") is None


def test_signatures_round_trip_through_parquet(planted, tmp_path):
    corpus, sigs = planted
    ids = sorted(sigs)[:50]
    rows = cluster_bucket([(d, sigs[d]) for d in ids])
    table = signature_table([(d, "hash-" + d, "", sigs[d]) for d in ids], rows)
    pq.write_table(table, tmp_path / "signatures.parquet")
    back = list(live_signatures(pq.read_table(tmp_path / "signatures.parquet")))
    assert [b.doc_id for b in back] == ids
    assert all(np.array_equal(b.signature, sigs[b.doc_id]) for b in back)
    assert len(signature_to_bytes(sigs[ids[0]])) == 4 * SETTINGS.num_perm
    # other settings: stored rows are not comparable and are skipped
    assert list(live_signatures(table, NearDupSettings(shingle_size=5))) == []
    pq.write_table(near_duplicates_table(rows), tmp_path / "near_duplicates.parquet")


def test_incremental_matches_new_documents_against_live_signatures(planted):
    corpus, sigs = planted
    copies = set(corpus.kinds)
    live_ids = [d for d in sigs if d not in copies]
    live_rows = find_near_duplicates([DocSignature(d, "", sigs[d]) for d in live_ids])
    rep = representatives(live_rows)
    live = [LiveSignature(d, "", sigs[d], rep.get(d)) for d in live_ids]
    new = [DocSignature(d, "", sigs[d]) for d in sorted(copies)]
    rows = match_against_index(new, live)
    full = find_near_duplicates([DocSignature(d, "", s) for d, s in sigs.items()])
    # the copies find their originals, which stay representatives (their chunks are kept)
    found = {r.member: r.representative for r in rows}
    originals = {c: next(iter(g - copies)) for g in corpus.groups for c in g if c in copies}
    hits = sum(1 for c, o in originals.items() if found.get(c) == o)
    assert hits / len(originals) >= 0.9
    assert all(r.representative in set(live_ids) or r.representative in copies for r in rows)
    assert len(rows) >= len([r for r in full if r.member in copies]) - 3


def test_deleted_representative_hands_over_to_a_member():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)
    a, b, c = base.copy(), base.copy(), base.copy()
    b[:5] = 1  # b and c are each 0.96 to a, 0.92 to each other
    c[5:10] = 2
    rows = [NearDup("b", "a", 0.96), NearDup("c", "a", 0.96)]
    after = hand_over(rows, {"a"}, {"b": b, "c": c})
    assert after == [NearDup("c", "b", round(estimate_jaccard(b, c), 4))]
    assert hand_over(rows, {"c"}, {}) == [NearDup("b", "a", 0.96)]


def test_lsh_parameters_keep_pairs_at_the_threshold():
    for perm in (64, 128, 256):
        for thr in (0.7, 0.8, 0.9, 0.95):
            b, r = lsh_params(perm, thr)
            assert b * r <= perm and (1 - thr ** r) ** b <= 0.01


def test_beam_side_functions_round_trip():
    text = " ".join(f"word{i % 97} common{i % 13}" for i in range(400))
    docs = [Document(doc_id=f"doc{i}", content_hash=f"h{i}", source_uri=f"s{i}", key=f"k{i}",
                     format="text", title="t", sections=[Section([], text + (" tail" * i))],
                     acl=["x"] if i == 2 else [])
            for i in range(3)]
    keyed = [kv for d in docs for kv in signature_record(d)]
    groups: dict[str, list] = {}
    for k, v in keyed:
        groups.setdefault(k, []).append(v)
    rows = sorted(r for item in groups.items() for r in cluster_group(item))
    assert [(r.member, r.representative) for r in rows] == [("doc1", "doc0")]  # doc2: other ACL


def test_shingles():
    assert shingles("A b, c d", 3) == {b"a b c", b"b c d"}
    assert shingles("a b", 3) == {b"a b"}
    assert signature_from_bytes(signature_to_bytes(np.arange(4, dtype=np.uint32))).tolist() == [0, 1, 2, 3]


try:
    from hypothesis import given, settings as hyp_settings, strategies as st
except ImportError:  # pragma: no cover - hypothesis comes with the test extra
    given = None

if given is not None:
    @hyp_settings(max_examples=30, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=2, max_size=12),
           st.randoms(use_true_random=False))
    def test_clusters_are_a_function_of_the_set(spec, rnd):
        """Any mix of near-copies: same rows whatever the order; members within the threshold."""
        rng = np.random.default_rng(7)
        bases = rng.integers(0, 2**32, (6, 128), dtype=np.uint64).astype(np.uint32)
        items = []
        for i, (family, edits) in enumerate(spec):
            sig = bases[family].copy()
            sig[rng.choice(128, edits * 5, replace=False)] = rng.integers(0, 2**32, edits * 5,
                                                                           dtype=np.uint64)
            items.append((f"doc{i:02d}", sig))
        rows = cluster_bucket(items)
        shuffled = list(items)
        rnd.shuffle(shuffled)
        assert cluster_bucket(shuffled) == rows
        members = [r.member for r in rows]
        assert len(members) == len(set(members))
        reps = {r.representative for r in rows}
        assert not reps & set(members)
        sig_of = dict(items)
        for r in rows:
            assert estimate_jaccard(sig_of[r.member], sig_of[r.representative]) >= 0.9


# --- the settings, and eval labels of near-duplicate members --------------------------------------

def test_dedupe_settings_are_validated_and_part_of_the_processing_key(test_config):
    from configs.schema import ConfigError, load_config
    from pipelines.index import current_versions
    from transforms.index.incremental import processing_key
    from transforms.ingest.embed import model_spec_from_config
    for key, value in (("THRESHOLD", "1.5"), ("SHINGLE_SIZE", "0"), ("NUM_PERM", "8"), ("NEAR_DUPLICATES", "maybe")):
        with pytest.raises(ConfigError, match=f"dedupe.{key.lower()}"):
            load_config(environ={f"RAGBEAM__DEDUPE__{key}": value})
    spec = model_spec_from_config(test_config)
    other = test_config.model_copy(update={"dedupe": test_config.dedupe.model_copy(update={"threshold": 0.95})})
    assert processing_key(current_versions(test_config, spec)) != processing_key(current_versions(other, spec))


def test_eval_labels_of_near_duplicate_members_resolve_to_their_representative(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transforms.evaluation.datasets import DocLabels
    from transforms.ingest.neardup import NEAR_DUPLICATES_SCHEMA
    from transforms.records import DOCUMENT_SCHEMA
    (tmp_path / "documents").mkdir()
    (tmp_path / "near_duplicates").mkdir()
    docs = [{"doc_id": d, "key": f"corpus.jsonl#{d}", "source_uri": "/c/corpus.jsonl", "source_uris": ["/c/corpus.jsonl"]}
            for d in ("p1", "p2")]
    pq.write_table(pa.Table.from_pylist(docs, DOCUMENT_SCHEMA), tmp_path / "documents" / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist([{"member": "p3", "representative": "p1", "similarity": 0.93}],
                                        NEAR_DUPLICATES_SCHEMA), tmp_path / "near_duplicates" / "part-0.parquet")
    labels = DocLabels(str(tmp_path), {"p1", "p3"})
    assert not labels.by_key and labels.doc_of["p3"] == "p1"
    assert labels.doc_qrels({"p3": 2, "p2": 1}) == {"p1": 2, "p2": 1}


def test_a_nightly_reads_only_the_live_signatures_the_match_can_use(planted, tmp_path):
    """The live rows sharing an LSH band with a new document, then their representatives, give
    the same near-duplicate rows as every live row (transforms/ingest/dedupe.py NearDedupeDocuments)."""
    from transforms.ingest.neardup import band_keys, cluster_with_live, read_live_signatures
    corpus, sigs = planted
    copies = sorted(corpus.kinds)
    new_ids = copies[::2]  # half the copies arrive tonight; the other half are live members
    live_ids = sorted(d for d in sigs if d not in set(new_ids))
    rows = cluster_bucket([(d, sigs[d]) for d in live_ids])
    assert rows  # live members, so the representatives' rows are needed
    # and a live member sharing one band with a new document whose representative shares none
    rng = np.random.default_rng(5)
    b, r = lsh_params(SETTINGS.num_perm, SETTINGS.threshold)
    member = rng.integers(0, 2**32, SETTINGS.num_perm, dtype=np.uint32)
    member[:r] = sigs[new_ids[0]][:r]
    extra = {"zz-member": member, "zz-rep": rng.integers(0, 2**32, SETTINGS.num_perm, dtype=np.uint32)}
    rows = rows + [NearDup("zz-member", "zz-rep", 0.9)]
    table = signature_table([(d, "hash-" + d, "", sigs[d]) for d in live_ids] +
                            [(d, "hash-" + d, "", v) for d, v in extra.items()], rows)
    files = []
    for i, part in enumerate((table.slice(0, 150), table.slice(150))):
        files.append(str(tmp_path / f"part-{i}.parquet"))
        pq.write_table(part, files[-1])
    everything = [r for f in files for r in read_live_signatures(f)]
    bands = [band_keys(sigs[d][None, :])[0] for d in new_ids]
    candidates = [r for f in files for r in read_live_signatures(f, bands=bands)]
    reps = sorted({r[1][2] for r in candidates if r[1][2]})
    wanted = [r for f in files for r in read_live_signatures(f, bands=bands, representatives=reps)]
    assert "zz-member" in {r[1][0] for r in candidates} and "zz-rep" in {r[1][0] for r in wanted}
    assert len(candidates) + len(wanted) < len(everything) / 2
    assert not {r[1][0] for r in candidates} & {r[1][0] for r in wanted}
    new = [(d, signature_to_bytes(sigs[d]), "hash-" + d) for d in new_ids]
    got = cluster_with_live(("", {"new": new, "live": [v for _, v in candidates + wanted]}))
    assert got and got == cluster_with_live(("", {"new": new, "live": [v for _, v in everything]}))
