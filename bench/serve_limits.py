"""`cascade serve` under a hostile query, this tree beside the viewer before its limits.

Both servers (this tree, and commit ffb0b0a extracted with `git archive`) serve the same demo
lake. Two scenarios, each against a fresh server process:

- heavy: one query that aggregates tens of millions of wide strings; the server's peak RSS
  while it runs (sampled every 0.1 s) and how it ends;
- leave: a cross join that would run for minutes, whose client disconnects after 1 s; the
  CPU seconds the server spends in the 5 s after that.

The old viewer runs a query from a GET; this one from a POST carrying its form token.

    python bench/serve_limits.py [--rows 20000000] [--old ffb0b0a]
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlencode

import psutil

ROOT = Path(__file__).resolve().parents[1]
RUNAWAY = "SELECT count(*) FROM range(1000000) a, range(1000000) b WHERE a.range + b.range < 0"


def heavy_query(rows: int) -> str:
    return (
        "SELECT k, string_agg(v, ',') AS s FROM (SELECT range % 3000000 AS k, "
        f"'row-' || range || repeat('x', 40) AS v FROM range({rows})) GROUP BY k "
        "ORDER BY length(s) DESC LIMIT 3"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(tree: Path, lake: Path) -> Iterator[tuple[str, psutil.Process]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "--lake", str(lake),
         "--quiet", "serve", "--port", str(port)],
        cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(base + "/", timeout=5).read()
            break
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the server of {tree} did not start") from None
            time.sleep(0.3)
    try:
        yield base, psutil.Process(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def request(base: str, query: str) -> tuple[str, bytes, bytes]:
    """(method and path, headers+body) that run `query` on this server."""
    html = urllib.request.urlopen(base + "/sql", timeout=30).read().decode()
    token = re.search(r'name="token" value="([^"]+)"', html)
    host = base.removeprefix("http://").encode()
    if token is None:  # the old viewer: a GET runs the query
        return "GET", f"GET /sql?q={quote(query)} HTTP/1.1\r\nHost: ".encode() + host, b""
    body = urlencode({"token": token.group(1), "q": query}).encode()
    head = (
        b"POST /sql HTTP/1.1\r\nHost: " + host + b"\r\nContent-Type: "
        b"application/x-www-form-urlencoded\r\nContent-Length: " + str(len(body)).encode()
    )
    return "POST", head, body


def send(base: str, query: str) -> socket.socket:
    _, head, body = request(base, query)
    port = int(base.rsplit(":", 1)[1])
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(head + b"\r\nConnection: close\r\n\r\n" + body)
    return client


def heavy(base: str, proc: psutil.Process, query: str, limit_s: float) -> dict:
    peak = proc.memory_info().rss
    client = send(base, query)
    answer: list[bytes] = []

    def read() -> None:
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                chunks.append(chunk)
        answer.append(b"".join(chunks))

    reader = threading.Thread(target=read, daemon=True)
    started = time.monotonic()
    reader.start()
    while reader.is_alive() and time.monotonic() - started < limit_s:
        with contextlib.suppress(psutil.Error):
            peak = max(peak, proc.memory_info().rss)
        time.sleep(0.1)
    took = time.monotonic() - started
    client.close()
    if not answer:
        return {
            "peak_rss_mib": peak / 2**20,
            "seconds": took,
            "end": f"still running at {limit_s:g} s",
        }
    text = answer[0].decode(errors="replace")
    status = text.split(" ", 2)[1] if text.startswith("HTTP/") else "?"
    error = re.search(r'class="error"[^>]*>([^<]*)<', text)
    end = f"{status} " + (error.group(1)[:90] if error else "rows shown")
    return {"peak_rss_mib": peak / 2**20, "seconds": took, "end": end}


def leave(base: str, proc: psutil.Process) -> dict:
    client = send(base, RUNAWAY)
    time.sleep(1.0)
    client.close()
    time.sleep(0.5)  # the server's next look at the socket
    before = sum(proc.cpu_times()[:2])
    time.sleep(5.0)
    return {"cpu_s_in_5s_after_leaving": sum(proc.cpu_times()[:2]) - before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--old", default="ffb0b0a")
    parser.add_argument("--limit-s", type=float, default=120.0)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from builders import math_rl_v2
    from builders.runner import build_dataset
    from lake import Lake

    work = Path(tempfile.mkdtemp(prefix="cascade-bench-serve-"))
    try:
        old = work / "old"
        old.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.old], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        lake = Lake(work / "lake")
        build_dataset(lake, math_rl_v2, profile="demo", manifests_dir=lake.path / "manifests")
        lake.close()
        for name, tree in (("old " + args.old, old), ("this tree", ROOT)):
            with server(tree, lake.path) as (base, proc):
                result = heavy(base, proc, heavy_query(args.rows), args.limit_s)
            with server(tree, lake.path) as (base, proc):
                result |= leave(base, proc)
            print(f"{name}: " + ", ".join(
                f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()
            ))  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
