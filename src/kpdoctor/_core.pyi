"""Types of kpdoctor's native core (rust/src/lib.rs): what kpdoctor/dataplane/iptables/native.py calls."""

from collections.abc import Callable
from typing import Any

__version__: str
# how many short chains' compiled forms a table keeps (rust/src/table.rs)
SHORT_CHAINS_KEPT: int

# (layer, table, chain, rule index among the table's rules or None for the policy, probability)
_Step = tuple[int, int, str, int | None, float]
_Outcome = tuple[
    tuple[float, str, str, bool, str | None, bool],
    tuple[tuple[str, int | None] | None, int, int, int, bool, bool, list[int]],
    list[_Step],
    int | None,
    _Step | None,
]
# (IP version, source, destination, protocol, destination port, source port, in and out interface, mark)
_Packet = tuple[int, int, int, str, int, int, str | None, str | None, int]
# a part of a chain a walk reads: None (the whole chain), "*" or ("dst" | "dport", key)
_Part = str | tuple[str, int] | None
# (name, chains with their policies, each rule's chain, line and text without counters, the Rule objects),
# or (name, chains with their policies, the rules as scan_save read them)
_Table = (
    tuple[str, list[tuple[str, str | None]], list[str], list[int], list[str], list[object]]
    | tuple[str, list[tuple[str, str | None]], SavedRules]
)

class IptablesRules:
    def __init__(self, layers: list[list[_Table]], local: list[tuple[int, int]]) -> None: ...
    def run(self, packet: _Packet, hook: str, postrouting: bool) -> tuple[list[_Outcome], list[str]]: ...
    def entries(
        self, packet: _Packet, hook: str, reads: bool = False
    ) -> tuple[
        list[tuple[float, str, str, str | None, tuple[int, int, int, int | None] | None, str | None]],
        list[str],
        list[tuple[int, str, str | None, _Part]] | None,
    ]: ...
    def settled(
        self, cases: list[tuple[_Packet, bool, int]], alternatives: list[list[tuple[bool, list[str]]]]
    ) -> list[bool]: ...
    def chain_name(self, layer: int, table: int, chain: int) -> str: ...
    def port_rules(self, table: str) -> list[tuple[int, int, str, tuple[int, int, int] | None, bool]]: ...
    def state(self, layer: int) -> RulesState: ...

class RulesState:
    """What one layer's tables held, as fingerprints of the parts a walk reads (rust/src/state.rs)."""

    def changes(self, before: RulesState | None = None) -> list[tuple[str, str | None, _Part]]: ...
    def __len__(self) -> int: ...

# scan_save's answer: (comments as (line, text), tables, diagnostics as (line, message), the
# table left without COMMIT, the number of lines); a table: (name, (chains, policies),
# (declared chains, lines), (built-in chains declared with counters, their lines' text),
# (those with packets read, packets), the rules)
_ScannedTable = tuple[
    str,
    tuple[list[str], list[str | None]],
    tuple[list[str], list[int]],
    tuple[list[str], list[str]],
    tuple[list[str], list[int]],
    SavedRules,
]
SaveScan = tuple[list[tuple[int, str]], list[_ScannedTable], list[tuple[int, str]], str | None, int]
# a rule with [packets:bytes] before it: its packets, bytes (None past 64 bits), text without them
SavedCounters = tuple[int | None, int | None, str]
# (chain, line, text, counters or None)
_SavedRule = tuple[str, int, str, SavedCounters | None]

class SavedRules:
    """One table's rules as a dump holds them (rust/src/save.rs)."""

    def __len__(self) -> int: ...
    def rule(self, i: int) -> _SavedRule: ...
    def rules(self) -> list[_SavedRule]: ...
    def containing(self, needle: str, *more: str) -> list[int]: ...
    def in_chains(self, names: list[str]) -> list[int]: ...
    def kube_rules(self) -> tuple[int, list[int]]: ...
    def repeated(self, needles: list[str]) -> list[tuple[int, int]]: ...

class RuleLines:
    """The rules of a dump's tables by their text (rust/src/save.rs)."""

    def __init__(self, tables: list[SavedRules]) -> None: ...
    def line_of(self, text: str) -> int | None: ...

def scan_save(text: str, first_line: int = 1) -> SaveScan | None: ...
def share_values(roots: list[Any], aliased: bool = True) -> int: ...
def load_json(text: str) -> tuple[Any] | None: ...

class NameLines:
    """The lines of a JSON text's ``"name": "..."`` fields, handed out in document order."""

    def __init__(self, text: str) -> None: ...
    def next(self, name: str) -> int | None: ...

def slice_endpoints(
    endpoints: object, family: int, is_ip_fn: Callable[[object, int], bool]
) -> tuple[list[tuple[str, str | None, bool, bool, bool, tuple[str, ...] | None]], list[int]]: ...
def slice_address_problems(
    endpoints: object, family: int | None, is_ip_fn: Callable[[object, int], bool]
) -> list[tuple[int, int]]: ...
