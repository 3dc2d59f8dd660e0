"""`ragbeam sql`: query one published index version with DuckDB.

The version (the index's CURRENT, `--version NAME`, or a version dir) is pinned by a lease while
it is read (publish.pin_current), so a pruner leaves it whole. Its tables become views
(transforms/index/sql_catalog.py); on object storage they are copied to a local folder first.
Then a query's rows are printed as a table, CSV or JSON, or, with no query, each view's columns;
`--write-catalog FILE` keeps the views in a DuckDB file for any DuckDB client.
"""
from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import sys
import tempfile
import textwrap
from typing import Optional

from transforms.common.errors import ActionableError
from transforms.common.s3 import is_s3
from transforms.index import publish

CELL_WIDTH = 60  # a table cell longer than this is cut (csv and json print every value whole)


class SqlError(ActionableError):
    """A version that is not there, or a query DuckDB refused: one line, exit 2."""


def _version_path(index: str, version: Optional[str]) -> str:
    """What to pin: the index (its CURRENT) or a version dir; `version` names one of the index's."""
    if version is None:
        return index
    names = publish.list_versions(index)
    if version not in names:
        shown = ", ".join(names[-5:]) or "none"
        raise SqlError(f"{index}: no published version {version!r} (newest versions: {shown})")
    return publish.version_dir(index, version)


@contextlib.contextmanager
def pinned_version(index: str, version: Optional[str], local_root: Optional[str] = None):
    """(local version dir, manifest) of a complete published version, leased while in use. A
    version on object storage is copied under `local_root` (a temp dir, removed after, if unset)."""
    path = _version_path(index, version)
    bare = path.rstrip("/")
    parent = bare.rsplit("/", 2)[-2] if is_s3(bare) else os.path.basename(os.path.dirname(os.path.abspath(bare)))
    if parent == publish.STAGING:
        raise SqlError(f"{path}: a staging dir is not a published version; give the index folder or one "
                       "of its versions/<v>")
    vdir, lease = publish.pin_current(path)
    temp = None
    try:
        manifest = publish.read_manifest(vdir)
        if is_s3(vdir):
            from transforms.index.incremental import mirror_version
            if local_root is None:
                temp = local_root = tempfile.mkdtemp(prefix="ragbeam-sql-")
            vdir = mirror_version(vdir, local_root)
        yield os.path.abspath(vdir), manifest
    finally:
        if lease is not None:
            lease.release()
        if temp:
            shutil.rmtree(temp, ignore_errors=True)


def _cell(v, for_table: bool) -> str:
    if v is None:
        return "NULL" if for_table else ""
    if isinstance(v, (list, dict, tuple)):
        v = json.dumps(v, default=str, ensure_ascii=False)
    text = str(v)
    if for_table:
        text = " ".join(text.split())
        if len(text) > CELL_WIDTH:
            text = text[:CELL_WIDTH - 1] + "…"
    return text


def print_rows(names: list[str], rows: list[tuple], fmt: str, out) -> None:
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(names)
        w.writerows([_cell(v, False) for v in r] for r in rows)
    elif fmt == "json":
        lines = [json.dumps(dict(zip(names, r)), default=str, ensure_ascii=False) for r in rows]
        out.write("[" + ",\n ".join(lines) + "]\n")  # one row a line
    else:
        cells = [[_cell(v, True) for v in r] for r in rows]
        widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]
        out.write("  ".join(n.ljust(w) for n, w in zip(names, widths)).rstrip() + "\n")
        out.write("  ".join("-" * w for w in widths) + "\n")
        for r in cells:
            out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")
        out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n")


def describe(con, names: list[str], vdir: str, manifest: dict, out) -> None:
    out.write(f"version {manifest.get('version')} ({vdir})\n")
    for name in names:
        n = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
        cols = ", ".join(f"{c} {t}" for c, t, *_ in con.execute(f"DESCRIBE {name}").fetchall())
        out.write(f"{name} ({n} row{'s' if n != 1 else ''})\n")
        out.write(textwrap.fill(cols, 100, initial_indent="  ", subsequent_indent="  ") + "\n")


def run_sql(index: str, *, version: Optional[str] = None, query: Optional[str] = None, fmt: str = "table",
            write_catalog: Optional[str] = None, out=None) -> dict:
    """The command: print the query's rows (or the views) and/or write the catalog file."""
    import duckdb
    from transforms.common.duck import connect
    from transforms.index.sql_catalog import create_views, write_catalog as write_file
    out = out or sys.stdout
    # a catalog names the files it reads: an object-storage version is copied beside it, to stay
    local_root = write_catalog + ".tables" if write_catalog and is_s3(index) else None
    with pinned_version(index, version, local_root) as (vdir, manifest):
        got = {"version": manifest.get("version"), "version_dir": vdir}
        if write_catalog:
            got["views"] = write_file(vdir, manifest, write_catalog)
            got["catalog"] = write_catalog
        if query is None and write_catalog:
            return got
        con = connect(":memory:", extensions=())
        try:
            names = create_views(con, vdir, manifest)
            if query is None:
                describe(con, names, vdir, manifest, out)
                return got
            try:
                cur = con.execute(query)
                rows = cur.fetchall() if cur.description else []
            except duckdb.Error as e:
                raise SqlError(f"query failed: {' '.join(str(e).split())[:300]}") from None
            print_rows([d[0] for d in cur.description or []], rows, fmt, out)
            got["rows"] = len(rows)
        finally:
            con.close()
    return got
