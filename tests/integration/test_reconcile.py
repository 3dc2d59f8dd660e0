"""A run whose counts do not reconcile is not published: an input that went missing in a stage
(neither indexed, a duplicate nor dead-lettered) stops the run before the CURRENT switch."""
import pytest

from pipelines import cli
from pipelines.index import UnbalancedRun, run_index
from tests.conftest import copy_corpus
from tests.integration.test_incremental import quiet
from transforms.index import publish

FILES = ["man/man3/fnmatch.3", "git/git-version.txt"]


def test_a_dropped_element_fails_the_run_and_keeps_the_live_version(test_config, tmp_path, monkeypatch, capsys):
    corpus = copy_corpus(tmp_path / "corpus", FILES)
    index = str(tmp_path / "index")
    first = run_index(test_config, str(corpus), index, progress=False, log=quiet)
    assert first["balanced"] and first["reconcile_problems"] == []
    (corpus / "git" / "git-version.txt").write_text("git version 9.9 (changed tonight)\n")
    monkeypatch.setenv("RAGBEAM_FAULT_DROP", "parse:git-version.txt")  # the parse stage loses it
    with pytest.raises(UnbalancedRun, match=r"read 1 != parsed 0 \+ duplicates 0 \+ carried 0 \+ dead-lettered 0"):
        run_index(test_config, str(corpus), index, progress=False, log=quiet)
    assert publish.current_version(index) == first["version"]
    # the command line: exit code 3, the summary, and why nothing was published
    code = cli.main(["index", "--input", str(corpus), "--output", index, "--quiet"])
    err = capsys.readouterr().err
    assert code == 3
    assert "NOT PUBLISHED: the counts do not reconcile: read 1 != parsed 0" in err
    assert publish.current_version(index) == first["version"]
    monkeypatch.delenv("RAGBEAM_FAULT_DROP")
    again = run_index(test_config, str(corpus), index, progress=False, log=quiet)
    assert again["balanced"] and publish.current_version(index) == again["version"] != first["version"]
