"""Host firewalls in front of kube-proxy's rules: ``ufw status [verbose|numbered]``.

Why: ufw's chains are evaluated before kube-proxy's, so an active ufw whose default policy drops
incoming or routed traffic drops NodePorts, Pod-to-node traffic (the API server reached through
the ``kubernetes`` Service) and overlay packets that no rule allows.

Formats (ufw 0.36, as it prints them)::

    Status: active
    Logging: on (low)                                              (verbose only)
    Default: deny (incoming), allow (outgoing), disabled (routed)  (verbose only)
    New profiles: skip                                             (verbose only)

         To                         Action      From
         --                         ------      ----
    [ 1] 22/tcp                     ALLOW IN    Anywhere           ([ N] with ``numbered``)
    443 (v6)                        ALLOW       Anywhere (v6)      (plain ``status``: no IN/OUT)
    Anywhere on cni0                ALLOW IN    Anywhere
    30000:32767/tcp                 ALLOW IN    10.42.0.0/16

``Status: inactive`` alone means ufw filters nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kpdoctor import lazy_re

_STATUS = lazy_re.compile(r"^\s*Status:\s*(active|inactive)\s*$")
_DEFAULT = lazy_re.compile(r"^\s*Default:\s*(.*)$")
_POLICY = lazy_re.compile(r"(allow|deny|reject|disabled)\s*\((incoming|outgoing|routed)\)")
_HEADER = lazy_re.compile(r"^\s*To\s+Action\s+From\s*$")
# "[ 1] " prefix (numbered), then To, Action (ALLOW/DENY/REJECT/LIMIT, IN/OUT/FWD), From; columns
# are separated by two spaces or more ("Anywhere on cni0" holds single spaces)
_RULE = lazy_re.compile(
    r"^\s*(?:\[\s*\d+\]\s*)?(?P<to>\S.*?)\s{2,}(?P<action>ALLOW|DENY|REJECT|LIMIT)(?:\s+(?P<dir>IN|OUT|FWD))?"
    r"\s{2,}(?P<src>\S.*?)\s*(?:#.*)?$"
)


@dataclass(frozen=True, slots=True)
class UfwRule:
    to: str  # "22/tcp", "443 (v6)", "Anywhere on cni0", "30000:32767/tcp"
    action: str  # ALLOW | DENY | REJECT | LIMIT
    direction: str  # IN | OUT | FWD ("IN" when plain `ufw status` does not say)
    source: str  # "Anywhere", "10.42.0.0/16", "Anywhere (v6)"
    line: int
    text: str

    @property
    def v6(self) -> bool:
        return "(v6)" in self.to or "(v6)" in self.source

    @property
    def interface(self) -> str | None:
        m = re.search(r"\bon (\S+)", self.to)
        return m.group(1) if m else None

    @property
    def ports(self) -> list[tuple[int, int, str | None]]:
        """(first, last, protocol or None for both) the rule's destination covers; [] for any port
        ("Anywhere"), or an application profile name (unknown ports)."""
        head = self.to.split(" on ")[0].replace("(v6)", "").strip()
        if head.startswith("Anywhere"):
            return []
        # "443", "22/tcp", "30000:32767/tcp", "80,443/tcp", "10.0.0.1 443/tcp" (a destination address)
        spec = head.split()[-1]
        proto: str | None = None
        if "/" in spec:
            spec, proto = spec.split("/", 1)
        out: list[tuple[int, int, str | None]] = []
        for part in spec.split(","):
            m = re.fullmatch(r"(\d{1,5})(?::(\d{1,5}))?", part)  # a port (more digits: none)
            if m:
                lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
                out.append((lo, hi, proto))
        return out

    @property
    def any_port(self) -> bool:
        return self.to.split(" on ")[0].replace("(v6)", "").strip() == "Anywhere"


@dataclass(slots=True)
class UfwStatus:
    active: bool
    line: int  # the Status: line
    text: str
    defaults: dict[str, str] = field(default_factory=dict)  # incoming/outgoing/routed -> allow/deny/...
    default_line: tuple[int, str] | None = None
    rules: list[UfwRule] = field(default_factory=list)


def looks_like_ufw(text: str) -> bool:
    """``Status: active|inactive`` as the first line, as ufw prints it."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    return _STATUS.match(first) is not None


def parse_ufw_status(text: str, first_line: int = 1) -> UfwStatus | None:
    """The status, default policies (verbose) and rules; None when there is no ``Status:`` line."""
    st: UfwStatus | None = None
    in_rules = False
    for i, raw in enumerate(text.splitlines()):
        ln = first_line + i
        if st is None:
            m = _STATUS.match(raw)
            if m:
                st = UfwStatus(m.group(1) == "active", ln, raw.strip())
            continue
        m = _DEFAULT.match(raw)
        if m and not in_rules:
            st.defaults = {d: p for p, d in _POLICY.findall(m.group(1))}
            st.default_line = (ln, raw.strip())
            continue
        if _HEADER.match(raw):
            in_rules = True
            continue
        if not in_rules or (re.match(r"^\s*(?:\[\s*\d+\]\s*)?--", raw) and "------" in raw):
            continue
        r = _RULE.match(raw)
        if r:
            st.rules.append(
                UfwRule(r.group("to"), r.group("action"), r.group("dir") or "IN", r.group("src"), ln, raw.strip())
            )
    return st
