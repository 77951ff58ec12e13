"""HTML building blocks for the report: escaping by construction, the page shell, CSS and JS.

Every string becomes HTML through `h()`, which escapes anything that is not already `Html`;
so a model whose op is called `<script>…` shows that name as text. The page needs no
network: CSS and JS are inline, a Content-Security-Policy allows only this page's own
script (by hash) and forbids every fetch.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from typing import Any, Iterable

_VOID_TAGS = frozenset({"br", "hr", "meta", "img", "col", "wbr"})


class Html(str):
    """Markup that is safe to emit as is: built by `h()`/`esc()` or a constant of this module."""


def esc(value: Any) -> Html:
    return Html(html.escape(str(value), quote=True))


def _attr_name(key: str) -> str:
    return key.rstrip("_").replace("_", "-")  # class_ → class, data_sort → data-sort


def _children(items: Iterable[Any]) -> Iterable[str]:
    for item in items:
        if item is None:
            continue
        if isinstance(item, Html):
            yield item
        elif isinstance(item, (list, tuple)):
            yield from _children(item)
        else:
            yield esc(item)


def h(tag: str, *children: Any, **attrs: Any) -> Html:
    """`h("td", "a<b", class_="num", data_sort=3)` → `<td class="num" data-sort="3">a&lt;b</td>`."""
    parts = [tag]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        parts.append(_attr_name(key) if value is True else f'{_attr_name(key)}="{esc(value)}"')
    opening = f"<{' '.join(parts)}>"
    if tag in _VOID_TAGS:
        return Html(opening)
    return Html(f"{opening}{''.join(_children(children))}</{tag}>")


def join(items: Iterable[Any], sep: str = "") -> Html:
    return Html(esc(sep).join(_children(items)))


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # JSON has no NaN; unknown stays unknown
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalars
        return _json_safe(obj.item())
    return obj if isinstance(obj, (str, int, float, bool)) or obj is None else str(obj)


def json_for_script(obj: Any) -> Html:
    """JSON that cannot end its <script> element or open a comment: <, >, & and the JS line
    separators are written as \\u escapes, which JSON.parse reads back unchanged."""
    text = json.dumps(_json_safe(obj), ensure_ascii=False, separators=(",", ":"))
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return Html(text)


SORT_JS = """
(function () {
  "use strict";
  function key(cell) {
    var raw = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent;
    if (raw.trim() === "") { return null; }
    var n = Number(raw);
    return isNaN(n) ? raw.toLowerCase() : n;
  }
  function compare(x, y) {
    if (typeof x === "number" && typeof y === "number") { return x - y; }
    return String(x).localeCompare(String(y));
  }
  function sortBy(table, th, col) {
    var current = th.getAttribute("aria-sort");
    var numeric = th.classList.contains("num");
    var asc = current ? current === "descending" : !numeric;  // numbers: largest first
    table.querySelectorAll("thead th").forEach(function (o) { o.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]);
      if (x === null || y === null) { return (x === null) - (y === null); }  // blanks last
      return asc ? compare(x, y) : compare(y, x);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th, col) {
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(table, th, col); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(table, th, col); }
      });
    });
  });
}());
"""

CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --band:#f6f8fa;
  --compute:#2e7d32; --memory:#1565c0; --occupancy:#00838f; --latency:#ef6c00; --sequential:#6d4c41; --host:#8e24aa; --unknown:#757575; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; color:var(--fg);
  background:var(--bg); }
header.top { background:#24292f; color:#fff; padding:16px 20px; }
header.top h1 { margin:0; font-size:20px; }
header.top p { margin:4px 0 0; color:#c9d1d9; font-size:13px; }
nav { position:sticky; top:0; z-index:2; background:var(--band); border-bottom:1px solid var(--line);
  padding:6px 20px; font-size:13px; }
nav a { margin-right:16px; color:#0969da; text-decoration:none; }
main { padding:8px 20px 48px; }
section { margin-top:28px; }
h2 { font-size:18px; border-bottom:1px solid var(--line); padding-bottom:4px; }
h3 { font-size:15px; margin:0; }
.note { color:var(--muted); }
.figures { display:grid; grid-template-columns:repeat(auto-fill,minmax(180px,1fr)); gap:10px; }
.figure { border:1px solid var(--line); border-radius:6px; padding:8px 12px; background:var(--band); }
.figure .value { font-size:20px; font-weight:600; }
.figure .label { color:var(--muted); font-size:12px; }
.classbar { display:flex; height:22px; border-radius:4px; overflow:hidden; margin:12px 0 4px;
  border:1px solid var(--line); }
.classbar span { display:block; height:100%; }
.legend span { margin-right:14px; font-size:12px; }
.swatch { display:inline-block; width:10px; height:10px; border-radius:2px; margin-right:4px; }
table { border-collapse:collapse; font-size:13px; margin:8px 0; }
th, td { padding:4px 8px; border-bottom:1px solid var(--line); text-align:left; vertical-align:top; }
th { background:var(--band); }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
table.sortable th { cursor:pointer; user-select:none; }
#hotspot-table { font-size:12px; }
#hotspot-table td, #hotspot-table th { padding:3px 4px; }
td.num { white-space:nowrap; }
td.shapes { min-width:110px; max-width:170px; overflow-wrap:break-word; }
/* Names and regions wrap inside their column, so the table fits a 1400 px window and the class
   column is not pushed past the right edge; a narrower window scrolls the table, never clips it. */
td.opname { min-width:14ch; max-width:26ch; overflow-wrap:anywhere; }
td.region { max-width:16ch; overflow-wrap:anywhere; }
.table-scroll { overflow-x:auto; max-width:100%; }
table.sortable th:hover { background:#eaeef2; }
th[aria-sort="ascending"]::after { content:" ▲"; font-size:10px; }
th[aria-sort="descending"]::after { content:" ▼"; font-size:10px; }
tbody tr:nth-child(even) { background:#fafbfc; }
code, .mono { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12px; }
.wrap { overflow-wrap:anywhere; max-width:360px; }
.nowrap { white-space:nowrap; }
.badge { display:inline-block; padding:1px 7px; border-radius:10px; font-size:12px; color:#fff;
  white-space:nowrap; }
.v-compute-bound { background:var(--compute); } .v-memory-bound { background:var(--memory); }
.v-under-occupied { background:var(--occupancy); } .v-latency-bound { background:var(--latency); } .v-sequential { background:var(--sequential); } .v-host-bound { background:var(--host); }
.v-unknown { background:var(--unknown); }
.s-good { background:var(--compute); } .s-bad { background:#cf222e; } .s-other { background:var(--unknown); }
.tier { background:#57606a; }
.chart svg { width:100%; max-width:1100px; height:auto; }
.rec { border:1px solid var(--line); border-radius:6px; padding:10px 14px; margin:10px 0; }
.rec header { display:flex; gap:10px; align-items:baseline; flex-wrap:wrap; }
.rec .gain { margin-left:auto; font-weight:600; }
table.kv td:first-child { color:var(--muted); white-space:nowrap; }
footer { color:var(--muted); font-size:12px; padding:16px 20px; border-top:1px solid var(--line); }
"""


def script_csp_hash(script: str) -> str:
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def page(title: str, header: Html, nav: Html, body: Html, footer: Html, data: Any) -> Html:
    """The whole document. `data` is embedded as JSON (id="advisor-data") for scripts and tools."""
    # Only our own script may run (hash); nothing may be fetched: the file works offline and an
    # injected <script>, were escaping ever to fail, would still not execute.
    csp = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src '{script_csp_hash(SORT_JS)}'")
    head = join([h("meta", charset="utf-8"),
                 h("meta", http_equiv="Content-Security-Policy", content=csp),
                 h("meta", name="viewport", content="width=device-width, initial-scale=1"),
                 h("title", title), Html(f"<style>{CSS}</style>")])
    data_script = Html(f'<script type="application/json" id="advisor-data">{json_for_script(data)}</script>')
    return Html("<!DOCTYPE html>\n" + h("html", h("head", head), h(
        "body", header, nav, h("main", body), footer, data_script, Html(f"<script>{SORT_JS}</script>")),
        lang="en") + "\n")
