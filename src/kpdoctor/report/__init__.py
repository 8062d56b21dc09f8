"""Renderers: turn a Report into text, JSON, Markdown, SARIF or HTML. No diagnosis logic lives here."""

from kpdoctor.report.html import render_html
from kpdoctor.report.json_report import render_json
from kpdoctor.report.markdown import render_markdown
from kpdoctor.report.sarif import render_sarif
from kpdoctor.report.text import render_text

FORMATS = {
    "text": render_text,
    "json": render_json,
    "markdown": render_markdown,
    "sarif": render_sarif,
    "html": render_html,
}

__all__ = ["FORMATS", "render_html", "render_json", "render_markdown", "render_sarif", "render_text"]
