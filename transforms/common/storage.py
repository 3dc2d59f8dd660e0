"""Durable writes and reads for local paths and s3:// URIs, in one place.

A write is all-or-nothing on both: locally a temp file is fsynced and renamed over
the target (and the directory fsynced); on S3 a single PUT is atomic by itself.
"""
from __future__ import annotations

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


def upload_file(local_path: str, uri: str, s3: Optional[S3Settings] = None) -> None:
    """Copy a finished local file to uri, atomically (multipart upload completes whole or not at all)."""
    if is_s3(uri):
        bucket, key = split_s3_uri(uri)
        s3_client(s3).upload_file(local_path, bucket, key)
        return
    tmp = uri + ".tmp"
    os.makedirs(os.path.dirname(uri) or ".", exist_ok=True)
    shutil.copyfile(local_path, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, uri)


def download_file(uri: str, local_path: str, s3: Optional[S3Settings] = None) -> None:
    tmp = local_path + f".{os.getpid()}.part"
    if is_s3(uri):
        bucket, key = split_s3_uri(uri)
        s3_client(s3).download_file(bucket, key, tmp)
    else:
        shutil.copyfile(uri, tmp)
    os.replace(tmp, local_path)


def read_bytes(uri: str, s3: Optional[S3Settings] = None) -> bytes:
    if is_s3(uri):
        bucket, key = split_s3_uri(uri)
        return s3_client(s3).get_object(Bucket=bucket, Key=key)["Body"].read()
    with open(uri, "rb") as f:
        return f.read()


def read_text(uri: str, s3: Optional[S3Settings] = None) -> str:
    return read_bytes(uri, s3).decode("utf-8")


def exists(uri: str, s3: Optional[S3Settings] = None) -> bool:
    if is_s3(uri):
        from botocore.exceptions import ClientError
        bucket, key = split_s3_uri(uri)
        try:
            s3_client(s3).head_object(Bucket=bucket, Key=key)
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
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
