"""Beam pipeline options from the config: the local runner never reaches for the network."""
from __future__ import annotations

from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions

from configs.schema import Config


def pipeline_options(cfg: Config, extra_args: Optional[list[str]] = None) -> PipelineOptions:
    r = cfg.runner
    args = [f"--runner={r.name}"]
    if r.name == "DirectRunner":
        # An explicit running mode keeps Beam 2.77 on its in-process runner instead of
        # trying to download the Prism binary first.
        args += [f"--direct_running_mode={r.direct_running_mode}",
                 f"--direct_num_workers={r.direct_num_workers}"]
    for key, value in sorted(r.options.items()):
        if isinstance(value, bool):
            if value:
                args.append(f"--{key}")
        else:
            args.append(f"--{key}={value}")
    return PipelineOptions(args + list(extra_args or []))
