"""The dashboard in a real browser: Debian's headless Chromium (installed by ``./dev test``)
driven over the DevTools protocol loads each page, waits for its charts, finds their elements
in the DOM, sees no console error, and saves a screenshot. ``SEDIMENT_SCREENSHOT_DIR``: also
write the table page's screenshot there as ``dashboard-table.png`` (the README's picture).

Without Chromium the test is skipped, saying so; with ``CI=true`` it fails instead.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_cdp import Browser, find_chromium
from dashboard_helpers import HTML_KEYS, Server

import sediment as sd

pytestmark = pytest.mark.slow
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"

CHARTS = {
    # page -> {chart element id: CSS selector of the marks Plotly draws in it}
    "store": {"chart-keeping-up": ".barlayer .point path"},
    "table": {"chart-tree": "g.slice", "chart-files": ".barlayer .point path",
              "chart-history": ".barlayer .point path", "chart-jobs": ".scatterlayer .point"},
    "query": {"chart-plan": ".barlayer .point path"},
}


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    binary = find_chromium()
    if binary is None:
        reason = "no Chromium installed (/usr/bin/chromium): `./dev test` installs Debian's"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    b = Browser(binary, tmp_path_factory.mktemp("chromium") / "profile", width=1400,
                height=1100)
    yield b
    b.close()


def marks(browser: Browser, chart: str, selector: str) -> int:
    return int(browser.evaluate(
        f"document.querySelectorAll({('#' + chart + ' ' + selector)!r}).length"))


def load(browser: Browser, url: str) -> None:
    """Open ``url`` and wait until its script has drawn the view (``data-rendered``)."""
    browser.navigate(url)
    browser.wait_for("document.readyState === 'complete' && "
                     "document.body && document.body.dataset.rendered")


def check_page(browser: Browser, server: Server, path: str, view: str,
               shot: Path) -> None:
    before = len(browser.events)
    load(browser, server.url + path)
    assert browser.evaluate("document.body.dataset.view") == view
    for chart, selector in CHARTS[view].items():
        assert browser.evaluate(f"!!document.querySelector('#{chart} .main-svg')"), chart
        assert marks(browser, chart, selector) > 0, (path, chart, selector)
    browser.screenshot(shot)
    assert shot.stat().st_size > 10_000
    problems = browser.problems(since=before)
    assert problems == [], problems


def test_pages_render_in_chromium(browser: Browser, server: Server, tmp_path: Path) -> None:
    check_page(browser, server, "/", "store", tmp_path / "store.png")
    assert browser.evaluate("document.querySelectorAll('#tables tbody tr').length") == 5
    check_page(browser, server, "/tables/events", "table", tmp_path / "table.png")
    assert marks(browser, "chart-tree", "g.slice") == 7  # the whole tree of events
    assert browser.evaluate("document.querySelectorAll('#tags tbody tr').length") == 2
    # the histogram marks the batch size; the jobs chart has a trace per job kind
    assert browser.evaluate("document.querySelector('#chart-files').layout.shapes[0].x0") == 3
    names = browser.evaluate("document.querySelector('#chart-jobs').data.map(t => t.name)")
    assert {"compaction", "split", "ingest", "failed"} <= set(names)
    target = os.environ.get("SEDIMENT_SCREENSHOT_DIR")
    if target:  # the README's picture: the first screenful of the table page
        Path(target).mkdir(parents=True, exist_ok=True)
        browser.screenshot(Path(target) / "dashboard-table.png", full=False)
    check_page(browser, server, "/tables/broken", "table", tmp_path / "broken.png")
    assert browser.evaluate("document.querySelector('#chart-jobs').data"
                            ".find(t => t.name === 'failed').x.length") == 1
    q = urllib.parse.urlencode({"start": "c", "end": "p", "limit": 20})
    check_page(browser, server, f"/tables/events/query?{q}", "query", tmp_path / "query.png")
    assert browser.evaluate("document.querySelectorAll('#rows tbody tr').length") == 20
    shown = browser.evaluate("document.getElementById('request').textContent")
    assert sd.ReadRequest.from_json(shown) == sd.ReadRequest(ranges=sd.Range("c", "p"))


def test_refresh_and_drill_down(browser: Browser, server: Server) -> None:
    """The page fetches its data again on its own; clicking a partition with more levels
    re-roots the tree there, and the breadcrumb leads back."""
    load(browser, server.url + "/tables/deep")
    first = browser.evaluate("document.body.dataset.rendered")
    browser.wait_for(f"document.body.dataset.rendered !== {first!r}", timeout=15)
    assert browser.evaluate("document.getElementById('status').textContent").startswith(
        "updated")
    tree = "document.getElementById('chart-tree')"
    assert browser.evaluate(f"{tree}.data[0].ids.length") == 511
    target = browser.evaluate(f"{tree}.data[0].ids[510]")
    browser.evaluate(f"{tree}.emit('plotly_click', {{points: [{{id: {target!r}}}]}})")
    browser.wait_for(f"{tree}.data[0].ids[0] === {target!r}", timeout=15)
    assert browser.evaluate(f"{tree}.data[0].ids.length") == 7  # the two levels below it
    crumbs = browser.evaluate(
        "[...document.querySelectorAll('#tree-path a')].map(a => a.textContent)")
    assert crumbs[0] == "root" and len(crumbs) == 8  # its ancestors, the root first
    browser.evaluate("document.querySelector('#tree-path a').click()")
    browser.wait_for(f"{tree}.data[0].ids[0] === 'root'", timeout=15)
    assert browser.problems() == []


def test_html_from_the_store_stays_text(browser: Browser, server: Server,
                                        tmp_path: Path) -> None:
    """Split points, keys and values made of HTML are shown, never run or parsed."""
    check_page(browser, server, "/tables/web", "table", tmp_path / "web.png")
    labels = browser.evaluate(
        "[...document.querySelectorAll('#chart-tree g.slice text')].map(t => t.textContent)"
        ".join(' ')")
    for key in HTML_KEYS:
        assert repr(key) in labels
    q = urllib.parse.urlencode({"keys": "\n".join(HTML_KEYS)})
    check_page(browser, server, f"/tables/web/query?{q}", "query", tmp_path / "webq.png")
    cells = browser.evaluate(
        "[...document.querySelectorAll('#rows tbody td')].map(t => t.textContent)")
    assert set(HTML_KEYS) <= set(cells) and "<b>bold</b>" in cells
    assert browser.evaluate("document.querySelector('textarea[name=keys]').value") == \
        "\n".join(HTML_KEYS)
    injected = browser.evaluate(
        "document.querySelectorAll('img[src=x], iframe, main script, #rows b').length")
    assert injected == 0
    assert browser.problems() == []  # no alert() dialog, no error


def test_the_table_page_at_a_glance(browser: Browser, server: Server, tmp_path: Path) -> None:
    """Commits per window with the selector (kept across a refresh), numbered leaves in the
    icicle and the list beside it, count axes in whole numbers, the properties grouped,
    every time in ISO 8601 UTC, and the query form's where filter with its error."""
    check_page(browser, server, "/tables/events", "table", tmp_path / "glance.png")
    history = "document.getElementById('chart-history')"
    assert browser.evaluate("[...document.querySelectorAll('#commit-window option')]"
                            ".map(o => o.value)") == ["hour", "day", "week"]
    assert browser.evaluate("document.getElementById('commit-window').value") == "hour"
    assert browser.evaluate(f"{history}.data.map(t => t.x.length)") == [60] * 6
    assert set(browser.evaluate(f"{history}.data.map(t => t.name)")) == {
        "initialise", "add_files", "split_partition", "split_file_references",
        "assign_job_ids", "replace_file_references"}
    assert browser.evaluate(f"{history}.data.reduce((a, t) => a + t.y.reduce((b, y) => b + y,"
                            " 0), 0)") == 23
    assert browser.evaluate("document.getElementById('commit-note').textContent").startswith(
        "23 commits in the last hour, per minute")
    for window, buckets in (("day", 24), ("week", 7)):
        select = "document.getElementById('commit-window')"
        browser.evaluate(f"{select}.value = {window!r}; "
                         f"{select}.dispatchEvent(new Event('change'))")
        browser.wait_for(f"{history}.data[0].x.length === {buckets}")
    first = browser.evaluate("document.body.dataset.rendered")
    browser.wait_for(f"document.body.dataset.rendered !== {first!r}", timeout=15)
    assert browser.evaluate(f"{history}.data[0].x.length") == 7  # the choice outlives a refresh
    status = browser.evaluate("document.getElementById('status').textContent")
    assert re.fullmatch(r"updated \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", status), status
    # leaves: numbered in the list and in the icicle
    cells = browser.evaluate("[...document.querySelectorAll('#leaves tbody tr')]"
                             ".map(r => [...r.cells].map(c => c.textContent))")
    assert [c[0] for c in cells] == ["#1", "#2", "#3", "#4"]
    assert all(c[2].startswith("[") and c[6].endswith("KiB") for c in cells)
    tiles = browser.evaluate("[...document.querySelectorAll('#chart-tree g.slice text')]"
                             ".map(t => t.textContent).join(' ')")
    assert all(f"#{n} [" in tiles for n in range(1, 5))
    # count axes: whole numbers only
    for chart in ("chart-files", "chart-history"):
        assert browser.evaluate(f"document.getElementById('{chart}').layout.yaxis.tickformat") \
            == "d"
        ticks = browser.evaluate(f"[...document.querySelectorAll('#{chart} .ytick text')]"
                                 ".map(t => t.textContent)")
        assert ticks and all(re.fullmatch(r"[\d,]+", t) for t in ticks), (chart, ticks)
    ticks = browser.evaluate("[...document.querySelectorAll('#chart-files .xtick text')]"
                             ".map(t => t.textContent)")
    assert ticks == ["0", "1", "2", "3", "4"]
    # properties: grouped, the set ones marked; the check box keeps only those
    groups = browser.evaluate("[...document.querySelectorAll('#properties tr.group')]"
                              ".map(r => r.textContent)")
    assert groups == sorted(groups) and {"compaction", "gc", "state"} <= set(groups)
    assert browser.evaluate("document.querySelectorAll('#properties .badge.set').length") == 4
    browser.evaluate("document.getElementById('only-set').click()")
    assert browser.evaluate("document.querySelectorAll('#properties tr:not(.group) code')"
                            ".length") == 12  # 4 rows: name, value, default
    times = browser.evaluate("[...document.querySelectorAll('.time')].map(t => t.textContent)")
    assert len(times) > 20 and all(re.fullmatch(ISO, t) for t in times)
    assert browser.problems() == []
    # the query form's where filter, and a bad one shown on the page
    q = urllib.parse.urlencode({"where": "key >= 'm'", "limit": 1000})
    check_page(browser, server, f"/tables/events/query?{q}", "query", tmp_path / "where.png")
    keys = browser.evaluate("[...document.querySelectorAll('#rows tbody tr')]"
                            ".map(r => r.cells[0].textContent)")
    assert keys and all(k >= "m" for k in keys)
    assert browser.evaluate("document.querySelector('input[name=where]').value") == "key >= 'm'"
    before = len(browser.events)
    load(browser, server.url + "/tables/events/query?" + urllib.parse.urlencode(
        {"where": "value > 3"}))
    error = browser.evaluate("document.getElementById('query-error').textContent")
    assert "literal 3 does not fit field 'value' (string)" in error
    problems = browser.problems(since=before)
    assert all("status of 400" in p for p in problems), problems  # the page's own answer
