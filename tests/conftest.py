"""Shared fixtures of both tiers (tests/unit, tests/integration) and of tests/flink.

s3_server: a real S3 API (SeaweedFS on 127.0.0.1, a free port), started once per
session and only when a test asks for it (~3.5 s). Prefer new prefixes over new
buckets: each bucket takes 2 of the server's 50 volumes on its first write.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `pytest` (not `python -m pytest`): infra/ is not installed
    sys.path.insert(0, str(ROOT))

from infra.s3 import seaweed  # noqa: E402

# The longest files first (about 50 s to 3 min each on 2 cores): `make test-core` runs two
# processes that take whole files (pytest-xdist --dist loadfile) in collection order, so a long
# file started last would leave one process working alone at the end. Paths under tests/.
LONGEST_FIRST = ("integration/test_s3_index.py", "integration/test_incremental.py",
                 "integration/test_llm_features.py", "integration/test_local_llm.py",
                 "integration/test_index_pipeline.py", "integration/test_ocr.py",
                 "integration/test_source_changes.py", "integration/test_segments.py",
                 "integration/test_neardup_index.py", "integration/test_eval.py")
TESTS = Path(__file__).resolve().parent
HOSTILE = TESTS / "hostile"  # hostile inputs (tests/hostile/README.md)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item):
        try:
            return rank.get(item.path.resolve().relative_to(TESTS).as_posix(), len(rank))
        except ValueError:  # a test outside tests/
            return len(rank)
    items.sort(key=key)  # stable: a file's own order stays


TEST_ACCESS_KEY = "ragbeam-test"
TEST_SECRET_KEY = "ragbeam-test-secret"


class S3TestServer:
    def __init__(self, server: seaweed.Server):
        self._server = server
        self.endpoint_url = server.endpoint_url
        self.access_key = server.access_key
        self.secret_key = server.secret_key
        self.region = server.region

    def __repr__(self) -> str:
        return f"S3TestServer(endpoint_url={self.endpoint_url!r})"

    def client(self):
        return self._server.client()

    def settings(self):
        """The same endpoint and keys as transforms.ingest.read.S3Settings."""
        from transforms.common.s3 import S3Settings
        return S3Settings(endpoint_url=self.endpoint_url, region=self.region,
                          access_key_id=self.access_key, secret_access_key=self.secret_key)

    def env(self) -> dict[str, str]:
        return self._server.env()

    def upload_dir(self, local_dir, bucket: str, prefix: str = "") -> list[str]:
        """Create the bucket (if needed) and upload every file under local_dir
        (hidden ones too, as `aws s3 sync` would) to s3://bucket/prefix/<relpath>."""
        c = self.client()
        try:
            c.create_bucket(Bucket=bucket)
        except (c.exceptions.BucketAlreadyOwnedByYou, c.exceptions.BucketAlreadyExists):
            pass
        root = Path(local_dir)
        prefix = prefix.strip("/")
        keys = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root).as_posix()
            key = f"{prefix}/{rel}" if prefix else rel
            c.upload_file(str(path), bucket, key)
            keys.append(key)
        return keys


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    t0 = time.monotonic()
    server = seaweed.start(tmp_path_factory.mktemp("s3"), access_key=TEST_ACCESS_KEY,
                           secret_key=TEST_SECRET_KEY, volume_max=50, die_with_parent=True)
    if os.environ.get("RAGBEAM_TEST_TIMINGS"):
        print(f"\ns3_server started in {time.monotonic() - t0:.1f} s at {server.endpoint_url}")
    try:
        yield S3TestServer(server)
    finally:
        # The data dir is thrown away: SIGKILL (0.1 s) instead of a 15 s graceful stop.
        server.stop(graceful=False)


@pytest.fixture
def s3_config_env(s3_server, monkeypatch):
    """This process talks to the test S3 server through the config's environment overrides, with a
    fresh storage client (none made with another test's keys)."""
    from transforms.common import storage
    for k, v in {**s3_server.env(), "RAGBEAM__S3__ENDPOINT_URL": s3_server.endpoint_url,
                 "RAGBEAM__S3__REGION": s3_server.region, "RAGBEAM__S3__ACCESS_KEY_ID": s3_server.access_key,
                 "RAGBEAM__S3__SECRET_ACCESS_KEY": s3_server.secret_key}.items():
        if k.startswith(("RAGBEAM__S3__", "AWS_")):
            monkeypatch.setenv(k, v)
    monkeypatch.setattr(storage, "_clients", {})
    return s3_server


@pytest.fixture
def upload_dir(s3_server):
    """upload_dir(local_dir, bucket, prefix) -> uploaded keys (bucket created if needed)."""
    return s3_server.upload_dir


# --- a small mixed-format corpus and its index, shared by the pipeline tests ------------
# A subset of samples/corpus keeps the embedding cost of the suite to seconds while
# still covering every format, a duplicate and a file that must be dead-lettered.
MINI_CORPUS_FILES = [
    "python/library/glob.html",
    "mirror/python/library/json.html",
    "python/library/json.html",
    "man/man3/fnmatch.3",
    "man/man3/globfree.3",
    "nodejs/api/punycode.md",
    "git/git-version.txt",
    "records/faq.jsonl",
    "broken/truncated.pdf",
]
SAMPLES = ROOT / "samples" / "corpus"


def copy_corpus(dest: Path, files=MINI_CORPUS_FILES) -> Path:
    import shutil
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SAMPLES / rel, target)
    return dest


@pytest.fixture(scope="session")
def mini_corpus(tmp_path_factory) -> Path:
    return copy_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def test_config():
    from configs.schema import load_config
    return load_config(environ={})


@pytest.fixture(scope="session")
def mini_index(mini_corpus, test_config, tmp_path_factory):
    """(index dir, summary) of the mini corpus indexed from the local folder."""
    from pipelines.index import run_index
    index_dir = tmp_path_factory.mktemp("index")
    summary = run_index(test_config, str(mini_corpus), str(index_dir), progress=False, log=lambda *_: None)
    return index_dir, summary


@pytest.fixture(scope="session")
def local_llm(tmp_path_factory):
    """llama-server with SmolLM2-135M on 127.0.0.1, a free port (infra/llm/server.py): started
    once by the first test that asks for it, stopped at the end. `make llm-setup` built it."""
    from infra.llm import server
    s = server.start(parallel=4, threads=1, ctx_per_slot=1536, log_dir=str(tmp_path_factory.mktemp("llm")))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def hostile_corpus(tmp_path):
    """A corpus with a non-UTF-8 file name, a link out of the root, a dangling link and a FIFO."""
    root = tmp_path / "corpus"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "good.md").write_text("# Good\n\nThe frobnicator turns widgets into gadgets.\n")
    bad = os.path.join(os.fsencode(root / "docs"), b"bad\xffname.md")
    with open(bad, "wb") as f:
        f.write(b"# Bad name\n\nThis file has a name that is not UTF-8.\n")
    outside = tmp_path / "outside-secret.txt"
    outside.write_text("root:x:0:0:root:/root:/bin/bash\n")
    os.symlink(outside, root / "docs" / "passwd-link.txt")
    os.symlink(tmp_path, root / "escape-dir")
    os.symlink(root / "missing.md", root / "docs" / "dangling.md")
    os.mkfifo(root / "docs" / "pipe.md")
    return root
