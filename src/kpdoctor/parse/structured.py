"""JSON and YAML from untrusted evidence, bounded: every reader of structured text goes through here.

Python's parsers fail on hostile shapes in ways that are not parse errors: deep nesting raises
``RecursionError`` (JSON at ~1,000 levels; YAML after seconds of work), a number of more than 4,300
digits raises a ``ValueError`` that tells the user to call ``sys.set_int_max_str_digits()``, and a
byte-order mark makes ``json.loads`` refuse a file that Windows editors and PowerShell write every
day. Here each becomes a :class:`StructuredError` with a one-line reason a user can act on, and a
byte-order mark is simply skipped.

YAML aliases are the other hostile shape: a 1 KB "billion laughs" (each level a list of ten aliases
of the one before) parses in microseconds into a graph of shared nodes, but every reader that walks
the result visits each shared part once per alias, a billion times. So a YAML stream is composed
into nodes first, and the nodes its aliases add when expanded (each alias weighted by the size of
the node it names) are counted before any object is built: past :data:`MAX_ALIAS_NODES` the stream
is refused, and so is an alias inside the node it names (a recursive structure, which no reader
could walk to its end). Text without ``&`` and ``*`` has no alias and is not counted. JSON has no
aliases.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kpdoctor import lazy_re

# A markdown code fence line (```, ```yaml, ~~~): never output, wherever it is pasted
FENCE = lazy_re.compile(r"^[ \t]*+(?:```|~~~)[\w-]*[ \t]*$", re.M)

MAX_DEPTH = 256  # Kubernetes objects nest about 15 levels; kubectl Lists and nft JSON under 30
# Nodes that aliases may add to a YAML stream when expanded. kubectl never writes aliases; a
# hand-written manifest shares some labels or a container block (`<<: *defaults`), a few hundred
# nodes. A billion laughs adds 10**9.
MAX_ALIAS_NODES = 10_000
_ANCHOR = lazy_re.compile(r"&[^\s,\[\]{}]")
_ALIAS = lazy_re.compile(r"\*[^\s,\[\]{}]")
_OPENERS = lazy_re.compile(r"[\[{]")
_BRACKETS = lazy_re.compile(r"[\[\]{}]")
_INDENT = lazy_re.compile(r"^( *)\S", re.M)


class StructuredError(ValueError):
    """The text is not usable JSON/YAML; ``str()`` is a one-line reason for the user, ``line``
    (1-based, when known) where the text breaks."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason)
        self.line = line


def strip_bom(text: str) -> str:
    return text[1:] if text.startswith("\ufeff") else text


def load_json(text: str) -> Any:
    """``json.loads`` that raises only :class:`StructuredError`, whatever the text."""
    text = strip_bom(text)
    try:
        return json.loads(text)
    except RecursionError:
        raise StructuredError("JSON nested too deeply to read (about 1,000 levels or more)") from None
    except ValueError as exc:
        if "Exceeds the limit" in str(exc):
            raise StructuredError("JSON holds a number of more than 4,300 digits") from None
        raise StructuredError(f"JSON that does not parse ({exc})", getattr(exc, "lineno", None)) from None


def flow_depth(text: str) -> int:
    """How deep ``[``/``{`` nest in ``text`` (quotes not considered: an upper bound). Cheap when
    the text has few brackets, which is when it matters (block YAML)."""
    if not _OPENERS.search(text):
        return 0
    depth = deepest = 0
    for m in _BRACKETS.finditer(text):
        if m.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif depth:
            depth -= 1
    return deepest


def _block_depth(text: str) -> int:
    """Distinct indentation levels of block YAML: a bound on its nesting."""
    return len({len(m.group(1)) for m in _INDENT.finditer(text)})


def load_yaml_all(text: str) -> list[Any]:
    """Every document of a YAML stream (safe loader), refusing nesting past :data:`MAX_DEPTH`
    before parsing: PyYAML recurses per level and takes seconds to fail on 20,000 of them."""
    import yaml  # here: only YAML needs it, and it costs start-up time

    text = strip_bom(text)
    if flow_depth(text) > MAX_DEPTH or _block_depth(text) > MAX_DEPTH:
        raise StructuredError(f"YAML nested more than {MAX_DEPTH} levels deep: not read")
    aliases = bool(_ANCHOR.search(text) and _ALIAS.search(text))
    loader: Any = None
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
        docs: list[Any] = []
        added = 0
        while loader.check_node():  # as yaml.load_all, with the aliases counted between the two steps
            node = loader.get_node()
            if aliases:
                added += _alias_nodes(node, MAX_ALIAS_NODES - added)
            docs.append(loader.construct_document(node))
        return docs
    except StructuredError:
        raise
    except RecursionError:
        raise StructuredError(f"YAML nested more than {MAX_DEPTH} levels deep: not read") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise StructuredError(f"invalid YAML: {exc.problem or exc}", mark.line + 1 if mark else None) from None
    except (yaml.YAMLError, ValueError) as exc:
        raise StructuredError(f"invalid YAML ({exc})") from None
    finally:
        if loader is not None:
            loader.dispose()


def _alias_nodes(root: Any, budget: int) -> int:
    """How many nodes the aliases of the document ``root`` (a composed ``yaml.Node``) add when
    expanded: the nodes of its tree with every alias replaced by a copy of what it names, less the
    distinct nodes. Raises :class:`StructuredError` past ``budget``, or when a node holds an alias
    of itself. One pass over the distinct nodes (shared ones are sized once), without recursion."""
    size: dict[int, int] = {}  # id(node) -> its expanded size, once known
    open_: set[int] = set()  # nodes whose size is being computed: the ancestors of the current one
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        value = node.value
        kids: list[Any] = []
        if isinstance(value, list):  # a sequence's items, a mapping's (key, value) pairs
            kids = [x for pair in value for x in pair] if value and isinstance(value[0], tuple) else value
        if children_done:
            open_.discard(key)
            size[key] = min(1 + sum(size[id(k)] for k in kids), 1 << 62)
            continue
        if key in size:  # shared, already sized
            continue
        if key in open_:
            raise StructuredError("YAML alias inside the node it names (a recursive structure): refused")
        open_.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in reversed(kids))
    added = size[id(root)] - len(size)
    if added > budget:
        raise StructuredError(f"YAML aliases expand past {MAX_ALIAS_NODES:,} nodes: refused")
    return added
