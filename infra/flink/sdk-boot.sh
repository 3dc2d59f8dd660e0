#!/usr/bin/env bash
# The command of the PROCESS environment: a task manager runs this for each SDK worker it
# needs (with --id, --control_endpoint, ...), and this runs Beam's own Python SDK boot program
# (built by infra/flink/setup.sh) in this project's venv, with a staging dir of the worker's own
# (both task managers number their workers alike, so the default /tmp/staged would be shared).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${RAGBEAM_VENV:-$root/.venv}"
version="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("apache-beam"))')"
cache="${RAGBEAM_CACHE:-$HOME/.cache/ragbeam}/flink"
boot="$cache/beam-boot-$version/boot"
[ -x "$boot" ] || { echo "sdk-boot: $boot missing: run infra/flink/setup.sh" >&2; exit 1; }
export PATH="$venv/bin:$PATH" RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
# exec: the task manager stops a worker by signalling the process it started. The dir is
# small (the staged pipeline files) and lives under the stack's tmp dir (TMPDIR), gone with it.
work="$(mktemp -d "${TMPDIR:-/tmp}/ragbeam-sdk-XXXXXX")"
cd "$root"
exec "$boot" --semi_persist_dir="$work" "$@"
