"""`cascade serve` over HTTP: its pages, read-only SQL, and one-sentence errors.

And the viewer attacked as an attacker would: statements that write hidden in a SELECT or an
EXPLAIN ANALYZE, table functions that read outside the lake, requests from other sites or
for other host names, a query that never ends, a client that leaves, too many queries.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

import pytest

from builders import math_rl_v2
from builders.runner import build_dataset
from cli.console import CascadeError
from cli.serve import ReadOnlyQueryError, Viewer, check_read_only, make_server
from lake import Lake

ROOT = Path(__file__).resolve().parents[1]
# 10^12 pairs: minutes of work, little memory; only an interrupt ends it soon.
RUNAWAY = "SELECT count(*) FROM range(1000000) a, range(1000000) b WHERE a.range + b.range < 0"


@contextlib.contextmanager
def serving(lake: Lake, limits=None) -> Iterator[str]:
    """A viewer of `lake` on a free port, as its base URL."""
    reader = Lake(lake.path, create=False, read_only=True)
    viewer = Viewer(reader) if limits is None else Viewer(reader, limits=limits)
    server = make_server(viewer, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        viewer.close()


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory) -> Lake:
    lake = Lake(tmp_path_factory.mktemp("serve") / "lake")
    build_dataset(lake, math_rl_v2, profile="demo", manifests_dir=lake.path / "manifests")
    return lake


@pytest.fixture(scope="module")
def served(demo_lake):
    with serving(demo_lake) as base:
        yield base, demo_lake


def get(url: str, method: str = "GET", headers: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def post(url: str, form: dict, headers: dict | None = None, timeout: float = 60) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=urlencode(form).encode(), method="POST", headers=headers or {}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def form_token(base: str) -> str:
    """The token the viewer's forms carry (read from its SQL page, as a browser would)."""
    _, html = get(base + "/sql")
    found = re.search(r'name="token" value="([^"]+)"', html)
    assert found, "the SQL page has no form token"
    return found.group(1)


def run_sql(base: str, query: str, timeout: float = 60) -> tuple[int, str]:
    """Submit the SQL form, as its run button does."""
    return post(base + "/sql", {"token": form_token(base), "q": query}, timeout=timeout)


def errors(html: str) -> list[str]:
    return [unescape(e) for e in re.findall(r'class="error"[^>]*>([^<]*)<', html)]


def cells(html: str) -> list[str]:
    return [unescape(c) for c in re.findall(r"<td>(.*?)</td>", html, flags=re.DOTALL)]


def file_hashes(root: Path) -> dict[str, str]:
    """Every file under `root` by its sha256 (SQLite's -wal/-shm sidecars aside)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


# -- the statement check ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "CREATE TABLE t AS SELECT 1",
        "COPY (SELECT 1) TO '/tmp/x.csv'",
        "ATTACH '/tmp/other.db'",
        "INSERT INTO lake.math_rl_v2 SELECT * FROM math_rl_v2",
        "SET threads = 1",
        "INSTALL httpfs",
        "SELECT 1; DROP TABLE drops",
        "SELECT 1 /* one */; -- two\n COPY (SELECT 1) TO '/tmp/x.csv'",
        "PREPARE p AS SELECT 1",
        "CREATE TEMP TABLE t AS SELECT 1",
        "EXPLAIN ANALYZE COPY (SELECT 1) TO '/tmp/x.csv'",
        "EXPLAIN COPY (SELECT 1) TO '/tmp/x.csv'",
        "/* hidden */ EXPLAIN -- still\n ANALYZE CREATE TEMP TABLE t AS SELECT 1",
        "EXPLAIN ANALYZE SET enable_external_access = true",
        "SELECT * FROM query('COPY (SELECT 1) TO ''/tmp/x.csv''')",
        "SELECT * FROM sqlite_scan('/tmp/other.sqlite', 't')",
        "SELECT * FROM sqlite_query('__ducklake_metadata_lake', 'DELETE FROM x RETURNING *')",
        "SELECT * FROM ducklake_expire_snapshots('lake', older_than => now())",
        "SELECT * FROM (SELECT 1) t, LATERAL (SELECT * FROM ducklake_flush_inlined_data('lake'))",
        "SELECT * FROM lake.merge_adjacent_files()",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT 1'))",
        "SELECT (SELECT count(*) FROM glob('/*'))",
    ],
)
def test_anything_but_one_select_that_only_reads_is_refused(query: str) -> None:
    with pytest.raises(ReadOnlyQueryError, match="read-only|one statement"):
        check_read_only(query)


def test_selects_pass_the_check() -> None:
    for query in (
        "SELECT 1",
        "WITH a AS (SELECT 1) SELECT * FROM a",
        "FROM drops",
        "EXPLAIN SELECT 1",
        "EXPLAIN ANALYZE SELECT count(*) FROM drops",
        "DESCRIBE drops",
        "SELECT * FROM lake.snapshots()",
        "SELECT * FROM range(3), ducklake_table_info('lake')",
    ):
        check_read_only(query)


# -- pages ------------------------------------------------------------------------------------


def test_pages_list_tables_and_versions(served) -> None:
    base, lake = served
    status, html = get(base + "/")
    assert status == 200
    for table in ("math_rl_v2", "math_rl_v2_sources", "drops"):
        assert f'<a href="/table/{table}">{table}</a>' in html
    status, html = get(base + "/table/math_rl_v2")
    assert status == 200 and 'action="/report/math_rl_v2@1"' in html
    assert lake.resolve("math_rl_v2").content_hash[:16] in html
    # the page previews the latest version's first rows, each uid linking to its drops
    preview = html.split('<table id="preview">')[1].split("</table>")[0]
    first = lake.sql('SELECT uid, problem FROM "math_rl_v2@1" LIMIT 1').fetchall()[0]
    assert preview.count("<tr>") == 1 + 20 and "<th>problem</th>" in preview
    assert f'<a href="/row?uid={quote(first[0])}">' in preview
    assert f"the first 20 rows of {lake.resolve('math_rl_v2').rows:,}" in html
    (rows,) = [unescape(q) for q in re.findall(r'name="q" value="([^"]*)"', html)]
    assert rows == 'SELECT * FROM "math_rl_v2@1" LIMIT 100'  # the version's "rows" button
    status, html = run_sql(base, rows)
    assert status == 200 and html.count("<tr>") == 1 + 100


def test_sql_results_show_as_a_table_and_writes_are_refused(served) -> None:
    base, _ = served
    query = "SELECT uid, reason FROM drops WHERE step = 'decontaminate' ORDER BY uid"
    status, html = run_sql(base, query)
    assert status == 200
    assert html.count("<tr>") == 1 + 26 and "contaminated" in html
    assert '<a href="/row?uid=demo_math%3A' in html  # uids link to their drops
    status, html = run_sql(base, "DROP TABLE drops")
    assert status == 400
    assert errors(html) == ["the viewer is read-only: only SELECT queries run here, not DROP"]
    status, html = run_sql(base, "SELECT * FROM nope")
    assert status == 400 and "nope" in errors(html)[0]
    assert get(base + "/sql", method="PUT")[0] == 405


def test_report_and_drops_of_a_row(served) -> None:
    base, lake = served
    status, html = post(base + "/report/math_rl_v2@1", {"token": form_token(base)})
    assert status == 200 and 'id="chart-funnel"' in html
    status, html = post(base + "/report/math_rl_v2@4", {"token": form_token(base)})
    assert status == 404
    assert errors(html) == ["table 'math_rl_v2' has no version 4 (versions 1..1)"]
    uid, item = lake.sql(
        "SELECT uid, detail->>'benchmark_id' FROM drops WHERE step = 'decontaminate' LIMIT 1"
    ).fetchone()
    status, html = get(base + "/row?uid=" + quote(uid))
    assert status == 200
    assert "math_rl_v2@1 · decontaminate · contaminated" in html
    assert f"demo_bench item {item}" in html and '<mark class="ngram">' in html
    status, html = get(base + "/row?uid=nobody")
    assert status == 200 and 'id="no-drops"' in html


def test_a_port_in_use_is_one_sentence(served) -> None:
    _, lake = served
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        viewer = Viewer(lake)
        with pytest.raises(CascadeError) as caught:
            make_server(viewer, "127.0.0.1", port)
        viewer.close()
    assert str(caught.value) == f"port {port} on 127.0.0.1 is in use; choose another with --port"


def test_serve_refuses_a_missing_lake(tmp_path) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    result = CliRunner().invoke(app, ["--lake", str(tmp_path / "none"), "serve", "--port", "0"])
    assert isinstance(result.exception, CascadeError)
    assert str(result.exception).startswith(f"no lake at {tmp_path / 'none'}")
    assert not (tmp_path / "none").exists()


def test_a_limit_duckdb_does_not_take_is_one_sentence(served) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    _, lake = served
    args = ["--lake", str(lake.path), "serve", "--port", "0", "--query-memory", "lots"]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, CascadeError)
    assert str(result.exception) == (
        "--query-memory 'lots': Parser Error: Memory must have a number (e.g. 1GB)"
    )


# -- nothing is written, nothing outside the lake is read -------------------------------------


def test_explain_analyze_copy_changes_no_file_of_the_lake(served) -> None:
    base, lake = served
    before = file_hashes(lake.path)
    published = lake.files("math_rl_v2")[0]
    attacks = [
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{target}' (FORMAT parquet)"
        for target in (published, lake.path / "lake.json", lake.path / "catalog.sqlite")
    ]
    for attack in attacks:  # what a cross-site <img src=...> sends
        get(base + "/sql?q=" + quote(attack))
    assert file_hashes(lake.path) == before
    for attack in attacks:  # the SQL form itself
        status, html = run_sql(base, attack)
        assert status == 400
        assert errors(html) == [
            "the viewer is read-only: EXPLAIN [ANALYZE] runs here for a SELECT, not COPY"
        ]
    assert file_hashes(lake.path) == before
    lake.verify_hash("math_rl_v2")


def test_even_past_the_check_the_lake_cannot_be_written(served) -> None:
    from cli.serve import read_only_connection

    _, lake = served
    before = file_hashes(lake.path)
    published = lake.files("drops")[0]
    con = read_only_connection(lake, "")
    with pytest.raises(Exception, match="read-only mode"):
        con.execute("INSERT INTO lake.math_rl_v2 SELECT * FROM math_rl_v2 LIMIT 1")
    with pytest.raises(Exception, match="lock_configuration|locked"):
        con.execute("SET enable_external_access = true")
    for target in (published, str(lake.path / "lake.json"), str(lake.path / "data" / "new.csv")):
        with pytest.raises(Exception, match="Permission Error"):
            con.execute(f"COPY (SELECT 1 AS x) TO '{target}'")
    for outside in ("/etc/passwd", str(lake.path / "lake.json")):
        with pytest.raises(Exception, match="Permission Error"):
            con.execute(f"SELECT * FROM read_text('{outside}')")
    assert con.execute("SELECT count(*) FROM drops").fetchone()[0] > 0  # the lake's files read
    con.close()
    assert file_hashes(lake.path) == before


def test_files_outside_the_lake_are_not_read(served, tmp_path) -> None:
    import sqlite3

    import pyarrow as pa
    import pyarrow.parquet as pq

    base, _ = served
    secret = tmp_path / "secret.sqlite"
    db = sqlite3.connect(secret)
    db.execute("CREATE TABLE t (s TEXT)")
    db.execute("INSERT INTO t VALUES ('the secret')")
    db.commit()
    db.close()
    pq.write_table(pa.table({"s": ["the secret"]}), tmp_path / "secret.parquet")
    for query, refusal in (
        ("SELECT * FROM read_text('/etc/passwd')", "read_text() is not one of"),
        (f"SELECT * FROM sqlite_scan('{secret}', 't')", "sqlite_scan() is not one of"),
        (f"SELECT * FROM read_parquet('{tmp_path / 'secret.parquet'}')", "Permission Error"),
        (f"SELECT * FROM '{tmp_path / 'secret.parquet'}'", "Permission Error"),
    ):
        status, html = run_sql(base, query)
        assert status == 400 and refusal in errors(html)[0], (query, errors(html))
        assert "the secret" not in html


def test_a_duckdb_file_catalog_is_read_only_and_answers_query_after_query(tmp_path) -> None:
    # Written by another process: a DuckDB-file catalog is attached read-write by one process.
    script = textwrap.dedent(
        """
        import sys
        import polars as pl
        from lake.catalog import Lake, LakeConfig
        lake = Lake(sys.argv[1], config=LakeConfig(catalog="duckdb"))
        rows = pl.DataFrame({"uid": [f"t:{i}" for i in range(5)], "id": [str(i) for i in range(5)],
            "source": ["t"] * 5, "source_id": [str(i) for i in range(5)], "domain": ["math"] * 5,
            "problem": ["What is 1 + 1?"] * 5, "answer": ["2"] * 5, "metadata": ["{}"] * 5})
        lake.commit("p", rows, kind="prompts")
        lake.commit("p", rows.head(3), kind="prompts")
        """
    )
    where = tmp_path / "lake"
    subprocess.run([sys.executable, "-c", script, str(where)], check=True, cwd=ROOT)
    lake = Lake(where, create=False, read_only=True)
    before = file_hashes(where)
    with serving(lake) as base:
        for query, want in (
            ("SELECT count(*) FROM p", "3"),
            ('SELECT count(*) FROM "p@1"', "5"),
            ("SELECT readonly FROM duckdb_databases() WHERE database_name = 'lake'", "True"),
        ):
            status, html = run_sql(base, query)
            assert status == 200 and cells(html) == [want], (query, errors(html))
        status, html = run_sql(base, "SELECT * FROM lake.settings()")
        assert status == 200
    assert file_hashes(where) == before
    assert [v.version for v in Lake(where, create=False, read_only=True).versions("p")] == [1, 2]


def test_query_results_and_errors_are_html_escaped(served) -> None:
    base, _ = served
    status, html = run_sql(base, """SELECT '<script>alert(1)</script>' AS "<b>c</b>" """)
    assert status == 200
    assert "<script>alert(1)" not in html and "<b>c</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;c&lt;/b&gt;" in html
    status, html = run_sql(base, 'SELECT * FROM "<script>alert(2)</script>"')
    assert status == 400 and "<script>alert(2)" not in html and "&lt;script&gt;alert(2)" in html


# -- only the viewer's own pages may ask ------------------------------------------------------


def raw_get(base: str, path: str, headers: dict[str, str]) -> int:
    """GET with exactly these headers (Host included), as another page's browser would send."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
    for name, value in headers.items():
        conn.putheader(name, value)
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


def test_requests_for_another_host_name_are_refused(served) -> None:
    base, _ = served
    port = urlsplit(base).port
    assert raw_get(base, "/", {"Host": f"127.0.0.1:{port}"}) == 200
    assert raw_get(base, "/", {"Host": f"localhost:{port}"}) == 200
    for host in (f"attacker.example:{port}", "127.0.0.1:1", f"127.0.0.1.attacker.example:{port}"):
        assert raw_get(base, "/", {"Host": host}) == 421, host  # DNS rebinding
    assert raw_get(base, "/", {}) == 421


def test_the_names_a_server_answers_to() -> None:
    from cli.serve import Audience

    local = Audience.of("127.0.0.1", 8765, ["viewer.internal"])
    assert local.names_us("127.0.0.1:8765") and local.names_us("localhost:8765")
    assert local.names_us("[::1]:8765") and local.names_us("viewer.internal:8765")
    assert not local.names_us("10.0.0.5:8765") and not local.names_us("127.0.0.1:8766")
    everywhere = Audience.of("0.0.0.0", 80)
    assert everywhere.names_us("10.0.0.5") and everywhere.names_us("[fd00::1]")
    assert not everywhere.names_us("rebound.attacker.example")


def test_cross_site_requests_are_refused(served) -> None:
    base, _ = served
    host = urlsplit(base).netloc
    form = {"token": form_token(base), "q": "SELECT 42 AS answer"}
    assert post(base + "/sql", form, {"Origin": base})[0] == 200
    assert post(base + "/sql", form, {"Sec-Fetch-Site": "same-origin", "Origin": base})[0] == 200
    for headers in (
        {"Origin": "http://attacker.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"},
        {"Referer": "http://attacker.example/page"},
    ):
        status, body = post(base + "/sql", form, headers)
        assert status == 403 and "another site" in body, headers
    image = {"Host": host, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "image"}
    image["Sec-Fetch-Mode"] = "no-cors"
    assert raw_get(base, "/row?uid=x", image) == 403
    # A link followed from another site lands: GET pages only show.
    link = {"Host": host, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    assert raw_get(base, "/table/drops", {**link, "Sec-Fetch-Dest": "document"}) == 200


def test_a_get_runs_no_query_and_a_post_needs_the_form_token(served) -> None:
    base, _ = served
    status, html = get(base + "/sql?q=" + quote("SELECT 6 * 7 AS answer"))
    assert status == 200 and "SELECT 6 * 7 AS answer</textarea>" in html  # filled in
    assert 'id="sql-result"' not in html and "42" not in cells(html)  # not run
    status, html = post(base + "/sql", {"q": "SELECT 6 * 7 AS answer"})
    assert status == 403 and "not from this server's pages" in errors(html)[0]
    status, html = post(base + "/sql", {"q": "SELECT 6 * 7 AS answer", "token": "guess"})
    assert status == 403
    status, html = get(base + "/report/math_rl_v2@1")
    assert status == 200 and 'id="report-render"' in html and "chart-funnel" not in html


def test_pages_carry_security_headers(served) -> None:
    base, _ = served
    with urllib.request.urlopen(base + "/", timeout=60) as response:
        headers = response.headers
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert "script-src" not in headers["Content-Security-Policy"]  # default-src 'none'
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Referrer-Policy"] == "same-origin"
    request = urllib.request.Request(
        base + "/report/math_rl_v2@1",
        data=urlencode({"token": form_token(base)}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        policy = response.headers["Content-Security-Policy"]
        html = response.read().decode()
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", html, flags=re.DOTALL)
    assert len(scripts) >= 3 and "'unsafe-inline'" not in policy.split("script-src")[1]
    assert policy.split("script-src")[1].count("'sha256-") == len(scripts)


# -- limits -----------------------------------------------------------------------------------


def test_a_query_runs_under_its_memory_thread_and_spill_limits(demo_lake) -> None:
    from cli.serve import QueryLimits

    limits = QueryLimits(memory="300MiB", threads=1, spill="50MiB")
    with serving(demo_lake, limits) as base:
        status, html = run_sql(
            base,
            "SELECT current_setting('memory_limit'), current_setting('threads'), "
            "current_setting('max_temp_directory_size'), current_setting('temp_directory')",
        )
    assert status == 200, errors(html)
    memory, threads, spill, temp = cells(html)
    assert (memory, threads, spill) == ("300.0 MiB", "1", "50.0 MiB")
    assert "cascade-serve-" in temp and not Path(temp).exists()  # private, removed after


def test_a_runaway_query_stops_at_its_time_limit_while_other_pages_answer(demo_lake) -> None:
    from cli.serve import QueryLimits

    with serving(demo_lake, QueryLimits(seconds=3)) as base:
        answer: list[tuple[int, str]] = []
        runaway = threading.Thread(target=lambda: answer.append(run_sql(base, RUNAWAY)))
        started = time.monotonic()
        runaway.start()
        time.sleep(1.5)
        assert get(base + "/")[0] == 200 and get(base + "/table/drops")[0] == 200
        assert runaway.is_alive()  # the pages answered while it ran
        runaway.join(timeout=30)
        took = time.monotonic() - started
    assert not runaway.is_alive() and took < 30
    status, html = answer[0]
    assert status == 400
    assert errors(html) == [
        "the query ran past the 3 s limit and was stopped; add a LIMIT, a filter or an aggregate"
    ]


def _poll(check, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_queries_beyond_the_bound_get_503_and_a_client_that_leaves_stops_its_query(
    demo_lake,
) -> None:
    from cli.serve import QueryLimits

    with serving(demo_lake, QueryLimits(seconds=300, concurrent=1)) as base:
        parts = urlsplit(base)
        body = urlencode({"token": form_token(base), "q": RUNAWAY}).encode()
        client = socket.create_connection((parts.hostname, parts.port))
        client.sendall(
            b"POST /sql HTTP/1.1\r\nHost: " + parts.netloc.encode() + b"\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        busy: list[str] = []

        def refused() -> bool:
            status, html = run_sql(base, "SELECT 1")
            busy[:] = errors(html)
            return status == 503

        assert _poll(refused, 30), "a second query ran beside the first (bound 1)"
        assert busy == [
            "the viewer is already running 1 queries (its --max-queries); try again when one "
            "has finished"
        ]
        client.close()  # the client leaves; its query had 300 s left
        assert _poll(lambda: run_sql(base, "SELECT 1")[0] == 200, 30), "its query ran on"
