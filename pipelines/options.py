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


def command_line_options(extra_args: list[str]) -> tuple[dict, list[str]]:
    """({name: value}, problems) of the Beam options given on the command line: `--name=value`,
    `--name value` or a bare `--flag` (True); anything else is a problem."""
    options: dict = {}
    problems: list[str] = []
    args = list(extra_args or [])
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("--") or arg == "--":
            problems.append(f"command line: unexpected argument {arg!r} (Beam pipeline options take the form "
                            "--name=value)")
            continue
        name, eq, value = arg[2:].partition("=")
        if not eq:
            if i < len(args) and not args[i].startswith("--"):
                value, i = args[i], i + 1
            else:
                value = True
        options[name] = value
    return options, problems


def beam_option_errors(cfg: Config, extra_args: Optional[list[str]] = None) -> list[str]:
    """What is wrong with the Beam options of a run, checked before it starts (issue 35, item 20):
    those on the command line with Beam's own parser, as `runner.options` in the config are; and,
    in both, the options the config has typed keys for (runner.direct_num_workers,
    runner.direct_running_mode) against those keys' bounds, so `--direct_num_workers=-3` is one line,
    not an IndexError from inside Beam."""
    from pydantic import ValidationError

    from configs.schema import RunnerConfig, validate_beam_options
    given, errors = command_line_options(extra_args or [])
    runner = given.get("runner") if isinstance(given.get("runner"), str) else cfg.runner.name
    errors += [e.replace("runner.options.", "command line --", 1)
               for e in validate_beam_options(given, runner)]
    typed = set(RunnerConfig.model_fields) & {"direct_num_workers", "direct_running_mode"}
    for where, options in (("runner.options.", cfg.runner.options), ("command line --", given)):
        for key in sorted(typed & set(options)):
            value = options[key]
            if any(e.startswith(f"{where}{key}:") for e in errors):
                continue  # Beam's parser said it already
            try:
                RunnerConfig.model_validate({key: value})
            except ValidationError as e:
                msg = "; ".join(err["msg"] for err in e.errors())
                errors.append(f"{where}{key}: {msg} (got {value!r}; as runner.{key} in the config)")
    return errors


def check_beam_options(cfg: Config, extra_args: Optional[list[str]] = None) -> None:
    """ConfigError listing beam_option_errors, if any."""
    from configs.schema import ConfigError
    errors = beam_option_errors(cfg, extra_args)
    if errors:
        raise ConfigError("\n".join(f"  {e}" for e in errors))


_EXTENSIONS = {"jsonl": (".jsonl", ".ndjson", ".json"), "parquet": (".parquet", ".pq")}


def output_format_problem(output: str, fmt: str, flag: bool) -> Optional[str]:
    """Why the answers cannot go to `output` in `fmt`: its name says the other format (Parquet
    written into x.jsonl, issue 35 item 20). A name with neither extension is taken as given."""
    lower = output.lower().rstrip("/")
    named = next((f for f, exts in _EXTENSIONS.items() if lower.endswith(exts)), None)
    if named is None or named == fmt:
        return None
    source = f"--format {fmt}" if flag else f"output.format is {fmt} in the config"
    return (f"{source} but --output {output} is named like a {named.upper()} file; name it "
            f"{_EXTENSIONS[fmt][0]} or give --format {named}")
