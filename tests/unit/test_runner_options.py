"""runner.options: what the Python SDK declares is parsed by Beam; the Flink runner's Java-side
options pass through to the job server for the portable runners; any other name is refused."""
import pytest

from configs.schema import ConfigError, load_config
from pipelines.options import pipeline_options


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
