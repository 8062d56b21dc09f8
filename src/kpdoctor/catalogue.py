"""The documented catalogue of checks (docs/checks.md), generated from the checks themselves."""

from __future__ import annotations

import kpdoctor.checks  # noqa: F401 - declares every check (an entry point)
from kpdoctor.knowledge import CHECKS


def render() -> str:
    out = [
        "# Checks and causes",
        "",
        "Generated from the checks' docstrings (`python -m kpdoctor.catalogue > docs/checks.md`);",
        "`kpdoctor explain CODE|CAUSE` prints the same entries. Cause slugs follow TAXONOMY.md.",
        "",
        "| code | cause | severity | title |",
        "|---|---|---|---|",
    ]
    specs = sorted(CHECKS.values(), key=lambda c: c.code)
    out += [f"| {s.code} | `{s.cause}` | {s.severity.label} | {s.title} |" for s in specs]
    for s in specs:
        sec = s.sections()
        out += ["", f"## {s.code} `{s.cause}`", "", sec.get("Summary", ""), ""]
        line = f"Evidence read (any of): {', '.join(k.value for k in s.needs)}"
        if s.needs_all:
            line += f"; together with: {', '.join(k.value for k in s.needs_all)}"
        out.append(line + ".")
        for name in ("Symptom", "Cause", "How it is detected", "Fix", "References"):
            if name in sec:
                out += ["", f"**{name}.** " + " ".join(sec[name].split())]
        if s.versions:
            out += ["", "| component | affected | fixed in | reference |", "|---|---|---|---|"]
            out += [f"| {r.component} | {r.affected} | {r.fixed or 'none known'} | {r.reference} |" for r in s.versions]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")
