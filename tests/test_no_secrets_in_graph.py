"""Credentials stay out of the job graph: the pickled DoFns in the pipeline proto that a
runner receives hold no S3 key bytes (workers resolve keys from their own environment)."""
import json

import apache_beam as beam
import pytest

from tests.test_incremental import TINY

SECRET = "sEcReT-do-not-ship-4f1c9a"
KEY_ID = "AKIA-do-not-ship-77aa"


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


def _cfg(test_config, s3_server):
    return test_config.model_copy(update={"s3": test_config.s3.model_copy(update={
        "endpoint_url": s3_server.endpoint_url, "region": s3_server.region,
        "access_key_id": KEY_ID, "secret_access_key": SECRET})})


def test_index_and_answer_job_graphs_hold_no_keys(s3_server, test_config, tmp_path, capture_graph, monkeypatch,
                                                  mini_index):
    from pipelines.answer import run_answer
    from pipelines.index import run_index
    from tests.conftest import SAMPLES
    # the real keys for the driver's own calls come from the environment, as on a cluster
    for k, v in (("RAGBEAM__S3__ACCESS_KEY_ID", s3_server.access_key),
                 ("RAGBEAM__S3__SECRET_ACCESS_KEY", s3_server.secret_key)):
        monkeypatch.setenv(k, v)
    c = s3_server.client()
    try:
        c.create_bucket(Bucket="nosecrets")
    except Exception:
        pass
    for rel in TINY[:2]:
        c.upload_file(str(SAMPLES / rel), "nosecrets", f"docs/{rel}")
    cfg = _cfg(test_config, s3_server)
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
            assert SECRET.encode() not in blob and KEY_ID.encode() not in blob


def decoded_dofns(proto) -> list[bytes]:
    """Every ParDo's DoFn as the runner ships it (Beam zlib-compresses its pickles), unpickled
    and pickled again with cloudpickle, so that any key it carried is in the bytes in clear."""
    import cloudpickle
    from apache_beam.internal import pickler
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2
    out = []
    for t in proto.components.transforms.values():
        if t.spec.urn == common_urns.primitives.PAR_DO.urn:
            payload = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
            obj = pickler.loads(payload.do_fn.payload)
            out.append(cloudpickle.dumps(obj))
    return out
