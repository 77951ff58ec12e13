"""The report in a real browser: it renders, its sort script runs under its own CSP, clicking a
header sorts, and an injected inline script would be blocked. Skipped without chromium."""
import re
import struct
from html.parser import HTMLParser

import pytest

from kernel_advisor.collect.rundir import load_run
from kernel_advisor.render.html_report import write_report
from headless_chromium import CHROMIUM, run_chromium
from run_factory import gpt_like_ops, recommendations_doc, try_kernel_doc, write_run

pytestmark = [pytest.mark.chromium, pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")]
WIDTH, HEIGHT = 1400, 2000


def chromium(tmp_path, *args: str) -> str:
    done = run_chromium(tmp_path, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture
def report(tmp_path):
    run = load_run(write_run(tmp_path / "run", gpt_like_ops(), recommendations=recommendations_doc(),
                             try_kernel=try_kernel_doc()))
    return write_report(run, tmp_path / "report.html").path


class FirstColumn(HTMLParser):
    """The first cell of each body row of #hotspot-table, and which <th> carry tabindex."""

    def __init__(self):
        super().__init__()
        self.ranks, self.tabbable, self._in, self._body, self._cell, self._col = [], 0, False, False, None, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self._in |= tag == "table" and a.get("id") == "hotspot-table"
        if not self._in:
            return
        self.tabbable += tag == "th" and a.get("tabindex") == "0"
        self._body |= tag == "tbody"
        self._col = 0 if tag == "tr" else self._col + (tag == "td")
        if tag == "td" and self._body and self._col == 1:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.ranks.append(int(self._cell))
            self._cell = None
        self._in &= tag != "table"

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def dom(tmp_path, path) -> FirstColumn:
    parser = FirstColumn()
    parser.feed(chromium(tmp_path, "--dump-dom", path.as_uri()))
    return parser


def test_screenshot_renders(report, tmp_path):
    shot = tmp_path / "report.png"
    chromium(tmp_path, f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", report.as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (WIDTH, HEIGHT)
    assert len(data) > 50_000  # a blank page of this size compresses to a few kB


def test_sort_script_runs_under_the_csp(report, tmp_path):
    page = dom(tmp_path, report)
    assert page.tabbable == 16  # the script made every hotspot header focusable
    assert page.ranks == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("clicks,expected", [
    (1, [1, 2, 3, 4, 5, 6]),  # "share", first click on a number column: largest first
    (2, [5, 6, 4, 3, 2, 1]),  # second click: ascending; 5 and 6 tie at 2.5 % and keep their order
])
def test_clicking_a_header_sorts(report, tmp_path, clicks, expected):
    html = report.read_text(encoding="utf-8")
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)  # let the test's script in
    click = ("<script>var th=document.querySelectorAll('#hotspot-table thead th')[7];"
             + "th.click();" * clicks + "</script></body>")
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", click), encoding="utf-8")
    assert dom(tmp_path, probe).ranks == expected


def test_csp_blocks_an_injected_inline_script(report, tmp_path):
    html = report.read_text(encoding="utf-8")
    evil = tmp_path / "evil.html"
    evil.write_text(html.replace("</body>", "<script>document.title='pwned'</script></body>"), encoding="utf-8")
    out = chromium(tmp_path, "--dump-dom", evil.as_uri())
    assert "<title>pwned</title>" not in out and "<title>kernel_advisor" in out
