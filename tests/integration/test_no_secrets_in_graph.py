"""Credentials stay out of the job graph: the pickled DoFns in the pipeline proto that a
runner receives hold no S3 key bytes (workers resolve keys from their own environment)."""
import json

import apache_beam as beam
import pytest

from tests.integration.test_incremental import TINY



class _Captured(Exception):
    pass


@pytest.fixture
def capture_graph(monkeypatch):
    graphs = []

    def run(self, test_runner_api="AUTO"):
        graphs.append(self.to_runner_api())
        raise _Captured()
    monkeypatch.setattr(beam.Pipeline, "run", run)
    return graphs


def test_index_and_answer_job_graphs_hold_no_keys(s3_server, test_config, tmp_path, capture_graph, monkeypatch,
                                                  mini_index):
    from pipelines.answer import run_answer
    from pipelines.index import run_index
    from tests.conftest import SAMPLES
    from tests.integration.test_incremental import s3_config
    # the keys are in the config, as a user would give them: the driver uses them, the graph must not hold them
    secret, key_id = s3_server.secret_key.encode(), s3_server.access_key.encode()
    assert len(secret) >= 12 and len(key_id) >= 8
    c = s3_server.client()
    try:
        c.create_bucket(Bucket="nosecrets")
    except Exception:
        pass
    for rel in TINY[:2]:
        c.upload_file(str(SAMPLES / rel), "nosecrets", f"docs/{rel}")
    cfg = s3_config(test_config, s3_server)
    with pytest.raises(_Captured):
        run_index(cfg, "s3://nosecrets/docs", "s3://nosecrets/index", progress=False, log=lambda *_: None)
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"id": "q1", "question": "What does fnmatch match?"}) + "\n")
    with pytest.raises(_Captured):
        run_answer(cfg, str(mini_index[0]), str(qfile), str(tmp_path / "a.jsonl"), progress=False,
                   log=lambda *_: None)
    assert len(capture_graph) == 2
    for proto in capture_graph:
        blobs = decoded_dofns(proto)
        assert len(blobs) > 5
        raw = proto.SerializeToString()
        for blob in blobs + [raw]:
            assert secret not in blob and key_id not in blob


def decoded_dofns(proto) -> list[bytes]:
    """Every ParDo's DoFn pickle as the runner ships it, decompressed (Beam base64-encodes a
    bz2/zlib-compressed pickle), so that any key it carried is in the bytes in clear."""
    import base64
    import bz2
    import zlib
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2
    out = []
    for t in proto.components.transforms.values():
        if t.spec.urn == common_urns.primitives.PAR_DO.urn:
            packed = base64.b64decode(beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).do_fn.payload)
            try:
                out.append(bz2.decompress(packed))
            except OSError:
                out.append(zlib.decompress(packed))
    return out
