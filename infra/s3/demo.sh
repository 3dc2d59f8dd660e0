#!/usr/bin/env bash
# The S3 demo: start the local S3 server, upload samples/corpus, index it from s3://,
# answer the sample questions, stop the server. `make demo-s3` runs this.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
eval "$(infra/s3/local-s3.sh start)"
trap 'infra/s3/local-s3.sh stop --force >/dev/null' EXIT
.venv/bin/python - <<'PY'
import os, boto3
from pathlib import Path
c = boto3.client("s3", endpoint_url=os.environ["RAGBEAM_S3_ENDPOINT"], region_name=os.environ["AWS_REGION"])
try:
    c.create_bucket(Bucket="docs")
except c.exceptions.BucketAlreadyOwnedByYou:
    pass
root = Path("samples/corpus")
files = [p for p in sorted(root.rglob("*")) if p.is_file()]
for p in files:
    c.upload_file(str(p), "docs", f"corpus/{p.relative_to(root).as_posix()}")
print(f"uploaded {len(files)} files to s3://docs/corpus")
PY
.venv/bin/ragbeam index --config configs/local-s3.yaml --input s3://docs/corpus --output out/s3-index
.venv/bin/ragbeam answer --config configs/local-s3.yaml --index out/s3-index \
  --questions samples/questions.jsonl --output out/s3-answers.jsonl --show 2
