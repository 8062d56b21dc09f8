"""What kpdoctor knows: its checks and the log signatures they read, each declared once.

The ground floor of the package (docs/architecture.md): every stage reads these registries, none
has to import the checks to do so. They are filled as the check modules are imported, which the
entry points do (the command line, :func:`kpdoctor.run`, the agent, the kubectl plugin:
``import kpdoctor.checks``); :func:`catalogue` says so when that did not happen, rather than
letting a run type its inputs and scan its logs with no signature at all.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.messages.schema import Message
from kpdoctor.messages.templates import Compiled, compile_structured, compile_template, regex_of
from kpdoctor.model import Finding, Severity, Skipped

SECTIONS = ("Symptom", "Cause", "How it is detected", "Fix", "References")

# A check reads the run's facts (kpdoctor.facts.Facts) and, when it says so, the dataplane's
# verification (kpdoctor.dataplane.session.Verified), and yields its findings. Both types live in
# layers above this one: every check function is typed with them, the registry takes any.
CheckFunc = Callable[..., Iterable[Finding]]


class Given(Protocol):
    """What the registry asks of the facts: which kinds of evidence hold something usable."""

    def has(self, kind: Kind) -> bool: ...


# -- log signatures -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Signature:
    """A log line that means something, declared next to the check that owns it.

    ``pattern`` must contain ``needle`` literally (the scanner only looks at lines holding the
    needle) and use only syntax that Python ``re`` and ``grep -E`` read the same way.

    ``failure``: a sync attempt failed; ``success``: a sync completed (a successful sync when no
    failure came since the previous one). Together they tell ongoing from recovered.

    ``variant``: a regular expression (Python syntax, no capturing group) searched in the hit's
    record, line by line. Hits whose records hold different matches (say ``ip6tables``, or the
    ``iptables-restore v1.8.4 (legacy)`` that failed) are different variants, and the first and
    last hit of every variant is kept, so a question such as "do all of them come from
    ip6tables-restore?" is answered exactly from the kept sample. Best with literal starts
    (``ip6tables|-restore v...``): only the lines holding one are then searched.

    ``generic``: other programs print the same line (``FLAG: --``, ``Version: v``), so it means
    something in a kube-proxy log but does not make a text one.

    ``keyed``: hits whose groups differ are kept apart in the scan's sample (the first and last
    hit of each value). A catalogue message no check reads is not: its captures (a payload, a
    time) vary on every line, and would spend the scan's budget of kept variants.
    """

    id: str
    needle: str
    pattern: str
    failure: bool = False
    success: bool = False
    variant: str = ""
    generic: bool = False
    keyed: bool = True

    def compiled(self) -> re.Pattern[str]:
        return regex_of(self.pattern)

    def needle_in_pattern(self) -> bool:
        """Is the needle literally in the pattern (a template's space, ``[ \\t]+``, read as one
        space): the scan only looks at lines holding it."""
        return self.needle in _SPACES.sub(" ", self.pattern).replace("\\", "")


_SPACES = lazy_re.compile(r"\[ (?:\t|\\t)\]\+")  # a template's space: "[ <tab>]+" (or "[ \\t]+" as written)
# Every signature declared, by id (the check modules declare theirs as they are imported).
REGISTRY: dict[str, Signature] = {}
OWNER: dict[str, set[str]] = {}  # signature id, or message key -> the modules that declared or read it


def signature(
    id: str,
    needle: str,
    pattern: str,
    *,
    failure: bool = False,
    success: bool = False,
    variant: str = "",
    generic: bool = False,
) -> Signature:
    """Declare (and register) a signature; ids are unique across kpdoctor."""
    sig = Signature(id, needle, pattern, failure, success, variant, generic)
    if not sig.needle_in_pattern():
        raise ValueError(f"signature {id}: needle {needle!r} not in its pattern")
    if variant and re.compile(variant).groups:
        raise ValueError(f"signature {id}: a variant has no capturing groups (use (?:...))")
    old = REGISTRY.get(id)
    if old is not None and old != sig:
        raise ValueError(f"signature {id!r} declared twice with different content")
    REGISTRY[id] = sig
    OWNER.setdefault(id, set()).add(sys._getframe(1).f_globals.get("__name__", ""))
    return sig


# Signatures, or what gives them when first needed: typing a file reads them only for a text
# its shape does not type (a run given rules and objects never reads the messages catalogue).
Signatures = tuple[Signature, ...] | Callable[[], tuple[Signature, ...]]


def signatures_of(given: Signatures) -> tuple[Signature, ...]:
    """The signatures ``given`` stands for."""
    return given() if callable(given) else given


def owners(sig_ids: Iterable[str]) -> set[str]:
    """The causes of the checks declared in the modules that declared these signatures (a
    signature declared in a check module is that module's checks' reading of its lines)."""
    modules = {m for s in sig_ids for m in readers(s)}
    return {spec.cause for spec in CHECKS.values() if spec.func.__module__ in modules}


def catalogue() -> tuple[Signature, ...]:
    """Every signature kpdoctor knows: what a run scans logs for and how the sniffer tells a text
    from kube-proxy's world. The check modules declare theirs (the entry points import them);
    every message of the messages catalogue is one too (:func:`message_signatures`)."""
    require_declared()
    return tuple(REGISTRY.values()) + message_signatures()


def require_declared() -> None:
    """Raise, saying what to do, when no check module was imported (no signature declared)."""
    if not REGISTRY:
        raise RuntimeError("no log signature is declared: import kpdoctor.checks first (the entry points do)")


def matching_signatures(text: str, signatures: Iterable[Signature]) -> Iterator[Signature]:
    """The signatures whose regular expression matches in ``text`` (the needle tried first: the
    cheap test; the needle alone says nothing, "Using " or "MARK")."""
    return (s for s in signatures if s.needle in text and s.compiled().search(text) is not None)


def scanned(signatures: Iterable[Signature]) -> tuple[Signature, ...]:
    """What a log scan looks for: every signature but the catalogue's routine messages no check
    reads (a busy log prints them on most lines; they only tell a text kube-proxy's, which the
    sniffer asks of the head of a file, not the scan)."""
    return tuple(s for s in signatures if not _routine_unread(s.id))


def _routine_unread(sig_id: str) -> bool:
    form = message_form(sig_id)
    return form is not None and form.message.kind == "benign" and form.message.key not in _FLAGS


def read_by_checks() -> tuple[Signature, ...]:
    """The signatures the checks read: their own, and the catalogue messages they declared
    (:func:`messages`); not the rest of the catalogue, which only KP130 reads."""
    return tuple(REGISTRY.values()) + tuple(s for s in message_signatures() if _key_of(s.id) in _FLAGS)


# -- signatures made from the messages catalogue ---------------------------------------
STRUCTURED_FORM = "#structured"
# kube-proxy's own code: a message printed from these paths (and no other) tells a kube-proxy
# log. pkg/util/iptables and the client libraries are kubelet's and the CNI agents' too.
KUBE_PROXY_PATHS = (
    "cmd/kube-proxy/",
    "pkg/proxy/",
    "pkg/util/ipvs/",
    "pkg/util/ipset/",
    "pkg/util/conntrack/",
    "vendor/sigs.k8s.io/knftables/",
    "vendor/github.com/moby/ipvs/",
    "vendor/github.com/docker/libnetwork/ipvs/",
)


# Libraries every Go program (or every Kubernetes component) prints through: Go's own packages,
# the command-line libraries, component-base, client-go. A failure only they print is kube-proxy's
# as the payload of its own message, never a sign by itself that a text is kube-proxy's world.
SHARED_LIBRARY_PATHS = (
    "go/src/",
    "vendor/github.com/spf13/",
    "staging/src/k8s.io/component-base/",
    "staging/src/k8s.io/client-go/",
    "staging/src/k8s.io/apiserver/",  # the API server's refusals, as every client prints them
    "staging/src/k8s.io/apimachinery/",
)

_DISTINCT_NEEDLE = 16  # a one-word needle shorter than this tells nobody's log


@dataclass(frozen=True, slots=True)
class MessageForm:
    """One printed form of a catalogue message, as the log scan sees it."""

    message: Message
    compiled: Compiled


@functools.cache
def _message_forms() -> dict[str, MessageForm]:
    from kpdoctor.messages import catalogue as messages  # the data is read when a run needs it

    out: dict[str, MessageForm] = {}
    for m in messages():
        printf = compile_template(m.template)
        out[m.key] = MessageForm(m, printf)
        # klog 2's form, unless the printf form reads its lines already (the same words, no
        # placeholder: "syncProxyRules complete"): one line, one hit of the message
        if m.structured is not None and printf.regex().search(f'"{m.structured.msg}"') is None:
            out[m.key + STRUCTURED_FORM] = MessageForm(m, compile_structured(m.structured.msg))
    return out


def message_form(sig_id: str) -> MessageForm | None:
    """The catalogue message a signature id stands for (None for a check's own signature)."""
    return _message_forms().get(sig_id) if "/" in sig_id else None


def message_ids(*keys: str) -> tuple[str, ...]:
    """The signature ids of these messages (``component/id``): each one's forms. A key the
    catalogue does not hold is an error, at import: a check never waits on a message that is not
    scanned for."""
    forms = _message_forms()
    out: list[str] = []
    for key in keys:
        if key not in forms:
            raise ValueError(f"message {key!r} is not in the messages catalogue (src/kpdoctor/messages)")
        out.append(key)
        if key + STRUCTURED_FORM in forms:
            out.append(key + STRUCTURED_FORM)
    return tuple(out)


# Basenames of kube-proxy's files that other Kubernetes programs' files share (kubelet's and the
# apiserver's server.go, client libraries' config.go and util.go, CNI agents' ipset.go and
# netlink.go, Windows CNI plugins' hns*.go): a klog header naming one tells nobody's log.
SHARED_FILE_NAMES = frozenset(
    [
        "server.go",
        "server_linux.go",
        "server_windows.go",
        "config.go",
        "types.go",
        "util.go",
        "utils.go",
        "node.go",
        "service.go",
        "endpoints.go",
        "port.go",
        "cleanup.go",
        "init_linux.go",
        "init_other.go",
        "objects.go",
        "netlink.go",
        "netlink_linux.go",
        "netlink_unsupported.go",
        "ipvs.go",
        "ipset.go",
        "nftables.go",
        "iptables.go",
        "hns.go",
        "hnsV1.go",
        "hnsV2.go",
        "hcnutils.go",
        "roundrobin.go",
        "traffic.go",
        "topology.go",
    ]
)


@functools.cache
def kube_proxy_files() -> frozenset[str]:
    """The basenames of kube-proxy's own source files that print a message (the catalogue's
    ``files``, from every release read), less the names other programs' files share: a klog
    header naming one (``proxier_health.go:123]``) is kube-proxy's."""
    from kpdoctor.messages import catalogue as messages

    names = {
        f.split(" ", 1)[0].rsplit("/", 1)[-1]
        for m in messages().of("kube-proxy")
        for f in m.files
        if f.startswith(KUBE_PROXY_PATHS)
    }
    return frozenset(n for n in names if n.endswith(".go")) - SHARED_FILE_NAMES


def tells_kube_proxy(m: Message) -> bool:
    """Does a line holding this message tell kube-proxy's world (a log to read, a fragment that
    is evidence)? Every failure the catalogue holds, and the routine messages only kube-proxy's
    own code prints; never a message short and plain enough for any program to print, nor one
    only a library every program uses prints (``SHARED_LIBRARY_PATHS``)."""
    needle = compile_template(m.template).needle
    if len(needle) < _DISTINCT_NEEDLE and " " not in needle:
        return False  # "Version: %+v", "Error: %v": any program prints that
    if m.files and all(f.startswith(SHARED_LIBRARY_PATHS) for f in m.files):
        return False  # "listen tcp ...: bind: address already in use": any Go program prints that
    if m.kind != "benign":
        return True  # a failure of kube-proxy's world, whoever printed it (kubelet's iptables code too)
    return m.component == "kube-proxy" and bool(m.files) and all(f.startswith(KUBE_PROXY_PATHS) for f in m.files)


@dataclass(frozen=True, slots=True)
class Messages:
    """A check's log signature made of catalogue messages: the signatures of every form of each
    (``ids``, for ``facts.log.hits(*ids)``), read instead of a regular expression of its own.
    What a line held is in its named captures (``facts.log.captures(hit)``)."""

    id: str
    keys: tuple[str, ...]

    @property
    def ids(self) -> tuple[str, ...]:
        return _ids_of(self.keys)


@functools.cache
def _ids_of(keys: tuple[str, ...]) -> tuple[str, ...]:
    return message_ids(*keys)


# what checks declared they read (message key -> the scan's flags: failure, success, variant);
# the catalogue itself is read when a run first needs it, not when the checks are imported
_FLAGS: dict[str, tuple[bool, bool, str, bool]] = {}
DECLARED: list[Messages] = []


def messages(
    id: str,
    *keys: str,
    failure: bool = False,
    success: bool = False,
    variant: str = "",
    keyed: bool = True,
) -> Messages:
    """Declare a check's reading of catalogue messages (``component/id`` keys): the messages are
    scanned for anyway; this names them for the check, marks its module as their reader (the
    generic KP130 leaves their lines to it) and gives the scan's flags (see :class:`Signature`;
    ``keyed=False`` for a reading whose captures vary on every line: a sync's duration, a
    payload). A key the catalogue does not hold fails the run's first use of it, and the suite."""
    if variant and re.compile(variant).groups:
        raise ValueError(f"signature {id}: a variant has no capturing groups (use (?:...))")
    module = sys._getframe(1).f_globals.get("__name__", "")
    for key in keys:
        flags = (failure, success, variant, keyed)
        if _FLAGS.setdefault(key, flags) != flags:
            raise ValueError(f"message {key}: read with other scan flags by another check")
        OWNER.setdefault(key, set()).add(module)
    declared = Messages(id, tuple(keys))
    DECLARED.append(declared)
    return declared


def _key_of(sig_id: str) -> str:
    return sig_id.removesuffix(STRUCTURED_FORM)


def readers(sig_id: str) -> set[str]:
    """The modules that declared a signature or read the message it is a form of."""
    return OWNER.get(sig_id) or OWNER.get(_key_of(sig_id)) or set()


_SIGNATURES: list[tuple[int, tuple[Signature, ...]]] = []  # (flags declared, signatures)


def message_signatures() -> tuple[Signature, ...]:
    """Every form of every catalogue message as a log signature (id ``component/id``, and
    ``component/id#structured`` for klog 2's message): what the scan looks for besides the
    checks' own, so that any line the programs print is found, counted and cited."""
    if _SIGNATURES and _SIGNATURES[0][0] == len(_FLAGS):
        return _SIGNATURES[0][1]
    out = []
    for sig_id, form in _message_forms().items():
        c = form.compiled
        # a message a check reads has its captures kept apart as a check's are (unless it says not)
        failure, success, variant, keyed = _FLAGS.get(form.message.key, (False, False, "", False))
        generic = not tells_kube_proxy(form.message)
        out.append(Signature(sig_id, c.needle, c.pattern, failure, success, variant, generic, keyed=keyed))
    _SIGNATURES[:] = [(len(_FLAGS), tuple(out))]
    return _SIGNATURES[0][1]


# -- checks -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class VersionRow:
    """One row of a cause's version table: who is affected, what fixes it, and where that is said.
    ``fixed`` is "" when no fixed release is known (the row says so, never guesses)."""

    component: str  # "kube-proxy", "kernel", "iptables", "nft", "k3s" ...
    affected: str
    fixed: str
    reference: str


@dataclass(frozen=True, slots=True)
class CheckSpec:
    code: str
    cause: str
    title: str
    severity: Severity  # the severity when the failure is confirmed and ongoing
    needs: tuple[Kind, ...]  # any one of these artifacts lets the check run
    func: CheckFunc
    needs_all: tuple[Kind, ...] = ()  # ... provided all of these are present too
    # What the check can still say without its evidence (from whatever is there: notes naming
    # what would decide, or what another part of the evidence proves on its own); the check is
    # reported as skipped all the same, so that coverage never counts its cause as ruled out.
    partial: CheckFunc | None = None
    # Why the check must not judge this evidence although it is present (the verification it
    # reads was not evaluated: the node runs a proxy mode kpdoctor does not read), or None; called
    # with the verification (``Verified``).
    abstains: Callable[[Any], str | None] | None = None
    # The causes this root cause explains when both are found: their findings are folded under
    # this one (declared here, on the root cause, and read by ranking through ``explained_by``).
    explains: tuple[str, ...] = ()
    # The releases the cause affects and the ones that fix it (``kpdoctor explain`` prints them).
    versions: tuple[VersionRow, ...] = ()
    # The packet-loss counters a finding rests on: growing between two snapshots confirms it.
    # A node agent reads them every cycle and reports the finding only while one of them spikes.
    counters: tuple[str, ...] = ()
    # The check reads the dataplane's verification: it is called with it (``func(facts,
    # verified)``, a ``kpdoctor.dataplane.session.Verified``), as ``abstains`` always is.
    reads_verification: bool = False
    # The check reads the messages catalogue's lines that name its cause itself
    # (``checks.logged.messages_naming``); KP130 leaves them to it.
    reads_messages: bool = False
    # The check reads what the others found (it runs after them, called ``func(facts, found)``
    # with their findings): what no finding explains is its subject (KP140, unexplained signals).
    reads_findings: bool = False
    # The check compares the node's rules with the cluster's objects as both were read at one
    # moment. kube-proxy applies a change within its sync (minSyncPeriod, then the sync itself),
    # so a finding about a Service that changed just before the rules were read may be a change
    # not applied yet: the node agent, which knows when each change arrived, holds it until the
    # change has had time to settle (agent/loop.py).
    settles: bool = False
    # Evidence that stands in for ``needs_all`` when that is missing (a `kubectl get svc` table
    # for the Service objects: what it shows is verified, what it leaves out is not judged).
    needs_all_or: tuple[Kind, ...] = ()
    # Of ``needs``, the kinds that let the check judge only a part of its cause (a kernel's build
    # configuration shows a part kube-proxy cannot load, not the failures its log shows): run on
    # these alone, it does not count toward ruling its family out (coverage.py).
    partly: tuple[Kind, ...] = ()

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.func.__doc__ or "")

    def sections(self) -> dict[str, str]:
        """The docstring split into its knowledge-base sections."""
        doc = self.doc
        out: dict[str, str] = {}
        pattern = re.compile(r"^(" + "|".join(SECTIONS) + r"):\s*", re.M)
        parts = pattern.split(doc)
        out["Summary"] = parts[0].strip()
        for i in range(1, len(parts) - 1, 2):
            out[parts[i]] = inspect.cleandoc(parts[i + 1])
        return out

    def reference_urls(self) -> list[str]:
        """The URLs of the docstring's References section (the finding's references)."""
        return re.findall(r"https?://[^\s;,)]+", self.sections().get("References", ""))

    def skipped(self, facts: Given | None = None) -> Skipped:
        """Why it cannot run, said and as data: the evidence it reads, or (when that is there) what
        must come with it."""
        given = facts is not None and any(facts.has(k) for k in self.needs)
        if given and facts is not None:
            lacking = tuple(k.value for k in self.needs_all if not facts.has(k))
            present = next(k.value for k in self.needs if facts.has(k))
            reason = f"no {' and no '.join(lacking)} (needed together with the {present} given)"
            return Skipped(self.code, self.cause, reason, lacking, given=True)
        names = tuple(k.value for k in self.needs)
        also = tuple(k.value for k in self.needs_all)
        reason = f"no {names[0]}" if len(names) == 1 else "none of: " + ", ".join(names)
        if also:
            reason += " (needs " + " and ".join(also) + " too)"
        return Skipped(self.code, self.cause, reason, names, also=also)

    def can_run(self, facts: Given) -> bool:
        return any(facts.has(k) for k in self.needs) and (
            all(facts.has(k) for k in self.needs_all) or any(facts.has(k) for k in self.needs_all_or)
        )


CHECKS: dict[str, CheckSpec] = {}


def check(
    code: str,
    *,
    cause: str,
    title: str,
    severity: Severity,
    needs: Iterable[Kind],
    needs_all: Iterable[Kind] = (),
    partial: CheckFunc | None = None,
    abstains: Callable[[Any], str | None] | None = None,
    explains: Iterable[str] = (),
    versions: Iterable[VersionRow] = (),
    counters: Iterable[str] = (),
    reads_verification: bool = False,
    reads_messages: bool = False,
    reads_findings: bool = False,
    settles: bool = False,
    needs_all_or: Iterable[Kind] = (),
    partly: Iterable[Kind] = (),
) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check. Codes and causes are public, stable identifiers."""

    def deco(func: CheckFunc) -> CheckFunc:
        if code in CHECKS:
            raise ValueError(f"check code {code} registered twice")
        reads = reads_verification or abstains is not None
        if reads and reads_findings:
            raise ValueError(f"check {code}: reads either the verification or the other findings, not both")
        if len(inspect.signature(func).parameters) != (2 if reads or reads_findings else 1):
            raise ValueError(
                f"check {code}: takes (facts, verified) or (facts, found) exactly when it reads the verification "
                "or the other checks' findings"
            )
        missing = [s for s in SECTIONS if f"{s}:" not in (func.__doc__ or "")]
        if missing:
            raise ValueError(f"check {code} docstring lacks sections: {', '.join(missing)}")
        CHECKS[code] = CheckSpec(
            code,
            cause,
            title,
            severity,
            tuple(needs),
            func,
            tuple(needs_all),
            partial,
            abstains,
            tuple(explains),
            tuple(versions),
            tuple(counters),
            reads,
            reads_messages,
            reads_findings,
            settles,
            tuple(needs_all_or),
            tuple(partly),
        )
        return func

    return deco


# The causes of what nothing known explains: a logged failure the catalogue names no cause for
# (KP130), a line or counter nothing reads (KP140). A root cause found beside them folds them
# (rank.py); the node agent does not raise its condition for them at low confidence.
UNEXPLAINED = ("logged-failure", "unexplained-signal")


def explained_by(cause: str) -> list[str]:
    """The root causes whose checks declare that they explain ``cause`` (the causality graph)."""
    out: list[str] = []
    for spec in sorted(CHECKS.values(), key=lambda c: c.code):
        if cause in spec.explains and spec.cause not in out:
            out.append(spec.cause)
    return out


def find(key: str) -> list[CheckSpec]:
    """Checks matching a code (``KP101``) or a cause slug."""
    key = key.strip()
    if key.upper() in CHECKS:
        return [CHECKS[key.upper()]]
    return [c for c in CHECKS.values() if c.cause == key.lower()]
