"""The one stage pattern: pure stage functions, the generic StageFn wrapper around them."""
from __future__ import annotations

import pickle

import apache_beam as beam

from transforms.common.counters import DEAD_LETTER
from transforms.common.stage import Outputs, StageFn
from transforms.ingest.dedupe import dedupe_content, merge_documents
from transforms.ingest.parse import ParseFn, acl_for, parse_unique
from transforms.records import DeadLetter, RawObject, UniqueObject


def _unique(key: str, data: bytes) -> UniqueObject:
    raw = RawObject.from_bytes(f"/src/{key}", key, data)
    return UniqueObject(raw=raw, source_uris=(raw.uri,))


def test_acl_for_joins_every_matching_prefix_in_order():
    rules = (("hr/", ("staff",)), ("hr/pay/", ("payroll", "staff")), ("eng/", ("eng",)))
    assert acl_for("/src/hr/pay/2024.md", "hr/pay/2024.md", rules) == ["staff", "payroll"]
    assert acl_for("/src/eng/x.md", "eng/x.md", rules) == ["eng"]
    assert acl_for("/src/public.md", "public.md", rules) is None  # no rule: public


def test_parse_unique_is_the_stage_function():
    docs, errors = parse_unique(_unique("hr/a.md", b"# Title\n\nSome text here.\n"), (("hr/", ("staff",)),))
    assert errors == [] and [d.acl for d in docs] == [["staff"]]
    assert docs[0].source_hash == docs[0].content_hash
    docs, errors = parse_unique(_unique("r.jsonl", b'{"id": "1", "text": "ok"}\nnot json\n'))
    assert len(docs) == 1 and len(errors) == 1


def test_stage_fn_dead_letters_a_failure_and_commits_nothing_of_it():
    fn = pickle.loads(pickle.dumps(ParseFn()))  # what Beam ships to workers
    bad = _unique("x.bin", bytes(range(256)) * 4)
    [out] = list(fn.process(bad))
    assert isinstance(out, beam.pvalue.TaggedOutput) and out.tag == DEAD_LETTER
    assert out.value == DeadLetter(bad.raw.uri, bad.raw.content_hash, "parse", out.value.reason)
    assert out.value.reason.startswith("binary content")
    good = list(fn.process(_unique("r.jsonl", b'{"id": "1", "text": "ok"}\nnot json\n')))
    # documents stream out as they are parsed (issue 35, item 16): the order within a file is free
    assert sorted(type(o).__name__ for o in good) == ["Document", "TaggedOutput"]


class _Half(StageFn):
    STAGE, FAILED = "half", "dead_lettered_half"

    def apply(self, element, out: Outputs) -> None:
        out.count("halves")
        out.emit(element["n"] // 2)
        if element["n"] < 0:
            raise ValueError("negative")


def test_outputs_of_a_failed_element_are_dropped():
    fn = _Half()
    assert list(fn.process({"n": 4, "uri": "u", "content_hash": "h"})) == [2]
    [dl] = list(fn.process({"n": -1}))
    assert dl.tag == DEAD_LETTER and dl.value.stage == "half" and dl.value.reason == "ValueError: negative"


def test_dedupe_functions():
    a = RawObject.from_bytes("/s/b.txt", "b.txt", b"same")
    b = RawObject.from_bytes("/s/a.txt", "a.txt", b"same")
    u = dedupe_content(a.content_hash, [a, b])
    assert u.raw.key == "a.txt" and u.source_uris == ("/s/a.txt", "/s/b.txt")
    docs, _ = parse_unique(_unique("r.jsonl", b'{"id": "1", "text": "ok"}\n'))
    other = [d.__class__(**{**d.__dict__, "key": "z.jsonl", "source_uri": "/src/z.jsonl",
                            "source_uris": ["/src/z.jsonl"]}) for d in docs]
    merged = merge_documents(other + docs)
    assert merged.key == "r.jsonl" and merged.source_uris == ["/src/r.jsonl", "/src/z.jsonl"]
