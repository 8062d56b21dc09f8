"""The README's example sessions are kpdoctor's real output, regenerated, so they cannot drift.

A fenced block right after ``<!-- example: session -->`` is a terminal session: ``$ `` lines are
commands, the lines after each its output. Two commands are known: ``cat FILE`` (what follows is
FILE's content, the input of the session, kept as written) and ``kpdoctor ARGS...`` (run for real
in a folder holding those files, 100 columns wide, no colour; what follows is replaced by what it
printed). Nothing goes through a shell.

    .venv/bin/python tests/readme_examples.py           # exit 1 and a diff when a block is stale
    .venv/bin/python tests/readme_examples.py --write   # rewrite the blocks in README.md
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARKER = "<!-- example: session -->"
_BLOCK = re.compile(re.escape(MARKER) + r"\n(```\w*\n)(.*?)(^```$)", re.S | re.M)
WIDTH = "100"


def run_session(block: str) -> str:
    """The session ``block`` with every kpdoctor command's output replaced by what it prints now."""
    out: list[str] = []
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        else:
            raise ValueError(f"a session starts with a `$ ` command, not {line!r}")
    with tempfile.TemporaryDirectory(prefix="kpd-readme-") as tmp:
        for command, shown in steps:
            argv = shlex.split(command)
            out.append(f"$ {command}")
            if argv[:1] == ["cat"] and len(argv) == 2:
                Path(tmp, argv[1]).write_text("".join(line + "\n" for line in shown))
                out += shown
            elif argv[:1] == ["kpdoctor"]:
                out += _kpdoctor(argv[1:], Path(tmp)).rstrip("\n").splitlines()
            else:
                raise ValueError(f"unknown command in a README session: {command!r} (cat FILE or kpdoctor ...)")
    return "\n".join(out) + "\n"


def _kpdoctor(args: list[str], cwd: Path) -> str:
    env = dict(os.environ, COLUMNS=WIDTH, NO_COLOR="1", PYTHONPATH=os.environ.get("PYTHONPATH") or str(REPO / "src"))
    env.pop("KPDOCTOR_DEBUG", None)
    res = subprocess.run([sys.executable, "-m", "kpdoctor", *args], capture_output=True, text=True, env=env, cwd=cwd,
                         timeout=300, check=False)  # fmt: skip
    if res.returncode not in (0, 1):
        raise RuntimeError(f"kpdoctor {shlex.join(args)}: exit {res.returncode}: {res.stderr.strip()[-500:]}")
    return res.stdout


def regenerate(text: str) -> str:
    """README text with every session block regenerated."""
    return _BLOCK.sub(lambda m: MARKER + "\n" + m.group(1) + run_session(m.group(2)) + m.group(3), text)


def sessions(text: str) -> list[str]:
    return [m.group(2) for m in _BLOCK.finditer(text)]


def main() -> int:
    old = README.read_text()
    new = regenerate(old)
    if "--write" in sys.argv[1:]:
        README.write_text(new)
        print(f"{len(sessions(old))} session(s) written to {README.relative_to(REPO)}")
        return 0
    if new == old:
        print(f"{len(sessions(old))} session(s) in {README.relative_to(REPO)} are current")
        return 0
    sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "README.md", "regenerated"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
