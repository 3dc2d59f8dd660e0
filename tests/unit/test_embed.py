"""The embedder: real model, unit vectors, semantic sanity, pinned file."""
import dataclasses

import numpy as np
import pytest

from transforms.ingest.embed import Embedder, ModelFileError, default_model_spec


@pytest.fixture(scope="module")
def embedder():
    return Embedder(default_model_spec())


def test_vectors_are_unit_and_meaningful(embedder):
    v = embedder.encode(["How do I parse JSON in Python?",
                         "json.loads deserializes a string containing a JSON document.",
                         "Penguins live in the southern hemisphere."])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_batching_does_not_change_vectors(embedder):
    texts = [("word " * n).strip() for n in (1, 5, 40, 120)]
    one = np.stack([embedder.encode([t])[0] for t in texts])
    assert np.allclose(embedder.encode(texts, batch_size=4), one, atol=1e-5)


def test_model_file_is_pinned(tmp_path):
    spec = default_model_spec()
    with pytest.raises(ModelFileError, match="expected 0000"):
        Embedder(dataclasses.replace(spec, model_sha256="0" * 64))
    with pytest.raises(ModelFileError, match="not found"):
        Embedder(dataclasses.replace(spec, model_path=str(tmp_path / "missing.onnx")))
