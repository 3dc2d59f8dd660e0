"""Near-duplicate documents: MinHash over word shingles, LSH for candidates, verified pairs,
clusters with a deterministic representative. Plain functions, no Beam.

- `signature(text)`: the MinHash of the text's word k-shingles (lower-cased `\\w+` tokens, so
  spacing, line breaks and punctuation do not matter) as uint32[num_perm]; 512 bytes at the
  default 128 permutations. `signature_to_bytes`/`signature_from_bytes` for Parquet.
- `cluster_bucket(items)`: one ACL bucket's (doc_id, signature) -> NearDup rows. LSH
  (datasketch) proposes pairs, the estimated Jaccard (share of equal MinHash values) must
  reach the threshold, union-find joins verified pairs into components, and inside a
  component representatives are chosen greedily in doc_id order: the smallest doc_id is a
  representative, every doc at >= threshold to it is its member, and so on with the rest.
  So a member is always within the threshold of its own representative (no chaining
  v1 ~ v2 ~ ... ~ v9 into one cluster), and the result depends only on the set of inputs,
  not their order.
- `find_near_duplicates(docs)`: buckets by ACL first (documents with different ACLs are
  never merged), then `cluster_bucket` per bucket.
- `match_against_index(new, live)`: the incremental run: new/changed documents against the
  stored signatures of the live index; a match joins the live document's cluster (its
  representative stays), the rest are clustered among themselves.
- `hand_over(rows, deleted, signatures)`: when a representative is deleted, the smallest
  surviving member takes over, and members too far from it become representatives themselves.

The Beam side (`signature_record` per document in a Map, then GroupByKey on the ACL key and
`cluster_group` per key) is at the bottom.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

SIGNATURE_VERSION = "minhash-v1"  # bump when tokenization or hashing changes: stored signatures go stale
_TOKEN = re.compile(r"\w+", re.UNICODE)
_BATCH = 8192  # shingles hashed per numpy step: bounds memory at ~8 MB for 128 permutations


@dataclass(frozen=True)
class NearDupSettings:
    """What a `dedupe.near` config section would hold."""
    # Measured on debian-docs: at 0.9 no false merge (k=3: 109 HTML/txt twins merged, k=5: 88);
    # 0.85 merged git-diff-index into git-diff-files, 0.8 also koi8-u into koi8-r and
    # iso_8859-9 into iso_8859-1 (different pages sharing most of their text).
    threshold: float = 0.9  # estimated Jaccard of the shingle sets
    shingle_size: int = 3  # words per shingle
    num_perm: int = 128  # MinHash permutations: estimate std ~0.027 at J=0.9
    seed: int = 1  # the permutations; part of the signature's identity
    min_shingles: int = 10  # shorter texts are never merged (too few shingles to judge)

    def __post_init__(self) -> None:
        if not (0.0 < self.threshold <= 1.0):
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.shingle_size < 1 or self.num_perm < 16:
            raise ValueError("shingle_size >= 1 and num_perm >= 16 required")

    @property
    def signature_id(self) -> str:
        """Signatures compare only under the same id (stored beside each one)."""
        return f"{SIGNATURE_VERSION}/affine32/k{self.shingle_size}/p{self.num_perm}/s{self.seed}"


@dataclass(frozen=True)
class DocSignature:
    doc_id: str
    acl_key: str
    signature: np.ndarray  # uint32[num_perm]


@dataclass(frozen=True, order=True)
class NearDup:
    """One row of the `near_duplicates` table: `member` is served by `representative`."""
    member: str
    representative: str
    similarity: float  # estimated Jaccard between member and representative


# --- text -> signature -------------------------------------------------------------------

def tokens(text: str) -> list[str]:
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())


def shingles(text: str, k: int) -> set[bytes]:
    toks = tokens(text)
    if len(toks) < k:
        return {" ".join(toks).encode("utf-8")} if toks else set()
    return {" ".join(toks[i:i + k]).encode("utf-8") for i in range(len(toks) - k + 1)}


_SCHEME = "affine32"  # datasketch >= 2.0's default: uint32 values, collision-free permutations
_PERMS: dict[tuple[int, int], tuple] = {}


def _permutations(num_perm: int, seed: int):
    key = (num_perm, seed)
    if key not in _PERMS:  # building them loops in Python; once per process is enough
        from datasketch import MinHash
        _PERMS[key] = MinHash(num_perm=num_perm, seed=seed, scheme=_SCHEME).permutations
    return _PERMS[key]


def signature(text: str, settings: NearDupSettings = NearDupSettings()) -> Optional[np.ndarray]:
    """uint32[num_perm] MinHash (datasketch, scheme affine32) of the text's shingles; None when
    the text has fewer than min_shingles shingles. Hashed in bounded batches."""
    from datasketch import MinHash
    sh = shingles(text, settings.shingle_size)
    if len(sh) < settings.min_shingles:
        return None
    mh = MinHash(num_perm=settings.num_perm, seed=settings.seed, scheme=_SCHEME,
                 permutations=_permutations(settings.num_perm, settings.seed))
    items = sorted(sh)
    for i in range(0, len(items), _BATCH):
        mh.update_batch(items[i:i + _BATCH])
    return np.asarray(mh.hashvalues, dtype=np.uint32)


def signature_to_bytes(sig: np.ndarray) -> bytes:
    return np.asarray(sig, dtype="<u4").tobytes()


def signature_from_bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<u4").copy()


def acl_key(acl: Optional[Sequence[str]]) -> str:
    """Canonical ACL bucket: sorted distinct groups; '' is public. Same groups -> same bucket."""
    return "\x1f".join(sorted({g for g in (acl or []) if g}))


def estimate_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(a == b)) / len(a)


# --- clustering one bucket ---------------------------------------------------------------

class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def lsh_params(num_perm: int, threshold: float, max_miss: float = 0.01) -> tuple[int, int]:
    """(bands, rows) for the LSH: the most rows per band (fewest spurious candidates) such that a
    pair at exactly the threshold is missed with probability <= max_miss.

    datasketch's own choice balances false positives against false negatives and misses
    50-70% of the pairs at the threshold (measured: P(miss) 0.69 at J=0.9, 128 perms); since
    every candidate is verified anyway, recall is what the LSH is for.
    """
    best = (num_perm, 1)
    for r in range(1, num_perm + 1):
        b = num_perm // r
        if (1.0 - threshold ** r) ** b <= max_miss:
            best = (b, r)
    return best


def _lsh(num_perm: int, threshold: float):
    from datasketch import MinHashLSH
    return MinHashLSH(num_perm=num_perm, params=lsh_params(num_perm, threshold))


def _lean(sig: np.ndarray, seed: int):
    from datasketch import LeanMinHash
    return LeanMinHash(seed=seed, hashvalues=sig, scheme=_SCHEME)


def candidate_pairs(sigs: Sequence[np.ndarray], settings: NearDupSettings) -> set[tuple[int, int]]:
    """Index pairs (i < j) that share at least one LSH band."""
    lsh = _lsh(settings.num_perm, settings.threshold)
    mhs = [_lean(s, settings.seed) for s in sigs]
    for i, mh in enumerate(mhs):
        lsh.insert(i, mh, check_duplication=False)
    pairs: set[tuple[int, int]] = set()
    for i, mh in enumerate(mhs):
        for j in lsh.query(mh):
            if j != i:
                pairs.add((min(i, j), max(i, j)))
    return pairs


_CENTRE_MAX = 1500  # components up to this size pick centres from the full similarity matrix


def _greedy_representatives(members: list[int], ids: Sequence[str], sigs: np.ndarray,
                            threshold: float) -> list[NearDup]:
    """Inside one component: pick a representative, give it every remaining doc within the
    threshold, repeat with the rest. The pick is the doc with the most remaining neighbours
    within the threshold (the centre: the original, not one of two differently edited copies),
    ties to the higher total similarity, then the smallest doc_id. Only the set matters, not the
    input order. Components above _CENTRE_MAX go in doc_id order (no n^2 matrix)."""
    members = sorted(members, key=lambda m: ids[m])
    rows: list[NearDup] = []
    if len(members) <= _CENTRE_MAX:
        sub = sigs[members]
        sim = (sub[:, None, :] == sub[None, :, :]).mean(axis=2)
        near = sim >= threshold
        left = np.ones(len(members), dtype=bool)
        while left.sum() > 1:
            counts = (near & left[None, :] & left[:, None]).sum(axis=1)
            totals = np.where(near & left[None, :], sim, 0.0).sum(axis=1)
            cand = np.flatnonzero(left)
            # most neighbours, then highest total similarity, then smallest doc_id (list is sorted)
            rep = min(cand, key=lambda i: (-counts[i], -round(float(totals[i]), 9), i))
            left[rep] = False
            for j in np.flatnonzero(near[rep] & left):
                rows.append(NearDup(ids[members[j]], ids[members[rep]], round(float(sim[rep, j]), 4)))
                left[j] = False
        return rows
    left = set(members)
    for rep in members:
        if rep not in left:
            continue
        left.discard(rep)
        cand = sorted(left, key=lambda m: ids[m])
        if not cand:
            break
        sims = (sigs[cand] == sigs[rep]).mean(axis=1)
        for m, s in zip(cand, sims):
            if s >= threshold:
                rows.append(NearDup(ids[m], ids[rep], round(float(s), 4)))
                left.discard(m)
    return rows


def cluster_bucket(items: Iterable[tuple[str, np.ndarray]],
                   settings: NearDupSettings = NearDupSettings()) -> list[NearDup]:
    """One ACL bucket's (doc_id, signature) -> NearDup rows for its members, sorted by member.

    Independent of input order (everything is sorted by doc_id first); doc_ids must be unique.
    """
    pairs_in = sorted(items, key=lambda it: it[0])
    ids = [d for d, _ in pairs_in]
    if len(set(ids)) != len(ids):
        raise ValueError("cluster_bucket: doc_ids must be unique")
    if len(ids) < 2:
        return []
    sigs = np.stack([np.asarray(s, dtype=np.uint32) for _, s in pairs_in])
    uf = _UnionFind(len(ids))
    for i, j in sorted(candidate_pairs(list(sigs), settings)):
        if (sigs[i] == sigs[j]).mean() >= settings.threshold:
            uf.union(i, j)
    comps: dict[int, list[int]] = {}
    for i in range(len(ids)):
        comps.setdefault(uf.find(i), []).append(i)
    rows: list[NearDup] = []
    for members in comps.values():
        if len(members) > 1:
            rows.extend(_greedy_representatives(members, ids, sigs, settings.threshold))
    return sorted(rows)


def find_near_duplicates(docs: Iterable[DocSignature],
                         settings: NearDupSettings = NearDupSettings()) -> list[NearDup]:
    """All documents -> NearDup rows; documents are only compared within their ACL bucket."""
    buckets: dict[str, list[tuple[str, np.ndarray]]] = {}
    for d in docs:
        buckets.setdefault(d.acl_key, []).append((d.doc_id, d.signature))
    rows: list[NearDup] = []
    for key in sorted(buckets):
        rows.extend(cluster_bucket(buckets[key], settings))
    return sorted(rows)


def representatives(rows: Iterable[NearDup]) -> dict[str, str]:
    """member -> representative (documents not in the map are their own representative)."""
    return {r.member: r.representative for r in rows}


# --- incremental: new documents against the live index --------------------------------------

@dataclass(frozen=True)
class LiveSignature:
    """A stored row of the live index: its signature and whom it is served by (None: itself)."""
    doc_id: str
    acl_key: str
    signature: np.ndarray
    representative: Optional[str] = None


def match_against_index(new: Iterable[DocSignature], live: Iterable[LiveSignature],
                        settings: NearDupSettings = NearDupSettings()) -> list[NearDup]:
    """New or changed documents -> NearDup rows, comparing against the live index's stored
    signatures (same ACL bucket only). Cost grows with the new documents, not the index: the
    live signatures go into one LSH per bucket, each new document is one query.

    A new document that matches live documents joins the cluster of the most similar live
    representative (ties: smallest doc_id); live representatives never change here, so
    their chunks stay. New documents that match nothing live are clustered among themselves.
    A new doc_id that is also in `live` (a changed document) is compared as new: its stored
    row is ignored.
    """
    new = list(new)
    new_ids = {d.doc_id for d in new}
    live_by_bucket: dict[str, list[LiveSignature]] = {}
    for row in live:
        if row.doc_id not in new_ids:
            live_by_bucket.setdefault(row.acl_key, []).append(row)
    rows: list[NearDup] = []
    unmatched: list[DocSignature] = []
    for key in sorted({d.acl_key for d in new}):
        bucket_new = sorted((d for d in new if d.acl_key == key), key=lambda d: d.doc_id)
        bucket_live = sorted(live_by_bucket.get(key, []), key=lambda r: r.doc_id)
        if not bucket_live:
            unmatched.extend(bucket_new)
            continue
        rep_of = {r.doc_id: (r.representative or r.doc_id) for r in bucket_live}
        sig_of = {r.doc_id: np.asarray(r.signature, dtype=np.uint32) for r in bucket_live}
        lsh = _lsh(settings.num_perm, settings.threshold)
        for r in bucket_live:
            lsh.insert(r.doc_id, _lean(sig_of[r.doc_id], settings.seed), check_duplication=False)
        for d in bucket_new:
            sig = np.asarray(d.signature, dtype=np.uint32)
            best: Optional[tuple[float, str]] = None
            for hit in lsh.query(_lean(sig, settings.seed)):
                rep = rep_of[hit]
                rep_sig = sig_of.get(rep)
                if rep_sig is None:  # representative not in this bucket's stored rows
                    continue
                s = estimate_jaccard(sig, rep_sig)
                if s >= settings.threshold and (best is None or (-s, rep) < (-best[0], best[1])):
                    best = (s, rep)
            if best is None:
                unmatched.append(d)
            else:
                rows.append(NearDup(d.doc_id, best[1], round(best[0], 4)))
    rows.extend(find_near_duplicates(unmatched, settings))
    return sorted(rows)


def hand_over(rows: Iterable[NearDup], deleted: Iterable[str], signatures: dict[str, np.ndarray],
              settings: NearDupSettings = NearDupSettings()) -> list[NearDup]:
    """The near_duplicates rows after `deleted` documents are gone.

    Deleted members just disappear. In a cluster whose representative is deleted, the
    surviving members are re-clustered with the same greedy rule (centre first, then smallest
    doc_id), so every member stays within the threshold of its representative. `signatures` must hold the survivors' signatures.
    """
    deleted = set(deleted)
    kept: list[NearDup] = []
    orphaned: dict[str, list[str]] = {}
    for r in rows:
        if r.member in deleted:
            continue
        if r.representative in deleted:
            orphaned.setdefault(r.representative, []).append(r.member)
        else:
            kept.append(r)
    for members in orphaned.values():
        ids = sorted(members)
        sigs = np.stack([np.asarray(signatures[m], dtype=np.uint32) for m in ids])
        kept.extend(_greedy_representatives(list(range(len(ids))), ids, sigs, settings.threshold))
    return sorted(kept)


# --- storage: one row per document in a Parquet table ---------------------------------------

SIGNATURE_SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("content_hash", pa.string()),
    ("acl_key", pa.string()),
    ("signature_id", pa.string()),  # NearDupSettings.signature_id: rows compare only under one id
    ("signature", pa.binary()),  # little-endian uint32[num_perm]
    ("representative", pa.string()),  # null: the document is its own representative
    ("similarity", pa.float32()),  # to its representative; null for representatives
    ("source_hash", pa.string()),  # sha256 of the file the document came from (what the sources table names)
])

NEAR_DUPLICATES_SCHEMA = pa.schema([
    ("member", pa.string()),
    ("representative", pa.string()),
    ("similarity", pa.float32()),
    # the index job's columns (null in rows made from NearDup alone): the member's paths (they
    # also join the representative's source_uris), its hashes, and the representative's file
    # hash (a nightly run re-checks members whose representative changed or disappeared)
    ("member_source_uris", pa.list_(pa.string())),
    ("member_content_hash", pa.string()),
    ("member_source_hash", pa.string()),
    ("representative_source_hash", pa.string()),
    ("acl_key", pa.string()),
])


def signature_table(docs: Iterable[tuple[str, str, str, np.ndarray]], rows: Iterable[NearDup],
                    settings: NearDupSettings = NearDupSettings()) -> pa.Table:
    """(doc_id, content_hash, acl_key, signature) + NearDup rows -> a SIGNATURE_SCHEMA table."""
    rep = {r.member: r for r in rows}
    out = {name: [] for name in SIGNATURE_SCHEMA.names}
    for doc_id, content_hash, key, sig in sorted(docs, key=lambda d: d[0]):
        r = rep.get(doc_id)
        out["doc_id"].append(doc_id)
        out["content_hash"].append(content_hash)
        out["acl_key"].append(key)
        out["signature_id"].append(settings.signature_id)
        out["signature"].append(signature_to_bytes(sig))
        out["representative"].append(r.representative if r else None)
        out["similarity"].append(r.similarity if r else None)
        out["source_hash"].append(content_hash)
    return pa.table(out, schema=SIGNATURE_SCHEMA)


def live_signatures(table: pa.Table, settings: NearDupSettings = NearDupSettings()
                    ) -> Iterator[LiveSignature]:
    """Rows of a stored SIGNATURE_SCHEMA table usable under `settings` (others are skipped:
    a changed shingle size or permutation count means those documents must be re-signed)."""
    for row in table.to_pylist():
        if row["signature_id"] != settings.signature_id:
            continue
        yield LiveSignature(row["doc_id"], row["acl_key"], signature_from_bytes(row["signature"]),
                            row["representative"])


def near_duplicates_table(rows: Iterable[NearDup]) -> pa.Table:
    rows = sorted(rows)
    return pa.table({"member": [r.member for r in rows],
                     "representative": [r.representative for r in rows],
                     "similarity": [r.similarity for r in rows],
                     **{name: [None] * len(rows) for name in NEAR_DUPLICATES_SCHEMA.names[3:]}},
                    schema=NEAR_DUPLICATES_SCHEMA)


# --- the Beam side, as plain functions ----------------------------------------------------------
#
#   keyed = docs | "Sign" >> beam.FlatMap(signature_record, settings)     # per document, parallel
#   rows = (keyed | "ByAcl" >> beam.GroupByKey()                          # one group per ACL bucket
#                 | "Cluster" >> beam.FlatMap(cluster_group, settings))   # -> NearDup
#   near = beam.pvalue.AsDict(rows | beam.Map(lambda r: (r.member, r)))
#   to_embed = docs | beam.Filter(lambda d, near: d.doc_id not in near, near)
#
# The members' source URIs are then added to their representative's sources (as exact
# duplicates are today), and `rows` is written as the near_duplicates table. Signatures are
# kept (signature_table) so the next incremental run calls match_against_index instead.
# One ACL bucket is grouped on one worker: 512 bytes a document, ~0.5 GB per million
# documents. Beyond that, key by (acl_key, band, band hash) instead, verify the pairs
# per band group, and join the components with a few rounds of label propagation.

def signature_record(doc, settings: NearDupSettings = NearDupSettings()
                     ) -> list[tuple[str, tuple[str, bytes]]]:
    """A Document -> [(acl_key, (doc_id, signature bytes))], or [] when it is too short."""
    sig = signature(doc.text, settings)
    if sig is None:
        return []
    return [(acl_key(doc.acl), (doc.doc_id, signature_to_bytes(sig)))]


def cluster_group(element: tuple[str, Iterable[tuple[str, bytes]]],
                  settings: NearDupSettings = NearDupSettings()) -> list[NearDup]:
    """(acl_key, [(doc_id, signature bytes)]) -> NearDup rows of that bucket."""
    _, items = element
    return cluster_bucket(((d, signature_from_bytes(b)) for d, b in items), settings)


def new_signature(doc, settings: NearDupSettings = NearDupSettings()) -> Optional[tuple[str, bytes]]:
    """A Document -> (acl_key, signature bytes), or None when it is too short to judge."""
    sig = signature(doc.text, settings)
    return None if sig is None else (acl_key(doc.acl), signature_to_bytes(sig))


def cluster_with_live(element: tuple[str, dict], settings: NearDupSettings = NearDupSettings()
                      ) -> list[tuple[str, tuple[str, float, str]]]:
    """One ACL bucket of the index job: (acl_key, {"new": [(doc_id, sig bytes, source_hash)],
    "live": [(doc_id, sig bytes, representative | None, source_hash)]}) ->
    [(member, (representative, similarity, representative's source_hash))] for new members.

    Without live rows (a first run) the bucket is clustered (`cluster_bucket`); with them the new
    documents are matched against the live index first (`match_against_index`), and the rest
    clustered among themselves. A doc_id that occurs twice among the new documents (JSONL records
    sharing an id) is never merged. Depends only on the sets, not their order."""
    key, groups = element
    new = list(groups.get("new", ()))
    live = list(groups.get("live", ()))
    if not new:
        return []
    seen: dict[str, int] = {}
    for d, *_ in new:
        seen[d] = seen.get(d, 0) + 1
    new = [x for x in new if seen[x[0]] == 1]
    hash_of = {d: h for d, _, h in new}
    for d, _, _, h in live:
        hash_of.setdefault(d, h)
    if live:
        rows = match_against_index([DocSignature(d, key, signature_from_bytes(b)) for d, b, _ in new],
                                   [LiveSignature(d, key, signature_from_bytes(b), rep) for d, b, rep, _ in live],
                                   settings)
    else:
        rows = cluster_bucket(((d, signature_from_bytes(b)) for d, b, _ in new), settings)
    return [(r.member, (r.representative, r.similarity, hash_of.get(r.representative, ""))) for r in rows]


def band_keys(sigs: np.ndarray, settings: NearDupSettings = NearDupSettings()) -> np.ndarray:
    """uint32[n, num_perm] signatures -> uint64[n, bands]: one hash per LSH band (the bands
    `_lsh` cuts: lsh_params' rows consecutive values each). Two signatures are LSH candidates
    only if some band's values are equal, so equal band keys are a superset of the candidates
    (a hash collision only adds a candidate, which is verified anyway)."""
    b, r = lsh_params(settings.num_perm, settings.threshold)
    sigs = np.asarray(sigs, dtype=np.uint32).reshape(-1, settings.num_perm)
    x = sigs[:, :b * r].reshape(len(sigs), b, r).astype(np.uint64)
    h = np.full((len(sigs), b), 14695981039346656037, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(r):
            h = (h ^ x[:, :, j]) * np.uint64(1099511628211)
    return h


def _signature_matrix(column, num_perm: int) -> np.ndarray:
    """A binary column of little-endian uint32[num_perm] signatures -> uint32[n, num_perm]."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not len(arr):
        return np.zeros((0, num_perm), np.uint32)
    return np.frombuffer(b"".join(arr.to_pylist()), dtype="<u4").reshape(len(arr), num_perm)


def read_live_signatures(uri: str, exclude_hashes: frozenset = frozenset(),
                         settings: NearDupSettings = NearDupSettings(), exclude_docs: frozenset = frozenset(),
                         deletions: Optional[dict] = None, bands: Optional[list] = None,
                         representatives: Optional[list] = None):
    """One Parquet shard of the live version's signatures table -> (acl_key, (doc_id, sig bytes,
    representative, source_hash)) rows comparable under `settings`, leaving out documents whose
    file is re-processed or gone in this run (`exclude_hashes`) and the near-duplicate members
    checked again (`exclude_docs`). A shared shard (transforms/index/shard_store.py) lists its
    deleted rows in the version's deletions file (`deletions`: uri -> (that file, shard name)):
    they are left out.

    With `bands` (band_keys of tonight's new documents, one uint64[bands] array each) only the
    rows that can be LSH candidates of a new document come out (a band key equal to one of
    theirs); with `representatives` as well, only the rows of those doc_ids that are not
    candidates (the candidates' representatives: match_against_index compares a new document
    with its hit's representative). Together they are every live row match_against_index can
    look at, so its result is the same as with all the rows, and a nightly's near-duplicate step
    handles the candidates, not every live signature."""
    import io

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from transforms.common import storage
    table = pq.read_table(io.BytesIO(storage.read_bytes(uri)))
    if deletions and uri in deletions:
        from transforms.index.shard_store import row_keys
        path, name = deletions[uri]
        dead = pq.read_table(io.BytesIO(storage.read_bytes(path)), filters=[("shard", "=", name)], columns=["key"])
        table = table.filter(pc.invert(pc.is_in(row_keys("signatures", table), value_set=dead.column("key").combine_chunks())))
    keep = pc.equal(table.column("signature_id"), settings.signature_id)
    if exclude_hashes:
        keep = pc.and_(keep, pc.invert(pc.is_in(table.column("source_hash"),
                                                value_set=pa.array(sorted(exclude_hashes), pa.string()))))
    if exclude_docs:
        keep = pc.and_(keep, pc.invert(pc.is_in(table.column("doc_id"),
                                                value_set=pa.array(sorted(exclude_docs), pa.string()))))
    table = table.filter(pc.fill_null(keep, False))
    if bands is not None:
        new = np.stack([np.asarray(b, np.uint64) for b in bands]) if bands else None
        if new is None or not table.num_rows:
            hit = np.zeros(table.num_rows, dtype=bool)
        else:
            live = band_keys(_signature_matrix(table.column("signature"), settings.num_perm), settings)
            hit = np.zeros(table.num_rows, dtype=bool)
            for j in range(live.shape[1]):
                hit |= np.isin(live[:, j], new[:, j])
        if representatives is not None:
            wanted = pc.is_in(table.column("doc_id"), value_set=pa.array(sorted(set(representatives)), pa.string()))
            hit = np.asarray(pc.fill_null(wanted, False)) & ~hit
        table = table.filter(pa.array(hit))
    for row in table.select(["acl_key", "doc_id", "signature", "representative", "source_hash"]).to_pylist():
        yield row["acl_key"], (row["doc_id"], row["signature"], row["representative"], row["source_hash"])


__all__ = ["new_signature", "cluster_with_live", "read_live_signatures", "band_keys", "SIGNATURE_VERSION", "NearDupSettings", "DocSignature", "NearDup", "LiveSignature",
           "tokens", "shingles", "signature", "signature_to_bytes", "signature_from_bytes",
           "acl_key", "estimate_jaccard", "lsh_params", "candidate_pairs", "cluster_bucket",
           "find_near_duplicates", "representatives", "match_against_index", "hand_over",
           "SIGNATURE_SCHEMA", "NEAR_DUPLICATES_SCHEMA", "signature_table", "live_signatures",
           "near_duplicates_table", "signature_record", "cluster_group"]
