"""Renderers: turn a Report into text, JSON or Markdown. No diagnosis logic lives here."""

from kpdoctor.report.json_report import render_json
from kpdoctor.report.markdown import render_markdown
from kpdoctor.report.text import render_text

FORMATS = {"text": render_text, "json": render_json, "markdown": render_markdown}

__all__ = ["FORMATS", "render_json", "render_markdown", "render_text"]
