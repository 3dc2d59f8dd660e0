"""DuckDB connections that never reach the network.

The fts extension (its Porter `stem()`, which the BM25 analyzer calls) is loaded by path from
the duckdb-extension-fts wheel; a plain `LOAD fts` would look in ~/.duckdb/extensions and,
with autoinstall on, try to download it.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Optional

import duckdb

_NO_AUTO = {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}


def extension_path(name: str) -> str:
    pkg = importlib.import_module(f"duckdb_extension_{name}")
    path = Path(pkg.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.exists():  # duckdb and extension wheels must be the same version
        raise RuntimeError(f"{path} missing: install duckdb-extension-{name}=={duckdb.__version__}")
    return str(path)


def connect(path: str = ":memory:", read_only: bool = False, threads: Optional[int] = None,
            memory_limit: Optional[str] = None, extensions: tuple[str, ...] = ("fts",)):
    """A connection with `extensions` loaded from their wheels and nothing fetched on demand."""
    config = dict(_NO_AUTO)
    if threads:
        config["threads"] = str(threads)
    if memory_limit:  # DuckDB's own default is 80% of RAM: a worker sets what it can afford
        config["memory_limit"] = memory_limit
    con = duckdb.connect(path, read_only=read_only, config=config)
    for name in extensions:
        con.execute(f"LOAD '{extension_path(name)}'")
    return con
