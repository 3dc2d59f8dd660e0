"""`ragbeam` through pipelines.cli.main without running a job: config and input errors exit 2
naming the key, a busy index exits 2 at once, every --help ends with real examples, and a
mistyped command or flag gets the nearest name."""
import os
import shlex

import pytest

from pipelines.cli import main
from transforms.index import publish


def small_src(path):
    from tests.conftest import copy_corpus
    return copy_corpus(path, ["git/git-version.txt", "records/faq.jsonl"])


def _helps():
    from pipelines.cli import _subparsers, build_parser
    parser = build_parser()
    return {"ragbeam": parser, **_subparsers(parser)}


def _examples(help_text: str) -> list[list[str]]:
    """The example command lines at the end of a --help, continuation lines joined, split."""
    tail = help_text.split("\nexamples:\n", 1)[1]
    joined = tail.replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.strip().startswith("ragbeam ")]


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


def test_a_busy_index_exits_2_at_once(tmp_path, capsys):
    idx = tmp_path / "idx"
    idx.mkdir()
    with publish.index_lock(str(idx)):  # another run holds the index
        assert main(["index", "--input", str(small_src(tmp_path / "src")), "--output", str(idx), "--quiet"]) == 2
    assert "being indexed by another run" in capsys.readouterr().err
    assert publish.current_version(str(idx)) is None


@pytest.mark.parametrize("name", ["ragbeam", "index", "build-artifacts", "answer", "eval", "sql"])
def test_every_help_ends_with_real_examples(name):
    from pipelines.cli import build_parser
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


@pytest.mark.parametrize("output,fmt_args", [
    ("x.jsonl", ["--format", "parquet"]), ("x.ndjson", ["--format", "parquet"]),
    ("x.parquet", ["--format", "jsonl"]), ("x.PQ", []), ("sub/answers.parquet", [])])
def test_an_output_named_for_the_other_format_is_refused_before_anything_runs(tmp_path, capsys, output, fmt_args):
    from pipelines.cli import main
    out = tmp_path / output
    code = main(["answer", "--index", str(tmp_path / "no-index"), "--questions", str(tmp_path / "q.jsonl"),
                 "--output", str(out), "--quiet"] + fmt_args)
    err = capsys.readouterr().err
    assert code == 2 and "is named like a" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.iterdir())
