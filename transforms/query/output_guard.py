"""Answer-job outputs that would destroy an input: refused with or without --overwrite.

The job writes `<output>` and beside it `.parts/` (emptied when it starts afresh), `.lock`,
`.summary.json` and `.tmp`; none of them may be the question file, and none may land inside
an index (an answers file as INDEX/CURRENT leaves the index unreadable).
"""
from __future__ import annotations

import os
from typing import Optional

from transforms.common.s3 import is_s3
from transforms.ingest.guards import _inside

SIDECARS = (".parts", ".lock", ".summary.json", ".tmp")
REFUSED = "; choose another --output (refused with or without --overwrite)"


class OutputPathError(ValueError):
    """--output would overwrite the question file or write into an index."""


def _local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def _same_file(a: str, b: str) -> bool:
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)  # also through a hard or symbolic link
    return os.path.realpath(a) == os.path.realpath(b)


def _is_index_dir(d: str) -> bool:
    return os.path.isfile(os.path.join(d, "CURRENT")) or os.path.isdir(os.path.join(d, "versions"))


def _local_index_around(output: str, index: str) -> Optional[str]:
    """The index dir that output is in (or is): an ancestor holding CURRENT or versions/, or
    the --index folder itself (a version dir given directly)."""
    d = os.path.realpath(output)
    while True:
        if _is_index_dir(d):
            return d
        if os.path.dirname(d) == d:
            break
        d = os.path.dirname(d)
    if not is_s3(index) and os.path.isdir(_local(index)) and _inside(output, _local(index)):
        return os.path.realpath(_local(index))
    return None


def _s3_index_around(output: str, index: str) -> Optional[str]:
    if not is_s3(index):
        return None
    for root in {index.rstrip("/"), index.split("/versions/", 1)[0].rstrip("/")}:
        if output.rstrip("/") == root or output.startswith(root + "/"):
            return root
    return None


def refuse_output_over_inputs(output: str, questions: str, index: str) -> None:
    """Raise OutputPathError saying what --output (or a file the job writes beside it) would hit."""
    exists = not is_s3(output) and os.path.exists(_local(output))
    head = f"--output {output} " + ("already exists and " if exists else "")
    if is_s3(output) == is_s3(questions):
        if (output == questions) if is_s3(output) else _same_file(_local(output), _local(questions)):
            raise OutputPathError(f"{head}is the question file (--questions {questions}): the answers "
                                  f"would replace the questions{REFUSED}")
        for suffix in SIDECARS:
            side = output + suffix
            hit = (side == questions or questions.startswith(side + "/")) if is_s3(side) else (
                _same_file(_local(side), _local(questions)) or _inside(_local(questions), _local(side)))
            if hit:
                raise OutputPathError(f"--output {output}: the job's {side} would overwrite or delete the "
                                      f"question file {questions}{REFUSED}")
    root = _s3_index_around(output, index) if is_s3(output) else _local_index_around(_local(output), index)
    if root is not None:
        raise OutputPathError(f"{head}is inside the index at {root}: writing there would damage the "
                              f"index{REFUSED}")
