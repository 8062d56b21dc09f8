"""Go panics in kube-proxy's log, each with the kube-proxy stack frames just below it.

Several causes read panics (the 1.18 IPVS-probe crash, the iptables-save parse panic, the known
run-time panics): the panic lines and their frames are found once, here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kpdoctor import lazy_re
from kpdoctor.facts.log import SYNC_COMPLETE
from kpdoctor.knowledge import signature
from kpdoctor.parse.logscan import Hit

if TYPE_CHECKING:
    from kpdoctor.facts import Facts

# Any Go panic, in each form it is logged: Go's own crash (`panic: non-positive interval for
# NewTicker`, also indented under `[recovered]`) and the crash handler's, old (`Observed a panic:
# "invalid memory address ..." (runtime error: ...)`) and structured (`"Observed a panic"
# panic="runtime error: ..."`). The message is captured.
GO_PANIC = signature(
    "go-panic",
    "panic",
    r'(^[ \t]*|Observed a |"Observed a panic" )panic(: "?|=")([^"]+)',
)
# A stack frame in kube-proxy's own code (vendored copies too: k3s, rke2), the function captured:
# `k8s.io/kubernetes/pkg/proxy/ipvs.(*Proxier).syncService(0xc00e8845a0, ...)`; before 1.1 the
# import path was `github.com/GoogleCloudPlatform/kubernetes/` (the pattern is grep's: no group
# of its own for the prefix). Kept per function (a variant each), so the frames under the first
# and last panic of each start-up are at hand.
KUBE_PROXY_FRAME = signature(
    "stack-frame-kube-proxy",
    "/kubernetes/",
    r"[A-Za-z0-9.]+/kubernetes/((pkg/proxy|cmd/kube-proxy|pkg/util/ipvs)[A-Za-z0-9_/]*\.[A-Za-z0-9_().*]+)\(",
)
FRAME_WINDOW = 40  # lines after a panic in which its stack's first frames are
TOP_FRAMES = 3
_RUNTIME_ERROR = lazy_re.compile(r"^(runtime error: )|\s*\[recovered\]\s*$|\s*\(runtime error: [^)]*\)\s*$")


@dataclass(frozen=True, slots=True)
class Panic:
    """One panic: where, its message, the first kube-proxy frames of its stack, and whether a
    sync had succeeded in that container before it."""

    hit: Hit
    frames: tuple[Hit, ...]
    after_sync: bool
    message: str = ""

    @property
    def top(self) -> str | None:
        return (self.frames[0].groups[0] or None) if self.frames else None


def message_of(hit: Hit) -> str:
    """The panic's message without Go's decorations (``runtime error:``, ``[recovered]``)."""
    text = (hit.groups[-1] if hit.groups else None) or hit.text
    return _RUNTIME_ERROR.sub("", text.strip()).strip()


def panics(facts: Facts, sig_id: str = GO_PANIC.id) -> list[Panic]:
    """Each kept panic line of ``sig_id`` with the kube-proxy frames just below it (its stack).

    Lines of one record (a panic and its ``[recovered]`` repetition) are one panic.
    """
    hits = facts.log.hits(sig_id)
    frames = facts.log.hits(KUBE_PROXY_FRAME.id)
    syncs = facts.log.hits(*SYNC_COMPLETE.ids)
    out: list[Panic] = []
    seen: list[Hit] = []
    for i, p in enumerate(hits):
        if seen and seen[-1].artifact == p.artifact and 0 <= p.line - seen[-1].line <= 2:
            continue  # `panic: X [recovered]` then `\tpanic: X`: one panic
        seen.append(p)
        nxt = next((q for q in hits[i + 1 :] if q.line - p.line > 2 or q.artifact != p.artifact), None)
        mine = [
            fr
            for fr in frames
            if fr.order[0] == p.order[0]
            and fr.order > p.order
            and 0 < fr.line - p.line <= FRAME_WINDOW
            and (nxt is None or fr.order < nxt.order)
        ]
        after = any(h.order[0] == p.order[0] and h.order < p.order for h in syncs)
        out.append(Panic(p, tuple(mine[:TOP_FRAMES]), after, message_of(p)))
    return out
