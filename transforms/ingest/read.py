"""The read stage: list the objects under an input root, then read each one's bytes.

Sources: a local folder or file, `s3://bucket/prefix` (boto3), and any other scheme
Beam's FileSystems knows (gs://, ...). Listing runs in the driver (the planner needs
it); reading runs in the pipeline, one boto3 client per DoFn instance. Beam's own S3
filesystem builds a client per call (0.1-0.6 s each: 728 s for 2,000 small objects,
against 22-33 s with a reused client).

One rule for every source: keys are '/'-separated paths under the root, and any
path with a component starting with '.' (.git/, .DS_Store) is skipped while
`source.skip_hidden` is true (the default), so a local folder and its copy in a bucket
list the same keys. Skipped hidden entries are counted in the report under `hidden`, one
path per hidden file or folder (a folder ends in '/'), the same for every source.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

import apache_beam as beam

from transforms.common.counters import DEAD_LETTER
from transforms.common.s3 import S3Settings, scheme as _scheme, split_s3_uri as _split_s3
from transforms.common.stage import Outputs, StageFn
from transforms.common.storage import is_not_found
from transforms.records import RawObject

CHUNK_BYTES = 1 << 20

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListedObject:
    uri: str
    key: str  # path under the input root, '/'-separated, no leading slash
    size: int
    mtime: float  # seconds since the epoch


def hidden_part(key: str) -> Optional[str]:
    """The key up to its first component starting with '.' ('.github/' for a folder), or None."""
    parts = key.split("/")
    for i, part in enumerate(parts):
        if part.startswith("."):
            return "/".join(parts[:i + 1]) + ("/" if i < len(parts) - 1 else "")
    return None


def _skip_hidden(base: str, rel: str, skip: bool, report: Optional[dict]) -> bool:
    """Whether to skip rel (hidden and skip is set); each hidden file or folder counted once."""
    part = hidden_part(rel) if skip else None
    if part is None:
        return False
    if report is not None:
        paths = report.setdefault("hidden", [])
        if not paths or paths[-1] != base + part:  # keys come sorted: a folder's keys are adjacent
            paths.append(base + part)
    return True


# --- listing -----------------------------------------------------------------------

def list_objects(input_uri: str, s3: Optional[S3Settings] = None, report: Optional[dict] = None,
                 follow_outside: bool = False, skip_hidden: bool = True) -> list[ListedObject]:
    """Every object under input_uri (a folder/prefix, or one object), sorted by key.

    report: filled with {reason: [paths]} for entries that are not listed (hidden names while
    skip_hidden; local symbolic links out of the root, dangling links, FIFOs/sockets/devices),
    so each one is counted."""
    scheme = _scheme(input_uri)
    report = report if report is not None else {}
    if scheme == "s3":
        from transforms.common.errors import is_s3_failure, s3_error
        try:
            found = _list_s3(input_uri, (s3 or S3Settings()).client(), skip_hidden, report)
        except Exception as e:  # a missing bucket or wrong keys: one line, not a botocore traceback
            if is_s3_failure(e):
                raise s3_error(e, input_uri, "--input") from None
            raise
    elif scheme in ("", "file"):
        from transforms.ingest.listing import list_local
        found = list_local(input_uri[len("file://"):] if scheme else input_uri,
                           report, follow_outside, make=ListedObject, skip_hidden=skip_hidden)
    else:
        found = _list_filesystems(input_uri, skip_hidden, report)
    return sorted(found, key=lambda o: o.key)


def _list_s3(uri: str, client, skip_hidden: bool = True, report: Optional[dict] = None) -> list[ListedObject]:
    bucket, prefix = _split_s3(uri)
    folder = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder):
        for o in page.get("Contents", []):
            key = o["Key"]
            rel = key[len(folder):]
            if key.endswith("/") or not rel:  # "dir/" markers hold no content
                continue
            if _skip_hidden(f"s3://{bucket}/{folder}", rel, skip_hidden, report):
                continue
            out.append(ListedObject(f"s3://{bucket}/{key}", rel, int(o["Size"]),
                                    o["LastModified"].timestamp()))
    if not out and prefix and not prefix.endswith("/"):
        out = _head_s3(client, bucket, prefix)  # s3://bucket/path/to/one-object
    return out


def _head_s3(client, bucket: str, key: str) -> list[ListedObject]:
    from botocore.exceptions import ClientError
    try:
        h = client.head_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if is_not_found(e):
            return []
        raise
    return [ListedObject(f"s3://{bucket}/{key}", key.rsplit("/", 1)[-1],
                         int(h["ContentLength"]), h["LastModified"].timestamp())]


def _list_filesystems(uri: str, skip_hidden: bool = True, report: Optional[dict] = None) -> list[ListedObject]:
    from apache_beam.io.filesystems import FileSystems
    root = uri.rstrip("/")
    metas = FileSystems.match([root + "/**"])[0].metadata_list
    if not metas:  # maybe uri names one object
        metas = FileSystems.match([root])[0].metadata_list
        return [ListedObject(m.path, m.path.rsplit("/", 1)[-1], m.size_in_bytes,
                             m.last_updated_in_seconds) for m in metas]
    out = []
    for m in sorted(metas, key=lambda m: m.path):
        rel = m.path[len(root):].lstrip("/")
        if rel and not rel.endswith("/") and not _skip_hidden(root + "/", rel, skip_hidden, report):
            out.append(ListedObject(m.path, rel, m.size_in_bytes, m.last_updated_in_seconds))
    return out


# --- reading -----------------------------------------------------------------------

def _drain(listed: ListedObject, chunks: Iterable[bytes],
           max_bytes: Optional[int] = None) -> RawObject:
    """Hash while the bytes arrive (no second pass over a large object)."""
    h, parts, n = hashlib.sha256(), [], 0
    for c in chunks:
        h.update(c)
        parts.append(c)
        n += len(c)
        if max_bytes is not None and n > max_bytes:
            raise ValueError(f"object larger than max_object_bytes={max_bytes}")
    data = b"".join(parts)
    return RawObject(uri=listed.uri, key=listed.key, data=data, size=n, mtime=listed.mtime,
                     content_hash=h.hexdigest())


def _file_chunks(f) -> Iterator[bytes]:
    return iter(lambda: f.read(CHUNK_BYTES), b"")


def read_object(listed: ListedObject, s3_client=None,
                max_bytes: Optional[int] = None) -> RawObject:
    """The bytes of one listed object. s3_client: reuse one (see ReadObjectsFn)."""
    scheme = _scheme(listed.uri)
    if scheme == "s3":
        bucket, key = _split_s3(listed.uri)
        client = s3_client or S3Settings().client()
        resp = client.get_object(Bucket=bucket, Key=key)
        body = resp["Body"]
        try:
            raw = _drain(listed, body.iter_chunks(CHUNK_BYTES), max_bytes)
        finally:
            body.close()
        if "ContentLength" in resp and raw.size != resp["ContentLength"]:
            raise IOError(f"short read: {raw.size} of {resp['ContentLength']} bytes")
        return raw
    if scheme in ("", "file"):
        with open(listed.uri[len("file://"):] if scheme else listed.uri, "rb") as f:
            return _drain(listed, _file_chunks(f), max_bytes)
    return _read_filesystems(listed, max_bytes)


def _read_filesystems(listed: ListedObject, max_bytes: Optional[int] = None) -> RawObject:
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
    # UNCOMPRESSED: the default (AUTO) would silently gunzip *.gz and change the bytes.
    with FileSystems.open(listed.uri, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return _drain(listed, _file_chunks(f), max_bytes)


class ReadRefused(ValueError):
    """An object the read stage will not read (its reason is the whole message)."""


def read_source(listed: ListedObject, s3_client=None, max_bytes: Optional[int] = None) -> RawObject:
    """The read stage function: one listed object -> its bytes, refusing what is over the limit."""
    from transforms.ingest.listing import undecodable_name
    if undecodable_name(listed.uri):  # e.g. bad\xffname.md: no text column can hold it
        raise ReadRefused("file name is not valid UTF-8")
    if max_bytes is not None and listed.size > max_bytes:
        raise ReadRefused(f"object of {listed.size} bytes is larger than max_object_bytes={max_bytes}")
    return read_object(listed, s3_client, max_bytes)


class ReadObjectsFn(StageFn):
    """ListedObject -> RawObject; failures -> TaggedOutput("dead_letter", DeadLetter)."""
    STAGE, FAILED = "read", "read_errors"

    def __init__(self, s3: Optional[S3Settings] = None, max_object_bytes: Optional[int] = None):
        self._s3 = s3
        self._max = max_object_bytes
        self._client = None

    def setup(self):
        # One client per DoFn instance, reused for every element (see module doc).
        self._client = (self._s3 or S3Settings()).client()

    def origin(self, listed: ListedObject) -> tuple[str, str]:
        from transforms.ingest.listing import printable_uri
        return printable_uri(listed.uri), ""  # nothing read, so no hash; a bad name made writable

    def reason(self, error: Exception) -> str:
        if isinstance(error, ReadRefused):
            return str(error)
        return f"{type(error).__name__}: {error}"[:1000]

    def on_failure(self, listed: ListedObject, reason: str) -> None:
        from transforms.ingest.listing import printable_uri
        log.warning("read failed for %s: %s", printable_uri(listed.uri), reason)

    def apply(self, listed: ListedObject, out: Outputs) -> None:
        if self._client is None:  # called without setup() (a unit test)
            self.setup()
        raw = read_source(listed, self._client, self._max)
        out.count("read_objects")
        out.count("read_bytes", raw.size)
        out.emit(raw)


class ReadSource(beam.PTransform):
    """PCollection[ListedObject] -> outputs `objects` (RawObject) and DEAD_LETTER (DeadLetter).

    Example:
        read = listed | "Read" >> ReadSource(s3_settings, max_object_bytes=1 << 28)
        read.objects | ...          # RawObject
        read[DEAD_LETTER] | ...     # DeadLetter(uri, "", "read", reason)
    """

    def __init__(self, s3: Optional[S3Settings] = None, max_object_bytes: Optional[int] = None):
        super().__init__()
        self.s3, self.max_object_bytes = s3, max_object_bytes

    def expand(self, listed):
        return (listed
                | "ReadObjects" >> beam.ParDo(ReadObjectsFn(self.s3, self.max_object_bytes))
                .with_output_types(RawObject).with_outputs(DEAD_LETTER, main="objects"))
