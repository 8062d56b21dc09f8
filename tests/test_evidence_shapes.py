"""Every registered evidence shape (parse.shapes.REGISTERED) is read wherever its output turns up.

A shape is declared once, by its parser module; this holds each to its own example (real lines
its program printed): the content sniffer types the example as the shape's kind, the segmenter
gives each of its lines that shape, a paste that holds it among other output reads it apart, the
facts read its records each at the line it is on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kpdoctor.bundle.loader import load
from kpdoctor.bundle.segments import shape_of
from kpdoctor.bundle.sniff import sniff
from kpdoctor.facts import Facts
from kpdoctor.parse.evidence_shape import EvidenceShape
from kpdoctor.parse.shapes import REGISTERED

SYSCTL = "net.ipv4.ip_forward = 1\nnet.ipv4.conf.all.route_localnet = 0\n"


@pytest.mark.parametrize("shape", REGISTERED, ids=lambda s: s.name)
def test_a_shape_is_typed_by_its_example_alone(shape: EvidenceShape[object]) -> None:
    typed = sniff(shape.example, ())
    assert typed.kind is shape.kind, typed
    lines = [ln for ln in shape.example.splitlines() if ln.strip()]
    assert all(getattr(shape_of(ln), "kind", None) is shape.kind for ln in lines), [(ln, shape_of(ln)) for ln in lines]


@pytest.mark.parametrize("shape", REGISTERED, ids=lambda s: s.name)
def test_a_shape_is_read_among_other_output_at_its_own_lines(shape: EvidenceShape[object], tmp_path: Path) -> None:
    paste = tmp_path / "paste.md"
    text = f"What I ran on the node:\n\n```\n$ sysctl -a | grep forward\n{SYSCTL}```\n\n```\n{shape.example}```\n"
    paste.write_text(text)
    facts = Facts(load([paste]))
    assert facts.of(shape.kind), [(a.name, a.kind) for a in facts.evidence.artifacts]
    records = facts.records(shape)
    assert records and len(records) == len(shape.parse(shape.example, 1))
    lines = text.splitlines()
    for record, cite in records:
        assert cite.line is not None and lines[cite.line - 1].strip() == cite.text == record.text

