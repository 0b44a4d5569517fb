"""A Sphinx extension that serves plotly.js for the book's interactive charts
(`kvutils.report.interactive`) from its own `_static/`, and only to the pages that hold one.

Listed in `_config.yml` (`sphinx: extra_extensions`). It copies the plotly.min.js that the installed
`plotly` package ships into `_static/` once, and adds it to exactly the pages whose body holds a
chart (`MARKER_CLASS`), so the other pages do not carry its 4.8 MB.
"""
from __future__ import annotations

from kvutils.report.interactive import MARKER_CLASS, PLOTLY_JS, plotly_js_path


def _add_plotly_static(app, config) -> None:
    config.html_static_path = [*config.html_static_path, str(plotly_js_path())]


def plotly_where_used(app, pagename, templatename, context, doctree) -> None:
    if MARKER_CLASS in (context.get("body") or ""):
        app.add_js_file(PLOTLY_JS)  # for this page only (Sphinx resets the list after each page)


def setup(app):
    app.connect("config-inited", _add_plotly_static)
    # before kvutils.book.offline (500), which rebuilds the page's script list
    app.connect("html-page-context", plotly_where_used, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
