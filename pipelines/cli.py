"""`ragbeam`: the command line. Parses arguments and config, then calls a job."""
from __future__ import annotations

import argparse
import difflib
import errno
import logging
import sys

from configs.schema import ConfigError, beam_option_names, load_config


def _index(args) -> int:
    from pipelines.index import GateFailed, IndexPathError, NoChunksError, UnbalancedRun, run_index
    from transforms.index.publish import IndexBusyError
    from transforms.index.manifest import format_summary

    cfg = load_config(args.config)
    from pipelines.options import check_beam_options
    check_beam_options(cfg, args.beam_args)  # before anything is listed or locked
    if args.dry_run:
        from pipelines.index import dry_run
        print(dry_run(cfg, args.input, args.output))
        return 0
    try:
        summary = run_index(cfg, args.input, args.output, progress=not args.quiet, beam_args=args.beam_args)
    except (GateFailed, UnbalancedRun, NoChunksError, IndexPathError, IndexBusyError) as e:
        if isinstance(e, (GateFailed, UnbalancedRun)):
            print(format_summary(e.summary))
            print(f"NOT PUBLISHED: {e}; the live version stays as it was", file=sys.stderr)
            return 4 if isinstance(e, GateFailed) else 3
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    print(f"published    {args.output} (summary.json beside the version)")
    return 0


def _build_artifacts(args) -> int:
    from pipelines.segments import rebuild_segments

    cfg = load_config(args.config)
    got = rebuild_segments(cfg, args.index)
    print(f"built {got['version_dir']}: {len(got['segments'])} segment(s) from its shards "
          f"({got['artifact_s']} s); published as a new version {got['version']} (rebuilt from "
          f"{got['previous_version']}, which is left as it was)")
    return 0


def _sql(args) -> int:
    from pipelines.sql import run_sql

    if args.beam_args:  # nothing of this command goes to Beam
        print(f"error: unrecognized arguments for 'ragbeam sql': {' '.join(args.beam_args)}", file=sys.stderr)
        return 2
    from transforms.common.s3 import export_to_environment, is_s3, settings_from_config
    if is_s3(args.index):  # object storage: endpoint and keys from the config and environment
        export_to_environment(settings_from_config(load_config(args.config)))
    got = run_sql(args.index, version=args.version, query=args.query, fmt=args.format,
                  write_catalog=args.write_catalog)
    if args.write_catalog:
        print(f"catalog      {got['catalog']}: views {', '.join(got['views'])} over version {got['version']} "
              f"({got['version_dir']})", file=sys.stderr if args.query else sys.stdout)
    return 0


def _answer(args) -> int:
    from pipelines.answer import run_answer

    cfg = load_config(args.config)
    if args.format:
        cfg = cfg.model_copy(update={"output": cfg.output.model_copy(update={"format": args.format})})
    from pipelines.options import check_beam_options, output_format_problem
    check_beam_options(cfg, args.beam_args)
    problem = output_format_problem(args.output, cfg.output.format, bool(args.format))
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from transforms.common.lock import BusyError
    from transforms.query.output_guard import OutputPathError
    from transforms.query.output_stats import OutputExistsError
    from transforms.query.questions.file import QuestionFileError
    try:
        summary = run_answer(cfg, args.index, args.questions, args.output, progress=not args.quiet,
                             beam_args=args.beam_args, overwrite=args.overwrite, trace=args.trace)
    except (QuestionFileError, OutputExistsError, OutputPathError, BusyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"answers      {summary['questions_written']} written to {args.output}: "
          f"{summary['answered']} answered, {summary['not_found']} not found, "
          f"{summary.get('unsupported', 0)} unsupported, {summary['errors']} errors "
          f"({summary['invalid_citations_removed']} invalid citations removed)")
    if summary.get("confidence_bands"):
        from transforms.query.output_stats import format_confidence_bands
        print(f"confidence   {format_confidence_bands(summary['confidence_bands'])}")
    print(f"time         {summary['wall_s']:.1f} s; shards skipped as already written: "
          f"{summary['shards_skipped']}/{summary['shards']}")
    if summary.get("rewrite_failed"):
        print(f"rewrite      {summary['rewrite_failed']} question(s) kept their own vector: the llm's rewriting "
              "failed (server down, timed out, or nothing usable)")
    if summary.get("shards_to_retry"):
        print(f"retry        {summary['shards_to_retry']} shard(s) hold backend errors (server down, timed out, "
              "budget spent): run the same command again to answer them again")
    if args.show and cfg.output.format == "jsonl":
        from pipelines.show import show_answers
        show_answers(args.output, args.show)
    return 0


def _eval(args) -> int:
    from pipelines.eval import format_table, run_eval

    cfg = load_config(args.config)
    if not args.dataset and not (args.index and args.questions and args.qrels):
        print("error: give --dataset, or --index with --questions and --qrels", file=sys.stderr)
        return 2
    report = run_eval(cfg, args.dataset, args.output, index=args.index, max_queries=args.max_queries,
                      questions=args.questions, qrels=args.qrels, seed=args.seed, reindex=args.reindex,
                      unanswerable=not args.no_unanswerable, log=(lambda *_: None) if args.quiet else print)
    print(format_table(report))
    print(f"report       {args.output}/report.json, report.html, per_question.jsonl")
    return 0


# Each --help ends with real examples: paths and configs that exist in this repository.
EXAMPLES = {
    "ragbeam": """examples:
  ragbeam index  --config configs/default.yaml --input samples/corpus --output out/index
  ragbeam answer --config configs/default.yaml --index out/index \\
                 --questions samples/questions.jsonl --output out/answers.jsonl --show 3
  ragbeam index  --config configs/local-s3.yaml --input s3://docs/corpus --output out/s3-index

`make run` does the first two; `ragbeam COMMAND --help` shows each command's options.""",
    "index": """examples:
  ragbeam index --config configs/default.yaml --input samples/corpus --output out/index
  ragbeam index --config configs/local-s3.yaml --input s3://docs/corpus --output out/s3-index
  ragbeam index --config configs/flink-local.yaml --input samples/corpus --output out/flink-index

The S3 example needs the local S3 server (make demo-s3), the Flink one the local cluster
(make demo-flink); --dry-run prints what a run would change and changes nothing.""",
    "build-artifacts": """examples:
  ragbeam build-artifacts --index out/index
  ragbeam build-artifacts --config configs/default.yaml --index out/index""",
    "sql": """examples:
  ragbeam sql --index out/index
  ragbeam sql --index out/index --query "SELECT stage, reason, source_uri FROM dead_letters"
  ragbeam sql --index out/index --format csv --write-catalog out/index.duckdb \\
              --query "SELECT format, count(*) AS documents FROM documents GROUP BY format"

Views: chunks, documents, dead_letters, near_duplicates, sources (the version's Parquet tables)
and manifest; without --query it lists their columns. The catalog file opens in any DuckDB client.""",
    "answer": """examples:
  ragbeam answer --config configs/default.yaml --index out/index \\
                 --questions samples/questions.jsonl --output out/answers.jsonl --show 3
  ragbeam answer --index out/index --questions samples/questions.jsonl \\
                 --output out/answers.parquet --format parquet --trace --overwrite
  ragbeam answer --config configs/flink-local.yaml --index out/flink-index \\
                 --questions samples/questions.jsonl --output out/flink-answers.jsonl

--index, --questions and --output each take a local path or an s3:// prefix.""",
    "eval": """examples:
  ragbeam eval --dataset ../shared/data/cranfield --output out/eval/cranfield
  ragbeam eval --dataset ../shared/data/squad-dev-half --max-queries 500 --output out/eval/squad
  ragbeam eval --config configs/eval-rerank.yaml --dataset ../shared/data/cranfield \\
               --index out/eval/cranfield/index --output out/eval/cranfield-rerank""",
}


def _examples(name: str) -> dict:
    """Parser keywords that end its --help with EXAMPLES[name], kept as written."""
    return {"epilog": EXAMPLES[name], "formatter_class": argparse.RawDescriptionHelpFormatter}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ragbeam", description="Batch RAG indexing and answering on Apache Beam.\n"
                                "Extra --key=value arguments go to Beam as pipeline options.", **_examples("ragbeam"))
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ix = sub.add_parser("index", help="index documents from a folder or s3:// prefix into an index dir",
                        **_examples("index"))
    ix.add_argument("--config", default=None, help="YAML config (default: the packaged configs/default.yaml)")
    ix.add_argument("--input", required=True, help="local folder or s3://bucket/prefix")
    ix.add_argument("--output", required=True, help="index directory (versions + CURRENT pointer)")
    ix.add_argument("--quiet", action="store_true", help="no progress lines")
    ix.add_argument("--dry-run", action="store_true",
                    help="print what would be added, changed, removed and carried over; change nothing")
    ix.set_defaults(func=_index)

    ba = sub.add_parser("build-artifacts", help="rebuild the segments of an index version from its shards (e.g. one built before segments)",
                        **_examples("build-artifacts"))
    ba.add_argument("--config", default=None)
    ba.add_argument("--index", required=True, help="index dir (uses CURRENT) or a version dir")
    ba.set_defaults(func=_build_artifacts)
    an = sub.add_parser("answer", help="answer a question file (JSONL, CSV, Parquet) against an index",
                        **_examples("answer"))
    an.add_argument("--config", default=None)
    an.add_argument("--index", required=True, help="index dir (uses CURRENT) or a version dir")
    an.add_argument("--questions", required=True, help="questions file, local or s3://")
    an.add_argument("--output", required=True, help="answers file (.jsonl or .parquet)")
    an.add_argument("--format", choices=["jsonl", "parquet"], default=None)
    an.add_argument("--show", type=int, default=0, help="print this many answers with their sources")
    an.add_argument("--quiet", action="store_true")
    an.add_argument("--trace", action="store_true",
                    help="add each stage's ranked ids and scores, the answer context and per-stage ms to every line")
    an.add_argument("--overwrite", action="store_true",
                    help="replace a finished output written by a different job")
    an.set_defaults(func=_answer)

    ev = sub.add_parser("eval", help="retrieval and answer metrics of an index on a BEIR-layout dataset",
                        **_examples("eval"))
    ev.add_argument("--config", default=None)
    ev.add_argument("--dataset", default=None, help="BEIR dir: queries.jsonl, qrels/test.tsv, corpus.jsonl or docs/")
    ev.add_argument("--output", required=True, help="report dir (report.json, report.html, per_question.jsonl)")
    ev.add_argument("--index", default=None, help="index dir or version dir (default: build REPORT_DIR/index)")
    ev.add_argument("--reindex", action="store_true", help="refresh REPORT_DIR/index from the corpus (incremental)")
    ev.add_argument("--max-queries", type=int, default=None, help="a seeded sample of this many judged queries")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--questions", default=None, help="questions file (overrides the dataset's queries)")
    ev.add_argument("--qrels", default=None, help="qrels TSV (overrides the dataset's)")
    ev.add_argument("--no-unanswerable", action="store_true", help="skip the unanswerable-question pass")
    ev.add_argument("--quiet", action="store_true")
    ev.set_defaults(func=_eval)

    sq = sub.add_parser("sql", help="query an index version's tables (chunks, documents, dead letters, ...) "
                        "with DuckDB SQL", **_examples("sql"))
    sq.add_argument("--config", default=None, help="YAML config (for an s3:// index: the endpoint and keys)")
    sq.add_argument("--index", required=True, help="index dir (uses CURRENT) or a version dir, local or s3://")
    sq.add_argument("--version", default=None, help="one of the index's published versions (default: CURRENT)")
    sq.add_argument("--query", default=None, help="SQL to run over the views; without it, list the views")
    sq.add_argument("--format", choices=["table", "csv", "json"], default="table", help="how --query's rows print")
    sq.add_argument("--write-catalog", default=None, metavar="FILE.duckdb",
                    help="write a DuckDB file holding the views (it reads the version's files in place)")
    sq.set_defaults(func=_sql)
    return p


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def typo_error(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """What a mistyped command or flag gets instead of argparse's bare error (or, for a flag,
    being passed to Beam unnoticed): "unknown command 'anwser'; did you mean 'answer'?".
    A flag is a typo only when it is close to one of the command's own flags and is not a Beam
    pipeline option (those still go to Beam)."""
    commands = _subparsers(parser)
    cmd = next((a for a in argv if not a.startswith("-")), None)
    if cmd is None or any(a in ("-h", "--help") for a in argv[:argv.index(cmd)]):
        return None
    if cmd not in commands:
        close = difflib.get_close_matches(cmd, list(commands), n=1)
        return (f"unknown command {cmd!r}; " + (f"did you mean {close[0]!r}?" if close
                                               else f"choose from {', '.join(commands)}"))
    own = [o for a in commands[cmd]._actions for o in a.option_strings if o.startswith("--")]
    for arg in argv[argv.index(cmd) + 1:]:
        name = arg.split("=", 1)[0]
        if not name.startswith("--") or name == "--" or any(o.startswith(name) for o in own):
            continue  # a value, one of ours, or an abbreviation of one (argparse takes those)
        close = difflib.get_close_matches(name, own, n=1, cutoff=0.75)
        if close and name[2:].replace("-", "_") not in beam_option_names():
            return f"unknown option {name!r} for 'ragbeam {cmd}'; did you mean {close[0]!r}?"
    return None


def main(argv=None) -> int:
    """The CLI. Everything it prints or logs, and any exception it lets out, has the configured
    secrets and URL user info masked (issue 35, item 2)."""
    from transforms.common.redact import RedactingStream, redact_exception, redact_log_record
    for handler in logging.getLogger().handlers:
        handler.addFilter(redact_log_record)
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(out), RedactingStream(err)
    try:
        return _main(argv)
    except BaseException as e:
        raise redact_exception(e)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Beam warns at import that Google Cloud client libraries are absent; they are not used here.
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda r: "apitools not found" not in r.getMessage())
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    typo = typo_error(parser, argv)
    if typo:
        parser.error(typo)  # usage, then "ragbeam: error: ...", exit 2
    args, beam_args = parser.parse_known_args(argv)
    args.beam_args = beam_args  # anything else goes to Beam as pipeline options
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"config error:\n{e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # one line for what a person can fix; anything else keeps its traceback
        from transforms.common.errors import ActionableError, is_s3_failure, s3_error
        if isinstance(e, ActionableError):
            print(f"error: {e}", file=sys.stderr)
            return 2
        if is_s3_failure(e):
            print(f"error: {s3_error(e, '')}", file=sys.stderr)
            return 2
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            print(f"error: disk full (no space left on the device) writing {e.filename or 'a file'}; "
                  "free space or point TMPDIR / --output elsewhere", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
