"""Access rules fail closed: an `acl:` rule with no groups is a config error, a record's own acl only
narrows its path rule, rules do not depend on where the listing started, and the row masks a
segment asks for follow access groups and metadata filters."""
from __future__ import annotations

import json

import pytest

from configs.schema import ConfigError, load_config


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_an_acl_rule_with_no_groups_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"acl.0.groups: List should have at least 1 item"):
        load_config(write(tmp_path, "acl: [{prefix: vault/, groups: []}]"), environ={})
    with pytest.raises(ConfigError, match=r"acl.0.groups.0"):
        load_config(write(tmp_path, "acl: [{prefix: vault/, groups: ['']}]"), environ={})


def _parse(uri, key, data, rules, root=None):
    from transforms.ingest.parse import parse_unique
    from transforms.records import RawObject, UniqueObject
    raw = RawObject.from_bytes(uri, key, data)
    return parse_unique(UniqueObject(raw, (uri,)), rules, root)[0]


def test_a_record_acl_only_narrows_its_path_rule():
    from transforms.ingest.acl import NOBODY
    rules = (("restricted/", ("staff", "hr")),)
    lines = [{"id": "wide", "text": "t1", "acl": ["everyone", "staff"]},
             {"id": "other", "text": "t2", "acl": ["everyone"]},
             {"id": "plain", "text": "t3"}]
    data = "\n".join(json.dumps(r) for r in lines).encode()
    docs = {d.metadata["record_id"]: d.acl for d in _parse("/c/restricted/r.jsonl", "restricted/r.jsonl", data, rules)}
    assert docs == {"wide": ["staff"], "other": [NOBODY], "plain": ["staff", "hr"]}
    # no rule on the path: the record's own acl stands
    docs = {d.metadata["record_id"]: d.acl for d in _parse("/c/open/r.jsonl", "open/r.jsonl", data, rules)}
    assert docs["wide"] == ["everyone", "staff"] and docs["plain"] == []


def test_rules_do_not_depend_on_where_the_listing_started(tmp_path):
    rules = (("secret/", ("staff",)),)
    data = b"# Plan\n\nThe secret plan.\n"
    # listed from corpus/: key secret/plan.md; listed from corpus/secret: key plan.md
    for key in ("secret/plan.md", "plan.md"):
        (doc,) = _parse("/data/corpus/secret/plan.md", key, data, rules)
        assert doc.acl == ["staff"], key
    # with source.root, keys are relative to it
    (doc,) = _parse("/data/corpus/secret/plan.md", "plan.md", data, rules, root="/data/corpus")
    assert doc.acl == ["staff"]
    (doc,) = _parse("s3://b/corpus/secret/plan.md", "plan.md", data, rules, root="s3://b/corpus")
    assert doc.acl == ["staff"]
    (doc,) = _parse("/data/corpus/public/plan.md", "plan.md", data, rules, root="/data/corpus")
    assert doc.acl == []


def test_row_masks_follow_access_groups_and_json_metadata_in_chunk_id_order():
    """build_filter_mask, as a segment asks it: rows (chunk_id, acl, metadata), one bool a row
    in chunk_id order; empty acl = public; metadata compared as JSON values (3 != "3")."""
    import numpy as np
    import pyarrow as pa
    from transforms.query.retrieve import build_filter_mask

    n = 30
    order = np.random.default_rng(0).permutation(n).tolist()  # rows out of order: the mask must not care
    rows = pa.table({"chunk_id": [f"c{i:05d}" for i in order],
                     "acl": [["staff"] if i == 11 else [] for i in order],
                     "metadata": [json.dumps({"product": "alpha" if i % 2 else "beta", "tier": i % 3})
                                  for i in order]})
    public = build_filter_mask(rows, None)
    assert not public[11] and public.sum() == n - 1
    assert build_filter_mask(rows, ["eng", "staff"]).all()
    m = build_filter_mask(rows, ["staff"], {"product": "alpha", "tier": 1})
    assert (m == np.array([(i % 2 == 1) and (i % 3 == 1) for i in range(n)])).all()
    assert not build_filter_mask(rows, ["staff"], {"tier": "1"}).any()  # JSON types matter
    assert not build_filter_mask(rows, ["staff"], {"missing": "x"}).any()
