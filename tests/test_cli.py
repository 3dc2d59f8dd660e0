"""`ragbeam` end to end through pipelines.cli.main: exit codes (0 ok, 2 config or input
error, busy index, 4 gate refused), secrets kept out of every file a run writes, and
`build-artifacts` rebuilding the segments from the shards."""
import json
import os
import shlex
import shutil

import duckdb
import pytest

from pipelines.cli import main
from transforms.index import publish

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


def small_src(path):
    from tests.conftest import copy_corpus
    return copy_corpus(path, ["git/git-version.txt", "records/faq.jsonl"])


def test_config_errors_exit_2_and_name_the_key(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("chunk: {chunk_tokens: abc}\nretrieve: {dense_topn: 3}\n")
    for argv in (["index", "--input", str(tmp_path), "--output", str(tmp_path / "idx")],
                 ["answer", "--index", str(tmp_path), "--questions", "q.jsonl", "--output", "a.jsonl"],
                 ["build-artifacts", "--index", str(tmp_path)]):
        assert main([argv[0], "--config", str(bad)] + argv[1:]) == 2, argv
        err = capsys.readouterr().err
        assert "config error" in err and "chunk.chunk_tokens" in err and "retrieve.dense_topn: unknown key" in err
    assert main(["index", "--config", str(tmp_path / "missing.yaml"), "--input", "x", "--output", "y"]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert not (tmp_path / "idx").exists()


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


def test_a_busy_index_exits_2_at_once(tmp_path, capsys):
    idx = tmp_path / "idx"
    idx.mkdir()
    with publish.index_lock(str(idx)):  # another run holds the index
        assert main(["index", "--input", str(small_src(tmp_path / "src")), "--output", str(idx), "--quiet"]) == 2
    assert "being indexed by another run" in capsys.readouterr().err
    assert publish.current_version(str(idx)) is None


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


# --- help and typos: the parser in-process, no job runs ----------------------------------------

def _helps():
    from pipelines.cli import _subparsers, build_parser
    parser = build_parser()
    return {"ragbeam": parser, **_subparsers(parser)}


def _examples(help_text: str) -> list[list[str]]:
    """The example command lines at the end of a --help, continuation lines joined, split."""
    tail = help_text.split("\nexamples:\n", 1)[1]
    joined = tail.replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.strip().startswith("ragbeam ")]


@pytest.mark.parametrize("name", ["ragbeam", "index", "build-artifacts", "answer", "eval", "sql"])
def test_every_help_ends_with_real_examples(name):
    from pipelines.cli import build_parser
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    examples = _examples(_helps()[name].format_help())
    assert 2 <= len(examples) <= 3, examples
    for words in examples:
        # every repository path an example names exists (out/ and s3:// are what the run makes)
        for w in words:
            if w.startswith(("configs/", "samples/")):
                assert os.path.exists(os.path.join(root, w)), w
        # and the example parses, leaving nothing for Beam
        args, rest = build_parser().parse_known_args(words[1:])
        assert rest == [] and args.command == (words[1] if name == "ragbeam" else name), words


def test_a_mistyped_command_suggests_the_nearest_and_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["anwser", "--index", "out/index"])
    assert e.value.code == 2
    assert "unknown command 'anwser'; did you mean 'answer'?" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2 and "choose from index, build-artifacts, answer, eval, sql" in capsys.readouterr().err


def test_a_mistyped_flag_suggests_the_nearest_and_exits_2(capsys):
    with pytest.raises(SystemExit) as e:  # before argparse would say only that --questions is missing
        main(["answer", "--index", "out/index", "--questons", "samples/questions.jsonl", "--output", "a.jsonl"])
    assert e.value.code == 2
    assert "unknown option '--questons' for 'ragbeam answer'; did you mean '--questions'?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "--output", "out/e", "--max-querys=3"])
    assert "did you mean '--max-queries'?" in capsys.readouterr().err


def test_beam_options_and_abbreviations_are_not_typos():
    from pipelines.cli import build_parser, typo_error
    p = build_parser()
    base = ["answer", "--index", "i", "--questions", "q.jsonl", "--output", "a.jsonl"]
    for extra in (["--job_endpoint=localhost:8099"], ["--runner", "DirectRunner"], ["--region=eu-west-1"],
                  ["--over"], ["--", "--anything"]):
        assert typo_error(p, base + extra) is None, extra
    assert typo_error(p, ["--help"]) is None and typo_error(p, ["index", "--help"]) is None
