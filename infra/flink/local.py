"""A local Flink session cluster with Beam's job server; SDK workers started by the task managers.

    python -m infra.flink.local run -- CMD ...   # start the stack, run CMD, stop the stack
    python -m infra.flink.local start|stop|status [--dir .local-flink]

The stack: one job manager and two task managers (two slots each) of Flink 1.16.3, and
Beam's `FlinkJobServerDriver` run from the Maven classpath of beam-runners-flink-1.16:2.56.0.
SDK workers: the PROCESS environment. Each task manager starts its own through
infra/flink/sdk-boot.sh, which runs Beam's Python SDK boot program in this project's venv.
(One EXTERNAL worker pool shared by two task managers does not work: both number their
workers "1-1", "2-1", ..., and the pool keys its workers by that id, so one task manager's
StopWorker kills the other's worker mid-bundle: "CANCELLED: client cancelled". On Kubernetes
each task manager pod has a pool of its own, infra/flink/k8s/.) `infra/flink/setup.sh`
fetches Flink, the classpath and builds the boot program once; nothing is downloaded here.

Exposure: Beam's gRPC servers (job, artifact and expansion services, the Fn API servers on
the task managers) listen on every interface whatever they are told, and a job service runs
any code it is sent. Run the stack inside a network namespace with only loopback
(`infra/flink/netns.sh`, which `make test-flink` and `make demo-flink` use); `start` outside
one refuses unless RAGBEAM_FLINK_EXPOSED=1 says the exposure is accepted. Inside such a
namespace nothing else listens, so the ports are fixed (configs/flink-local.yaml).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from infra.procs import alive as _alive, die_with_parent as _die_with_parent, listening as _listening, log_tail as _log_tail

ROOT = Path(__file__).resolve().parents[2]
FLINK_VERSION = "1.16.3"
BEAM_RUNNER = "beam-runners-flink-1.16-2.56.0"
JOB_SERVER_MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver"
DEFAULT_PORTS = {"rest": 8081, "rpc": 6123, "job": 8099, "artifact": 8098, "expansion": 8097}
SDK_BOOT = ROOT / "infra" / "flink" / "sdk-boot.sh"
START_TIMEOUT_S = 120.0

# Flink 1.16 predates its Java 17 support: the daemons die at start with IllegalAccessError
# (sun.net.util.IPAddressUtil) without these. The set is the one Flink 1.18 ships for Java 17.
JAVA17_OPTS = " ".join([
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.api=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.parser=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.tree=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.util=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.text=ALL-UNNAMED",
    "--add-opens=java.base/java.time=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED",
])


def cache_dir() -> Path:
    return Path(os.environ.get("RAGBEAM_CACHE", Path.home() / ".cache" / "ragbeam")) / "flink"


def flink_home() -> Path:
    return cache_dir() / f"flink-{FLINK_VERSION}"


def classpath_file() -> Path:
    return cache_dir() / f"{BEAM_RUNNER}.classpath"


def ensure_setup() -> None:
    """Run infra/flink/setup.sh unless its cache is complete (it is idempotent either way)."""
    if not ((flink_home() / ".complete").exists() and classpath_file().exists()
            and list(cache_dir().glob("beam-boot-*/boot"))):
        subprocess.run([str(ROOT / "infra" / "flink" / "setup.sh")], check=True, stdout=subprocess.DEVNULL)


def isolated_network() -> bool:
    """True inside a network namespace whose only interface is loopback."""
    # /proc/net/dev follows this process's namespace (/sys/class/net follows sysfs's mount)
    try:
        with open("/proc/net/dev") as f:
            names = {line.split(":", 1)[0].strip() for line in f.readlines()[2:] if ":" in line}
    except OSError:
        return False
    return names == {"lo"}


def flink_conf(run_dir: Path, ports: dict[str, int], task_slots: int) -> str:
    conf = {
        "jobmanager.rpc.address": "127.0.0.1",
        "jobmanager.bind-host": "127.0.0.1",
        "jobmanager.rpc.port": ports["rpc"],
        "jobmanager.memory.process.size": "1024m",
        "taskmanager.bind-host": "127.0.0.1",
        "taskmanager.host": "127.0.0.1",
        "taskmanager.numberOfTaskSlots": task_slots,
        # Flink deploys a batch graph whole and every blocking result partition asks for
        # sort-shuffle.min-buffers (512 by default): at 1280 MB a task manager ran out of
        # network buffers on the index job; 2 GB with 256 MB of network memory and 64 do.
        "taskmanager.memory.process.size": "2048m",
        "taskmanager.memory.network.min": "256m",
        "taskmanager.memory.network.max": "256m",
        "taskmanager.network.sort-shuffle.min-buffers": 64,
        "rest.address": "127.0.0.1",
        "rest.bind-address": "127.0.0.1",
        "rest.port": ports["rest"],
        "parallelism.default": 2,
        "cluster.evenly-spread-out-slots": "true",  # a job's subtasks on both task managers, not one
        # a lost task manager is noticed in ~20 s, not the default 50 (one machine: no slow links)
        "heartbeat.interval": 4000,
        "heartbeat.timeout": 20000,
        "io.tmp.dirs": str(run_dir / "tmp"),
        "env.log.dir": str(run_dir / "log"),
        "env.pid.dir": str(run_dir),
        "env.java.opts": JAVA17_OPTS,  # the key's name in 1.16 (1.18 calls it env.java.opts.all)
    }
    return "".join(f"{k}: {v}\n" for k, v in conf.items())


def children(pid: int) -> list[int]:
    """Direct child processes of pid (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return out


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


class StartError(RuntimeError):
    pass


@dataclass
class Stack:
    run_dir: str
    ports: dict[str, int]
    pids: dict[str, int] = field(default_factory=dict)  # role -> pid (jobmanager, taskmanager-1, ...)
    _procs: dict = field(default_factory=dict, repr=False, compare=False)

    # -- what a pipeline needs --------------------------------------------------------------
    @property
    def job_endpoint(self) -> str:
        return f"localhost:{self.ports['job']}"

    def runner_options(self, worker_env: Optional[dict[str, str]] = None) -> dict:
        """runner.options for this stack; worker_env goes into the job graph (no secrets)."""
        return {"job_endpoint": self.job_endpoint, "environment_type": "PROCESS",
                "environment_config": environment_config(worker_env), "parallelism": 2}

    # -- Flink's REST API -------------------------------------------------------------------
    def rest(self, path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['rest']}{path}", timeout=10) as r:
            return json.loads(r.read())

    def jobs(self) -> list[dict]:
        return self.rest("/jobs/overview")["jobs"]

    def task_managers(self) -> list[dict]:
        return self.rest("/taskmanagers")["taskmanagers"]

    def job_task_managers(self, job_id: str) -> set[str]:
        """The task managers (their resource ids) that ran some subtask of the job."""
        used = set()
        for vertex in self.rest(f"/jobs/{job_id}")["vertices"]:
            detail = self.rest(f"/jobs/{job_id}/vertices/{vertex['id']}/taskmanagers")
            used |= {tm["taskmanager-id"] for tm in detail["taskmanagers"]}
        return used

    # -- processes --------------------------------------------------------------------------
    def sdk_workers(self) -> list[int]:
        """The SDK harness processes the task managers started (Python's sdk_worker_main)."""
        out = []
        for tm in (p for r, p in self.pids.items() if r.startswith("taskmanager")):
            for pid in descendants(tm):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if b"sdk_worker_main" in f.read():
                            out.append(pid)
                except OSError:
                    continue
        return out

    def running(self) -> bool:
        return bool(self.pids) and all(_alive(p) for p in self.pids.values())

    def stop(self, timeout: float = 20.0) -> None:
        """The job server first, then the task managers (and their SDK workers), then the job manager."""
        order = ["jobserver"] + sorted(r for r in self.pids if r.startswith("taskmanager")) + ["jobmanager"]
        for role in order:
            pid = self.pids.get(role)
            if pid is None or not _alive(pid):
                continue
            if role.startswith("taskmanager"):
                for child in descendants(pid):  # the SDK workers it started
                    _signal(child, signal.SIGKILL)
            _signal(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                _signal(pid, signal.SIGKILL)
            proc = self._procs.get(role)
            if proc is not None:
                proc.wait(timeout=5)
        state = Path(self.run_dir) / "stack.json"
        state.unlink(missing_ok=True)

    def save(self) -> None:
        (Path(self.run_dir) / "stack.json").write_text(json.dumps({"ports": self.ports, "pids": self.pids}))

    @classmethod
    def load(cls, run_dir: str) -> Optional["Stack"]:
        try:
            data = json.loads((Path(run_dir) / "stack.json").read_text())
        except (OSError, ValueError):
            return None
        return cls(run_dir=str(run_dir), ports=data["ports"], pids=data["pids"])


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def environment_config(worker_env: Optional[dict[str, str]] = None) -> str:
    """The PROCESS environment's config: the boot command, and extra environment for the SDK
    workers (it travels in the job graph: never secrets; those come from the task managers)."""
    cfg = {"command": str(SDK_BOOT)}
    if worker_env:
        cfg["env"] = dict(worker_env)
    return json.dumps(cfg)


def start(run_dir: str | os.PathLike, *, task_managers: int = 2, task_slots: int = 2,
          ports: Optional[dict[str, int]] = None, worker_env: Optional[dict[str, str]] = None,
          die_with_parent: bool = True, timeout: float = START_TIMEOUT_S) -> Stack:
    """Start the job manager, the task managers and the job server; return once all task
    slots are registered and the job service accepts connections. worker_env: environment of
    the task managers, which their SDK workers inherit (e.g. the S3 endpoint and keys: on a
    cluster the workers resolve credentials themselves, the job graph carries none)."""
    if not isolated_network() and os.environ.get("RAGBEAM_FLINK_EXPOSED") != "1":
        raise StartError("refusing to start Beam's job server and Flink's task managers outside a private network "
                         "namespace: they listen on every interface and run any code sent to them. Use "
                         "infra/flink/netns.sh, or set RAGBEAM_FLINK_EXPOSED=1 to accept the exposure")
    ensure_setup()
    ports = {**DEFAULT_PORTS, **(ports or {})}
    busy = [f"{k} {p}" for k, p in ports.items() if _listening(p)]
    if busy:
        raise StartError(f"ports already in use: {', '.join(busy)} (is another stack running?)")
    run = Path(run_dir).resolve()
    for sub in ("conf", "log", "tmp", "artifacts"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    home = flink_home()
    (run / "conf" / "flink-conf.yaml").write_text(flink_conf(run, ports, task_slots))
    for name in ("log4j-console.properties", "log4j.properties"):
        shutil.copy(home / "conf" / name, run / "conf" / name)
    stack = Stack(run_dir=str(run), ports=ports)
    preexec = _die_with_parent if die_with_parent else None
    flink_env = {**os.environ, "FLINK_CONF_DIR": str(run / "conf"), "FLINK_LOG_DIR": str(run / "log")}

    def launch(role: str, argv: list[str], env: dict, cwd: Optional[str] = None) -> None:
        log = open(run / "log" / f"{role}.out", "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, preexec_fn=preexec)
        log.close()
        stack._procs[role], stack.pids[role] = proc, proc.pid

    try:
        # start-foreground execs the JVM: the pid is the daemon's, and it dies with us.
        launch("jobmanager", [str(home / "bin" / "jobmanager.sh"), "start-foreground"], flink_env)
        tm_env = {**flink_env, **(worker_env or {}), "TMPDIR": str(run / "tmp")}
        for i in range(1, task_managers + 1):
            launch(f"taskmanager-{i}", [str(home / "bin" / "taskmanager.sh"), "start-foreground"], tm_env,
                   cwd=str(ROOT))
        classpath = classpath_file().read_text().strip()
        launch("jobserver", ["java", "-cp", classpath, JOB_SERVER_MAIN,
                             "--job-host=127.0.0.1", f"--job-port={ports['job']}",
                             f"--artifact-port={ports['artifact']}", f"--expansion-port={ports['expansion']}",
                             f"--artifacts-dir={run / 'artifacts'}",
                             f"--flink-master=127.0.0.1:{ports['rest']}"], dict(os.environ))
        _wait_ready(stack, task_managers * task_slots, timeout)
    except BaseException:
        stack.stop(timeout=5)
        raise
    stack.save()
    return stack


def _wait_ready(stack: Stack, slots: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    run = Path(stack.run_dir)
    while time.monotonic() < deadline:
        dead = [r for r, p in stack.pids.items() if not _alive(p)]
        if dead:
            raise StartError(f"{dead[0]} exited at start; its log:\n{_log_tail(run / 'log' / (dead[0] + '.out'))}")
        try:
            registered = sum(tm["slotsNumber"] for tm in stack.task_managers())
        except OSError:
            registered = 0
        if registered >= slots and _listening(stack.ports["job"]):
            return
        time.sleep(0.5)
    raise StartError(f"the Flink stack was not ready in {timeout:.0f} s (logs in {run / 'log'})")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infra.flink.local", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["run", "start", "stop", "status"])
    ap.add_argument("--dir", default=str(ROOT / ".local-flink"), help="state dir (default: .local-flink)")
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[argv.index("--") + 1:] if "--" in argv else []  # run: the command after --
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    existing = Stack.load(args.dir)
    if args.command == "status":
        if existing is None or not existing.running():
            print("local Flink stack not running", file=sys.stderr)
            return 1
        print(json.dumps(asdict(existing) | {"task_managers": len(existing.task_managers())}, default=str))
        return 0
    if args.command == "stop":
        if existing is not None:
            existing.stop()
        print("local Flink stack stopped", file=sys.stderr)
        return 0
    if existing is not None and existing.running():
        print(f"local Flink stack already running (state in {args.dir})", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    stack = start(args.dir, die_with_parent=args.command == "run")
    print(f"# local Flink stack up in {time.monotonic() - t0:.1f} s: REST http://127.0.0.1:{stack.ports['rest']}, "
          f"job endpoint {stack.job_endpoint}", file=sys.stderr)
    if args.command == "start":
        return 0
    env = {**os.environ, "RAGBEAM_FLINK_JOB_ENDPOINT": stack.job_endpoint}  # configs/flink-local.yaml reads it
    try:
        return subprocess.call(cmd, env=env) if cmd else 0
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
