"""S3 settings, URI parsing and clients: the one place that knows how to reach a bucket.

Keys never travel inside a pickled DoFn: S3Settings pickles without them, and a
worker resolves credentials on its own (the settings' environment variables, then
boto3's chain: AWS_* variables, profile, instance role).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Optional

# Workers (and a driver without keys in its config) read these.
ENV_ENDPOINT = "RAGBEAM__S3__ENDPOINT_URL"
ENV_KEY_ID = "RAGBEAM__S3__ACCESS_KEY_ID"
ENV_SECRET = "RAGBEAM__S3__SECRET_ACCESS_KEY"


def scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


def is_s3(uri: str) -> bool:
    return scheme(uri) == "s3"


def split_s3_uri(uri: str) -> tuple[str, str]:
    """s3://bucket/key/path -> ("bucket", "key/path")."""
    if not is_s3(uri):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {uri!r}")
    return bucket, key


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: Optional[str] = None  # None: AWS itself
    region: Optional[str] = None
    access_key_id: Optional[str] = None  # None: boto3's chain (env, profile, instance role)
    secret_access_key: Optional[str] = None

    def __post_init__(self):
        # "${VAR:-}" in YAML gives "", which boto3 would take as a real (empty) value.
        for f in ("endpoint_url", "region", "access_key_id", "secret_access_key"):
            if getattr(self, f) == "":
                object.__setattr__(self, f, None)

    def __repr__(self) -> str:  # never print keys (reprs end up in logs and tracebacks)
        def mask(v):
            return None if v is None else "***"
        return (f"S3Settings(endpoint_url={self.endpoint_url!r}, region={self.region!r}, "
                f"access_key_id={mask(self.access_key_id)}, "
                f"secret_access_key={mask(self.secret_access_key)})")

    def __getstate__(self):
        # Pickled into job graphs and shipped to workers: leave the keys behind.
        return {"endpoint_url": self.endpoint_url, "region": self.region,
                "access_key_id": None, "secret_access_key": None}

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)

    def resolved(self) -> "S3Settings":
        """Fill what is unset from this process's environment (on a worker: its own)."""
        return replace(self,
                       endpoint_url=self.endpoint_url or os.environ.get(ENV_ENDPOINT) or None,
                       access_key_id=self.access_key_id or os.environ.get(ENV_KEY_ID) or None,
                       secret_access_key=self.secret_access_key or os.environ.get(ENV_SECRET) or None)

    def client(self):
        import boto3
        from botocore.config import Config
        s = self.resolved()
        extra = {}
        if s.endpoint_url:
            # Non-AWS stores (SeaweedFS, MinIO, Ceph): no virtual-host buckets, and
            # checksums only where the API requires them (newer boto3 adds them everywhere).
            extra = dict(s3={"addressing_style": "path"},
                         request_checksum_calculation="when_required",
                         response_checksum_validation="when_required")
        session = boto3.session.Session(  # own session: the default one isn't thread-safe
            aws_access_key_id=s.access_key_id, aws_secret_access_key=s.secret_access_key,
            region_name=s.region)
        return session.client("s3", endpoint_url=s.endpoint_url, config=Config(
            retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=32, **extra))


def settings_from_config(cfg) -> S3Settings:
    return S3Settings(endpoint_url=cfg.s3.endpoint_url or None, region=cfg.s3.region,
                      access_key_id=cfg.s3.access_key_id, secret_access_key=cfg.s3.secret_access_key)


def export_to_environment(settings: S3Settings) -> None:
    """Let in-process workers (DirectRunner, or a worker pool started from this process)
    resolve the keys the driver was given, without pickling them into the graph."""
    for env, value in ((ENV_ENDPOINT, settings.endpoint_url), (ENV_KEY_ID, settings.access_key_id),
                       (ENV_SECRET, settings.secret_access_key)):
        if value and not os.environ.get(env):
            os.environ[env] = value
