"""JSON in the ``kpdoctor.report/v1`` shape (docs/report-schema.md)."""

from __future__ import annotations

import json

from kpdoctor.model import Report


def render_json(report: Report, color: bool = False) -> str:
    return json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
