"""The whole report of a hostile bundle, as a user gets it: in Markdown only kpdoctor's own
structure (headings, one fence per finding's evidence, no HTML, no links), on the terminal no raw
control character (tests/test_report_markdown_hostile.py tests the escaping itself)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_report_markdown_hostile import DEMO, HOSTILE, MD, REPO

from kpdoctor.report.safe import printable


def _hostile_bundle(tmp_path: Path, payload: str) -> Path:
    """The demo bundle, with the payload in the log lines the finding quotes and a loose file
    whose name holds it (names may hold any byte but / and NUL)."""
    bundle = tmp_path / "bundle"
    shutil.copytree(DEMO, bundle)
    log = bundle / "kube-proxy/log.txt"
    lines = log.read_text().splitlines(keepends=True)
    one_line = payload.replace("\n", " ")
    lines = [ln.rstrip("\n") + " " + one_line + "\n" if "holding the xtables lock" in ln else ln for ln in lines]
    log.write_text("".join(lines))
    return bundle


@pytest.mark.parametrize("payload", HOSTILE)
def test_the_markdown_report_of_a_hostile_bundle_has_only_its_own_structure(tmp_path: Path, payload: str) -> None:
    bundle = _hostile_bundle(tmp_path, payload)
    name = re.sub(r"[/\0]", "_", payload) or "x"
    loose = tmp_path / f"paste {name}.txt"
    loose.write_text("iptables v1.8.4 (legacy)\n")
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or str(REPO / "src"), NO_COLOR="1")
    runs = {}
    for fmt in ("markdown", "json", "text"):
        res = subprocess.run([sys.executable, "-m", "kpdoctor", "diagnose", "-f", fmt, str(bundle), str(loose)],
                             capture_output=True, env=env, timeout=120, check=False)  # fmt: skip
        assert res.returncode in (0, 1), res.stderr
        runs[fmt] = res.stdout.decode("utf-8")
    md = runs["markdown"]
    tokens = MD.parse(md)
    assert not [t for t in tokens if t.type == "html_block"]
    assert not [c for t in tokens if t.children for c in t.children if c.type in ("html_inline", "link_open", "image")]
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings[0].startswith("kpdoctor report") and all(
        h.startswith(("kpdoctor report", "CRITICAL", "WARNING", "INFO", "Inputs", "Not checked", "Below"))
        for h in headings
    ), headings
    fences = [t for t in tokens if t.type == "fence"]
    doc = json.loads(runs["json"])
    quoted = [e for f in doc["findings"] for e in f.get("evidence", [])]
    assert len(fences) == sum(1 for f in doc["findings"] if f.get("evidence"))
    assert sum(len(f.content.splitlines()) for f in fences) == len(quoted)  # every quoted line inside
    for out in (md, runs["text"]):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out), "a raw control character reached the reader"
    shown = ["".join(c.content for c in t.children or []) for t in tokens if t.type == "inline"]
    want = printable(" ".join(name.splitlines())).strip()
    assert any(want in line for line in shown) or "`" in name, "the file's name shows as written"
