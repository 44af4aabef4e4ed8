"""The viewer and the report in a real headless browser (Debian's chromium + chromedriver).

A test that fails saves a screenshot (to $CASCADE_SCREENSHOTS, else its tmp dir) and names
it in the failure. With $CASCADE_SCREENSHOTS set, the report test also keeps a full-page
screenshot of the demo build's report there.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

from builders import math_rl_v2
from builders.publish import write_report
from builders.runner import build_dataset
from cli.serve import Viewer, make_server
from lake import Lake

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs Debian's chromium and chromedriver (apt-get install -y chromium chromium-driver)",
)
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    lake = Lake(root / "lake")
    built = build_dataset(lake, math_rl_v2, profile="demo", manifests_dir=lake.path / "manifests")
    viewer = Viewer(Lake(lake.path, create=False, read_only=True))
    server = make_server(viewer, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", lake, built
    server.shutdown()
    server.server_close()
    viewer.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    profile = tempfile.mkdtemp(prefix="cascade-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # to see CSP violations
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def shots(tmp_path, request) -> Iterator[Path]:
    """Where screenshots go; a failing test leaves one named after it."""
    where = Path(os.environ.get("CASCADE_SCREENSHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    yield where


@contextlib.contextmanager
def screenshot_on_failure(driver: WebDriver, where: Path, name: str) -> Iterator[None]:
    try:
        yield
    except BaseException as exc:
        path = where / f"{name}-failure.png"
        driver.save_screenshot(str(path))
        exc.add_note(f"screenshot of the page at the failure: {path}")
        raise


def wait(driver: WebDriver, seconds: float = 30) -> WebDriverWait:
    return WebDriverWait(driver, seconds)


def policy_violations(driver: WebDriver) -> list[str]:
    """Console messages since the last call that report a Content-Security-Policy violation."""
    return [
        e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]
    ]


def funnel_points(driver: WebDriver) -> list[int]:
    """The funnel chart's drawn bars (SVG) and the data the chart holds."""
    wait(driver).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-funnel g.point path"))
    drawn = driver.find_elements(By.CSS_SELECTOR, "#chart-funnel g.point path")
    data = driver.execute_script("return document.getElementById('chart-funnel').data[0].x")
    assert len(drawn) == len(data)
    return [int(x) for x in data]


def open_first_sample(driver: WebDriver, group_label: str):
    """Pick a sample group by its label's start, open its first row, return that row."""
    select = Select(driver.find_element(By.ID, "sample-group"))
    [option] = [o for o in select.options if o.text.startswith(group_label)]
    select.select_by_visible_text(option.text)
    visible = [
        e for e in driver.find_elements(By.CSS_SELECTOR, "details.sample") if e.is_displayed()
    ]
    assert visible, f"no rows shown for {group_label}"
    first = visible[0]
    first.find_element(By.TAG_NAME, "summary").click()
    wait(driver).until(lambda d: first.get_attribute("open") is not None)
    return first


def test_viewer_loads_and_a_query_shows_its_rows(demo, browser, shots) -> None:
    base, _, _ = demo
    with screenshot_on_failure(browser, shots, "viewer-query"):
        browser.get(base + "/")
        assert browser.find_element(By.LINK_TEXT, "math_rl_v2").is_displayed()
        box = browser.find_element(By.ID, "sql-query")
        box.clear()
        box.send_keys("SELECT uid, reason FROM drops WHERE step = 'exact_dedup' ORDER BY uid")
        browser.find_element(By.ID, "sql-run").click()
        wait(browser).until(ec.presence_of_element_located((By.ID, "sql-result")))
        rows = browser.find_elements(By.CSS_SELECTOR, "#sql-result tr")
        assert len(rows) == 1 + 52
        assert rows[1].find_elements(By.TAG_NAME, "td")[1].text == "exact_duplicate"

        box = browser.find_element(By.ID, "sql-query")
        box.clear()
        box.send_keys("DELETE FROM drops")
        browser.find_element(By.ID, "sql-run").click()
        error = wait(browser).until(ec.visibility_of_element_located((By.ID, "sql-error")))
        assert error.text == "the viewer is read-only: only SELECT queries run here, not DELETE"


def test_served_report_draws_the_funnel_and_opens_a_dropped_rows_evidence(
    demo, browser, shots
) -> None:
    base, _, built = demo
    with screenshot_on_failure(browser, shots, "served-report"):
        browser.get(base + "/table/math_rl_v2")
        policy_violations(browser)
        browser.find_element(By.ID, "report-math_rl_v2@1").click()  # the form posts
        first = built.manifest.funnel[0].rows_in
        assert funnel_points(browser) == [first, *(f.rows_out for f in built.manifest.funnel)]
        row = open_first_sample(browser, "dropped · decontaminate · contaminated")
        marks = row.find_elements(By.CSS_SELECTOR, "mark.ngram")
        assert len(marks) >= 2 and all(m.is_displayed() for m in marks)
        item = row.find_element(By.CSS_SELECTOR, "pre.benchmark-item mark.ngram")
        assert item.text.lower().split()[0] in marks[0].text.lower()
        assert policy_violations(browser) == []  # its scripts ran under the page's policy


def test_a_uid_in_query_results_leads_to_its_drops(demo, browser, shots) -> None:
    base, _, _ = demo
    with screenshot_on_failure(browser, shots, "row-drops"):
        browser.get(base + "/sql?q=SELECT+uid+FROM+drops+WHERE+step+%3D+'near_dedup'+LIMIT+1")
        assert not browser.find_elements(By.ID, "sql-result")  # a link fills the box only
        browser.find_element(By.ID, "sql-run").click()
        wait(browser).until(ec.presence_of_element_located((By.ID, "sql-result")))
        browser.find_element(By.CSS_SELECTOR, "#sql-result td a").click()
        sample = wait(browser).until(
            ec.presence_of_element_located((By.CSS_SELECTOR, "details.sample"))
        )
        sample.find_element(By.TAG_NAME, "summary").click()
        twin = wait(browser).until(ec.visibility_of_element_located((By.CSS_SELECTOR, "pre.twin")))
        assert twin.text
        changed = sample.find_elements(By.CSS_SELECTOR, "mark.removed, mark.added")
        assert changed and all(m.is_displayed() for m in changed)


def test_the_demo_builds_report_file_in_the_browser(demo, browser, shots) -> None:
    _, lake, built = demo
    path = write_report(lake, "math_rl_v2@1")
    with screenshot_on_failure(browser, shots, "report-file"):
        browser.get(path.resolve().as_uri())
        assert browser.title == "math_rl_v2@1 build report"
        assert funnel_points(browser)[-1] == built.manifest.output.rows
        for chart in ("drops", "contamination", "clusters"):
            assert browser.find_elements(By.CSS_SELECTOR, f"#chart-{chart} .main-svg")
        row = open_first_sample(browser, "dropped · near_dedup · near_duplicate")
        assert row.find_element(By.CSS_SELECTOR, "pre.twin").is_displayed()
        # a kept sample's LaTeX is drawn as MathML, not shown as `$2^{3}$`
        drawn = browser.execute_script(
            "const m = document.querySelector('details.sample pre.text math msup, "
            "details.sample pre.text math mfrac, details.sample pre.text math mi');"
            "if (!m) return null;"
            "const d = m.closest('details'); d.style.display = ''; d.open = true;"
            "const r = m.getBoundingClientRect(); return [m.tagName, r.width, r.height];"
        )
        assert drawn is not None and drawn[1] > 0 and drawn[2] > 0, drawn
        browser.execute_script("window.scrollTo(0, 0)")
        height = browser.execute_script("return document.body.scrollHeight")
        browser.set_window_size(1400, min(height + 80, 8000))
        browser.execute_async_script(  # let every chart finish its relayout before the shot
            "const done = arguments[arguments.length - 1];"
            "const charts = Array.from(document.querySelectorAll('.js-plotly-plot'));"
            "Promise.all(charts.map(c => Plotly.Plots.resize(c))).then(() => done());"
        )
        shot = shots / "report-demo-build.png"
        assert browser.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
        browser.set_window_size(1400, 1000)


CHART_OVERLAPS = """
const box = r => ({left: r.left, right: r.right, top: r.top, bottom: r.bottom});
const meets = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
                        Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
const problems = [];
for (const chart of document.querySelectorAll('.js-plotly-plot')) {
  const svg = box(chart.querySelector('.main-svg').getBoundingClientRect());
  const cell = chart.closest('.grid > *') || chart.parentElement;
  const room = box(cell.getBoundingClientRect());
  if (svg.left < room.left - 1 || svg.right > room.right + 1)
    problems.push(`${chart.id} is ${svg.right - svg.left}px wide in a ${room.right - room.left}px cell`);
  for (const other of cell.parentElement.children) {
    if (other === cell || !cell.parentElement.classList.contains('grid')) continue;
    for (const el of [other, ...other.querySelectorAll('*')]) {
      if (meets(svg, box(el.getBoundingClientRect()))) {
        problems.push(`${chart.id} covers ${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}`);
        break;
      }
    }
  }
}
return problems;
"""


@pytest.mark.parametrize("width", [1024, 1400, 1920])
def test_report_charts_fit_their_cells_at_every_width(demo, browser, shots, width) -> None:
    _, lake, _ = demo
    path = write_report(lake, "math_rl_v2@1")
    with screenshot_on_failure(browser, shots, f"report-layout-{width}"):
        browser.set_window_size(width, 1000)
        browser.get(path.resolve().as_uri())
        funnel_points(browser)  # drawn
        wait(browser).until(lambda d: d.execute_script("return document.readyState") == "complete")
        with contextlib.suppress(TimeoutException):  # plotly debounces its relayouts
            wait(browser, 5).until(lambda d: d.execute_script(CHART_OVERLAPS) == [])
        assert browser.execute_script(CHART_OVERLAPS) == []
    browser.set_window_size(1400, 1000)


def lake_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


@contextlib.contextmanager
def attacker_site(page: str) -> Iterator[str]:
    """Another site (localhost, not 127.0.0.1) serving one page, as its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_on_another_site_cannot_run_a_query(demo, browser, shots) -> None:
    base, lake, _ = demo
    published = lake.files("math_rl_v2")[0]
    attack = f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{published}' (FORMAT parquet)"
    page = (  # the <img> first; once it has its answer (never an image), the <form>
        f'<form method="post" action="{base}/sql"><input name="q" value="{html.escape(attack)}">'
        '<input name="token" value="guessed"></form>'
        f'<img src="{base}/sql?q={quote(attack)}" onerror="document.forms[0].submit()">'
    )
    before = lake_hashes(lake.path)
    with attacker_site(page) as site, screenshot_on_failure(browser, shots, "cross-site"):
        browser.get(site + "/")
        wait(browser).until(lambda d: d.current_url.startswith(base))  # the form was sent
        assert lake_hashes(lake.path) == before  # neither the <img> nor the <form> ran it
        assert "from another site" in browser.find_element(By.TAG_NAME, "body").text
    lake.verify_hash("math_rl_v2")
