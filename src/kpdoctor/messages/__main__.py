"""docs/messages.md, generated from the data: ``python -m kpdoctor.messages > docs/messages.md``;
``python -m kpdoctor.messages --write-data`` writes the YAML files' data file (schema.DATA_FILE)."""

from __future__ import annotations

import sys
from pathlib import Path

from kpdoctor.messages import catalogue
from kpdoctor.messages.schema import DATA_FILE, Catalogue, data_of, shipped_files


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """An inline code span that holds backticks too (a template may quote with them)."""
    return f"`` {_cell(text)} ``" if "`" in text else f"`{_cell(text)}`"


def render(cat: Catalogue) -> str:
    out = [
        "# Messages",
        "",
        "What kube-proxy, its node tools and the kernel can print, read from their source and kept as",
        "data in `src/kpdoctor/messages/` (one YAML file per component; the schema is in",
        "`src/kpdoctor/messages/schema.py`). Generated: `python -m kpdoctor.messages > docs/messages.md`.",
        "",
        "| component | messages | cause | symptom | benign |",
        "|---|---|---|---|---|",
    ]
    for c in cat.components:
        kinds = [m.kind for m in c.messages]
        out.append(
            f"| {c.name} | {len(kinds)} | {kinds.count('cause')} | {kinds.count('symptom')} | {kinds.count('benign')} |"
        )
    for c in cat.components:
        out += ["", f"## {c.name}", ""]
        out += [f"Read from: {_cell(s)}" for s in c.sources]
        out += ["", "| message | class | cause | meaning |", "|---|---|---|---|"]
        for m in c.messages:
            cause = m.cause or (", ".join(m.suggests) if m.suggests else "")
            out.append(f"| {_code(m.template)} | {m.kind} | {cause} | {_cell(m.meaning)} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-data"]:
        out = Path(__file__).with_name(DATA_FILE)
        out.write_text(data_of(shipped_files()), encoding="utf-8")
        print(f"wrote {out}")
    else:
        print(render(catalogue()), end="")
