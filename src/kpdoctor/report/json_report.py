"""JSON in the ``kpdoctor.report/v1`` shape (docs/report-schema.md)."""

from __future__ import annotations

import json

from kpdoctor.model import Report
from kpdoctor.report.safe import json_safe

PRETTY_LIMIT = 3000  # results; above, no indentation (json's indenting encoder is pure Python: 4 s at 10k)


def render_json(report: Report, color: bool = False) -> str:
    doc = report.to_json()
    big = report.verification is not None and len(report.verification.rows) > PRETTY_LIMIT
    if big:
        return json_safe(json.dumps(doc, ensure_ascii=False, separators=(",", ":"))) + "\n"
    return json_safe(json.dumps(doc, indent=2, ensure_ascii=False)) + "\n"
