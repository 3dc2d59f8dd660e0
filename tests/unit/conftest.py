"""The unit tier's rule: a test here runs no Beam pipeline, starts no process and opens no
listening socket (no S3 or LLM server, not even one in a thread). While a unit test sets up,
runs and tears down, each of those raises UnitTierViolation, and a test that tripped one fails
even if it caught the exception; a unit test that asks for a server fixture fails before it
starts. Such a test belongs in tests/integration.
"""
from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
from contextlib import contextmanager

import apache_beam
import pytest
from apache_beam.runners.runner import PipelineRunner

# Fixtures of tests/conftest.py that start a server or run a pipeline.
SERVER_FIXTURES = {"s3_server", "s3_config_env", "upload_dir", "local_llm", "mini_index"}


class UnitTierViolation(RuntimeError):
    pass


_tripped: list[str] = []


def _refuse(what: str):
    def refuse(*args, **kwargs):
        _tripped.append(what)
        raise UnitTierViolation(f"a unit test {what}: move it to tests/integration")
    return refuse


# (owner, attribute, what the test did); os functions only where this platform has them.
_GUARDED = [(apache_beam.Pipeline, "run", "ran a Beam pipeline"),
            (PipelineRunner, "run_pipeline", "ran a Beam pipeline"),
            (subprocess.Popen, "_execute_child", "started a process"),
            (multiprocessing.process.BaseProcess, "start", "started a process"),
            (socket.socket, "listen", "opened a listening socket (a server)")]
_GUARDED += [(os, name, "started a process") for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp",
                                                          "system") if hasattr(os, name)]


@contextmanager
def _guarded():
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in _GUARDED]
    for owner, name, what in _GUARDED:
        setattr(owner, name, _refuse(what))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


# Hooks of this conftest run for the items under tests/unit only, so the integration tier in
# the same process (make test-core) is never guarded.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    servers = sorted(SERVER_FIXTURES & set(item.fixturenames))
    if servers:
        pytest.fail(f"a unit test asks for {', '.join(servers)}: move it to tests/integration", pytrace=False)
    with _guarded():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _guarded():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    with _guarded():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if _tripped:  # also when the test caught the exception
        what = "; ".join(sorted(set(_tripped)))
        _tripped.clear()
        if report.passed or report.skipped:
            report.outcome = "failed"
            report.longrepr = f"UnitTierViolation: a unit test {what}: move it to tests/integration"
