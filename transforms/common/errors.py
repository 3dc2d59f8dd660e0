"""Errors a person fixes (a setting, a path, a credential, a stray object): the CLI prints the
one line and exits 2, where anything else would be a traceback and exit 1.

S3 failures are named from the error code, never from the request (which carries the key id)."""
from __future__ import annotations


class ActionableError(RuntimeError):
    """One line naming the problem; no traceback is worth showing."""


class S3AccessError(ActionableError):
    """The store refused a request: no such bucket, unknown key, wrong secret, access denied."""


_S3_HINTS = {
    "NoSuchBucket": "no such bucket {bucket!r}",
    "InvalidAccessKeyId": "the store does not know the access key (InvalidAccessKeyId); "
                          "check s3.access_key_id or RAGBEAM__S3__ACCESS_KEY_ID / AWS_ACCESS_KEY_ID",
    "SignatureDoesNotMatch": "the secret key does not match the access key (SignatureDoesNotMatch); "
                             "check s3.secret_access_key or RAGBEAM__S3__SECRET_ACCESS_KEY / "
                             "AWS_SECRET_ACCESS_KEY",
    "AccessDenied": "access denied (AccessDenied): the credentials may not read {bucket!r}",
    "403": "access denied (403): the credentials may not read {bucket!r}",
    "InvalidBucketName": "not a valid bucket name {bucket!r}",
}


def s3_error(error, uri: str, what: str = "") -> S3AccessError:
    """A botocore ClientError / NoCredentialsError / EndpointConnectionError as one line."""
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    from transforms.common.redact import mask_url
    bucket = uri[len("s3://"):].split("/", 1)[0] if uri.startswith("s3://") else None
    if bucket is None and isinstance(error, ClientError):
        bucket = error.response.get("Error", {}).get("BucketName")
    bucket = bucket or "?"
    where = (f"{what} {uri}" if what else uri) or "S3"
    if isinstance(error, NoCredentialsError):
        return S3AccessError(f"{where}: no S3 credentials (set s3.access_key_id and s3.secret_access_key, "
                             "or the RAGBEAM__S3__* / AWS_* variables)")
    if isinstance(error, EndpointConnectionError):
        return S3AccessError(f"{where}: cannot reach the S3 endpoint "
                             f"{mask_url(str(error.kwargs.get('endpoint_url', '?')))}")
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", "?"))
        hint = _S3_HINTS.get(code)
        if hint is None:
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
            hint = f"the store refused the request ({code[:60]}, HTTP {status})"
        return S3AccessError(f"{where}: {hint.format(bucket=bucket)}")
    return S3AccessError(f"{where}: {type(error).__name__}")


def is_s3_failure(error) -> bool:
    try:
        from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
    except ImportError:
        return False
    return isinstance(error, (ClientError, EndpointConnectionError, NoCredentialsError))
