"""Dedupe by content: identical bytes under several paths are parsed and embedded once.

The representative is the copy with the smallest key, so the choice is the same
on every runner; every other path stays recorded as a source of that content.
On an incremental run, copies that were not re-read (unchanged size and mtime)
still count when choosing the representative, and a content the live version
already holds under the same representative is not parsed again ("carried").
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

import apache_beam as beam

from transforms.common.stage import Outputs, StageFn
from transforms.index.incremental import is_carried, representative
from transforms.records import Document, RawObject, UniqueObject


def pick_representative(copies: Iterable[RawObject],
                        unread: Optional[list[tuple]] = None) -> UniqueObject:
    """All copies of one content -> one UniqueObject listing every source uri.

    `unread` are (uri, key, size, mtime) of copies known by hash but not read.
    """
    copies = list(copies)
    every = [(c.uri, c.key, c.size, c.mtime) for c in copies] + list(unread or [])
    uri, key, size, mtime = representative(every)
    data = copies[0].data  # same content hash, so the same bytes
    raw = RawObject(uri=uri, key=key, data=data, size=size, mtime=mtime, content_hash=copies[0].content_hash)
    return UniqueObject(raw=raw, source_uris=tuple(sorted({c[0] for c in every})))


def dedupe_content(content_hash: str, copies: Iterable[RawObject], unread: Optional[list[tuple]] = None,
                   known_rep: Optional[dict] = None) -> Optional[UniqueObject]:
    """The dedupe stage function: every read copy of one content -> its UniqueObject, or
    None when the live version already holds it under the same representative (carried)."""
    copies = list(copies)
    unread = list(unread or [])
    every = [(c.uri, c.key, c.size, c.mtime) for c in copies] + unread
    if is_carried(content_hash, every, known_rep or {}):
        return None
    return pick_representative(copies, unread)


def merge_documents(docs: Iterable[Document]) -> Document:
    """JSONL records repeated verbatim in several files: one document (smallest key), every file a source."""
    docs = sorted(docs, key=lambda d: (d.key, d.doc_id))
    if len(docs) == 1:
        return docs[0]
    uris = sorted({u for d in docs for u in (d.source_uris or [d.source_uri])})
    return dataclasses.replace(docs[0], source_uris=uris)


class _PickFn(StageFn):
    """(content hash, copies) -> UniqueObject. Failures propagate (FAILED is None)."""
    STAGE = "dedupe"

    def __init__(self, unread_by_hash: dict, known_rep: dict):
        self.unread_by_hash = unread_by_hash
        self.known_rep = known_rep

    def apply(self, element, out: Outputs) -> None:
        content_hash, copies = element
        copies = list(copies)
        unique = dedupe_content(content_hash, copies, self.unread_by_hash.get(content_hash, []), self.known_rep)
        if unique is None:
            out.count("carried_objects", len(copies))  # rows come over from the live version
            return
        out.count("unique_objects")
        out.count("duplicate_objects", len(copies) - 1)
        out.emit(unique)


class DedupeByContent(beam.PTransform):
    """PCollection[RawObject] -> PCollection[UniqueObject] (carried contents dropped).

    Example:
        uniques = raws | "DedupeByContent" >> DedupeByContent(plan.extra_copies(), plan.known_rep)
    """

    def __init__(self, unread_by_hash: Optional[dict] = None, known_rep: Optional[dict] = None):
        super().__init__()
        self.unread_by_hash = unread_by_hash or {}
        self.known_rep = known_rep or {}

    def expand(self, raws):
        return (raws
                | "KeyByContentHash" >> beam.Map(lambda r: (r.content_hash, r))
                | "GroupByContentHash" >> beam.GroupByKey()
                | "PickRepresentative" >> beam.ParDo(_PickFn(self.unread_by_hash, self.known_rep))
                .with_output_types(UniqueObject))


class _PickDocumentFn(StageFn):
    """(content hash, documents) -> one Document listing every file it came from."""
    STAGE = "dedupe_documents"

    def apply(self, element, out: Outputs) -> None:
        _, docs = element
        docs = list(docs)
        out.count("duplicate_documents", len(docs) - 1)
        out.emit(merge_documents(docs))


class DedupeDocuments(beam.PTransform):
    """PCollection[Document] -> one Document per content hash (chunk ids derive from it).

    Example:
        documents = parsed.documents | "DedupeDocuments" >> DedupeDocuments()
    """

    def expand(self, docs):
        return (docs
                | "KeyByDocumentHash" >> beam.Map(lambda d: (d.content_hash, d))
                | "GroupByDocumentHash" >> beam.GroupByKey()
                | "PickDocument" >> beam.ParDo(_PickDocumentFn()).with_output_types(Document))


# --- documents kept from the live version inside a re-read file -----------------------------------

KEPT_DOCUMENTS = "kept_documents"  # tagged output: {"key": document key} rows (KEPT_DOCUMENTS_SCHEMA)


def kept_document_key(doc: Document, partial: dict, keep: frozenset) -> Optional[str]:
    """The key of a document the live version already holds as it is (a document of a file re-read
    only for the near-duplicate members in it: same file bytes, same paths, not a member to
    re-check), or None when the document must be processed. Keys as shard_store.row_keys makes
    them for the documents table (source hash, content hash, doc id)."""
    from transforms.index.shard_store import KEY_SEP
    uris = partial.get(doc.source_hash)
    if uris is None or frozenset(doc.source_uris or [doc.source_uri]) != uris:
        return None  # another file's copy was merged in, or a path changed: processed
    key = KEY_SEP.join((doc.source_hash or "", doc.content_hash or "", doc.doc_id))
    return key if key in keep else None


class _KeepFn(StageFn):
    STAGE = "dedupe_documents"

    def __init__(self, partial: dict, keep: frozenset):
        self.partial = partial
        self.keep = keep

    def apply(self, doc: Document, out: Outputs) -> None:
        key = kept_document_key(doc, self.partial, self.keep)
        if key is None:
            out.emit(doc)
            return
        out.count("kept_documents")  # its rows come over from the live version, nothing is redone
        out.tagged(KEPT_DOCUMENTS, {"key": key})


class KeepLiveDocuments(beam.PTransform):
    """PCollection[Document] -> `documents` (those to process) and KEPT_DOCUMENTS (the keys of
    documents whose live rows the new version keeps: the unchanged documents of a file re-read
    only to re-check the near-duplicate members in it; plan.partial, plan.keep_documents).

    Example:
        kept = documents | "KeepLiveDocuments" >> KeepLiveDocuments(plan.partial, plan.keep_documents)
        kept.documents | "NearDedupe" >> ...
    """

    def __init__(self, partial: dict, keep: frozenset):
        super().__init__()
        self.partial = dict(partial)
        self.keep = frozenset(keep)

    def expand(self, docs):
        out = docs | "KeepOrProcess" >> beam.ParDo(_KeepFn(self.partial, self.keep)).with_outputs(
            KEPT_DOCUMENTS, main="documents")
        return {"documents": out.documents, KEPT_DOCUMENTS: out[KEPT_DOCUMENTS]}


# --- near-duplicates: MinHash/LSH per ACL bucket (transforms/ingest/neardup.py) ----------------

NEAR_DUPLICATES = "near_duplicates"  # tagged output: NEAR_DUPLICATES_SCHEMA rows
SIGNATURES = "signatures"  # tagged output: SIGNATURE_SCHEMA rows, one per signed document
_MEMBER_URIS = "member_uris"


def _uris(doc: Document) -> list[str]:
    return list(doc.source_uris or [doc.source_uri])


def place_document(doc_id: str, docs: list, sigs: list, near: list, settings, out: Outputs) -> None:
    """The near-dedupe stage function for one doc_id: a member becomes a near_duplicates row and
    its paths go to its representative (tagged); every other document goes on (main output,
    keyed by doc_id); each signed document gets its signatures row."""
    match = near[0] if (near and len(docs) == 1) else None
    for doc in docs:
        source_hash = doc.source_hash or doc.content_hash
        if sigs:
            key, sig = sigs[0]
            out.tagged(SIGNATURES, {
                "doc_id": doc.doc_id, "content_hash": doc.content_hash, "acl_key": key,
                "signature_id": settings.signature_id, "signature": sig,
                "representative": match[0] if match else None,
                "similarity": match[1] if match else None, "source_hash": source_hash})
        if match:
            rep, sim, rep_hash = match
            out.count("near_duplicates")
            out.tagged(NEAR_DUPLICATES, {
                "member": doc.doc_id, "representative": rep, "similarity": sim,
                "member_source_uris": sorted(_uris(doc)), "member_content_hash": doc.content_hash,
                "member_source_hash": source_hash, "representative_source_hash": rep_hash,
                "acl_key": sigs[0][0] if sigs else ""})
            out.tagged(_MEMBER_URIS, (rep, _uris(doc)))
        else:
            out.emit((doc_id, doc))


def attach_members(docs: list, member_uris: list) -> list:
    """A representative's Document with its near-duplicate members' paths among its sources."""
    extra = [u for uris in member_uris for u in uris]
    if not extra:
        return list(docs)
    return [dataclasses.replace(d, source_uris=sorted(set(_uris(d)) | set(extra))) for d in docs]


def _band_keys_of(element, settings):
    """(acl_key, (doc_id, signature bytes, source_hash)) -> the signature's LSH band keys."""
    from transforms.ingest.neardup import band_keys, signature_from_bytes
    return band_keys(signature_from_bytes(element[1][1])[None, :], settings)[0]


class _SignFn(StageFn):
    """Document -> (acl_key, (doc_id, signature bytes, source_hash)) for clustering, and
    (doc_id, (acl_key, signature bytes)) tagged BY_DOC; nothing for texts too short to judge."""
    STAGE = "near_dedupe"
    BY_DOC = "by_doc"

    def __init__(self, settings):
        self.settings = settings

    def apply(self, doc: Document, out: Outputs) -> None:
        from transforms.ingest.neardup import new_signature
        signed = new_signature(doc, self.settings)
        if signed is None:
            return
        key, sig = signed
        out.emit((key, (doc.doc_id, sig, doc.source_hash or doc.content_hash)))
        out.tagged(self.BY_DOC, (doc.doc_id, (key, sig)))


class _PlaceFn(StageFn):
    STAGE = "near_dedupe"

    def __init__(self, settings):
        self.settings = settings

    def apply(self, element, out: Outputs) -> None:
        doc_id, g = element
        place_document(doc_id, list(g["doc"]), list(g["sig"]), list(g["near"]), self.settings, out)


class _AttachFn(StageFn):
    STAGE = "near_dedupe"

    def apply(self, element, out: Outputs) -> None:
        _, g = element
        for d in attach_members(list(g["doc"]), list(g["members"])):
            out.emit(d)


class NearDedupeDocuments(beam.PTransform):
    """PCollection[Document] -> outputs `documents` (near-duplicate members removed, their paths
    added to their representative's source_uris), NEAR_DUPLICATES and SIGNATURES (table rows).

    Signatures per document, one GroupByKey per ACL bucket (documents with different ACLs are
    never compared), clustering with a deterministic representative; in a nightly run the live
    version's signatures (`live_signatures_dir`, minus documents re-processed or gone:
    `exclude_hashes`) are matched first, so a new near-copy joins its existing cluster.

    Example:
        near = documents | "NearDedupe" >> NearDedupeDocuments(NearDupSettings(threshold=0.9))
        near.documents | "Chunk" >> ChunkDocuments(...)
        near[NEAR_DUPLICATES] | WriteShards(...)
    """

    def __init__(self, settings, live_signature_files: Optional[list[str]] = None,
                 exclude_hashes: Optional[set] = None, exclude_docs: Optional[set] = None,
                 deletions: Optional[dict] = None):
        super().__init__()
        self.deletions = dict(deletions or {})  # shard uri -> (deletions file, shard name)
        self.settings = settings
        self.live_files = sorted(live_signature_files or [])
        self.exclude = frozenset(exclude_hashes or ())
        self.exclude_docs = frozenset(exclude_docs or ())

    def expand(self, docs):
        from transforms.ingest.neardup import cluster_with_live, read_live_signatures
        settings = self.settings
        signed = docs | "Sign" >> beam.ParDo(_SignFn(settings)).with_outputs(_SignFn.BY_DOC, main="by_acl")
        # Only the live rows match_against_index can look at: those sharing an LSH band with a
        # new document, then the representatives of those (read_live_signatures)
        bands = beam.pvalue.AsList(signed.by_acl | "NewBandKeys" >> beam.Map(_band_keys_of, settings))
        files = (docs.pipeline
                 | "LiveSignatureFiles" >> beam.Create(self.live_files).with_output_types(str))
        candidates = files | "ReadLiveCandidates" >> beam.FlatMap(
            read_live_signatures, self.exclude, settings, self.exclude_docs, self.deletions, bands)
        reps = beam.pvalue.AsList(
            candidates
            | "CandidateRepresentatives" >> beam.FlatMap(lambda kv: [kv[1][2]] if kv[1][2] else [])
            | "DistinctRepresentatives" >> beam.Distinct())
        wanted = files | "ReadLiveRepresentatives" >> beam.FlatMap(
            read_live_signatures, self.exclude, settings, self.exclude_docs, self.deletions, bands, reps)
        live = (candidates, wanted) | "LiveRows" >> beam.Flatten()
        near = ({"new": signed.by_acl, "live": live}
                | "GroupByAcl" >> beam.CoGroupByKey()
                | "Cluster" >> beam.FlatMap(cluster_with_live, settings))
        placed = ({"doc": docs | "KeyByDocId" >> beam.Map(lambda d: (d.doc_id, d)),
                   "sig": signed[_SignFn.BY_DOC], "near": near}
                  | "GroupByDocId" >> beam.CoGroupByKey()
                  | "Place" >> beam.ParDo(_PlaceFn(settings)).with_outputs(
                      NEAR_DUPLICATES, SIGNATURES, _MEMBER_URIS, main="kept"))
        documents = ({"doc": placed.kept, "members": placed[_MEMBER_URIS]}
                     | "GroupByRepresentative" >> beam.CoGroupByKey()
                     | "AttachMembers" >> beam.ParDo(_AttachFn()).with_output_types(Document))
        return {"documents": documents, NEAR_DUPLICATES: placed[NEAR_DUPLICATES],
                SIGNATURES: placed[SIGNATURES]}
