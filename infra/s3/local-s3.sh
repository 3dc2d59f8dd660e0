#!/usr/bin/env bash
# Start/stop a local S3 server (SeaweedFS on 127.0.0.1) for demos and manual runs.
#   infra/s3/local-s3.sh start [--port 8333]   # prints `export AWS_...` lines
#   infra/s3/local-s3.sh status                # same lines, exit 1 if not running
#   infra/s3/local-s3.sh stop [--force]        # graceful stop takes ~15 s
#   eval "$(infra/s3/local-s3.sh start)"       # start and use it in this shell
# State (data, log, pid, keys) lives in $LOCAL_S3_DIR (default: <repo>/.local-s3).
# Keys: $LOCAL_S3_ACCESS_KEY / $LOCAL_S3_SECRET_KEY (default: fixed dev keys).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
py="$root/.venv/bin/python"
[ -x "$py" ] || py="$(command -v python3)"
cmd="${1:-}"
case "$cmd" in
  start|stop|status) shift ;;
  *) echo "usage: $0 start|stop|status [--port P] [--force]" >&2; exit 2 ;;
esac
cd "$root"
exec "$py" -m infra.s3.seaweed "$cmd" --dir "${LOCAL_S3_DIR:-$root/.local-s3}" "$@"
