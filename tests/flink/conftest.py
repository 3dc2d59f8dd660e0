"""The local Flink stack for the cluster tests (`make test-flink`).

flink: one job manager, two task managers (two slots each) whose SDK workers get the S3
server's settings from their environment, and Beam's Flink job server, started once for the
session. They listen on every interface, so these tests run only inside a private network
namespace with nothing but loopback (infra/flink/netns.sh), where the S3 server runs too.
"""
from __future__ import annotations

import os
import time

import pytest

from infra.flink import local


@pytest.fixture(scope="session")
def flink(s3_server, tmp_path_factory):
    if not local.isolated_network() and os.environ.get("RAGBEAM_FLINK_EXPOSED") != "1":
        pytest.fail("the Flink tests start servers that listen on every interface: run them inside a "
                    "private network namespace (`make test-flink`)")
    t0 = time.monotonic()
    stack = local.start(tmp_path_factory.mktemp("flink"), worker_env=s3_server.env())
    print(f"\nflink stack up in {time.monotonic() - t0:.1f} s")
    try:
        yield stack
    finally:
        stack.stop()
