"""`cascade serve`: a small read-only web app over the lake, on 127.0.0.1 by default.

Pages: the tables and their versions, a SQL box whose results show as a table, the build
report of any dataset version, and every drop of a row (by uid) with its evidence. The lake
is opened read-only (DuckLake attached READ_ONLY), a query must be one SELECT (anything else is
refused with a message), and each query's connection may read only the lake's own files.
The standard library's threading HTTP server serves it; pages are Jinja templates.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import duckdb
import jinja2
import typer

from builders.publish.evidence import BenchmarkItems
from builders.publish.manifest_file import find_manifest
from builders.publish.report import drop_samples, environment, gather_report, render_report
from cli.app import app
from cli.console import CascadeError, console, plain, state
from lake import Lake, LakeError

MAX_ROWS = 500
REPORTS_KEPT = 8  # rendered reports kept in memory (versions never change)
CELL_CHARS = 300
READ_STATEMENTS = {"SELECT", "EXPLAIN"}

_PAGES = {
    "page.html.j2": """{% import "evidence.html.j2" as ev %}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }} · cascade</title>{{ ev.style() }}</head>
<body><header><h1>{{ title }}</h1><div class="sub"><a href="/">tables</a> · <a href="/sql">SQL</a>
 · lake <code>{{ lake_path }}</code> (read-only)</div></header>
<main>{% block body %}{% endblock %}</main></body></html>""",
    "index.html.j2": """{% extends "page.html.j2" %}{% block body %}
<section><h2>Tables</h2><table id="tables">
<tr><th>table</th><th>latest</th><th>kind</th><th>mode</th><th>rows</th><th>content_hash</th><th>created</th></tr>
{% for t in tables %}<tr><td><a href="/table/{{ t.name }}">{{ t.name }}</a></td><td class="n">{{ t.version }}</td>
<td>{{ t.kind }}</td><td>{{ t.mode }}</td><td class="n">{{ t.rows|num }}</td><td class="hash">{{ t.content_hash[:16] }}</td>
<td>{{ t.created_at|utc }}</td></tr>{% endfor %}
</table></section>
{% include "sqlbox.html.j2" %}
<section><h2>Drops of a row</h2><form action="/row" method="get"><input name="uid" placeholder="uid, e.g. source:17" size="40">
<button type="submit">show</button></form></section>
{% endblock %}""",
    "sqlbox.html.j2": """<section><h2>SQL</h2><form action="/sql" method="get" id="sql-form">
<textarea name="q" id="sql-query" rows="4">{{ query or "SELECT step, reason, count(*) AS n FROM drops GROUP BY ALL ORDER BY n DESC" }}</textarea>
<button type="submit" id="sql-run">run</button> <span class="muted">tables by name (latest), "name@N" pinned, versions, drops; one SELECT</span>
</form></section>""",
    "table.html.j2": """{% extends "page.html.j2" %}{% block body %}
<section><h2>Versions of {{ name }}</h2><table id="versions">
<tr><th>version</th><th>rows</th><th>content_hash</th><th>parents</th><th>producer</th><th>created</th><th></th></tr>
{% for v in versions|reverse %}<tr><td class="n">{{ v.version }}</td><td class="n">{{ v.rows|num }}</td>
<td class="hash">{{ v.content_hash[:16] }}</td><td>{{ v.parents|join(", ") }}</td><td><code>{{ v.producer }}</code></td>
<td>{{ v.created_at|utc }}</td>
<td><a href="/sql?q={{ ('SELECT * FROM "' ~ v.ref ~ '" LIMIT 100')|urlencode }}">rows</a>
{% if v.kind != "drops" %} · <a href="/report/{{ v.ref }}">report</a>{% endif %}</td></tr>{% endfor %}
</table></section>{% endblock %}""",
    "sql.html.j2": """{% extends "page.html.j2" %}{% block body %}
{% include "sqlbox.html.j2" %}
{% if error %}<section><p class="error" id="sql-error">{{ error }}</p></section>{% endif %}
{% if columns %}<section><p class="muted" id="sql-count">{{ shown }} rows{% if more %} (the first {{ shown }}; add a LIMIT or aggregate){% endif %}</p>
<div style="overflow:auto"><table id="sql-result"><tr>{% for c in columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c, cell in zip(columns, row) %}<td>{% if c == "uid" and cell %}<a href="/row?uid={{ cell|urlencode }}">{{ cell }}</a>{% else %}{{ cell }}{% endif %}</td>{% endfor %}</tr>{% endfor %}
</table></div></section>{% endif %}{% endblock %}""",
    "row.html.j2": """{% extends "page.html.j2" %}{% block body %}
<section><h2>Drops of row <code>{{ uid }}</code></h2>
{% if not groups %}<p id="no-drops">No build dropped a row with uid <code>{{ uid }}</code>.</p>{% endif %}
{% for g in groups %}{% for s in g.samples %}<h4>{{ s.output }} · {{ g.step }} · {{ g.reason }}</h4>{{ ev.sample(s, "row") }}{% endfor %}{% endfor %}
</section>{% endblock %}""",
    "error.html.j2": """{% extends "page.html.j2" %}{% block body %}<section><p class="error">{{ error }}</p></section>{% endblock %}""",
}


class ReadOnlyQueryError(ValueError):
    """A query that is not one read-only statement."""


def check_read_only(query: str) -> None:
    """Refuse anything but one SELECT (or EXPLAIN of one), with a sentence saying why."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise ReadOnlyQueryError(" ".join(str(exc).split())) from None
    if len(statements) != 1:
        raise ReadOnlyQueryError(f"give one statement, not {len(statements)}")
    kind = statements[0].type.name
    if kind not in READ_STATEMENTS:
        raise ReadOnlyQueryError(
            f"the viewer is read-only: only SELECT queries run here, not {kind}"
        )


def read_only_connection(lake: Lake, query: str) -> duckdb.DuckDBPyConnection:
    """The lake's read-only connection for `query`, then barred from every other file."""
    con = lake.connect(query)
    data = lake.data_path
    if "://" not in data:
        allowed = [data, str(lake.path.resolve()) + "/"]
        con.execute("SET allowed_directories = ?", [allowed])
        con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


@dataclass
class Page:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"


class Viewer:
    """The pages, as functions of a GET request; the lake is only read."""

    def __init__(self, lake: Lake, search: Sequence[str | os.PathLike[str]] = ()) -> None:
        self.lake = lake
        self.search = list(search)
        base = environment()
        self.env = base.overlay(
            loader=jinja2.ChoiceLoader([jinja2.DictLoader(_PAGES), base.loader])  # type: ignore[list-item]
        )
        self.env.globals["zip"] = zip
        self._reports: OrderedDict[tuple[str, str], bytes] = OrderedDict()  # newest last
        self._lock = threading.Lock()

    def render(self, template_name: str, status: int = 200, **context: object) -> Page:
        html = self.env.get_template(template_name).render(lake_path=str(self.lake.path), **context)
        return Page(status, html.encode("utf-8"))

    def get(self, target: str) -> Page:
        parts = urlsplit(target)
        path = unquote(parts.path)
        params = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            if path == "/":
                return self.render(
                    "index.html.j2", title="cascade lake", tables=self.lake.tables(), query=""
                )
            if path.startswith("/table/"):
                return self.table(path.removeprefix("/table/"))
            if path == "/sql":
                return self.sql(params.get("q", ""))
            if path.startswith("/report/"):
                return self.report(path.removeprefix("/report/"))
            if path == "/row":
                return self.row(params.get("uid", ""))
        except LakeError as exc:
            return self.render("error.html.j2", 404, title="not found", error=str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug: one line on the page, not a dropped socket
            return self.render(
                "error.html.j2", 500, title="internal error", error=f"{type(exc).__name__}: {exc}"
            )
        return self.render("error.html.j2", 404, title="not found", error=f"no page {path}")

    def table(self, name: str) -> Page:
        versions = self.lake.versions(name)
        if not versions:
            self.lake.resolve(name)  # raises LakeError naming the known tables
        return self.render("table.html.j2", title=name, name=name, versions=versions)

    def sql(self, query: str) -> Page:
        context: dict[str, object] = {
            "title": "SQL",
            "query": query,
            "columns": None,
            "error": None,
        }
        if not query.strip():
            return self.render("sql.html.j2", **context)
        try:
            check_read_only(query)
            con = read_only_connection(self.lake, query)
            try:
                cursor = con.execute(query)
                columns = [d[0] for d in cursor.description or []]
                rows = cursor.fetchmany(MAX_ROWS + 1)
            finally:
                con.close()
        except (ReadOnlyQueryError, duckdb.Error) as exc:
            context["error"] = " ".join(str(exc).split())
            return self.render("sql.html.j2", 400, **context)
        context.update(
            columns=columns,
            rows=[[_cell(v) for v in r] for r in rows[:MAX_ROWS]],
            shown=min(len(rows), MAX_ROWS),
            more=len(rows) > MAX_ROWS,
        )
        return self.render("sql.html.j2", **context)

    def report(self, ref: str) -> Page:
        info = self.lake.resolve(ref)
        key = (info.ref, info.content_hash)
        with self._lock:
            cached = self._reports.get(key)
            if cached is not None:
                self._reports.move_to_end(key)
        if cached is None:
            cached = render_report(gather_report(self.lake, info.ref, search=self.search)).encode()
            with self._lock:
                self._reports[key] = cached
                while len(self._reports) > REPORTS_KEPT:
                    self._reports.popitem(last=False)
        return Page(200, cached)

    def row(self, uid: str) -> Page:
        if not uid:
            return self.render("error.html.j2", 400, title="drops of a row", error="give a uid")
        con = self.lake.connect("")
        try:
            picked = con.execute(
                "SELECT input_table, input_version, uid, step, reason, detail, output_table, "
                "output_version FROM drops WHERE uid = ? ORDER BY output_table, output_version",
                [uid],
            ).fetchall()
        finally:
            con.close()
        pins = {(r[0], r[1]) for r in picked if r[0] is not None}
        outputs = {(r[6], r[7]) for r in picked}
        benchmarks = BenchmarkItems()
        for table, version in sorted(outputs):
            found = find_manifest(
                self.lake, self.lake.resolve(f"{table}@{version}"), None, self.search
            )
            if found is not None:
                more = BenchmarkItems.from_manifest(found.manifest.benchmarks)
                benchmarks.loaded.update(more.loaded)
                benchmarks.problems.update(more.problems)
        con = self.lake.connect(" ".join(f'"{t}@{v}"' for t, v in sorted(pins)))
        try:
            totals = sorted({(r[3], r[4], 1) for r in picked})
            groups = drop_samples(con, picked, totals, [], benchmarks)
        finally:
            con.close()
        return self.render("row.html.j2", title=f"row {uid}", uid=uid, groups=groups)


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def make_server(viewer: Viewer, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server for `viewer` bound to host:port (port 0: any free port)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "cascade-serve"

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._send(viewer.get(self.path))

        def do_HEAD(self) -> None:  # noqa: N802
            self._send(viewer.get(self.path), body=False)

        def _refuse(self) -> None:
            self._send(Page(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only: only GET", "text/plain"))

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

        def _send(self, page: Page, body: bool = True) -> None:
            self.send_response(page.status)
            self.send_header("Content-Type", page.content_type)
            self.send_header("Content-Length", str(len(page.body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if body:
                self.wfile.write(page.body)

        def log_message(self, format: str, *args: object) -> None:
            if not state.quiet:
                console.print(plain(f"{self.address_string()} {format % args}", "dim"))

    try:
        return ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        if exc.errno in (98, 48):  # EADDRINUSE on Linux, macOS
            raise CascadeError(
                f"port {port} on {host} is in use; choose another with --port"
            ) from None
        raise CascadeError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


@app.command("serve")
def serve_command(
    port: int = typer.Option(8765, "--port", help="Port to listen on."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind (127.0.0.1: this machine only)."
    ),
    manifests: list[Path] = typer.Option(
        None, "--manifests", help="Directories to look for dataset manifests in."
    ),
) -> None:
    """Browse the lake read-only: tables, versions, SQL, build reports, drops of a row."""
    try:
        lake = Lake(state.lake_path, create=False, read_only=True)
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    server = make_server(Viewer(lake, manifests or ()), host, port)
    url = f"http://{host}:{server.server_address[1]}/"
    console.print(plain(f"serving {lake.path} read-only at {url} (Ctrl-C stops)", "green"))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
