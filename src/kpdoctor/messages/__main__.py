"""docs/messages.md, generated from the data: ``python -m kpdoctor.messages > docs/messages.md``."""

from __future__ import annotations

from kpdoctor.messages import catalogue
from kpdoctor.messages.schema import Catalogue


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
    print(render(catalogue()), end="")
