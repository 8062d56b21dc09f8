"""nft's own error report for a rule it refused, as kube-proxy's nftables mode logs it.

nft names the failing input line and columns (`/dev/stdin:892:87-100: Error: Could not process
rule: No such file or directory`), then prints that line and a caret line under the columns.
The words under the carets say what failed: an expression the kernel lacks (`fib`, KP116), a
rule kube-proxy wrote wrong (`iif` for an interface prefix, KP123). Both read it here.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from kpdoctor import lazy_re
from kpdoctor.knowledge import signature
from kpdoctor.parse.logscan import Hit

if TYPE_CHECKING:
    from kpdoctor.facts import Facts

NFT_RULE_ERROR = signature(
    "nft-input-error",
    ": Error: ",
    r"/dev/stdin:([0-9]+):([0-9]+)-([0-9]+): Error: (.+)",
    failure=True,
)
_COMMAND = lazy_re.compile(r"\b(add|insert|replace|create|delete|flush) (rule|element|chain|map|set|table) ")
LOOKAHEAD = 3  # lines after the error in which nft prints the refused input


def _input_after(facts: Facts, hit: Hit) -> str | None:
    """The refused input line: in the hit's record, else in the artifact's next lines."""
    after = hit.record.split(hit.text, 1)[1] if hit.text and hit.text in hit.record else ""
    for line in after.splitlines()[:LOOKAHEAD]:
        if _COMMAND.search(line):
            return line
    art = next((a for a in facts.log_artifacts if a.name == hit.artifact), None)
    if art is None:
        return None
    skip = hit.line - art.first_line + 1
    if art.path is None:
        lines = art.text.splitlines()[skip : skip + LOOKAHEAD]
    else:
        with open(art.path, encoding="utf-8", errors="replace") as fh:
            lines = list(itertools.islice(fh, skip, skip + LOOKAHEAD))
    return next((line for line in lines if _COMMAND.search(line)), None)


def failing_part(facts: Facts, hit: Hit) -> tuple[str, str, str, str] | None:
    """(nft's message, the first word under its carets, the refused input, the words before
    the carets) for a hit of NFT_RULE_ERROR; None when the input is not in the evidence.

    nft puts its carets under an expression (`fib saddr type`) or under the operand it could
    not use (`azv*` of `iif != azv*`): the words before say which expression that was."""
    if len(hit.groups) < 4 or hit.groups[3] is None:
        return None
    message = hit.groups[3].strip().removeprefix("Could not process rule: ")
    line = _input_after(facts, hit)
    if line is None:
        return None
    m = _COMMAND.search(line)
    assert m is not None
    command = line[m.start() :].rstrip()
    try:
        first, last = int(hit.groups[1] or 0), int(hit.groups[2] or 0)
    except ValueError:
        return None
    span = command[max(first - 1, 0) : last]
    word = span.split()[0] if span.split() else ""
    return message, word, command, command[: max(first - 1, 0)]
