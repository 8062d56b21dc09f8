"""What the packet-loss checks share: reading drop counters the same way, and sysctl advice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kpdoctor.facts.node import Change, NodeState, Sample
from kpdoctor.model import Cite, Severity

SINCE_BOOT = "a total since boot (one snapshot: when it happened is unknown)"


@dataclass(slots=True)
class CounterReading:
    """Drop counters as the evidence shows them: growing now (two snapshots) or totals."""

    growing: list[tuple[str, Change]] = field(default_factory=list)
    totals: list[tuple[str, Sample]] = field(default_factory=list)  # non-zero, not known to grow

    @property
    def cites(self) -> list[Cite]:
        out: list[Cite] = []
        for _, c in self.growing:
            out += [c.first.cite, c.last.cite]
        out += [s.cite for _, s in self.totals]
        return list(dict.fromkeys(out))

    def describe(self) -> str:
        if self.growing:
            return "; ".join(c.describe(n) for n, c in self.growing)
        return "; ".join(f"{n} = {s.value}" for n, s in self.totals) + f" ({SINCE_BOOT})"

    def severity(self, confirmed: Severity) -> Severity:
        """``confirmed`` when a counter grows between snapshots; a total alone is info."""
        return confirmed if self.growing else Severity.INFO


def read_counters(node: NodeState, names: list[str]) -> CounterReading:
    out = CounterReading()
    for name in names:
        ch = node.change(name)
        if ch is not None:
            if ch.growth > 0:
                out.growing.append((name, ch))
            continue  # two snapshots and no growth: nothing happening now
        tot = node.total(name)
        if tot is not None and tot.value > 0:
            out.totals.append((name, tot))
    return out


def sysctl_advice(node: NodeState, name: str, suggested: int | str, *, only_raise: bool = True) -> str | None:
    """``sysctl -w name=value`` (persisted), unless the node already has at least that."""
    cur = node.setting(name)
    if cur is not None and only_raise and isinstance(suggested, int):
        v = cur.int()
        if v is not None and v >= suggested:
            return None
    now = f" (now {cur.value})" if cur is not None else ""
    return f"sysctl -w {name}={suggested}{now}; persist it in /etc/sysctl.d/90-kpdoctor.conf (`{name} = {suggested}`)"


def setting_cites(node: NodeState, names: list[str]) -> list[Cite]:
    return [s.cite for n in names if (s := node.setting(n)) is not None]


def as_dict(v: object) -> dict[str, Any]:
    """A field of a Kubernetes object that should be an object: {} when it is anything else."""
    return v if isinstance(v, dict) else {}


def as_list(v: object) -> list[Any]:
    """A field that should be a list: [] when it is anything else (null, a string, a number)."""
    return v if isinstance(v, list) else []
