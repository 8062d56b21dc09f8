"""The iptables walk in the native core (``kpdoctor._core``, built from ``rust/``).

A verification walks every Service port and traffic class through the node's rules: at 10,000
Services that is 22,000 walks over a quarter of a million rules, the hot path of ``kpdoctor
verify`` and of the agent. The core holds one address family's tables (rules stored once,
compiled the first time a packet enters their chain) and walks a packet through them with the
same semantics as :class:`~kpdoctor.dataplane.iptables.evaluate.Evaluator` (tests/test_native_parity.py
holds the two equal over every dump the tests know).

:class:`NativeEvaluator` is what the iptables backend calls for a verification; what the core
does not do yet it hands to the Python evaluator, built only when first needed: walks that keep
every step (``trace``, explaining a mismatch) and rules that read ipsets (IPVS mode). What a
verification's walk read (the agent carries a result over while those parts are unchanged) the
core records itself (:meth:`NativeEvaluator.entries`).

``KPDOCTOR_CORE=python`` makes every walk the Python evaluator's (to compare the two).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kpdoctor.dataplane.addresses import IPAddress, Span
from kpdoctor.dataplane.backend import Packet
from kpdoctor.dataplane.expected import Expectation
from kpdoctor.dataplane.iptables.compile import CompiledTable
from kpdoctor.dataplane.iptables.evaluate import Dep, Evaluator
from kpdoctor.dataplane.walk import Outcome, State, Step, merge_outcomes
from kpdoctor.model import Cite
from kpdoctor.parse.iptables import Rule, Ruleset, ScannedRules, Table

if TYPE_CHECKING:
    from kpdoctor._core import IptablesRules, RulesState, _Table

# A step of a walk as the core names it: (layer, table, chain, rule or None for the policy)
StepKey = tuple[int, int, int, int | None]
# One outcome as a verification reads it (NativeEvaluator.entries)
NativeEntry = tuple[float, str, str, str | None, StepKey | None, str | None]

# a table's rules as the core takes them: chains, lines, texts without counters
_CHAIN, _LINE, _BODY = operator.attrgetter("chain"), operator.attrgetter("line"), operator.attrgetter("body")


def _table(name: str, t: Table) -> _Table:
    """A table as the core takes it: a dump's own reading as it is, or its rules one by one."""
    if isinstance(t.rules, ScannedRules):
        return (name, list(t.chains.items()), t.rules.saved)
    rules: list[object] = list(t.rules)
    chains, lines, bodies = list(map(_CHAIN, rules)), list(map(_LINE, rules)), list(map(_BODY, rules))
    return (name, list(t.chains.items()), chains, lines, bodies, rules)


# the environment variable that chooses the walk: "native" (the default) or "python"
CORE_SETTING = "KPDOCTOR_CORE"


class CoreMissing(RuntimeError):
    """The native core is not built or does not load: what happened and how to fix it."""


@functools.cache
def core() -> ModuleType:
    """``kpdoctor._core``, or :class:`CoreMissing` saying how to build it."""
    try:
        import kpdoctor._core as _core
    except ImportError as exc:
        raise CoreMissing(
            f"kpdoctor's native core (kpdoctor._core) does not load ({exc}): install kpdoctor from its source "
            "with `pip install .` (which builds it; needs Rust's cargo and rustc 1.80 or later), or set "
            f"{CORE_SETTING}=python to choose the slower Python evaluator"
        ) from None
    return _core


def core_missing() -> str | None:
    """Why the native core does not load, with the fix; None when it does."""
    try:
        core()
    except CoreMissing as exc:
        return str(exc)
    return None


def native_walks() -> bool:
    """Whether verifications walk the rules in the native core (``KPDOCTOR_CORE``)."""
    return os.environ.get(CORE_SETTING, "native").strip().lower() != "python"


@contextlib.contextmanager
def _contained() -> Iterator[None]:
    """A bug in the core (a Rust panic, raised as PyO3's PanicException, which is no Exception)
    becomes an error the verification stage contains and reports, like any other bug."""
    try:
        yield
    except Exception:
        raise
    except BaseException as exc:
        if type(exc).__name__ == "PanicException":
            raise RuntimeError(f"kpdoctor's native core failed: {exc}") from exc
        raise


def _packet(p: Packet) -> tuple[int, int, int, str, int, int, str | None, str | None, int]:
    """A packet as the core takes it."""
    return (p.dst.version, int(p.src), int(p.dst), p.proto, p.dport, p.sport, p.iif, p.oif, p.mark)


class NativeEvaluator:
    """One address family's rules as the native core walks them, with the Python evaluator's
    interface as the iptables backend uses it (``run``, ``undecided``, ``tables``, ``layers``,
    ``recording``), and what a verification reads (``entries``, ``port_rules``).

    ``primary``: the dump whose Service rules are judged; ``others``: the other iptables
    backend's dumps, whose tables the kernel runs at the same hooks; ``compiled``: the Python
    evaluator's compiled tables of a dump, made when first asked for."""

    def __init__(
        self,
        primary: Ruleset,
        others: list[Ruleset],
        local: Iterable[IPAddress],
        compiled: Callable[[Ruleset], dict[str, CompiledTable]],
    ) -> None:
        self.local = list(local)
        self._rulesets = [primary, *others]
        self._compiled = compiled
        # the tables each layer holds, in the order the core was given them: a step's
        # (layer, table) points here
        self._tables = [[(name, t) for name, t in rs.tables.items()] for rs in self._rulesets]
        layers = [[_table(name, t) for name, t in tabs] for tabs in self._tables]
        module = core()
        with _contained():
            self._core: IptablesRules = module.IptablesRules(layers, [(a.version, int(a)) for a in self.local])
        self.undecided: list[str] = []
        self.record = False  # the core keeps only the steps a verification cites
        # a cited step's citation, chain and owner (backend.native_entries fills it)
        self.citations: dict[StepKey, tuple[Cite, str, str | None]] = {}

    @functools.cached_property
    def python(self) -> Evaluator:
        """The Python evaluator of the same rules (for what the core does not do yet)."""
        primary, *others = self._rulesets
        return Evaluator(self._compiled(primary), self.local, None, [self._compiled(rs) for rs in others], record=False)

    @property
    def tables(self) -> dict[str, CompiledTable]:
        return self.python.tables

    @property
    def layers(self) -> list[dict[str, CompiledTable]]:
        return self.python.layers

    def recording(self) -> Evaluator:
        return self.python.recording()

    def run(self, packet: Packet, hook: str = "prerouting", postrouting: bool = True) -> list[Outcome]:
        """Every outcome of the packet's new connection (see ``Evaluator.run``)."""
        with _contained():
            raw, undecided = self._core.run(_packet(packet), hook, postrouting)
        self.undecided = undecided
        return merge_outcomes([self._outcome(packet, o) for o in raw])

    def entries(self, packet: Packet, hook: str, reads: set[Dep] | None = None) -> tuple[list[NativeEntry], list[str]]:
        """A verification's walk (no nat POSTROUTING) as its entries need it, most likely
        first: ``(probability, verdict, reason, backend, step, open_table)``, ``step`` the rule
        or policy to cite as a key of :meth:`cited`; and the undecidable rules that did not
        matter. ``reads``: a set to add every part of the rules the walk read to (the agent's
        carried-over results depend on those parts only)."""
        with _contained():
            raw, undecided, read = self._core.entries(_packet(packet), hook, reads is not None)
        if reads is not None and read is not None:
            origins = [rs.artifact for rs in self._rulesets]
            reads.update((origins[layer], table, chain, part) for layer, table, chain, part in read)
        self.undecided = undecided
        return raw, undecided

    def states(self, known: Collection[str] = ()) -> list[tuple[str, RulesState]]:
        """What each dump the core walks held, as fingerprints of the parts a walk reads (the
        agent compares them with the previous cycle's: dataplane/reuse.py), by its artifact;
        none for the artifacts ``known`` (fingerprinted already, for another evaluator)."""
        with _contained():
            layers = enumerate(self._rulesets)
            return [(rs.artifact, self._core.state(i)) for i, rs in layers if rs.artifact not in known]

    def settled(self, packets: list[tuple[Packet, str, list[Expectation]]]) -> list[bool]:
        """Which of these walks (packet, hook, the case's alternatives) the rules certainly
        handle as one alternative says, walked and judged in the core in one call (see
        ``IptablesRules.settled``); each distinct list of alternatives is handed over once."""
        index: dict[int, int] = {}
        alternatives: list[list[tuple[bool, list[str]]]] = []
        todo = []
        for packet, hook, alts in packets:
            k = index.get(id(alts))
            if k is None:
                k = index[id(alts)] = len(alternatives)
                alternatives.append([(a.refused, list(a.backends)) for a in alts])
            todo.append((_packet(packet), hook == "prerouting", k))
        with _contained():
            return self._core.settled(todo, alternatives)

    def cited(self, step: StepKey) -> tuple[str, str, int | None, str, str]:
        """The rule or policy a step of :meth:`entries` names: (table, chain, line or None,
        text, the artifact it was read from; a policy's text is ``policy X``)."""
        layer, table, chain, rule = step
        name, tab = self._tables[layer][table]
        origin = self._rulesets[layer].artifact
        if rule is None:
            with _contained():
                chain_name = self._core.chain_name(layer, table, chain)
            return name, chain_name, None, f"policy {tab.chains.get(chain_name) or 'ACCEPT'}", origin
        r = tab.rules[rule]
        return name, r.chain, r.line, r.text, origin

    def port_rules(self, table: str) -> tuple[Sequence[Rule], list[tuple[int, int, str, Span | None, bool]]]:
        """The primary rules of ``table`` matching one destination port of one protocol, in
        the dump's order: the table's rules and, per such rule, (its index among them, port,
        protocol, destination, destination negated)."""
        tabs = dict(self._tables[0])
        if table not in tabs:
            return [], []
        with _contained():
            return tabs[table].rules, self._core.port_rules(table)

    def _step(self, raw: tuple[int, int, str, int | None, float], stripped: bool = False) -> Step:
        layer, table, chain, rule, prob = raw
        name, tab = self._tables[layer][table]
        origin = self._rulesets[layer].artifact
        if rule is None:
            return Step(name, chain, None, f"policy {tab.chains.get(chain) or 'ACCEPT'}", prob, origin)
        r = tab.rules[rule]
        return Step(name, chain, r.line, r.text.strip() if stripped else r.text, prob, origin)

    def _outcome(self, packet: Packet, raw: Any) -> Outcome:
        (prob, verdict, reason, by_mark, open_table, undecided_step), state, steps, dnat_step, drop_mark = raw
        dnat, dst, dport, mark, masquerade, notrack, affinity = state
        st = State(packet, packet.dst.version, int(packet.src), dst, dport, mark)
        st.steps = [self._step(s, undecided_step) for s in steps]
        st.dnat = dnat
        st.masquerade, st.notrack, st.affinity = masquerade, notrack, affinity
        st.dnat_step = st.steps[dnat_step] if dnat_step is not None else None
        st.drop_mark_step = self._step(drop_mark) if drop_mark is not None else None
        return Outcome(prob, verdict, st, reason, by_mark, open_table)
