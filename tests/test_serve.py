"""`cascade serve` over HTTP: its pages, read-only SQL, and one-sentence errors."""

from __future__ import annotations

import re
import socket
import threading
import urllib.error
import urllib.request
from html import unescape
from urllib.parse import quote

import pytest

from builders import math_rl_v2
from builders.runner import build_dataset
from cli.console import CascadeError
from cli.serve import ReadOnlyQueryError, Viewer, check_read_only, make_server
from lake import Lake


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    lake = Lake(root / "lake")
    build_dataset(lake, math_rl_v2, profile="demo", manifests_dir=lake.path / "manifests")
    reader = Lake(lake.path, create=False, read_only=True)
    server = make_server(Viewer(reader), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", lake
    server.shutdown()
    server.server_close()


def get(url: str, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def errors(html: str) -> list[str]:
    return [unescape(e) for e in re.findall(r'class="error"[^>]*>([^<]*)<', html)]


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
    ],
)
def test_anything_but_one_select_is_refused(query: str) -> None:
    with pytest.raises(ReadOnlyQueryError, match="read-only|one statement"):
        check_read_only(query)


def test_selects_pass_the_check() -> None:
    for query in (
        "SELECT 1",
        "WITH a AS (SELECT 1) SELECT * FROM a",
        "FROM drops",
        "EXPLAIN SELECT 1",
    ):
        check_read_only(query)


def test_pages_list_tables_and_versions(served) -> None:
    base, lake = served
    status, html = get(base + "/")
    assert status == 200
    for table in ("math_rl_v2", "math_rl_v2_sources", "drops"):
        assert f'<a href="/table/{table}">{table}</a>' in html
    status, html = get(base + "/table/math_rl_v2")
    assert status == 200 and 'href="/report/math_rl_v2@1"' in html
    assert lake.resolve("math_rl_v2").content_hash[:16] in html


def test_sql_results_show_as_a_table_and_writes_are_refused(served) -> None:
    base, _ = served
    query = "SELECT uid, reason FROM drops WHERE step = 'decontaminate' ORDER BY uid"
    status, html = get(base + "/sql?q=" + quote(query))
    assert status == 200
    assert html.count("<tr>") == 1 + 26 and "contaminated" in html
    assert '<a href="/row?uid=demo_math%3A' in html  # uids link to their drops
    status, html = get(base + "/sql?q=" + quote("DROP TABLE drops"))
    assert status == 400
    assert errors(html) == ["the viewer is read-only: only SELECT queries run here, not DROP"]
    status, html = get(base + "/sql?q=" + quote("SELECT * FROM read_text('/etc/hostname')"))
    assert status == 400 and "file system operations are disabled" in errors(html)[0]
    status, html = get(base + "/sql?q=" + quote("SELECT * FROM nope"))
    assert status == 400 and "nope" in errors(html)[0]
    assert get(base + "/sql", method="POST")[0] == 405


def test_report_and_drops_of_a_row(served) -> None:
    base, lake = served
    status, html = get(base + "/report/math_rl_v2@1")
    assert status == 200 and 'id="chart-funnel"' in html
    status, html = get(base + "/report/math_rl_v2@4")
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
    base, lake = served
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CascadeError) as caught:
            make_server(Viewer(lake), "127.0.0.1", port)
    assert str(caught.value) == f"port {port} on 127.0.0.1 is in use; choose another with --port"


def test_even_past_the_check_the_lake_cannot_be_written(served) -> None:
    from cli.serve import read_only_connection

    _, lake = served
    con = read_only_connection(lake, "")
    with pytest.raises(Exception, match="read-only mode"):
        con.execute("INSERT INTO lake.math_rl_v2 SELECT * FROM math_rl_v2 LIMIT 1")
    with pytest.raises(Exception, match="lock_configuration|locked"):
        con.execute("SET enable_external_access = true")
    con.close()


def test_serve_refuses_a_missing_lake(tmp_path) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    result = CliRunner().invoke(app, ["--lake", str(tmp_path / "none"), "serve", "--port", "0"])
    assert isinstance(result.exception, CascadeError)
    assert str(result.exception).startswith(f"no lake at {tmp_path / 'none'}")
    assert not (tmp_path / "none").exists()
