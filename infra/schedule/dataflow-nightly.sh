#!/usr/bin/env bash
# Cluster, Dataflow: the same `ragbeam index` with a Dataflow runner config (see
# configs/s3-dataflow.example.yaml: runner.name DataflowRunner, setup_file ./setup.py).
# The driver (listing, planning, DuckDB build, publish) runs where this script runs -
# e.g. a Cloud Scheduler-triggered Cloud Run job or the cron/systemd units here - and
# the Beam pipeline runs on Dataflow workers, which install ragbeam from setup.py.
# RAGBEAM_INDEX is an s3:// prefix: workers write shards there, the driver publishes there;
# no disk is shared between the driver and the workers (docs/object-storage.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/ragbeam index --quiet --config "${RAGBEAM_CONFIG:-configs/s3-dataflow.example.yaml}" \
  --input "${RAGBEAM_INPUT:?}" --output "${RAGBEAM_INDEX:?}"
