#!/usr/bin/env bash
# The nightly re-index, as every schedule below calls it. Incremental: only new or
# changed objects are read, parsed and embedded; a failed or refused run leaves the
# live version untouched and exits non-zero so the scheduler reports it.
#   RAGBEAM_HOME   the repo checkout with its .venv   (default: this script's repo)
#   RAGBEAM_CONFIG config file                        (default: configs/default.yaml)
#   RAGBEAM_INPUT  local folder or s3://bucket/prefix (required)
#   RAGBEAM_INDEX  index directory                    (required)
set -euo pipefail
home="${RAGBEAM_HOME:-$(cd "$(dirname "$0")/../.." && pwd)}"
: "${RAGBEAM_INPUT:?set RAGBEAM_INPUT}" "${RAGBEAM_INDEX:?set RAGBEAM_INDEX}"
cd "$home"
exec flock -n "$RAGBEAM_INDEX.lock" \
  "$home/.venv/bin/ragbeam" index --quiet --config "${RAGBEAM_CONFIG:-configs/default.yaml}" \
  --input "$RAGBEAM_INPUT" --output "$RAGBEAM_INDEX"
