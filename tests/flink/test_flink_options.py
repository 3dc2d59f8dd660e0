"""configs/flink_options.py lists exactly the Flink runner's own options, as the runner jar on
the job server's classpath declares them (its getters, in the Python SDK's snake_case)."""
import re
import subprocess

from configs.flink_options import FLINK_RUNNER_OPTIONS
from infra.flink import local

INTERFACES = ["org.apache.beam.runners.flink.FlinkPipelineOptions",
              "org.apache.beam.runners.flink.VersionDependentFlinkPipelineOptions"]


def snake(camel: str) -> str:
    return re.sub(r"([A-Z])", r"_\1", camel[0].lower() + camel[1:]).lower()


def test_the_pass_through_list_is_the_runner_jars():
    local.ensure_setup()
    jar = next(p for p in local.classpath_file().read_text().strip().split(":")
               if re.search(r"/beam-runners-flink-1\.16-[\d.]+\.jar$", p))
    out = subprocess.run(["javap", "-cp", jar, *INTERFACES], check=True, capture_output=True, text=True).stdout
    getters = set(re.findall(r" (?:get|is)([A-Z]\w*)\(\);", out))
    assert {snake(g) for g in getters} == FLINK_RUNNER_OPTIONS
