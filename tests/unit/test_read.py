"""The read stage on a local folder: listing and reading, and S3 settings that hide their secrets."""
from __future__ import annotations

import hashlib
import os
import pickle

import pytest

from transforms.common.s3 import S3Settings
from transforms.ingest.read import ReadObjectsFn, list_objects, read_object
from transforms.records import RawObject

BINARY = bytes(range(256)) * 37 + b"\x00\xff"
EXPECTED_KEYS = ["a.md", "empty.txt", "sub/b.html", "sub/deeper/c.bin", "z.txt"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    return root, make_corpus(root)


def make_corpus(root):
    files = {
        "a.md": b"# Title\n\nSome text.\n",
        "empty.txt": b"",
        "sub/b.html": "<html><body><h1>Caf\u00e9</h1></body></html>".encode(),
        "sub/deeper/c.bin": BINARY,
        "z.txt": b"last\n" * 1000,
        ".hidden": b"secret",  # hidden files and dirs are skipped everywhere
        ".git/config": b"[core]\n",
        "sub/.DS_Store": b"\x00\x01",
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def test_local_listing_keys_sizes_order(corpus):
    root, files = corpus
    listed = list_objects(str(root))
    assert [o.key for o in listed] == EXPECTED_KEYS
    assert {o.key: o.size for o in listed} == {k: len(files[k]) for k in EXPECTED_KEYS}
    assert all(o.uri == os.path.join(str(root), o.key) for o in listed)
    assert list_objects(str(root)) == listed  # deterministic
    assert list_objects(f"file://{root}") == listed


def test_local_listing_survives_symlink_loop(tmp_path):
    make_corpus(tmp_path)
    os.symlink(tmp_path, tmp_path / "sub" / "loop")  # sub/loop -> root
    assert [o.key for o in list_objects(str(tmp_path))] == EXPECTED_KEYS


def test_local_single_file_and_missing(corpus, tmp_path):
    root, files = corpus
    [one] = list_objects(str(root / "sub" / "b.html"))
    assert (one.key, one.size) == ("b.html", len(files["sub/b.html"]))
    with pytest.raises(FileNotFoundError):
        list_objects(str(tmp_path / "nope"))


def test_local_read(corpus):
    root, files = corpus
    for listed in list_objects(str(root)):
        raw = read_object(listed)
        assert raw.data == files[listed.key]
        assert raw.content_hash == hashlib.sha256(files[listed.key]).hexdigest()
        assert (raw.uri, raw.key, raw.size, raw.mtime) == (listed.uri, listed.key, listed.size,
                                                           listed.mtime)
        assert raw == RawObject.from_bytes(listed.uri, listed.key, raw.data, listed.mtime)


def test_settings_hide_secrets_and_pickle():
    s = S3Settings(endpoint_url="http://127.0.0.1:1", region="", access_key_id="AKIDEXAMPLE",
                   secret_access_key="wJalrXUtnFEMI")
    assert "AKIDEXAMPLE" not in repr(s) and "wJalrXUtnFEMI" not in str(s)
    assert s.region is None  # "${VAR:-}" in YAML gives ""
    shipped = pickle.dumps(ReadObjectsFn(s))  # what Beam ships to workers
    assert b"AKIDEXAMPLE" not in shipped and b"wJalrXUtnFEMI" not in shipped  # keys stay in the driver
    fn = pickle.loads(shipped)
    assert fn._client is None and fn._s3.endpoint_url == s.endpoint_url and fn._s3.access_key_id is None
