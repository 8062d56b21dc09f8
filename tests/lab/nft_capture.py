"""Load a knftables dump (upstream kube-proxy's nftables test expectations) into real nftables.

knftables' ``Fake.Dump()`` prints one ``add ...`` command a line, grouped by Service, so a rule or
an element can come before the set, map or chain it refers to (``add rule ... update @affinity-...``
before ``add set ... affinity-...``; a vmap's ``goto endpoint-...`` before ``add chain ...
endpoint-...``). ``nft -f`` resolves every reference when it reads the line, so such a dump
does not load as printed. :func:`ordered` reorders it the way tests/data/upstream/SOURCES.md
describes (tables, then sets and maps, then chains, then every rule and element in their
original order) and drops comments and blank lines; :func:`load` feeds the result to
``nft -f -`` inside a namespace. Nothing sends traffic.

CLI::

    python -m tests.lab.nft_capture DUMP.nft          # print the reordered script
"""

from __future__ import annotations

import sys
from pathlib import Path

from .netns import Netns

# declaration order: what a later line may refer to comes first
_RANK = {"table": 0, "set": 1, "map": 1, "flowtable": 1, "chain": 2}


def _rank(line: str) -> int:
    words = line.split(None, 2)
    if len(words) >= 2 and words[0] == "add":
        return _RANK.get(words[1], 3)
    return 3


def ordered(dump: str) -> str:
    """The dump as an ``nft -f`` script: declarations first, rules and elements in dump order."""
    lines = [ln.strip() for ln in dump.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    return "\n".join(sorted(lines, key=_rank)) + "\n"  # sorted() is stable: order within a rank is kept


def load(ns: Netns, dump: str) -> None:
    """Load a knftables dump into ``ns`` with ``nft -f -`` (raises RuntimeError when nft refuses it)."""
    ns.check(["nft", "-f", "-"], input=ordered(dump))


def apply(ns: Netns, script: str) -> None:
    """Run an ``nft -f`` script (one or more commands) inside ``ns``."""
    ns.check(["nft", "-f", "-"], input=script)


def listing(ns: Netns, json: bool = True) -> str:
    """``nft -j list ruleset`` (or the text form) of ``ns``."""
    return ns.check(["nft", "-j", "list", "ruleset"] if json else ["nft", "list", "ruleset"])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.lab.nft_capture DUMP.nft", file=sys.stderr)
        return 2
    sys.stdout.write(ordered(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
