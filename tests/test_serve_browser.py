"""The viewer and the report in a real headless browser (Debian's chromium + chromedriver).

A test that fails saves a screenshot (to $CASCADE_SCREENSHOTS, else its tmp dir) and names
it in the failure. With $CASCADE_SCREENSHOTS set, the report test also keeps a full-page
screenshot of the demo build's report there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
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
    server = make_server(Viewer(Lake(lake.path, create=False, read_only=True)), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", lake, built
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    profile = tempfile.mkdtemp(prefix="cascade-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
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
        browser.get(base + "/report/math_rl_v2@1")
        first = built.manifest.funnel[0].rows_in
        assert funnel_points(browser) == [first, *(f.rows_out for f in built.manifest.funnel)]
        row = open_first_sample(browser, "dropped · decontaminate · contaminated")
        marks = row.find_elements(By.CSS_SELECTOR, "mark.ngram")
        assert len(marks) >= 2 and all(m.is_displayed() for m in marks)
        item = row.find_element(By.CSS_SELECTOR, "pre.benchmark-item mark.ngram")
        assert item.text.lower().split()[0] in marks[0].text.lower()


def test_a_uid_in_query_results_leads_to_its_drops(demo, browser, shots) -> None:
    base, _, _ = demo
    with screenshot_on_failure(browser, shots, "row-drops"):
        browser.get(base + "/sql?q=SELECT+uid+FROM+drops+WHERE+step+%3D+'near_dedup'+LIMIT+1")
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
