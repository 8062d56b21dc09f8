"""JSON and YAML from untrusted evidence, bounded: every reader of structured text goes through here.

Python's parsers fail on hostile shapes in ways that are not parse errors: deep nesting raises
``RecursionError`` (JSON at ~1,000 levels; YAML after seconds of work), a number of more than 4,300
digits raises a ``ValueError`` that tells the user to call ``sys.set_int_max_str_digits()``, and a
byte-order mark makes ``json.loads`` refuse a file that Windows editors and PowerShell write every
day. Here each becomes a :class:`StructuredError` with a one-line reason a user can act on, and a
byte-order mark is simply skipped.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 256  # Kubernetes objects nest about 15 levels; kubectl Lists and nft JSON under 30
_OPENERS = re.compile(r"[\[{]")
_BRACKETS = re.compile(r"[\[\]{}]")
_INDENT = re.compile(r"^( *)\S", re.M)


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
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return list(yaml.load_all(text, Loader=loader))
    except RecursionError:
        raise StructuredError(f"YAML nested more than {MAX_DEPTH} levels deep: not read") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise StructuredError(f"invalid YAML: {exc.problem or exc}", mark.line + 1 if mark else None) from None
    except (yaml.YAMLError, ValueError) as exc:
        raise StructuredError(f"invalid YAML ({exc})") from None
