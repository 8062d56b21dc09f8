"""A message template as a regular expression with typed captures, and as a real line again.

A template is the printed text with what varies named in braces (``{port}``, ``{target}``) or
written as the Go format verb the source uses (``%v``, ``%d``, ``%q``). Each placeholder becomes a
capture of the shape its name says (a port is digits, an address is an IP address, a reason is
the rest of the line), so the same template reads a glog-era line and a structured one's payload,
and :func:`render` writes a line the program could have printed (bench/coverage.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from kpdoctor import lazy_re

# What each kind of placeholder matches, by its name (the last word of it: {src_port} is a port).
# Every pattern is in the subset that Python's ``re`` and POSIX ERE read alike (as the log scan's
# signatures are: parse/logscan.py), with no group of its own: each placeholder is one group.
_MASKED = "[0-9xX*]{1,3}[.][0-9xX*]{1,3}[.][0-9xX*]{1,3}[.][0-9xX*]{1,3}"
_ADDRESS = "[0-9A-Fa-f][0-9A-Fa-f:./]*|" + _MASKED + "[/0-9]*|<[^<> ]*>|\\[[A-Za-z_-]+\\]"
_SHAPES: dict[str, str] = {
    "number": "-?[0-9]+",
    "port": "[0-9]+",
    "line": "[0-9]+",
    "column": "[0-9][0-9-]*",  # nft's "87-100"
    "count": "[0-9]+",
    "pid": "[0-9]+",
    "cpu": "[0-9]+",
    "seconds": "[0-9][0-9.]*",
    # an address as printed, or as users mask it before they post ("10.x.x.x", "<redacted>",
    # "[NODE_IP]"): the message is the same whatever the address was (no group of its own: the
    # placeholder's parentheses make the alternatives one)
    "address": _ADDRESS,
    "ip": _ADDRESS,
    "cidr": "[0-9A-Fa-f][0-9A-Fa-f:.]*/[0-9]+|" + _MASKED + "/[0-9]+|<[^<> ]*>",
    "version": "v?[0-9][A-Za-z0-9_.+~-]*",
    "protocol": "[A-Za-z]+",
}
# Names whose value is one word (a chain, a target, a set, a table, a program, an interface).
_WORDS = (
    "target",
    "chain",
    "table",
    "set",
    "name",
    "program",
    "interface",
    "match",
    "module",
    "node",
    "service",
    "path",
    "file",
    "op",
)
_WORD = "[^ \t'`\"]+"
_REST = ".*"  # the last placeholder of a template, when it ends it: a reason, an error, the payload
_ANY = ".*?"  # a placeholder in the middle may be empty ("failed with message: ``")
_SPACE = "[ \t]+"
_ERE_SPECIAL = lazy_re.compile(r"[.\[\]()*+?{}|^$\\]")
# An IPv4 address the program prints as it is (kube-proxy's "127.0.0.1" fallback): read as
# written or as users mask it before they post ("127.x.x.x", "x.x.x.x"), one octet at a time.
_LITERAL_IPV4 = lazy_re.compile(r"\b[0-9]{1,3}(?:\.[0-9]{1,3}){3}\b")
_GO_VERB = lazy_re.compile(r"%(?:%|[-+# 0]*\d*(?:\.\d+)?[vsdqwxXTtfgeEbocU])")
_PLACEHOLDER = lazy_re.compile(r"\{\{|\}\}|\{([a-z][a-z0-9_]*)\}|\{|\}|" + _GO_VERB.pattern)
# sample values, for render()
_SAMPLES = {
    "number": "3",
    "port": "30080",
    "line": "16",
    "column": "87-100",
    "count": "2",
    "pid": "1234",
    "cpu": "0",
    "seconds": "5",
    "address": "10.96.0.10",
    "ip": "10.96.0.10",
    "cidr": "10.244.0.0/16",
    "version": "v1.8.4",
    "protocol": "TCP",
}


class TemplateError(ValueError):
    """A template that cannot be read (an unbalanced brace)."""


@dataclass(frozen=True, slots=True)
class Compiled:
    pattern: str  # Python's re and POSIX ERE read it alike (a lazy ``+?`` is ``(+)?`` there: same lines)
    needle: str  # the longest literal part: a line without it cannot match
    names: tuple[str, ...]  # the captures, in order
    parts: tuple[str | tuple[str, str], ...]  # literals and (name, shape) placeholders

    def regex(self) -> re.Pattern[str]:
        return regex_of(self.pattern)


_CACHE: dict[str, re.Pattern[str]] = {}


def regex_of(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled, once per process (the log signatures' and the templates')."""
    rx = _CACHE.get(pattern)
    if rx is None:
        rx = _CACHE[pattern] = re.compile(pattern)
    return rx


def _shape(name: str, last: bool) -> str:
    word = name.rsplit("_", 1)[-1]
    if word in _SHAPES:
        return _SHAPES[word]
    if word in _WORDS:
        return _WORD
    return _REST if last else _ANY


def _go_shape(verb: str, last: bool) -> tuple[str, str]:
    kind = verb[-1]
    if kind in "dboc":
        return "number", "-?[0-9]+"
    if kind == "q":
        return "quoted", '"[^"]*"'
    if kind in "fgeE":
        return "number", "-?[0-9][0-9.eE+-]*"
    if kind == "t":
        return "flag", "true|false"
    return "value", (_REST if last else _ANY)


@functools.cache
def compile_template(template: str) -> Compiled:
    """The template's regular expression (see the module docstring); once per template and
    process (the loader, the scan's signatures, the matcher and render all ask for it)."""
    tokens = list(_PLACEHOLDER.finditer(template))
    parts: list[str | tuple[str, str]] = []
    pos = 0
    literal = ""
    holes = [t for t in tokens if t.group(0) not in ("{{", "}}", "%%")]
    for t in tokens:
        literal += template[pos : t.start()]
        pos = t.end()
        text = t.group(0)
        if text in ("{{", "}}"):
            literal += text[0]
            continue
        if text == "%%":
            literal += "%"
            continue
        if text in ("{", "}"):
            raise TemplateError(f"an unbalanced brace at {t.start()} (write {{{{ or }}}} for a literal one)")
        if literal:
            parts.append(literal)
            literal = ""
        last = t is holes[-1] and not template[t.end() :].strip()
        if t.group(1):
            parts.append((t.group(1), _shape(t.group(1), last)))
        else:
            parts.append(_go_shape(text, last))
    literal += template[pos:]
    if literal:
        parts.append(literal)
    if not any(isinstance(p, str) and re.search(r"[A-Za-z]{3}", p) for p in parts):
        raise TemplateError("no literal word: it would match almost any line")
    pattern: list[str] = []
    names: list[str] = []
    used: dict[str, int] = {}
    for p in parts:
        if isinstance(p, str):
            pattern.append(_SPACE.join(_escape(w) for w in re.split(r"[ \t]+", p)) if p.strip() else "[ \t]*")
            continue
        name, shape = p
        n = used[name] = used.get(name, 0) + 1
        names.append(name if n == 1 else f"{name}_{n}")
        pattern.append(f"({shape})")
    # a template that starts with a word starts a word in the line ("Version:" is not "apiVersion:");
    # \b is Python's and GNU grep -E's alike
    start = "\\b" if isinstance(parts[0], str) and re.match(r"\w", parts[0]) else ""
    needle = _needle(p for p in parts if isinstance(p, str))
    return Compiled(start + "".join(pattern), needle, tuple(names), tuple(parts))


def _needle(literals: Iterable[str]) -> str:
    """The longest run of the literals' words joined by single spaces, as the program prints
    them: a line holding the message holds it (unless spaces were added to it), and a phrase
    ("Failed to execute iptables-restore") picks far fewer lines of a busy log than its longest
    word would."""
    phrases = [ph.strip() for lit in literals for ph in re.split(r"[ \t]{2,}|[\t\n]|" + _LITERAL_IPV4.pattern, lit)]
    return max((ph for ph in phrases if ph), key=len)


def _escape(text: str) -> str:
    """``text`` as a literal in both Python's ``re`` and POSIX ERE (re.escape's ``\\-`` and
    ``\\ `` are not ERE); an IPv4 address in it as written or masked (:data:`_LITERAL_IPV4`)."""
    out, pos = [], 0
    for m in _LITERAL_IPV4.finditer(text):
        out += [_ERE_SPECIAL.sub(r"\\\g<0>", text[pos : m.start()]), _MASKED]
        pos = m.end()
    return "".join(out) + _ERE_SPECIAL.sub(r"\\\g<0>", text[pos:])


def captures(compiled: Compiled, found: re.Match[str]) -> dict[str, str]:
    """What each placeholder held in a match of ``compiled``'s pattern."""
    return {name: v for name, v in zip(compiled.names, found.groups(), strict=True) if v is not None}


@functools.cache
def compile_structured(msg: str) -> Compiled:
    """klog 2's quoted message (``"Failed to execute iptables-restore" err=...``) as a pattern:
    the text as given, a trailing period or space inside the quotes either way (releases differ:
    "Creating dualStackProxier for Windows kernel." and "...kernel" are one message). A Go verb
    in it is printed as written: klog formats no structured message (1.34's "Timed out waiting for
    node %q to exist" is logged with the %q)."""
    text = msg.strip().rstrip(".").rstrip().replace("{", "{{").replace("}", "}}").replace("%", "%%")
    base = compile_template('"' + text + '"')
    # the needle leaves the quotes out: a log kept as JSON (docker's) escapes them
    return Compiled(base.pattern[:-1] + '\\.?[ \t]*"', compile_template(text).needle, base.names, base.parts)


def render(template: str, values: dict[str, str] | None = None) -> str:
    """A line the program could have printed: each placeholder given a sample of its shape (or
    the value in ``values``, by name)."""
    values = values or {}
    out = []
    for p in compile_template(template).parts:
        if isinstance(p, str):
            out.append(p)
            continue
        name = p[0]
        word = name.rsplit("_", 1)[-1]
        if name in values:
            out.append(values[name])
        elif word in _SAMPLES:
            out.append(_SAMPLES[word])
        elif word == "quoted":
            out.append('"x"')
        elif word == "flag":
            out.append("true")
        elif word in _WORDS:
            out.append(f"KUBE-SVC-EXAMPLE{word.upper()}" if word in ("chain", "target") else f"example-{word}")
        else:
            out.append(f"<{name}>")
    return "".join(out)
