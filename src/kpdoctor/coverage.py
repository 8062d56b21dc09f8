"""What a run could rule out: per family of causes, how many of its checks ran.

"Nothing found" means little when almost nothing could run: a single pasted listing that five
checks read says nothing of the other fifty. A run is a clean bill of health ("healthy") only
when most checks of every family ran and nothing it found is suspected or unexplained; otherwise
the verdict says "nothing found in what was given", names the families not ruled out and what
to send. Computed once, after ranking, from the checks that ran and were skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

from kpdoctor.bundle.artifacts import HOW_TO_GIVE, LIVE_RUN, Kind
from kpdoctor.knowledge import CHECKS, UNEXPLAINED
from kpdoctor.model import Coverage, FamilyCoverage, Finding, Skipped

# The families of TAXONOMY.md, by the first digit of their check codes (DESIGN.md).
FAMILIES = (
    ("KP1", "rule sync failures"),
    ("KP2", "rules that disagree with the cluster"),
    ("KP3", "packet loss on the node"),
    ("KP4", "connections lost when Pods stop"),
)
# A family is ruled out when at least this share of its checks ran on evidence given whole (not
# only on fragments): a node's full collection runs most of them (the rest read what only a
# paste holds, or another proxy mode's state).
RULED_OUT_SHARE = 0.5

LIVE_COMMAND = f"{LIVE_RUN} (or `kpdoctor collect` there, then diagnose the bundle)"
MAX_SEND = 4  # commands named besides the live run


def _counted(code: str) -> bool:
    """The checks coverage counts: not the ones that report what nothing explains (they say
    nothing about a family)."""
    return CHECKS[code].cause not in UNEXPLAINED


def _judged(code: str, whole: frozenset[Kind] | None) -> bool:
    """Did the check that ran judge its cause whole: on evidence given whole, not only on
    fragments, nor only on kinds that show a part of its cause (``CheckSpec.partly``)?"""
    if whole is None:
        return True
    spec = CHECKS[code]
    return bool((set(spec.needs) - set(spec.partly)) & whole)


def coverage_of(
    findings: Sequence[Finding],
    skipped: Sequence[Skipped],
    only: tuple[str, ...] | None = None,
    collected: bool = False,
    whole: frozenset[Kind] | None = None,
) -> Coverage:
    """The run's coverage: ``findings`` ranked (folded ones inside), ``skipped`` the checks that
    could not run, ``only`` the code prefixes the run was limited to (``verify``), ``collected``:
    the evidence is a node's collection already (a bundle, --live), so what to send is only what
    it lacked, not the live run again; ``whole``: the kinds given whole, not only as fragments
    (log lines without their log, rules without their tables). A check whose evidence was given
    only as fragments ran, but rules nothing out: what a fragment leaves out is unknown. None:
    every kind given counts as whole."""
    codes = [c for c in CHECKS if _counted(c) and (only is None or c.startswith(only))]
    not_run = {s.code for s in skipped}
    families = []
    lacking: dict[str, int] = {}
    for prefix, name in FAMILIES:
        mine = [c for c in codes if c.startswith(prefix)]
        if not mine:
            continue
        ran = sum(1 for c in mine if c not in not_run)
        judged = sum(1 for c in mine if c not in not_run and _judged(c, whole))
        ruled_out = judged >= RULED_OUT_SHARE * len(mine)
        families.append(FamilyCoverage(name, prefix, ran, len(mine), ruled_out))
        if not ruled_out:
            for s in skipped:
                if s.code.startswith(prefix):
                    for kind in s.lacking[:1]:
                        lacking[kind] = lacking.get(kind, 0) + 1
    every = [f for top in findings for f in top.with_folded()]
    unexplained = sum(1 for f in every if f.cause in UNEXPLAINED)
    suspected = sum(1 for f in every if f.suspected)
    ran_total = sum(1 for c in codes if c not in not_run)
    send: list[str] = []
    if not all(f.ruled_out for f in families):
        if not collected:
            send.append(LIVE_COMMAND)
        for kind, _ in sorted(lacking.items(), key=lambda kv: -kv[1]):
            if kind in HOW_TO_GIVE and len(send) <= MAX_SEND:
                send.append(HOW_TO_GIVE[kind])
    return Coverage(ran_total, len(codes), tuple(families), unexplained, suspected, tuple(send))
