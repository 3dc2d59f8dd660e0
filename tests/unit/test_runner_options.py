"""runner.options: what the Python SDK declares is parsed by Beam; the Flink runner's Java-side
options pass through to the job server for the portable runners; any other name is refused."""
import pytest

from configs.schema import ConfigError, load_config
from pipelines.options import pipeline_options


BAD_BEAM_ARGS = [["--direct_num_workers=-3"], ["--direct_num_workers", "0"], ["--direct_num_workers=100000"],
                 ["--direct_num_workers=many"], ["--direct_running_mode=fast"], ["--direct_num_workers"],
                 ["--not_a_beam_option=1"], ["stray-value"]]


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_flink_options_pass_through_for_the_portable_runner(tmp_path):
    cfg = load_config(write(tmp_path, "runner: {name: PortableRunner, options: {job_endpoint: 'localhost:8099', "
                                      "execution_mode_for_batch: BATCH_FORCED, max_bundle_size: 500}}"), environ={})
    opts = pipeline_options(cfg).get_all_options(retain_unknown_options=True)
    assert opts["execution_mode_for_batch"] == "BATCH_FORCED" and opts["max_bundle_size"] == "500"


@pytest.mark.parametrize("text, message", [
    ("runner: {name: PortableRunner, options: {execution_mode_for_bach: BATCH_FORCED}}",
     "runner.options.execution_mode_for_bach: not a Beam pipeline option; did you mean 'execution_mode_for_batch'?"),
    ("runner: {name: DirectRunner, options: {execution_mode_for_batch: BATCH_FORCED}}",
     "runner.options.execution_mode_for_batch: not a Beam pipeline option"),
    ("runner: {name: PortableRunner, options: {parallelism: two}}", "runner.options.parallelism"),
])
def test_typos_and_options_of_another_runner_are_refused(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("?", r"\?").replace(".", r"\.")):
        load_config(write(tmp_path, text), environ={})


# --- Beam options on the command line and in the config, checked at start -------------------------

@pytest.mark.parametrize("extra", BAD_BEAM_ARGS)
@pytest.mark.parametrize("command", ["index", "answer"])
def test_bad_beam_options_on_the_command_line_are_config_errors_at_start(tmp_path, capsys, extra, command):
    from pipelines.cli import main
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    if command == "index":
        argv = ["index", "--input", str(src), "--output", str(tmp_path / "idx"), "--quiet"]
    else:
        argv = ["answer", "--index", str(tmp_path / "idx"), "--questions", str(src / "q.jsonl"),
                "--output", str(tmp_path / "a.jsonl"), "--quiet"]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error:") and "Traceback" not in err
    name = extra[0].split("=")[0]
    assert (name if name.startswith("--") else "unexpected argument") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # nothing written


def test_runner_options_in_the_config_are_held_to_the_same_bounds(tmp_path, capsys):
    from pipelines.cli import main
    cfg = tmp_path / "c.yaml"
    cfg.write_text("runner:\n  options:\n    direct_num_workers: -3\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    assert main(["index", "--config", str(cfg), "--input", str(src), "--output", str(tmp_path / "idx"),
                 "--quiet"]) == 2
    assert "runner.options.direct_num_workers" in capsys.readouterr().err


def test_good_beam_options_still_pass():
    from configs.schema import Config
    from pipelines.options import beam_option_errors
    for extra in (["--direct_num_workers=2"], ["--direct_running_mode", "multi_threading"],
                  ["--runner", "DirectRunner"], ["--job_endpoint=localhost:8099"], ["--save_main_session"]):
        assert beam_option_errors(Config(), extra) == [], extra
