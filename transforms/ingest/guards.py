"""Run-level checks of the index job's paths, before anything is listed or written."""
from __future__ import annotations

import os


def _inside(child: str, parent: str) -> bool:
    child, parent = os.path.realpath(child), os.path.realpath(parent)
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def refuse_output_inside_input(input_uri: str, index_dir: str, error=ValueError) -> None:
    """An index directory inside the input would index its own CURRENT, manifests and shards."""
    if "://" in input_uri and not input_uri.startswith("file://"):
        return
    src = input_uri[len("file://"):] if input_uri.startswith("file://") else input_uri
    if os.path.isdir(src) and _inside(index_dir, src):
        raise error(f"--output {index_dir} is inside --input {input_uri}: the run would index its own "
                    "index files; put the index directory outside the input")
