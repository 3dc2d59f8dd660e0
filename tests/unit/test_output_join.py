"""The answer job joins and counts its shards one at a time (memory follows a shard, not the
output): the joined file and the counts equal a whole read, in both formats."""
import json

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.answer import join_parts, part_path
from transforms.query.output_stats import count_output

STATUSES = ["answered", "not_found", "error", "unsupported"]


def records(shard: int, n: int) -> list[dict]:
    # long answers so the JSONL output crosses count_output's 1 MiB read blocks mid-record
    return [{"id": f"s{shard}-{i}", "status": STATUSES[(shard + i) % 4], "answer": "x\u2028y " * 2000,
             "invalid_citations": i % 3, "error": None if i % 2 else "boom"} for i in range(n)]


def test_jsonl_shards_join_and_count_in_a_stream(tmp_path):
    parts = tmp_path / "out.jsonl.parts"
    parts.mkdir()
    everything = []
    for s in range(3):
        recs = records(s, 40)
        everything += recs
        with open(part_path(str(parts), s, 3, "jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in recs)
    out = tmp_path / "out.jsonl"
    n, counts = join_parts(str(parts), str(out), "jsonl", 3)
    assert n == 120 and out.stat().st_size > 1 << 20  # more than one read block
    assert [json.loads(line) for line in out.read_bytes().split(b"\n") if line] == everything
    expected = {k: sum(r["status"] == k for r in everything) for k in ("answered", "not_found", "unsupported")}
    expected["error"] = sum(r["status"] == "error" for r in everything)
    expected["invalid_citations"] = sum(r["invalid_citations"] for r in everything)
    assert counts == expected == count_output(str(out), "jsonl")


def test_parquet_shards_with_other_null_columns_join_into_one_schema(tmp_path):
    parts = tmp_path / "out.parquet.parts"
    parts.mkdir()
    a = [dict(r, error=None) for r in records(0, 5)]  # its error column is all null: typed null
    b = records(1, 7)
    pq.write_table(pa.Table.from_pylist(a), part_path(str(parts), 0, 2, "parquet"))
    pq.write_table(pa.Table.from_pylist(b), part_path(str(parts), 1, 2, "parquet"))
    out = tmp_path / "out.parquet"
    n, counts = join_parts(str(parts), str(out), "parquet", 2)
    t = pq.read_table(out)
    assert n == t.num_rows == 12 and t.schema.field("error").type == pa.string()
    assert t.to_pylist() == a + b
    assert counts == count_output(str(out), "parquet")
    assert counts["invalid_citations"] == sum(r["invalid_citations"] for r in a + b)
