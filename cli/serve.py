"""`cascade serve`: a small read-only web app over the lake, on 127.0.0.1 by default.

Pages: the tables and their versions, a SQL box whose results show as a table, the build
report of any dataset version, and every drop of a row (by uid) with its evidence. The lake
is opened read-only and a query runs confined (cli/serve_query.py: DuckDB's parser judges the
statement, the connection is read-only, barred from every file but the lake's data files and
locked, and each query has a time, memory and thread limit; only so many run at once).

Whatever a browser can be made to send is refused unless it comes from the viewer's own pages:
a request naming another host (DNS rebinding) gets 421, a cross-site one 403 (Origin, Referer,
Sec-Fetch-Site); what runs a query or renders a report is a POST carrying the server's form
token, so a cross-site `<img>` or `<form>` runs nothing. A GET only shows: `/sql?q=...` fills
the SQL box without running it. Every page has a Content-Security-Policy (a report's inline
scripts allowed by their hashes), cannot be framed, and sends no Referer to other sites. The standard
library's threading HTTP server serves it; pages are Jinja templates (autoescaped).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import select
import shutil
import socket
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

import typer

from cli.app import app
from cli.console import CascadeError, console, plain, state
from cli.serve_query import (
    QueryLimits,
    ReadOnlyQueryError,
    check_read_only,
    read_only_connection,
    run_query,
)

if TYPE_CHECKING:
    from lake import Lake

__all__ = [  # the query guard is part of the viewer's Python API
    "QueryLimits",
    "ReadOnlyQueryError",
    "Viewer",
    "check_read_only",
    "make_server",
    "read_only_connection",
    "run_query",
    "serve_command",
]

MAX_ROWS = 500
PREVIEW_ROWS = 20  # rows of a table's latest version shown on its page
REPORTS_KEPT = 8  # rendered reports kept in memory (versions never change)
CELL_CHARS = 300
MAX_FORM_BYTES = 256 * 1024
REQUEST_TIMEOUT_S = 60  # a client that sends its request slower than this is dropped
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
NO_SCRIPT = "'none'"

_PAGES = {
    "page.html.j2": """{% import "evidence.html.j2" as ev %}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }} · cascade</title>{{ ev.style() }}
<style>form.inline { display: inline; } button.link { border: 0; padding: 0; background: none; color: #0969da; cursor: pointer; text-decoration: underline; }</style></head>
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
    "sqlbox.html.j2": """<section><h2>SQL</h2><form action="/sql" method="post" id="sql-form">
<input type="hidden" name="token" value="{{ token }}">
<textarea name="q" id="sql-query" rows="4">{{ query or "SELECT step, reason, count(*) AS n FROM drops GROUP BY ALL ORDER BY n DESC" }}</textarea>
<button type="submit" id="sql-run">run</button> <span class="muted">tables by name (latest), "name@N" pinned, versions, drops; one SELECT, at most {{ limits.seconds|round(1) }} s</span>
</form></section>""",
    "table.html.j2": """{% extends "page.html.j2" %}{% block body %}
<section><h2>Versions of {{ name }}</h2><table id="versions">
<tr><th>version</th><th>rows</th><th>content_hash</th><th>parents</th><th>producer</th><th>created</th><th></th></tr>
{% for v in versions|reverse %}<tr><td class="n">{{ v.version }}</td><td class="n">{{ v.rows|num }}</td>
<td class="hash">{{ v.content_hash[:16] }}</td><td>{{ v.parents|join(", ") }}</td><td><code>{{ v.producer }}</code></td>
<td>{{ v.created_at|utc }}</td>
<td><form class="inline" method="post" action="/sql"><input type="hidden" name="token" value="{{ token }}">
<input type="hidden" name="q" value="{{ 'SELECT * FROM "' ~ v.ref ~ '" LIMIT 100' }}"><button class="link" id="rows-{{ v.ref }}">rows</button></form>
{% if v.kind != "drops" %} · <form class="inline" method="post" action="/report/{{ v.ref }}"><input type="hidden" name="token" value="{{ token }}"><button class="link" id="report-{{ v.ref }}">report</button></form>{% endif %}</td></tr>{% endfor %}
</table></section>
<section><h2>Rows of {{ preview.ref }}</h2>
{% if preview.error %}<p class="error" id="preview-error">{{ preview.error }}</p>{% else %}
<p class="muted" id="preview-count">the first {{ preview.rows|length }} rows{% if versions[-1].rows > preview.rows|length %} of {{ versions[-1].rows|num }}{% endif %}</p>
<div style="overflow:auto"><table id="preview"><tr>{% for c in preview.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in preview.rows %}<tr>{% for c, cell in zip(preview.columns, row) %}<td>{% if c == "uid" and cell %}<a href="/row?uid={{ cell|urlencode }}">{{ cell }}</a>{% else %}{{ cell }}{% endif %}</td>{% endfor %}</tr>{% endfor %}
</table></div>{% endif %}</section>{% endblock %}""",
    "sql.html.j2": """{% extends "page.html.j2" %}{% block body %}
{% include "sqlbox.html.j2" %}
{% if error %}<section><p class="error" id="sql-error">{{ error }}</p></section>{% endif %}
{% if columns %}<section><p class="muted" id="sql-count">{{ shown }} rows{% if more %} (the first {{ shown }}; add a LIMIT or aggregate){% endif %}</p>
<div style="overflow:auto"><table id="sql-result"><tr>{% for c in columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c, cell in zip(columns, row) %}<td>{% if c == "uid" and cell %}<a href="/row?uid={{ cell|urlencode }}">{{ cell }}</a>{% else %}{{ cell }}{% endif %}</td>{% endfor %}</tr>{% endfor %}
</table></div></section>{% endif %}{% endblock %}""",
    "report-form.html.j2": """{% extends "page.html.j2" %}{% block body %}
<section><h2>Build report of {{ ref }}</h2><form method="post" action="/report/{{ ref }}">
<input type="hidden" name="token" value="{{ token }}"><button type="submit" id="report-render">render the report</button></form></section>{% endblock %}""",
    "row.html.j2": """{% extends "page.html.j2" %}{% block body %}
<section><h2>Drops of row <code>{{ uid }}</code></h2>
{% if not groups %}<p id="no-drops">No build dropped a row with uid <code>{{ uid }}</code>.</p>{% endif %}
{% for g in groups %}{% for s in g.samples %}<h4>{{ s.output }} · {{ g.step }} · {{ g.reason }}</h4>{{ ev.sample(s, "row") }}{% endfor %}{% endfor %}
</section>{% endblock %}""",
    "error.html.j2": """{% extends "page.html.j2" %}{% block body %}<section><p class="error">{{ error }}</p></section>{% endblock %}""",
}


@dataclass
class Page:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    csp: str = CSP
    headers: dict[str, str] = field(default_factory=dict)


def report_csp(html: str) -> str:
    """The viewer's policy, with the report's own inline scripts allowed by their hashes."""
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
        for body in re.findall(r"<script[^>]*>(.*?)</script>", html, flags=re.DOTALL)
    ]
    return f"{CSP}; script-src {' '.join(hashes) or NO_SCRIPT}"


class Viewer:
    """The pages, as functions of a request; the lake is only read."""

    def __init__(
        self,
        lake: Lake,
        search: Sequence[str | os.PathLike[str]] = (),
        limits: QueryLimits | None = None,
    ) -> None:
        import jinja2

        from builders.publish.report import environment

        self.lake = lake
        self.search = list(search)
        self.limits = limits or QueryLimits()
        self.token = secrets.token_urlsafe(32)  # in every form: a POST without it runs nothing
        base = environment()
        self.env = base.overlay(
            loader=jinja2.ChoiceLoader([jinja2.DictLoader(_PAGES), base.loader])  # type: ignore[list-item]
        )
        self.env.globals["zip"] = zip
        self._reports: OrderedDict[tuple[str, str], tuple[bytes, str]] = OrderedDict()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.limits.concurrent)
        self._temp = tempfile.mkdtemp(prefix="cascade-serve-")  # queries spill only here

    def close(self) -> None:
        shutil.rmtree(self._temp, ignore_errors=True)

    def render(self, template_name: str, status: int = 200, **context: object) -> Page:
        html = self.env.get_template(template_name).render(
            lake_path=str(self.lake.path), token=self.token, limits=self.limits, **context
        )
        return Page(status, html.encode("utf-8"))

    def _guarded(self, page: Callable[[], Page]) -> Page:
        """A page, with the lake's errors and bugs as one sentence on it."""
        from lake import LakeError

        try:
            return page()
        except LakeError as exc:
            return self.render("error.html.j2", 404, title="not found", error=str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug: one line on the page, not a dropped socket
            return self.render(
                "error.html.j2", 500, title="internal error", error=f"{type(exc).__name__}: {exc}"
            )

    def get(self, target: str) -> Page:
        """A GET: shows pages, runs no query of the user's and renders no report."""
        parts = urlsplit(target)
        path = unquote(parts.path)
        params = {k: v[-1] for k, v in parse_qs(parts.query).items()}

        def page() -> Page:
            if path == "/":
                return self.render(
                    "index.html.j2", title="cascade lake", tables=self.lake.tables(), query=""
                )
            if path.startswith("/table/"):
                return self.table(path.removeprefix("/table/"))
            if path == "/sql":  # the box filled in, not run: a link cannot run a query
                return self.render(
                    "sql.html.j2", title="SQL", query=params.get("q", ""), columns=None, error=None
                )
            if path.startswith("/report/"):
                ref = self.lake.resolve(path.removeprefix("/report/")).ref
                return self.render("report-form.html.j2", title=f"report {ref}", ref=ref)
            if path == "/row":
                return self._busy_or(lambda: self.row(params.get("uid", "")))
            return self.render("error.html.j2", 404, title="not found", error=f"no page {path}")

        return self._guarded(page)

    def post(
        self, target: str, form: Mapping[str, str], gone: Callable[[], bool] = lambda: False
    ) -> Page:
        """A POST from one of the viewer's forms: runs a query or renders a report.

        `gone()` says whether the client has left; a running query then stops.
        """
        path = unquote(urlsplit(target).path)
        if not hmac.compare_digest(form.get("token", ""), self.token):
            return self.render(
                "error.html.j2",
                403,
                title="refused",
                error="this form is not from this server's pages (or from before it restarted); "
                "reload the page and submit it again",
            )
        if path == "/sql":
            return self._guarded(lambda: self._busy_or(lambda: self.sql(form.get("q", ""), gone)))
        if path.startswith("/report/"):
            ref = path.removeprefix("/report/")
            return self._guarded(lambda: self.report(ref))
        return self.render(
            "error.html.j2", 404, title="not found", error=f"no form posts to {path}"
        )

    def _busy_or(self, page: Callable[[], Page]) -> Page:
        """`page()` if one of the limited query slots is free, else 503 with a sentence."""
        if not self._slots.acquire(blocking=False):
            busy = self.render(
                "error.html.j2",
                503,
                title="busy",
                error=f"the viewer is already running {self.limits.concurrent} queries (its "
                "--max-queries); try again when one has finished",
            )
            busy.headers["Retry-After"] = "5"
            return busy
        try:
            return page()
        finally:
            self._slots.release()

    def table(self, name: str) -> Page:
        versions = self.lake.versions(name)
        if not versions:
            self.lake.resolve(name)  # raises LakeError naming the known tables
        latest = versions[-1].ref
        query = 'SELECT * FROM "' + latest.replace('"', '""') + f'" LIMIT {PREVIEW_ROWS}'
        preview: dict[str, object] = {"ref": latest, "error": None, "columns": [], "rows": []}
        try:
            result = run_query(self.lake, query, self.limits, PREVIEW_ROWS, self._temp)
            preview.update(
                columns=result.columns, rows=[[_cell(v) for v in r] for r in result.rows]
            )
        except ReadOnlyQueryError as exc:
            preview["error"] = str(exc)
        return self.render(
            "table.html.j2", title=name, name=name, versions=versions, preview=preview
        )

    def sql(self, query: str, gone: Callable[[], bool] = lambda: False) -> Page:
        context: dict[str, object] = {"title": "SQL", "query": query, "columns": None}
        if not query.strip():
            return self.render("sql.html.j2", error=None, **context)
        try:
            result = run_query(self.lake, query, self.limits, MAX_ROWS, self._temp, gone)
        except ReadOnlyQueryError as exc:
            return self.render("sql.html.j2", 400, error=str(exc), **context)
        context.update(
            columns=result.columns,
            rows=[[_cell(v) for v in r] for r in result.rows],
            shown=len(result.rows),
            more=result.more,
        )
        return self.render("sql.html.j2", error=None, **context)

    def report(self, ref: str) -> Page:
        info = self.lake.resolve(ref)
        key = (info.ref, info.content_hash)
        with self._lock:
            cached = self._reports.get(key)
            if cached is not None:
                self._reports.move_to_end(key)
        if cached is None:

            def rendered() -> Page:
                from builders.publish.report import gather_report, render_report

                html = render_report(gather_report(self.lake, info.ref, search=self.search))
                return Page(200, html.encode(), csp=report_csp(html))

            page = self._busy_or(rendered)
            if page.status != 200:
                return page
            cached = (page.body, page.csp)
            with self._lock:
                self._reports[key] = cached
                while len(self._reports) > REPORTS_KEPT:
                    self._reports.popitem(last=False)
        return Page(200, cached[0], csp=cached[1])

    def row(self, uid: str) -> Page:
        if not uid:
            return self.render("error.html.j2", 400, title="drops of a row", error="give a uid")
        from builders.publish.evidence import BenchmarkItems
        from builders.publish.manifest_file import find_manifest
        from builders.publish.report import drop_samples

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


# -- who may ask ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Audience:
    """The names a request may give for this server (its Host), and who counts as itself."""

    port: int
    names: frozenset[str]  # lower-case host names and IP literals, without the port
    any_address: bool = False  # bound to every interface: any IP literal names it

    @classmethod
    def of(cls, host: str, port: int, extra: Iterable[str] = ()) -> Audience:
        names = {host.strip("[]").lower(), *(n.lower() for n in extra)}
        any_address = host in ("", "0.0.0.0", "::")
        if any_address or _loopback(host):
            names |= {"localhost", "127.0.0.1", "::1"}
        return cls(port, frozenset(names), any_address)

    def names_us(self, netloc: str) -> bool:
        """Whether `host[:port]` (a Host header or an Origin's authority) is this server."""
        try:
            parts = urlsplit("//" + netloc)
            name, port = (parts.hostname or ""), parts.port
        except ValueError:
            return False
        if (port or 80) != self.port:
            return False
        if name in self.names:
            return True
        if self.any_address:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                return False
            return True
        return False

    def refusal(self, method: str, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """Why a request is refused (status, sentence), or None when it may be answered."""
        host = headers.get("Host", "")
        if not self.names_us(host):
            return (
                HTTPStatus.MISDIRECTED_REQUEST,
                f"this server does not answer to the host {host!r}; open it by the address it "
                "listens on (or name the host with --allow-host)",
            )
        site = headers.get("Sec-Fetch-Site")
        navigation = (
            method in ("GET", "HEAD")
            and headers.get("Sec-Fetch-Mode") == "navigate"
            and headers.get("Sec-Fetch-Dest", "document") == "document"
        )
        if navigation:  # a link followed from elsewhere: GET pages only show, so it may land
            return None
        cross = site is not None and site not in ("same-origin", "none")
        origin = headers.get("Origin")
        if origin is not None:
            parts = urlsplit(origin)
            cross = cross or parts.scheme != "http" or not self.names_us(parts.netloc)
        referer = headers.get("Referer")
        if referer is not None:
            cross = cross or not self.names_us(urlsplit(referer).netloc)
        if cross:
            return (
                HTTPStatus.FORBIDDEN,
                "refused: the request comes from another site; use the viewer's own pages",
            )
        return None


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _client_left(sock: socket.socket) -> bool:
    """Whether the client closed its side (its socket reads as ended or reset)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def make_server(
    viewer: Viewer, host: str, port: int, allow_hosts: Iterable[str] = ()
) -> ThreadingHTTPServer:
    """An HTTP server for `viewer` bound to host:port (port 0: any free port).

    It answers only requests that name it by its address (or an `allow_hosts` name) and that
    do not come from another site.
    """
    audience: Audience | None = None

    class Handler(BaseHTTPRequestHandler):
        server_version = "cascade-serve"
        timeout = REQUEST_TIMEOUT_S

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._answer("GET")

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer("HEAD")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def _refuse(self) -> None:
            self._send(Page(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only: GET or POST", "text/plain"))

        do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

        def _answer(self, method: str) -> None:
            assert audience is not None
            refused = audience.refusal(method, self.headers)  # type: ignore[arg-type]
            if refused is not None:
                status, why = refused
                self._send(Page(status, why.encode(), "text/plain; charset=utf-8"))
                return
            if method != "POST":
                self._send(viewer.get(self.path), body=method == "GET")
                return
            form = self._form()
            if isinstance(form, Page):
                self._send(form)
                return
            self._send(viewer.post(self.path, form, lambda: _client_left(self.connection)))

        def _form(self) -> dict[str, str] | Page:
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                return Page(
                    HTTPStatus.LENGTH_REQUIRED, b"a POST needs a Content-Length", "text/plain"
                )
            if int(length) > MAX_FORM_BYTES:
                return Page(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"a form may hold at most {MAX_FORM_BYTES} bytes".encode(),
                    "text/plain",
                )
            body = self.rfile.read(int(length)).decode("utf-8", errors="replace")
            return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}

        def _send(self, page: Page, body: bool = True) -> None:
            try:
                self.send_response(page.status)
                self.send_header("Content-Type", page.content_type)
                self.send_header("Content-Length", str(len(page.body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Security-Policy", page.csp)
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("X-Frame-Options", "DENY")
                self.send_header("Referrer-Policy", "same-origin")
                self.send_header("Cross-Origin-Opener-Policy", "same-origin")
                self.send_header("Cross-Origin-Resource-Policy", "same-origin")
                for name, value in page.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if body:
                    self.wfile.write(page.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client left before its answer

        def log_message(self, format: str, *args: object) -> None:
            if not state.quiet:
                console.print(plain(f"{self.address_string()} {format % args}", "dim"))

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        if exc.errno in (98, 48):  # EADDRINUSE on Linux, macOS
            raise CascadeError(
                f"port {port} on {host} is in use; choose another with --port"
            ) from None
        raise CascadeError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    audience = Audience.of(host, server.server_address[1], allow_hosts)
    return server


@app.command("serve")
def serve_command(
    port: int = typer.Option(8765, "--port", help="Port to listen on."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind (127.0.0.1: this machine only)."
    ),
    manifests: list[Path] = typer.Option(
        None, "--manifests", help="Directories to look for dataset manifests in."
    ),
    allow_host: list[str] = typer.Option(
        None, "--allow-host", help="Another host name the server may be reached by."
    ),
    query_seconds: float = typer.Option(
        30.0, "--query-seconds", min=0.1, help="Time limit of one SQL query (seconds)."
    ),
    query_memory: str = typer.Option(
        "1GiB", "--query-memory", help="DuckDB memory limit of one SQL query."
    ),
    query_threads: int = typer.Option(2, "--query-threads", min=1, help="Threads per query."),
    query_spill: str = typer.Option(
        "1GiB", "--query-spill", help="Disk a query may spill to, in a private temp dir."
    ),
    max_queries: int = typer.Option(
        2, "--max-queries", min=1, help="Queries (and report renderings) running at once."
    ),
) -> None:
    """Browse the lake read-only: tables, versions, SQL, build reports, drops of a row."""
    from lake import Lake, LakeError

    try:
        lake = Lake(state.lake_path, create=False, read_only=True)
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    limits = QueryLimits(query_seconds, query_memory, query_threads, query_spill, max_queries)
    try:
        limits.check()
    except ValueError as exc:
        raise CascadeError(str(exc)) from None
    viewer = Viewer(lake, manifests or (), limits)
    try:
        server = make_server(viewer, host, port, allow_host or ())
    except CascadeError:
        viewer.close()
        raise
    url = f"http://{host}:{server.server_address[1]}/"
    console.print(plain(f"serving {lake.path} read-only at {url} (Ctrl-C stops)", "green"))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        viewer.close()
