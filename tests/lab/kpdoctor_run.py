"""kpdoctor run as a user runs it on files the lab made: its JSON report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def diagnose_json(*paths: Path, options: tuple[str, ...] = ()) -> dict[str, Any]:
    """``kpdoctor diagnose -f json --min-severity info [OPTIONS] PATH...`` in a child process; its report."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    done = subprocess.run(
        [sys.executable, "-m", "kpdoctor", "diagnose", "-f", "json", "--min-severity", "info", *options, *map(str, paths)],
        capture_output=True, text=True, timeout=180, env=env, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report
