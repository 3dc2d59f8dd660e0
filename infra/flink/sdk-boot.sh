#!/usr/bin/env bash
# The command of the PROCESS environment: a task manager runs this for each SDK worker it
# needs (with --id, --control_endpoint, ...), and this runs Beam's own Python SDK boot program
# (built by infra/flink/setup.sh) in this project's venv.
# Each worker gets a dir of its own (both task managers number their workers alike, so the
# default /tmp/staged would be shared), and boot runs there: it writes pipeline_options.json
# into its working dir. The SDK worker itself runs from the project root, where the jobs'
# relative local paths resolve, through a `python` first on boot's PATH.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${RAGBEAM_VENV:-$root/.venv}"
version="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("apache-beam"))')"
cache="${RAGBEAM_CACHE:-$HOME/.cache/ragbeam}/flink"
boot="$cache/beam-boot-$version/boot"
[ -x "$boot" ] || { echo "sdk-boot: $boot missing: run infra/flink/setup.sh" >&2; exit 1; }
# The dir is small (the staged pipeline files) and lives under the stack's tmp dir (TMPDIR).
work="$(mktemp -d "${TMPDIR:-/tmp}/ragbeam-sdk-XXXXXX")"
mkdir "$work/bin"
cat > "$work/bin/python" <<SHIM
#!/bin/sh
case "\${PIPELINE_OPTIONS_FILE:-}" in ""|/*) ;; *) export PIPELINE_OPTIONS_FILE="$work/\$PIPELINE_OPTIONS_FILE" ;; esac
cd "$root" && exec "$venv/bin/python" "\$@"
SHIM
chmod +x "$work/bin/python"
export PATH="$work/bin:$venv/bin:$PATH" RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
cd "$work"
# exec: the task manager stops a worker by signalling the process it started.
exec "$boot" --semi_persist_dir="$work" "$@"
