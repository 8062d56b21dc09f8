"""Rules a writer appended more than once: the one reader of "duplicated rules" that the causes
behind them (an iptables whose `-C` fails, a kube-proxy release that re-appended its jumps) share.

A writer that checks before it appends (kubelet, kube-proxy's jump rules, kube-router, old
kube-proxy for every rule) never makes two identical rules in one chain: two copies mean its
check did not find the rule it had added. Rules restored as a whole table (kube-proxy's own
chains) cannot repeat that way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.parse.iptables import UNNAMED_CHAIN, Rule, Ruleset, ScannedRules

BUILTIN_CHAINS = ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")
# `iptables -L -v` rows start with their counters: the same rule counted apart is one rule
_LIST_COUNTERS = lazy_re.compile(r"^\s*\d+[KMGT]?\s+\d+[KMGT]?\s+")
# kube-proxy's userspace proxier (before 1.2 by default): its chains, each jumped to from one
# built-in chain of the nat table only (pkg/proxy/userspace/proxier.go's iptablesInit, and the
# iptables proxier's tearDownUserspaceIptables): a grep'd `-L` row without its "Chain" line that
# jumps to one is in that chain
USERSPACE_JUMPED_FROM = {
    "KUBE-PORTALS-CONTAINER": "PREROUTING",
    "KUBE-NODEPORT-CONTAINER": "PREROUTING",
    "KUBE-PORTALS-HOST": "OUTPUT",
    "KUBE-NODEPORT-HOST": "OUTPUT",
}
USERSPACE_CHAINS = tuple(USERSPACE_JUMPED_FROM)


def chain_of(r: Rule) -> str:
    """A rule's chain; for a row whose chain the text does not name, the one kube-proxy's
    userspace proxier jumps from to its target, when it is such a jump."""
    if r.chain == UNNAMED_CHAIN:
        return USERSPACE_JUMPED_FROM.get(r.target or "", r.chain)
    return r.chain


@dataclass(frozen=True, slots=True)
class DuplicatedRule:
    rule: Rule  # its first copy
    copies: int
    artifact: str

    @property
    def chain(self) -> str:
        return chain_of(self.rule)

    @property
    def userspace_jump(self) -> bool:
        """A jump of kube-proxy's userspace proxier, which kube-proxy itself re-appended."""
        return self.chain in BUILTIN_CHAINS and (self.rule.target or "") in USERSPACE_CHAINS


# what a Kubernetes rule's line holds: its chain, its target, or its comment
_KUBERNETES = ("KUBE-", "kubernetes")


def _kubernetes(r: Rule) -> bool:
    return any(k in r.text for k in _KUBERNETES)


def _listing_key(r: Rule) -> str | None:
    """A `-L` row that names its rule uniquely: a jump to a KUBE- chain from a built-in chain,
    with its comment (-L hides matches, so two other rows may look alike and differ)."""
    if chain_of(r) not in BUILTIN_CHAINS or "/*" not in r.text:
        return None
    body = _LIST_COUNTERS.sub("", r.body.strip())
    return body if body.startswith("KUBE-") else None


def duplicated_rules(rulesets: list[Ruleset], at_least: int = 2) -> list[DuplicatedRule]:
    """Kubernetes rules found ``at_least`` times in one chain of one dump, most copies first
    (three per dump at most)."""
    out = []
    for rs in rulesets:
        counts: Counter[tuple[str, str]] = Counter()
        first: dict[tuple[str, str], Rule] = {}
        for table in rs.tables.values():
            copies: list[tuple[Rule, str, int]]  # a rule, the text that tells it, its copies
            if isinstance(table.rules, ScannedRules):  # repeated texts found in the core, without making every rule
                copies = [(r, r.body.strip(), n) for r, n in table.rules.repeated(_KUBERNETES)]
            else:
                if rs.form == "L":
                    keyed = [(r, k) for r in table.rules if (k := _listing_key(r)) is not None]
                else:
                    keyed = [(r, r.body.strip()) for r in table.rules if _kubernetes(r)]
                # most dumps repeat no rule, which one set tells without counting
                if len({k for _, k in keyed}) == len(keyed):
                    continue
                copies = [(r, k, 1) for r, k in keyed]
            for r, k, n in copies:
                key = (table.name, f"{chain_of(r)} {k}")
                counts[key] += n
                first.setdefault(key, r)
        out += [DuplicatedRule(first[key], n, rs.artifact) for key, n in counts.most_common(3) if n >= at_least]
    return sorted(out, key=lambda d: -d.copies)
