"""Listing a local input root so that every entry is accounted for.

Regular files under the root are listed. Everything else is counted in `report` by reason:
- `symlink_outside_root`: a link (to a file or a folder) whose target is outside the root;
  not followed unless `source.follow_links_outside_root` is set;
- `dangling_link`: a link whose target does not exist;
- `not_a_regular_file`: a FIFO, socket or device (reading one would block or fail);
- `unreadable`: an entry whose metadata cannot be read.
- `hidden`: a file or folder whose name starts with '.', skipped by rule while
  `source.skip_hidden` is set (the default), as for every source; a folder is one entry.
"""
from __future__ import annotations

import logging
import os
import stat
from typing import Iterator

log = logging.getLogger(__name__)


def undecodable_name(path: str) -> bool:
    """A name that is not valid UTF-8 (os.fsdecode turned its bytes into surrogates)."""
    try:
        path.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def printable_uri(path: str) -> str:
    """The path with undecodable bytes shown as \\xNN (for logs and dead-letter rows)."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _inside(path: str, root_real: str) -> bool:
    return path == root_real or path.startswith(root_real.rstrip(os.sep) + os.sep)


def list_local(path: str, report: dict, follow_outside: bool = False, *, make,
               skip_hidden: bool = True) -> Iterator:
    """make(uri, key, size, mtime): the listed-object constructor (transforms.ingest.read.ListedObject)."""
    ListedObject = make

    def skip(reason: str, full: str) -> None:
        report.setdefault(reason, []).append(printable_uri(full))
        if reason != "hidden":  # .git/ and .DS_Store are routine: counted, not warned about
            log.warning("not indexed (%s): %s", reason, printable_uri(full))

    root = os.path.abspath(path)
    if os.path.isfile(root):
        st = os.stat(root)
        yield ListedObject(root, os.path.basename(root), st.st_size, st.st_mtime)
        return
    if not os.path.isdir(root):
        raise FileNotFoundError(f"input not found: {path}")
    root_real = os.path.realpath(root)
    seen: set[tuple[int, int]] = set()  # (dev, inode) of visited dirs: symlink loops end here
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        keep = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            if skip_hidden and d.startswith("."):
                skip("hidden", full + os.sep)
                continue
            if os.path.islink(full) and not follow_outside and not _inside(os.path.realpath(full), root_real):
                skip("symlink_outside_root", full)
                continue
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if skip_hidden and name.startswith("."):
                skip("hidden", full)
                continue
            try:
                fst = os.stat(full)
            except FileNotFoundError:
                skip("dangling_link" if os.path.islink(full) else "unreadable", full)
                continue
            except OSError:
                skip("unreadable", full)
                continue
            if os.path.islink(full) and not follow_outside and not _inside(os.path.realpath(full), root_real):
                skip("symlink_outside_root", full)
                continue
            if not stat.S_ISREG(fst.st_mode):  # a FIFO or socket would block or fail the read
                skip("not_a_regular_file", full)
                continue
            key = os.path.relpath(full, root).replace(os.sep, "/")
            yield ListedObject(full, key, fst.st_size, fst.st_mtime)
