"""Durable writes and reads for local paths and s3:// URIs, in one place.

A write is all-or-nothing on both: locally a temp file is fsynced and renamed over
the target (and the directory fsynced); on S3 a single PUT is atomic by itself.
"""
from __future__ import annotations

import contextlib
import json
import os
import posixpath
import shutil
from typing import Optional

from transforms.common.s3 import S3Settings, is_s3, split_s3_uri

_clients: dict = {}


def s3_client(settings: Optional[S3Settings] = None):
    """One client per process and settings (boto3 clients are thread-safe)."""
    settings = settings or S3Settings()
    key = (settings.endpoint_url, settings.region, settings.access_key_id)
    if key not in _clients:
        _clients[key] = settings.client()
    return _clients[key]


def is_not_found(error) -> bool:
    """A botocore ClientError that means "no such object" (stores answer with any of these)."""
    return error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound")


def join(base: str, *parts: str) -> str:
    return posixpath.join(base, *parts) if is_s3(base) else os.path.join(base, *parts)


def _fsync_dir(path: str) -> None:
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(uri: str, data: bytes, s3: Optional[S3Settings] = None) -> None:
    if is_s3(uri):
        bucket, key = split_s3_uri(uri)
        s3_client(s3).put_object(Bucket=bucket, Key=key, Body=data)
        return
    parent = os.path.dirname(uri)
    if parent:
        os.makedirs(parent, exist_ok=True)
    tmp = uri + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, uri)  # readers see the old file or the new one, never a part
    _fsync_dir(parent)


def write_text(uri: str, text: str, s3: Optional[S3Settings] = None) -> None:
    write_bytes(uri, text.encode("utf-8"), s3)


def write_json(uri: str, data, s3: Optional[S3Settings] = None) -> None:
    write_text(uri, json.dumps(data, indent=2, sort_keys=True, default=str), s3)


def upload_file(local_path: str, uri: str, s3: Optional[S3Settings] = None,
                kill_point_name: Optional[str] = None) -> None:
    """Copy a finished local file to uri, atomically (multipart upload completes whole or not at all).

    kill_point_name: a fault-injection point hit while bytes are in flight (crash tests)."""
    if is_s3(uri):
        bucket, key = split_s3_uri(uri)
        callback = None
        if kill_point_name:
            from transforms.common.fault_injection import kill_point
            callback = lambda _n: kill_point(kill_point_name)  # noqa: E731
        s3_client(s3).upload_file(local_path, bucket, key, Callback=callback)
        return
    tmp = uri + ".tmp"
    os.makedirs(os.path.dirname(uri) or ".", exist_ok=True)
    shutil.copyfile(local_path, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, uri)


@contextlib.contextmanager
def open_local_or_download(uri: str, s3: Optional[S3Settings] = None):
    """A local path for uri: the path itself, or a temporary download of an s3:// object
    (streamed to disk, removed afterwards), for readers that want a file to stream from."""
    if not is_s3(uri):
        yield uri
        return
    import tempfile
    with tempfile.TemporaryDirectory(prefix="ragbeam-read-") as d:
        local = os.path.join(d, posixpath.basename(uri) or "object")
        download_file(uri, local, s3)
        yield local


def download_file(uri: str, local_path: str, s3: Optional[S3Settings] = None) -> None:
    tmp = local_path + f".{os.getpid()}.part"
    if is_s3(uri):
        bucket, key = split_s3_uri(uri)
        s3_client(s3).download_file(bucket, key, tmp)
    else:
        shutil.copyfile(uri, tmp)
    os.replace(tmp, local_path)


def _s3_object(uri: str, s3: Optional[S3Settings], head: bool = False) -> Optional[dict]:
    """The get_object (head_object) response for an s3:// URI, or None if there is no such
    object: the one place a missing object is told apart from other S3 errors."""
    from botocore.exceptions import ClientError
    bucket, key = split_s3_uri(uri)
    client = s3_client(s3)
    try:
        return (client.head_object if head else client.get_object)(Bucket=bucket, Key=key)
    except ClientError as e:
        if is_not_found(e):
            return None
        raise


def read_bytes(uri: str, s3: Optional[S3Settings] = None) -> bytes:
    if is_s3(uri):
        r = _s3_object(uri, s3)
        if r is None:  # one exception for a missing file, local or remote
            raise FileNotFoundError(uri)
        return r["Body"].read()
    with open(uri, "rb") as f:
        return f.read()


def read_text(uri: str, s3: Optional[S3Settings] = None) -> str:
    return read_bytes(uri, s3).decode("utf-8")


def exists(uri: str, s3: Optional[S3Settings] = None) -> bool:
    if is_s3(uri):
        return _s3_object(uri, s3, head=True) is not None
    return os.path.exists(uri)


def list_files(prefix: str, s3: Optional[S3Settings] = None, suffix: str = "") -> list[str]:
    """Every file under a folder/prefix (recursively), sorted, as full URIs/paths."""
    if is_s3(prefix):
        bucket, key = split_s3_uri(prefix)
        folder = key if not key or key.endswith("/") else key + "/"
        out = []
        for page in s3_client(s3).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder):
            out += [f"s3://{bucket}/{o['Key']}" for o in page.get("Contents", [])
                    if o["Key"].endswith(suffix) and not o["Key"].endswith("/")]
        return sorted(out)
    out = []
    for dirpath, _, files in os.walk(prefix):
        out += [os.path.join(dirpath, f) for f in files if f.endswith(suffix)]
    return sorted(out)


def delete_tree(prefix: str, s3: Optional[S3Settings] = None) -> None:
    if is_s3(prefix):
        bucket, _ = split_s3_uri(prefix)
        keys = [split_s3_uri(u)[1] for u in list_files(prefix, s3)]
        client = s3_client(s3)
        for i in range(0, len(keys), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                                           "Quiet": True})
        return
    shutil.rmtree(prefix, ignore_errors=True)


def delete(uri: str, s3: Optional[S3Settings] = None) -> None:
    if is_s3(uri):
        bucket, key = split_s3_uri(uri)
        s3_client(s3).delete_object(Bucket=bucket, Key=key)
    elif os.path.exists(uri):
        os.remove(uri)


def copy(src: str, dst: str, s3: Optional[S3Settings] = None) -> None:
    """Copy one object/file; on S3 a server-side copy (no bytes through this process)."""
    if is_s3(src) and is_s3(dst):
        sb, sk = split_s3_uri(src)
        db, dk = split_s3_uri(dst)
        s3_client(s3).copy({"Bucket": sb, "Key": sk}, db, dk)  # managed: multipart above 8 MB
        return
    if is_s3(dst):
        upload_file(src, dst, s3)
    elif is_s3(src):
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        download_file(src, dst, s3)
    else:
        upload_file(src, dst, s3)


def sha256_file(path: str, chunk: int = 1 << 20) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def download_tree(prefix: str, local_dir: str, s3: Optional[S3Settings] = None,
                  only: Optional[tuple[str, ...]] = None) -> list[str]:
    """Copy every file under prefix (optionally only those whose relative path starts with one of
    `only`) into local_dir, keeping relative paths; returns the relative paths copied."""
    base = prefix.rstrip("/") + "/"
    got = []
    for uri in list_files(prefix, s3):
        rel = uri[len(base):] if is_s3(prefix) else os.path.relpath(uri, prefix)
        if only and not rel.startswith(only):
            continue
        target = os.path.join(local_dir, *rel.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        download_file(uri, target, s3)
        got.append(rel)
    return got


def put_if_absent(uri: str, data: bytes, s3: Optional[S3Settings] = None) -> Optional[str]:
    """Create an S3 object only if there is none (If-None-Match: *): its ETag, or None if it existed."""
    return _conditional_put(uri, data, s3, IfNoneMatch="*")


def put_if_match(uri: str, data: bytes, etag: str, s3: Optional[S3Settings] = None) -> Optional[str]:
    """Replace an S3 object only if it is still the version `etag`: the new ETag, or None."""
    return _conditional_put(uri, data, s3, IfMatch=etag)


def _conditional_put(uri: str, data: bytes, s3: Optional[S3Settings], **cond) -> Optional[str]:
    from botocore.exceptions import ClientError
    bucket, key = split_s3_uri(uri)
    try:
        return s3_client(s3).put_object(Bucket=bucket, Key=key, Body=data, **cond)["ETag"]
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict", "412",
                                                       "409"):
            return None
        raise


def read_with_etag(uri: str, s3: Optional[S3Settings] = None) -> Optional[tuple[bytes, str]]:
    """(body, ETag) of an S3 object, or None if there is none."""
    r = _s3_object(uri, s3)
    return None if r is None else (r["Body"].read(), r["ETag"])


def delete_if_match(uri: str, etag: str, s3: Optional[S3Settings] = None) -> None:
    """Delete an S3 object if it is still `etag` (best effort where the store has no conditional delete)."""
    got = read_with_etag(uri, s3)
    if got is not None and got[1] == etag:
        delete(uri, s3)


def stat(uri: str, s3: Optional[S3Settings] = None) -> Optional[dict]:
    """{"size", "mtime", "etag"} of a file/object, or None if there is none."""
    if is_s3(uri):
        h = _s3_object(uri, s3, head=True)
        if h is None:
            return None
        return {"size": h["ContentLength"], "mtime": h["LastModified"].timestamp(), "etag": h.get("ETag")}
    try:
        st = os.stat(uri)
    except FileNotFoundError:
        return None
    return {"size": st.st_size, "mtime": st.st_mtime, "etag": None}
