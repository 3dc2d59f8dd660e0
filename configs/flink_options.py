"""The Flink runner's own pipeline options (Java side), which the portable runner passes
through to the job server: `FlinkPipelineOptions` and `VersionDependentFlinkPipelineOptions`
of beam-runners-flink-1.16:2.56.0, in the Python SDK's snake_case spelling. The Python SDK
declares only a few of them, so `runner.options` accepts these as well for the runners that
reach a Flink job server; any other unknown name is still refused (a typo is caught at load).
tests/flink/test_flink_options.py checks this list against the runner jar itself.
"""
from __future__ import annotations

FLINK_RUNNER_OPTIONS = frozenset("""
allow_non_restored_state attached_mode auto_balance_write_files_sharding_enabled auto_watermark_interval
checkpoint_timeout_millis checkpointing_interval checkpointing_mode disable_metrics enable_stable_input_drain
execution_mode_for_batch execution_retry_delay externalized_checkpoints_enabled fail_on_checkpointing_errors
faster_copy file_input_split_max_size_m_b finish_bundle_before_checkpointing flink_conf_dir flink_master
job_check_interval_in_secs latency_tracking_interval max_bundle_size max_bundle_time_mills max_parallelism
min_pause_between_checkpoints num_concurrent_checkpoints number_of_execution_retries object_reuse
operator_chaining parallelism re_iterable_group_by_key_result report_checkpoint_duration
retain_externalized_checkpoints_on_cancellation savepoint_path shutdown_sources_after_idle_ms state_backend
state_backend_factory state_backend_storage_path use_data_stream_for_batch
""".split())

# Runners whose unknown options end up at a Flink job server.
PASS_THROUGH_RUNNERS = frozenset({"portablerunner", "flinkrunner"})


def passes_through(runner_name: str, key: str) -> bool:
    name = runner_name.rsplit(".", 1)[-1].lower()
    return name in PASS_THROUGH_RUNNERS and key in FLINK_RUNNER_OPTIONS
