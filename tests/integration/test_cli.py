"""`ragbeam` end to end through pipelines.cli.main: exit codes (0 ok, 2 config or input
error, busy index, 4 gate refused), secrets kept out of every file a run writes, and
`build-artifacts` rebuilding the segments from the shards."""
import json
import os
import shutil

import pytest

from pipelines.cli import main
from transforms.index import publish
from tests.unit.test_cli import small_src

S3_KEY_ID = "AKIA-TEST-KEY-ID-7731"
S3_SECRET = "s3-secret-value-Xq93kd"
API_KEY = "sk-answer-secret-5521"


@pytest.fixture
def clean_env():
    """The CLI exports S3 settings into os.environ for in-process workers (RAGBEAM__S3__*),
    which load_config reads as overrides: keep them out of every later test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_bad_paths_exit_2(mini_index, tmp_path, capsys):
    idx = tmp_path / "idx"
    assert main(["index", "--input", str(tmp_path / "nope"), "--output", str(idx), "--quiet"]) == 2
    assert "input not found" in capsys.readouterr().err
    assert publish.current_version(str(idx)) is None
    assert main(["index", "--input", str(tmp_path), "--output", "gs://bucket/index", "--quiet"]) == 2
    assert "must be a local path or an s3:// prefix" in capsys.readouterr().err
    (tmp_path / "q.jsonl").write_text('{"id": "q", "question": "What?"}\n')  # the index is what is missing
    for argv in (["answer", "--index", str(tmp_path / "no-index"), "--questions", str(tmp_path / "q.jsonl"),
                  "--output", str(tmp_path / "a.jsonl"), "--quiet"],
                 ["build-artifacts", "--index", str(tmp_path / "no-index")]):
        assert main(argv) == 2, argv
        assert "not an index" in capsys.readouterr().err
    assert main(["answer", "--index", str(mini_index[0]), "--questions", str(tmp_path / "missing.jsonl"),
                 "--output", str(tmp_path / "a.jsonl"), "--quiet"]) == 2
    assert "question file not found" in capsys.readouterr().err  # not a traceback from inside Beam
    assert not (tmp_path / "a.jsonl").exists() and not (tmp_path / "a.jsonl.parts").exists()
    assert main(["eval", "--output", str(tmp_path / "report")]) == 2
    assert "give --dataset" in capsys.readouterr().err


def test_a_refused_gate_exits_4_and_publishes_nothing(tmp_path, capsys, clean_env):
    data = tmp_path / "golden"
    (data / "qrels").mkdir(parents=True)
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "What does ERR_CONN_4042 mean?"}) + "\n")
    # the judged document is not in this corpus: the metric is 0 and the floor refuses it
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tnot-indexed\t1\n")
    cfg = tmp_path / "gate.yaml"
    cfg.write_text(f"gate: {{dataset: '{data}', metric: 'recall@10', stage: bm25, min: 0.5}}\n")
    idx = tmp_path / "idx"
    rc = main(["index", "--config", str(cfg), "--input", str(small_src(tmp_path / "src")), "--output", str(idx),
               "--quiet"])
    assert rc == 4
    assert "NOT PUBLISHED" in capsys.readouterr().err
    assert publish.current_version(str(idx)) is None
    assert not (idx / "versions").exists() or not os.listdir(idx / "versions")


def test_a_run_exits_0_and_writes_no_secret(tmp_path, capsys, clean_env):
    cfg = tmp_path / "secret.yaml"
    cfg.write_text(f"""
s3:
  endpoint_url: http://127.0.0.1:9
  region: eu-west-1
  access_key_id: {S3_KEY_ID}
  secret_access_key: {S3_SECRET}
answer:
  api_key: {API_KEY}
""")
    idx, out = tmp_path / "idx", tmp_path / "answers.jsonl"
    assert main(["index", "--config", str(cfg), "--input", str(small_src(tmp_path / "src")), "--output", str(idx),
                 "--quiet"]) == 0
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"id": "q1", "question": "What does error ERR_CONN_4042 mean?"}) + "\n")
    assert main(["answer", "--config", str(cfg), "--index", str(idx), "--questions", str(qfile),
                 "--output", str(out), "--quiet"]) == 0
    printed = capsys.readouterr()
    assert json.loads(out.read_text())["status"] == "answered"

    vdir = publish.resolve_index(str(idx))
    manifest = json.load(open(os.path.join(vdir, "manifest.json")))
    assert manifest["config"]["answer"]["kind"] == "extractive"  # the config is recorded, minus its secrets
    written = [os.path.join(root, f) for d in (idx, tmp_path) for root, _, files in os.walk(d) for f in files
               if f.endswith((".json", ".jsonl", ".txt"))]
    assert any(w.endswith("manifest.json") for w in written) and any(w.endswith("summary.json") for w in written)
    assert any(w.endswith("_run.json") for w in written)
    for path in written:
        if path == str(cfg):
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        for secret in (S3_KEY_ID, S3_SECRET, API_KEY):
            assert secret not in text, (secret, path)
    for secret in (S3_KEY_ID, S3_SECRET, API_KEY):
        assert secret not in printed.out + printed.err


def test_build_artifacts_rebuilds_the_same_rows(mini_index, tmp_path, capsys):
    idx = tmp_path / "idx"
    shutil.copytree(mini_index[0], idx)  # a copy: the session index stays as it is
    vdir = publish.resolve_index(str(idx))
    with open(os.path.join(vdir, "manifest.json")) as f:
        before = json.load(f)["segments"]
    shutil.rmtree(idx / "segments")  # gone: only the shards are left

    assert main(["build-artifacts", "--index", str(idx)]) == 0
    assert "1 segment(s) from its shards" in capsys.readouterr().out
    with open(os.path.join(vdir, "manifest.json")) as f:
        rebuilt = json.load(f)["segments"]
    assert rebuilt == before  # content-derived: the same rows give the same segment, byte for byte
    assert rebuilt[0]["live"] == mini_index[1]["chunks"]
    from transforms.index.segments import verify_files
    assert verify_files(str(idx / "segments" / rebuilt[0]["id"])) is None
