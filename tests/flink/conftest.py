"""The local Flink stack for the cluster tests (`make test-flink`).

flink: one job manager, two task managers (two slots each), Beam's Flink job server and a
worker pool whose SDK workers get the S3 server's settings, started once for the session.
They listen on every interface, so these tests run only inside a private network namespace
with nothing but loopback (infra/flink/netns.sh), where the S3 server runs too.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time

import pytest

from infra.flink import local


@pytest.fixture(scope="session")
def flink(s3_server, tmp_path_factory):
    if not local.isolated_network() and os.environ.get("RAGBEAM_FLINK_EXPOSED") != "1":
        pytest.fail("the Flink tests start servers that listen on every interface: run them inside a "
                    "private network namespace (`make test-flink`)")
    t0 = time.monotonic()
    stack = local.start(tmp_path_factory.mktemp("flink"), pool_env=s3_server.env())
    print(f"\nflink stack up in {time.monotonic() - t0:.1f} s")
    try:
        yield stack
    finally:
        stack.stop()


@contextlib.contextmanager
def extra_worker_pool(port: int, env: dict, log_path):
    """A second worker pool, with its own environment, for one run (fault injection)."""
    argv, environ = local.worker_pool_command(port, env)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, env=environ, cwd=str(local.ROOT), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        yield f"localhost:{port}"
    finally:
        for child in local.children(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, 9)
        proc.kill()
        proc.wait()
