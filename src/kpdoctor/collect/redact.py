"""Scrub a bundle before it leaves the node.

Bundles are attached to tickets and read by people outside the cluster, so every artifact loses
anything that grants access (Secrets, tokens, keys, credential-looking environment values) on the
way in, and ``--redact-ips`` can swap addresses for consistent, prefix-preserving pseudonyms.
Both touch only the sensitive values: what the checks read, and the line numbers findings cite,
stay as they were.
"""

from __future__ import annotations

import binascii
import hmac
import ipaddress
import json
import os
import re
from collections.abc import Callable
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.parse.k8s import list_item_kind

REDACTED = "<redacted>"
REDACTED_JWT = "<redacted-jwt>"
UNSCRUBBABLE = b"<redacted: kpdoctor could not scrub this artifact>\n"

# --------------------------------------------------------------------------------------------
# Secrets
# --------------------------------------------------------------------------------------------

# Programs that take a password in an option of their own (argv in processes.txt, a Pod's command,
# a shell line in a log), by the word their name starts with: ``mysql -pSECRET`` (attached only:
# ``-p`` alone prompts, the word after it is the database), ``sshpass -p SECRET``, ``redis-cli -a
# SECRET``, ``ldapsearch -w SECRET``, ``curl -u user:SECRET``, ``openssl ... -passin pass:SECRET``.
# Group 1 is kept, group 2 is the secret.
_OPT_VAL = rb"(\"[^\"]*\"|'[^']*'|[^\s\"']+)"
_OPT_START = rb"(?<![^\s\"'])"
_OPT_SEP = rb"[ \t]+"  # the value in the next word, whatever it starts with (these options take one)
_TOOL_OPTS: dict[bytes, re.Pattern[bytes]] = {
    b"mysql": lazy_re.compile(_OPT_START + rb"(-p)" + _OPT_VAL),
    b"mariadb": lazy_re.compile(_OPT_START + rb"(-p)" + _OPT_VAL),
    b"sshpass": lazy_re.compile(_OPT_START + rb"(-p" + _OPT_SEP + rb"?)" + _OPT_VAL),
    b"redis-cli": lazy_re.compile(_OPT_START + rb"(-a" + _OPT_SEP + rb"?|--pass(?:=|" + _OPT_SEP + rb"))" + _OPT_VAL),
    b"ldap": lazy_re.compile(_OPT_START + rb"(-w" + _OPT_SEP + rb"?)" + _OPT_VAL),
    b"curl": lazy_re.compile(
        _OPT_START + rb"((?:-[uU]" + _OPT_SEP + rb"?|--(?:proxy-)?user(?:=|" + _OPT_SEP + rb"))[^\s:\"'=]*:)" + _OPT_VAL
    ),
    b"openssl": lazy_re.compile(rb"(?<![\w-])(pass:)" + _OPT_VAL),
}
_TOOL_NAME = rb"(" + b"|".join(re.escape(t) for t in _TOOL_OPTS) + rb")[\w-]*"
# a program word: after white space, a path, a quote or a shell operator; before one
_TOOL = lazy_re.compile(rb"(?:^|(?<=[\s/\"'`(;|&=]))" + _TOOL_NAME + rb"(?=[\s\"'`;|&)]|$)")
_TOOL_ARG = lazy_re.compile(rb"(?:.*/)?" + _TOOL_NAME)  # an argv word naming one (fullmatch)
_TOOL_IN_ARGV = lazy_re.compile(rf"(?m)(?:^|/)(?:{'|'.join(re.escape(t.decode()) for t in _TOOL_OPTS)})[\w-]*$")

# Lower-case words without which no text rule can fire: lines holding none are never looked at.
_TRIGGERS = (
    b"passw",
    b"passphrase",
    b"secret",
    b"token",
    b"key",
    b"credential",
    b"auth",
    b"bearer",
    b"cookie",
    b"eyj",
    b"akia",
    b"asia",
    b"://",
    b"ls0tls1crudjti",  # base64 of "-----BEGIN" (a PEM block, base64-encoded as in a kubeconfig): _B64_WORD
    *_TOOL_OPTS,
)
_TRIGGER_S = lazy_re.compile("|".join(re.escape(w.decode()) for w in _TRIGGERS))

_FLAG_WORDS = (
    r"passw(?:or)?d|passphrase|secret|token|api[-_]?key|access[-_]?key|private[-_]?key|credential"
    r"|session[-_]?key|signing[-_]?key"
)
_ENV_WORDS = _FLAG_WORDS + r"|auth"
# what a key ends with when its value is secret: kubeconfig, YAML, JSON, INI, `name: value` and
# `name=value` anywhere in a line
_KEY_PREFIXES = ("api", "access", "secret", "private", "session", "signing", "auth", "encryption", "master")
_KEY_WORDS = rf"token|passw(?:or)?d|passphrase|secret|client-key-data|(?:{'|'.join(_KEY_PREFIXES)})[-_]?key"
_KEY_ENDS = (  # the same, spelt out
    *("token", "passwd", "password", "passphrase", "secret", "client-key-data"),
    *(f"{p}{sep}key" for p in _KEY_PREFIXES for sep in ("-", "_", "")),
)
# HTTP headers that carry credentials (besides Authorization, which keeps its scheme word, and Cookie)
_HEADER_ENDS = tuple(
    f"-{w}" for w in ("token", "key", "secret", "auth", "passwd", "password", "credential", "credentials")
)


def _name_ending(ends: tuple[str, ...], chars: str) -> bytes:
    """A word of ``chars`` ending with one of ``ends``, matched fast: the whole word, then its end."""
    return rf"[{chars}]*+(?:{'|'.join(f'(?<={re.escape(e)})' for e in ends)})".encode()


_PATHISH = lazy_re.compile(r"(?i)(?:file|path|dir)s?$")  # a *-file / *_PATH / *Dir name holds a path
# values that hold no secret: empty, booleans (YAML's and Kconfig's tristate y/m/n: the kernel's
# build configuration has CONFIG_SECRETMEM=y), placeholders
_EMPTYISH = {
    *(b"", b'""', b"''", b"true", b"false", b"null", b"none", b"~", b"<redacted>", b'"<redacted>"'),
    *(b"y", b"m", b"n"),
}

_ENV_NAME = lazy_re.compile(_ENV_WORDS, re.I)
_SECRET_KEY = lazy_re.compile(rf"(?i)^[\w.-]*?(?:{_KEY_WORDS}|authorization|cookie2?)$")
_FLAG_ALONE = lazy_re.compile(rf"(?i)--?[\w.-]*?(?:{_FLAG_WORDS})[\w.-]*")
_JWT_S = lazy_re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")
_AWS_S = lazy_re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])")

_B = str.encode
# a value: \"...\" (inside a logged, escaped JSON string), "...", '...', up to white space, or
# from a quote never closed in the line (a cut line) to white space
_ESCAPED_Q = rb"\\\"(?:(?!\\\").)*\\\""
_VAL = _ESCAPED_Q + rb"|\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s\"']+|[\"'][^\s\"']+"
_YAML_KEY = lazy_re.compile(
    rb"(?i)^([ \t]*(?:-[ \t]+|export[ \t]+)?([\"']?)[\w.-]*?(?:" + _B(_KEY_WORDS) + rb")\2"
    rb"(?:[ \t]*:[ \t]+|[ \t]*=[ \t]*))"  # YAML `key: value`, INI / env `key = value`
    # a scalar value: an object or list opening (`"password": {` in a JSON schema) holds no secret itself
    rb"(\"[^\"]*\"|'[^']*'|[^\s\"'#{\[][^\r\n]*?)([ \t]+#[^\r\n]*)?(\r?)$"
)
_JSON_KEY = lazy_re.compile(rb"(?i)(\"[\w.-]*?(?:" + _B(_KEY_WORDS) + rb")\"[ \t]*:[ \t]*)(\"(?:[^\"\\]|\\.)*\")")
_BLOCK_KEY = lazy_re.compile(
    rb"(?i)^([ \t]*(?:-[ \t]+)?)[\"']?[\w.-]*?(?:" + _B(_KEY_WORDS) + rb")[\"']?[ \t]*:"
    rb"[ \t]*[|>][-+0-9]*[ \t]*(?:#.*)?\r?$"
)
_AUTHZ = lazy_re.compile(
    rb"(?i)((?<![\w-])(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"'\[]?[ \t]*"
    rb"(?:(?:bearer|basic|digest|negotiate|token)[ \t]+)?+)([^\s\"'<>\[\]{},;][^\s\"'<>\],;]*)"
)
_BEARER = lazy_re.compile(rb"(?<![\w-])([Bb]earer[ \t]+)([A-Za-z0-9._~+/-]{16,}=*)")
# the word after a flag is its value unless it is an option itself: a long word with one dash and
# no `=` (`--token -cZEYi2u9QxEdBg`) is a value
_DASHED = r"-[^\s=-][^\s=]{7,}(?!\S)"
_DASHED_S = lazy_re.compile(_DASHED)
_FLAG = lazy_re.compile(
    rb"(?i)(?<![\w-])(--?[\w.-]*?(?:" + _B(_FLAG_WORDS) + rb")[\w.-]*)"
    rb"(=|[ \t]+(?=[^\s-]|" + _B(_DASHED) + rb"))(" + _VAL + rb")"
)
_ENV = lazy_re.compile(
    rb"(?i)(?<![\w.$-])((?:[A-Za-z_][A-Za-z0-9_]*?)?(?:" + _B(_ENV_WORDS) + rb")[A-Za-z0-9_]*)=(" + _VAL + rb")"
)
# A value in a line: quoted (\"...\" too, inside a logged JSON string) or bracketed (`["x"]`, Go's
# `[x]`); after a quoted name, a bare word that ends there (JSON's numbers, not code's `"token":
# make_token()`); else up to white space (for a header: to the end of the line); a quote never
# closed in the line (a cut line), up to white space. `{` or an unclosed `[` opens structure.
_QVALUE = _ESCAPED_Q + rb"|\"(?:[^\"\\]|\\.)*\"|'[^']*'|\[[^\]\r\n]*\]"
_JSON_WORD = rb"[\w.+/=@~-]+(?=[ \t]*(?:[,}\]]|$))"
_OPEN_Q = rb"[\"'][^\s\"']+"
# `name: value`, `name=value`, `name = value`, `"name":"value"`, `\"name\":\"value\"` anywhere in
# a line (a klog line quoting a kubeconfig or a request body, Go's `{Password:x}`), but not a flag
# (`--token`: _FLAG), a path's last part (`.../serviceaccount/token: no such file`) or a Go type
# (`*v1.Secret:`)
_INLINE = lazy_re.compile(
    rb"(?i)(?<![\w.$/\\*-])((\\?[\"'])?" + _name_ending(_KEY_ENDS, r"\w.-") + rb"(?(2)\2)"
    rb"[ \t]*(?::(?![:=])|=(?!=))[ \t]*)"
    rb"(" + _QVALUE + rb"|(?(2)" + _JSON_WORD + rb"|[^\s\"'{\[][^\s\"']*)|" + _OPEN_Q + rb")"
)
# a credential header, case-insensitive, anywhere: `X-Auth-Token: x`, `Cookie: a=1; b=2` (to the end
# of the line or of its quotes), `"X-Api-Key":["x"]`, Go's `map[Cookie:[a=1]]`
_HEADER = lazy_re.compile(
    rb"(?i)(?<![\w.$/\\*-])((\\?[\"'])?(?:(?:proxy-)?authorization|(?:set-)?cookie2?|"
    + _name_ending(_HEADER_ENDS, "a-z0-9-")
    + rb")(?(2)\2)[ \t]*:(?![:=])[ \t]*)"
    rb"(" + _QVALUE + rb"|(?(2)" + _JSON_WORD + rb"|[^\s\"'{\[\]][^\r\n\"'\]}]*)|" + _OPEN_Q + rb")"
)
_URL_PASS = lazy_re.compile(rb"(?i)(\b[a-z][a-z0-9+.-]*://[^\s:/@\"']*:)([^\s@/\"']+)(?=@)")
_JWT = lazy_re.compile(_B(_JWT_S.pattern))
_AWS = lazy_re.compile(_B(_AWS_S.pattern))
_PEM_BEGIN = lazy_re.compile(rb"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY[A-Z ]*)-----")
_PEM_REACH = 1 << 16  # an END further from its BEGIN than any key is long closes some other block
_PEM_BODY = lazy_re.compile(rb"[ \t]*(?:[A-Za-z0-9+/]+=*|Proc-Type:.*|DEK-Info:.*)?[ \t]*\r?")
_B64_PEM = lazy_re.compile(rb"LS0tLS1CRUdJTi[A-Za-z0-9+/]*={0,2}")  # base64 of "-----BEGIN..."
_B64_LINE = lazy_re.compile(rb"([ \t]*)([A-Za-z0-9+/]+={0,2})[ \t]*\r?")
_PEM_HEAD = lazy_re.compile(rb"-----BEGIN [A-Z0-9 ]+-----")
# a value that is no secret: a placeholder (`<redacted>`, client-go's `Bearer <masked>`) or a YAML
# block indicator, in its quotes or brackets; a path under a system folder (a token *file*)
_PLACEHOLDER = lazy_re.compile(
    rb"(?i)(?:(?:bearer|basic|digest|negotiate|token)[ \t]+)?<[\w. -]*>(?:[\s,;].*)?|[|>][-+0-9]*"
)
_SYSTEM_PATH = lazy_re.compile(
    rb"/(?:var|run|etc|home|root|tmp|usr|opt|srv|mnt|proc|sys|dev|lib|snap|secrets?)(?:/[\w.@-]+)+/?"
)


def redact_secrets(path: str, data: bytes) -> bytes:
    """``data`` (the artifact at bundle ``path``) without Secrets, tokens, keys or credentials.

    Secret-bearing keys are found anywhere in a line, not only where a line starts: YAML, INI and
    env keys, ``"key":"value"`` (escaped too, as a log quotes a request body), ``key=value``,
    flags, credential headers (``Authorization``, ``Cookie``, ``X-Auth-Token``...), passwords in
    URLs and in the options of known programs (``mysql -pSECRET``), JWTs, AWS key ids, and private
    keys, in PEM (quoted inside a line too) or base64 of PEM.

    Cluster JSON is parsed and re-serialised only when something was removed; everything else
    keeps its bytes and its line count, only secret values being replaced. Never raises."""
    try:
        p = path.replace("\\", "/")
        while p.startswith("./"):
            p = p[2:]
        if p.endswith(".json") and (p.startswith("cluster/") or "/cluster/" in p):
            out = _redact_json(data)
            if out is not None:
                return out
        return _scrub_bytes(data)
    except Exception:  # a bug here must not leak what it failed to scrub
        return UNSCRUBBABLE


def redact_text(text: str) -> str:
    """One line or message (a command line, a command's error output, a reason the manifest or an
    Event gives) without secrets, by the rules every artifact is scrubbed with."""
    if not text:
        return text
    return redact_secrets("message.txt", text.encode("utf-8", "surrogateescape")).decode("utf-8", "replace")


def _keep(value: bytes) -> bool:
    return value.lower() in _EMPTYISH


def _inert(value: bytes) -> bool:
    """A value that holds no secret: empty-ish, a placeholder, a block indicator, a system path."""
    core = value.strip(b"\\\"'[] \t")
    return _keep(core) or _PLACEHOLDER.fullmatch(core) is not None or _SYSTEM_PATH.fullmatch(core) is not None


def _quoted(value: bytes) -> bytes:
    """``<redacted>`` in the quotes (or brackets) ``value`` had, so quoted JSON/YAML/shell stays
    well-formed."""
    if len(value) >= 4 and value[:2] == b'\\"' and value[-2:] == b'\\"':
        return b'\\"<redacted>\\"'
    if len(value) >= 2 and value[:1] in (b'"', b"'") and value[-1:] == value[:1]:
        return value[:1] + b"<redacted>" + value[:1]
    if len(value) >= 2 and value[:1] == b"[" and value[-1:] == b"]":
        inner = value[1:-1].strip()
        return b'["<redacted>"]' if inner[:1] == b'"' else b"[<redacted>]"
    return b"<redacted>"


def _yaml_key(m: re.Match[bytes]) -> bytes:
    v = m.group(3)
    if _keep(v) or v[:1] in (b"|", b">"):  # a block scalar's body is handled with the lines below
        return m.group()
    return m.group(1) + _quoted(v) + (m.group(4) or b"") + m.group(5)


def _json_key(m: re.Match[bytes]) -> bytes:
    return m.group() if _keep(m.group(2)) else m.group(1) + b'"<redacted>"'


def _after_prefix(m: re.Match[bytes]) -> bytes:
    return m.group(1) + b"<redacted>"


def _flag(m: re.Match[bytes]) -> bytes:
    name, sep, v = m.group(1), m.group(2), m.group(3)
    if _keep(v) or _PATHISH.search(name.decode("ascii", "replace")):
        return m.group()
    return name + sep + _quoted(v)


def _env(m: re.Match[bytes]) -> bytes:
    name, v = m.group(1), m.group(2)
    if _keep(v) or _PATHISH.search(name.decode("ascii", "replace")):
        return m.group()
    return name + b"=" + _quoted(v)


def _inline(m: re.Match[bytes]) -> bytes:
    v = m.group(3)
    return m.group() if _inert(v) else m.group(1) + _quoted(v)


def _header(m: re.Match[bytes]) -> bytes:
    v = m.group(3)
    if _inert(v):
        return m.group()
    tail = v[len(v.rstrip()) :]  # an unquoted value runs to the end of the line: keep its spaces
    return m.group(1) + _quoted(v.rstrip()) + tail


def _option(m: re.Match[bytes]) -> bytes:
    return m.group() if _keep(m.group(2)) else m.group(1) + _quoted(m.group(2))


def _tool_options(line: bytes) -> bytes:
    """``line`` without the passwords given in the options of the known programs it runs: the
    first such option after each program's name (`sshpass -p SECRET ssh -p 22`: ssh's port stays)."""
    found = list(_TOOL.finditer(line))
    if not found:
        return line
    out, pos = [line[: found[0].end()]], found[0].end()
    for m, nxt in zip(found, [*found[1:], None], strict=True):
        end = len(line) if nxt is None else nxt.end()
        out.append(_TOOL_OPTS[m.group(1)].sub(_option, line[pos:end], count=1))
        pos = end
    return b"".join(out)


def _tool_argv(argv: list[Any]) -> bool:
    """The same for an argv list (a container's command, a probe's exec), in place: an option and
    its value in one word (``-pSECRET``) or in two (``-a``, ``SECRET``). True if one was redacted."""
    try:
        joined = "\n".join(argv)
    except TypeError:  # not an argv: a list of objects or numbers
        return False
    if not _TOOL_IN_ARGV.search(joined):
        return False
    words = [a.encode("utf-8", "surrogatepass") for a in argv]
    changed, kind, done = False, None, True
    for i, w in enumerate(words):
        tool = _TOOL_ARG.fullmatch(w)
        if tool:
            kind, done = tool.group(1), False
            continue
        if kind is None or done:
            continue
        rx = _TOOL_OPTS[kind]
        new = rx.sub(_option, w, count=1)
        if new == w and i + 1 < len(words):  # the value in the next word
            pair = w + b" " + words[i + 1]
            new = rx.sub(_option, pair, count=1)
            if new != pair and new.startswith(w + b" "):
                argv[i + 1], words[i + 1] = new[len(w) + 1 :].decode("utf-8", "surrogatepass"), b""
                changed = done = True
            continue
        if new != w:
            argv[i] = new.decode("utf-8", "surrogatepass")
            changed = done = True
    return changed


try:  # every trigger word in one pass (Aho-Corasick); else one search per word
    import ahocorasick_rs

    _TRIGGER_AC: Any = ahocorasick_rs.BytesAhoCorasick(list(_TRIGGERS))
except ImportError:  # pragma: no cover
    _TRIGGER_AC = None
_KEY_GATE = frozenset((b"token", b"passw", b"passphrase", b"secret", b"key"))
_NAME_GATE = frozenset((b"passw", b"passphrase", b"secret", b"token", b"key", b"credential"))
_HEADER_GATE = frozenset((b"auth", b"cookie", b"token", b"key", b"secret", b"passw", b"credential"))
_TOOL_GATE = frozenset(_TOOL_OPTS)
# (rule, replacement, the line holds one of these triggers, and this too once lower-cased): skip
# the rules that cannot fire
_LINE_RULES: tuple[
    tuple[re.Pattern[bytes], Callable[[re.Match[bytes]], bytes] | bytes, frozenset[bytes], bytes], ...
] = (
    (_JSON_KEY, _json_key, _KEY_GATE, b'"'),
    (_YAML_KEY, _yaml_key, _KEY_GATE, b""),
    (_AUTHZ, _after_prefix, frozenset((b"auth",)), b"authorization"),
    (_BEARER, _after_prefix, frozenset((b"bearer",)), b""),
    (_FLAG, _flag, _NAME_GATE, b"-"),
    (_ENV, _env, _NAME_GATE | {b"auth"}, b"="),
    (_HEADER, _header, _HEADER_GATE, b":"),
    (_INLINE, _inline, _KEY_GATE, b""),
    (_URL_PASS, _after_prefix, frozenset((b"://",)), b"@"),
    (_JWT, REDACTED_JWT.encode(), frozenset((b"eyj",)), b"."),
    (_AWS, b"<redacted>", frozenset((b"akia", b"asia")), b""),
)


_Rules = tuple[tuple[re.Pattern[bytes], Callable[[re.Match[bytes]], bytes] | bytes, bytes], ...]
_RULES_FOR: dict[frozenset[bytes], tuple[_Rules, bool]] = {}


def _rules_for(present: set[bytes]) -> tuple[_Rules, bool]:
    """The line rules the trigger words ``present`` can fire, and whether the programs' options
    may hold a password (a few distinct sets of words cover a whole artifact: cached)."""
    key = frozenset(present)
    got = _RULES_FOR.get(key)
    if got is None:
        if len(_RULES_FOR) > 4096:
            _RULES_FOR.clear()
        rules = tuple((rx, repl, also) for rx, repl, words, also in _LINE_RULES if not words.isdisjoint(key))
        got = _RULES_FOR[key] = (rules, not _TOOL_GATE.isdisjoint(key))
    return got


def _scrub_line(data: bytes, low: bytes, s: int, e: int, present: set[bytes]) -> bytes | None:
    """The line ``data[s:e]`` through the rules its trigger words (``present``) can fire, None if
    none could (``low``: ``data`` lower-cased)."""
    rules, tools = _rules_for(present)
    line = None
    for rx, repl, also in rules:
        if low.find(also, s, e) >= 0:
            line = rx.sub(repl, data[s:e] if line is None else line)
    if tools:
        line = _tool_options(data[s:e] if line is None else line)
    return line


def _redact_lines(body: bytes) -> bytes:
    """Each non-blank line of ``body`` becomes its indentation + ``<redacted>`` (line count kept)."""
    out = []
    for seg in body.split(b"\n"):
        core = seg.rstrip(b"\r")
        if core.strip():
            indent = core[: len(core) - len(core.lstrip())]
            seg = indent + b"<redacted>" + seg[len(core) :]
        out.append(seg)
    return b"\n".join(out)


def _line_end(data: bytes, pos: int) -> int:
    e = data.find(b"\n", pos)
    return len(data) if e < 0 else e


def _pem_tail(data: bytes, pos: int) -> int:
    """Where a private key whose END line is missing (a cut log, a truncated file) ends: with its
    line when the key goes on in it (quoted, ``\\n`` escaped), else after the base64 lines below."""
    end = _line_end(data, pos)
    if data[pos:end].strip():
        return end
    while end < len(data):
        nxt = _line_end(data, end + 1)
        if not _PEM_BODY.fullmatch(data[end + 1 : nxt]):
            break
        end = nxt
    return end


def _scrub_pem(data: bytes) -> bytes:
    """Every private key's body becomes ``<redacted>`` lines (BEGIN and END lines kept)."""
    out: list[bytes] = []
    pos = 0
    for m in _PEM_BEGIN.finditer(data):
        if m.start() < pos:
            continue  # inside the key before
        end = data.find(b"-----END " + m.group(1) + b"-----", m.end(), m.end() + _PEM_REACH)
        if end < 0:
            end = _pem_tail(data, m.end())
        out += (data[pos : m.end()], _redact_lines(data[m.end() : end]))
        pos = end
    out.append(data[pos:])
    return b"".join(out)


def _private_b64(run: bytes) -> bool:
    """Whether base64 ``run`` (it starts with the encoding of ``-----BEGIN``) holds a private key,
    or is too short to tell."""
    run = run.rstrip(b"=")
    try:
        pem = binascii.a2b_base64(run[: len(run) // 4 * 4])
    except binascii.Error:
        return True
    return b"PRIVATE" in pem or _PEM_HEAD.match(pem) is None


def _scrub_b64_pem(data: bytes) -> bytes:
    """Base64 of a PEM private key (``client-key-data: LS0tLS1CRUdJTi...`` quoted anywhere)
    becomes ``<redacted>``, and so do the lines it continues on when wrapped (``base64``'s 76
    columns: the lines below of the same width, and a last shorter one). Certificates stay."""
    out: list[bytes] = []
    pos = 0
    for m in _B64_PEM.finditer(data):
        if m.start() < pos:
            continue
        end, width, run, wrapped = m.end(), len(m.group()), [m.group()], []
        if 60 <= width <= 128 and not data[end : _line_end(data, end)].strip():  # the run ends its line
            e = _line_end(data, end)
            while e < len(data):
                nxt = _line_end(data, e + 1)
                w = _B64_LINE.fullmatch(data[e + 1 : nxt])
                if w is None or len(w.group(2)) > width:
                    break
                run.append(w.group(2))
                wrapped.append((e + 1 + len(w.group(1)), e + 1 + w.end(2)))
                e = nxt
                if len(w.group(2)) < width or w.group(2).endswith(b"="):
                    break
        if not _private_b64(b"".join(run)):
            continue
        out += (data[pos : m.start()], b"<redacted>")
        pos = end
        for s, e in wrapped:
            out += (data[pos:s], b"<redacted>")
            pos = e
    out.append(data[pos:])
    return b"".join(out)


def _block_end(data: bytes, start: int, indent: int) -> int:
    """End of a YAML block scalar's body starting at ``start``: the lines indented deeper than
    ``indent`` (and blank lines between them)."""
    pos = last = start
    n = len(data)
    while pos < n:
        e = data.find(b"\n", pos)
        e = n if e < 0 else e
        line = data[pos:e]
        stripped = line.lstrip(b" \t")
        if stripped.strip():
            if len(line) - len(stripped) <= indent:
                break
            last = e
        pos = e + 1
    return last


_Lines = list[tuple[int, int, set[bytes]]]
_B64_WORD = b"ls0tls1crudjti"


def _trigger_lines(low: bytes) -> _Lines:
    """(start, end, trigger words) of each line of ``low`` (lower-cased text) holding any, in order."""
    n = len(low)
    if _TRIGGER_AC is not None:  # one pass for every word (a 10,000-Service rule dump: 25 MB)
        found: _Lines = []
        end = -1
        present: set[bytes] = set()
        # overlapping: `monkeyJ` holds both `key` and `eyj`; matches come line by line
        for w, i, _ in _TRIGGER_AC.find_matches_as_indexes(low, overlapping=True):
            if i > end:
                end = low.find(b"\n", i)
                end = n if end < 0 else end
                present = set()
                found.append((low.rfind(b"\n", 0, i) + 1, end, present))
            present.add(_TRIGGERS[w])
        return found
    lines: dict[int, set[bytes]] = {}
    for w in _TRIGGERS:
        i = low.find(w)
        while i >= 0:
            lines.setdefault(low.rfind(b"\n", 0, i) + 1, set()).add(w)
            i = low.find(w, _line_end(low, i))
    return [(s, _line_end(low, s), words) for s, words in sorted(lines.items())]


def _scrub_bytes(data: bytes) -> bytes:
    """The text rules: only lines holding a trigger word are examined."""
    low = data.lower()
    if b"-----begin" in low and b"private key" in low:
        data = _scrub_pem(data)
        low = data.lower()
    found = _trigger_lines(low)
    if any(_B64_WORD in words for _, _, words in found):  # (cheaper than a search of the whole text)
        data = _scrub_b64_pem(data)
        low = data.lower()
        found = _trigger_lines(low)
    n = len(low)
    if not found:
        return data
    out: list[bytes] = []
    pos = 0
    for s, e, words in found:
        if s < pos:
            continue  # inside a block scalar already redacted
        new = _scrub_line(data, low, s, e, words)
        if new is not None:
            out += (data[pos:s], new)
            pos = e
        if e < n and (low.find(b"|", s, e) >= 0 or low.find(b">", s, e) >= 0) and not _KEY_GATE.isdisjoint(words):
            bm = _BLOCK_KEY.match(data[s:e])
            end = _block_end(data, e + 1, len(bm.group(1))) if bm else e
            if end > e:
                out += (data[pos:e], data[e : e + 1], _redact_lines(data[e + 1 : end]))
                pos = end
    out.append(data[pos:])
    return b"".join(out)


def _scrub_str(s: str) -> str:
    b = s.encode("utf-8", "surrogatepass")
    out = _scrub_bytes(b)
    return s if out is b else out.decode("utf-8", "surrogatepass")


def _secret_value(v: str) -> bool:
    """A literal env value that is a credential whatever its name."""
    return bool(_JWT_S.search(v) or _AWS_S.search(v) or ("PRIVATE KEY-----" in v and "-----BEGIN" in v))


_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _is_kind(v: Any, kind: str) -> bool:
    return type(v) is dict and v.get("kind") == kind


class _JsonScrubber:
    """One walk over a parsed cluster document; ``changed`` says whether it must be rewritten."""

    def __init__(self, strings: bool) -> None:
        self.strings = strings  # run the text rules on every string (the file holds a trigger word)
        self.changed = False
        self.secret_keys: dict[str, bool] = {}

    def is_secret(self, obj: Any, implied: str | None) -> bool:
        if not isinstance(obj, dict):
            return False
        kind = obj.get("kind") or implied
        if kind == "Secret":
            return True
        # items of a typed list (SecretList from the API) carry no kind: recognise the shape
        return kind is None and isinstance(obj.get("type"), str) and ("data" in obj or "stringData" in obj)

    def walk(self, node: Any) -> Any:
        if type(node) is dict:
            self.dict_(node)
        elif type(node) is list:
            self.list_(node)
        elif type(node) is str and self.strings:
            return self.text(node)
        return node

    def text(self, s: str) -> str:
        if not _TRIGGER_S.search(s.lower()):
            return s
        out = _scrub_str(s)
        if out != s:
            self.changed = True
        return out

    def list_(self, lst: list[Any]) -> None:
        if self.strings and any(_is_kind(v, "Secret") for v in lst):
            lst[:] = [v for v in lst if not _is_kind(v, "Secret")]
            self.changed = True
        if self.strings and lst and type(lst[0]) is str and _tool_argv(lst):  # a command (`mysql`, `-pSECRET`)
            self.changed = True
        for i, v in enumerate(lst):
            t = type(v)
            if t is dict:
                self.dict_(v)
            elif t is list:
                self.list_(v)
            elif t is str and self.strings:
                lst[i] = self.text(v)

    def dict_(self, d: dict[str, Any]) -> None:
        meta = d.get("metadata")
        if type(meta) is dict:
            ann = meta.get("annotations")
            if type(ann) is dict and _LAST_APPLIED in ann:
                del ann[_LAST_APPLIED]
                self.changed = True
        items = d.get("items")
        if type(items) is list:
            implied = list_item_kind(d.get("kind"))
            kept = [it for it in items if not self.is_secret(it, implied)]
            if len(kept) != len(items):
                d["items"] = kept
                self.changed = True
        if self.strings:  # every rule below needs a trigger word
            for k in [k for k, v in d.items() if _is_kind(v, "Secret")]:
                del d[k]  # a Secret nested elsewhere than in a list's items
                self.changed = True
            for name in _CONTAINER_LISTS:
                containers = d.get(name)
                if type(containers) is list:
                    for c in containers:
                        if type(c) is dict:
                            self.container(c)
        for k, v in d.items():
            t = type(v)
            if t is dict:
                self.dict_(v)
            elif t is list:
                self.list_(v)
            elif t is str and self.strings:
                secret = self.secret_keys.get(k)
                if secret is None:
                    secret = self.secret_keys[k] = _SECRET_KEY.match(k) is not None
                if secret and v and not _keep(v.encode("utf-8", "surrogatepass")):
                    d[k] = REDACTED
                    self.changed = True
                else:
                    d[k] = self.text(v)

    def container(self, c: dict[str, Any]) -> None:
        env = c.get("env")
        if isinstance(env, list):
            for e in env:
                if not isinstance(e, dict):
                    continue
                name, value = e.get("name"), e.get("value")
                if not isinstance(value, str) or not value or value == REDACTED:
                    continue
                named = isinstance(name, str) and bool(_ENV_NAME.search(name)) and not _PATHISH.search(name)
                if (named and not _keep(value.encode("utf-8", "surrogatepass"))) or _secret_value(value):
                    e["value"] = REDACTED
                    self.changed = True
        for key in ("command", "args"):
            argv = c.get(key)
            if not isinstance(argv, list):
                continue
            for i in range(len(argv) - 1):
                flag, nxt = argv[i], argv[i + 1]
                if (
                    isinstance(flag, str)
                    and isinstance(nxt, str)
                    and _FLAG_ALONE.fullmatch(flag)
                    and not _PATHISH.search(flag)
                    and (not nxt.startswith("-") or _DASHED_S.fullmatch(nxt))
                    and not _keep(nxt.encode("utf-8", "surrogatepass"))
                ):
                    argv[i + 1] = REDACTED
                    self.changed = True


def _redact_json(data: bytes) -> bytes | None:
    """The scrubbed document, ``data`` itself when nothing was removed, None when not JSON."""
    low = data.lower()
    strings = any(w in low for w in _TRIGGERS)
    shaped = b'"type"' in low and (b'"data"' in low or b'"stringdata"' in low)  # a kind-less Secret?
    if not strings and not shaped and b"last-applied-configuration" not in low:
        return data  # nothing below could fire: skip the parse
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    s = _JsonScrubber(strings)
    if s.is_secret(doc, None):
        return (json.dumps({"apiVersion": "v1", "items": [], "kind": "List"}, indent=2) + "\n").encode()
    try:
        doc = s.walk(doc)
    except RecursionError:
        return None
    if not s.changed:
        return data
    return (json.dumps(doc, indent=2) + "\n").encode()


# --------------------------------------------------------------------------------------------
# IP pseudonyms
# --------------------------------------------------------------------------------------------


class _Family:
    """Prefix-preserving permutation of one address family (Crypto-PAn with HMAC-SHA256).

    Output bit k is input bit k, flipped iff the keyed hash of the first k input bits says so;
    never flipped at ancestors of a special block, and identity blocks are returned unchanged,
    so special blocks stay in place and nothing else lands in them."""

    def __init__(
        self, key: bytes, tag: int, bits: int, identity: list[tuple[str, int]], kept: list[tuple[str, int]]
    ) -> None:
        self.key = key
        self.tag = bytes([tag])
        self.bits = bits
        self.width = (bits + 8) // 8
        self.identity = [(int(ipaddress.ip_address(a)) >> (bits - n), bits - n) for a, n in identity]
        self.fixed: set[int] = set()
        for a, n in identity + kept:
            net = int(ipaddress.ip_address(a))
            for k in range(n):
                self.fixed.add((net >> (bits - k)) | (1 << k))
        self.blocks: dict[int, int] = {}  # node at a multiple of 8 bits -> the flips below it
        self.masks: dict[int, int] = {}  # node at a multiple of 8 bits -> the flips above it
        self.cache: dict[int, int] = {}

    def in_identity(self, a: int) -> bool:
        return any(a >> shift == prefix for prefix, shift in self.identity)

    def map(self, a: int) -> int:
        out = self.cache.get(a)
        if out is not None:
            return out
        if self.in_identity(a):
            self.cache[a] = a
            return a
        bits, fixed, masks = self.bits, self.fixed, self.masks
        mask = start = 0
        for c in range(bits - 8, 0, -8):  # resume below the longest prefix already walked
            m = masks.get((a >> (bits - c)) | (1 << c))
            if m is not None:
                mask, start = m, c
                break
        for block in range(start, bits, 8):
            # One keyed hash per 8-level block of the tree: its 256 bits are the flips of the
            # block's 255 nodes, so each flip still depends on the node's own prefix only.
            base = (a >> (bits - block)) | (1 << block)
            d = self.blocks.get(base)
            if d is None:
                d = self.blocks[base] = int.from_bytes(
                    hmac.digest(self.key, self.tag + base.to_bytes(self.width, "big"), "sha256"), "big"
                )
            pinned = base in fixed
            for k in range(block, block + 8):
                if pinned and (a >> (bits - k)) | (1 << k) in fixed:
                    continue
                rel = ((a >> (bits - k)) & ((1 << (k - block)) - 1)) | (1 << (k - block))
                if d >> rel & 1:
                    mask |= 1 << (bits - 1 - k)
            if block + 8 < bits:
                masks[(a >> (bits - block - 8)) | (1 << (block + 8))] = mask
        out = self.cache[a] = a ^ mask
        return out


_V4_IDENTITY = [("0.0.0.0", 8), ("127.0.0.0", 8), ("169.254.0.0", 16), ("224.0.0.0", 4), ("240.0.0.0", 4)]
_V4_KEPT = [("10.0.0.0", 8), ("172.16.0.0", 12), ("192.168.0.0", 16), ("100.64.0.0", 10)]
_V6_IDENTITY = [("::", 128), ("::1", 128), ("fe80::", 10), ("ff00::", 8)]
_V6_KEPT = [("::ffff:0:0", 96), ("fc00::", 7), ("2000::", 3)]  # ::ffff:a.b.c.d maps a.b.c.d as IPv4

_OCT = r"\d\d?\d?"
_V4T = rf"{_OCT}\.{_OCT}\.{_OCT}\.{_OCT}"
_V4X = rf"(?P<v4>{_V4T})(?!\w|\.\d)(?:/(?P<m4>{_V4T}|\d\d?)(?!\w|\.\d))?"
_H = r"[0-9A-Fa-f]{1,4}"
_V6X = (
    rf"(?P<v6>(?:(?:{_H}:){{6}}|(?:{_H}(?::{_H}){{0,5}})?::(?:{_H}:){{0,5}}){_V4T}(?!\w|\.\d)"
    rf"|(?:{_H}:){{7}}{_H}(?![\w:]|\.\d)"
    rf"|(?:{_H}(?::{_H}){{0,6}})?::(?:{_H}(?::{_H}){{0,6}})?(?![\w:]|\.\d))"
    rf"(?:/(?P<m6>\d\d?\d?)(?!\w|\.\d))?"
)
_V4_RE = lazy_re.compile(_V4X)
_ANY_RE = lazy_re.compile(rf"{_V6X}|{_V4X}")
_V6_HINT = lazy_re.compile(r"::|:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){5}:")
_HOST_RE = lazy_re.compile(r"ip-(\d\d?\d?)-(\d\d?\d?)-(\d\d?\d?)-(\d\d?\d?)(?!\d|-\d)")


def _v4_int(s: str) -> int | None:
    n = 0
    for part in s.split("."):
        if len(part) > 1 and part[0] == "0":
            return None  # 010: not how any tool here prints an address
        o = int(part)
        if o > 255:
            return None
        n = n << 8 | o
    return n


def _fmt4(n: int) -> str:
    return f"{n >> 24}.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def _glued(s: str, i: int, extra: str) -> bool:
    """Whether the candidate at ``s[i]`` continues a word (v1.2.3.4, x.10.0.0.1): not an address."""
    if i == 0:
        return False
    c = s[i - 1]
    return c.isalnum() or c == "_" or c in extra


def _mask_len(mask: int, bits: int) -> int | None:
    inv = ~mask & ((1 << bits) - 1)
    return bits - inv.bit_length() if inv & (inv + 1) == 0 else None


class IpPseudonyms:
    """Consistent, prefix-preserving pseudonyms for every address in a bundle.

    Use one instance for all artifacts of a bundle: the same address always gets the same
    pseudonym, distinct addresses distinct ones, and subnet relations survive."""

    def __init__(self, key: bytes | None = None) -> None:
        k = key if key is not None else os.urandom(32)
        self._v4 = _Family(k, 4, 32, _V4_IDENTITY, _V4_KEPT)
        self._v6 = _Family(k, 6, 128, _V6_IDENTITY, _V6_KEPT)
        self._tokens: dict[str, str] = {}

    # -- single addresses ------------------------------------------------------------------

    def map4(self, a: int) -> int:
        """The pseudonym of IPv4 address ``a`` (as an integer)."""
        return self._v4.map(a)

    def map6(self, a: int) -> int:
        """The pseudonym of IPv6 address ``a`` (as an integer)."""
        if a >> 32 == 0xFFFF:  # IPv4-mapped: keep it consistent with the IPv4 pseudonym
            return (0xFFFF << 32) | self._v4.map(a & 0xFFFFFFFF)
        return self._v6.map(a)

    def address(self, addr: str) -> str:
        """The pseudonym of one address or CIDR (``10.1.2.3``, ``fd00::1``, ``10.244.0.0/16``).

        Raises ValueError when ``addr`` is neither."""
        base, _, plen = addr.partition("/")
        a = ipaddress.ip_address(base)
        if plen and (not plen.isdigit() or int(plen) > a.max_prefixlen):
            raise ValueError(f"not an address or CIDR: {addr!r}")
        if a.version == 4:
            return self._cidr4(int(a), int(plen) if plen else None, plen)
        return self._cidr6(int(a), "." in base, int(plen) if plen else None, plen)

    def _cidr4(self, a: int, plen: int | None, suffix: str) -> str:
        out = self._v4.map(a)
        if plen is not None:
            host = (1 << (32 - plen)) - 1
            if a & host == 0:
                out &= ~host
        return _fmt4(out) + (f"/{suffix}" if suffix else "")

    def _cidr6(self, a: int, dotted: bool, plen: int | None, suffix: str) -> str:
        out = self.map6(a)
        if plen is not None:
            host = (1 << (128 - plen)) - 1
            if a & host == 0:
                out &= ~host
        if out >> 32 == 0xFFFF:
            lo = out & 0xFFFFFFFF
            text = "::ffff:" + (_fmt4(lo) if dotted else f"{lo >> 16:x}:{lo & 0xFFFF:x}")
        else:
            text = ipaddress.IPv6Address(out).compressed
        return text + (f"/{suffix}" if suffix else "")

    # -- text ------------------------------------------------------------------------------

    def text(self, s: str) -> str:
        """``s`` with every IPv4/IPv6 address, CIDR and ``ip-A-B-C-D`` host name pseudonymised."""
        if "ip-" in s:
            s = _HOST_RE.sub(self._subhost, s)
        if _V6_HINT.search(s):
            return _ANY_RE.sub(self._sub, s)
        if "." in s:
            return _V4_RE.sub(self._sub4, s)
        return s

    def data(self, data: bytes) -> bytes:
        """:meth:`text` over an artifact's bytes (undecodable bytes pass through)."""
        return self.text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")

    def _subhost(self, m: re.Match[str]) -> str:
        if _glued(m.string, m.start(), ""):
            return m.group()
        a = _v4_int(".".join(m.groups()))
        if a is None:
            return m.group()
        return "ip-" + _fmt4(self._v4.map(a)).replace(".", "-")

    def _sub(self, m: re.Match[str]) -> str:
        if m.group("v6") is None:
            return self._sub4(m)
        tok = m.group()
        if _glued(m.string, m.start(), ":."):
            return _V4_RE.sub(self._sub4, tok)  # part of a word, but a dotted tail may be IPv4
        out = self._tokens.get(tok)
        if out is None:
            out = self._tokens[tok] = self._token6(m)
        return out

    def _sub4(self, m: re.Match[str]) -> str:
        tok = m.group()
        if _glued(m.string, m.start(), "."):
            return tok
        out = self._tokens.get(tok)
        if out is None:
            out = self._tokens[tok] = self._token4(m)
        return out

    def _token6(self, m: re.Match[str]) -> str:
        v6, plen = m.group("v6"), m.group("m6")
        try:
            a = int(ipaddress.IPv6Address(v6))
        except ValueError:
            return _V4_RE.sub(self._sub4, m.group())  # not IPv6 after all: a dotted tail may be IPv4
        if plen is not None and int(plen) > 128:
            return self._cidr6(a, "." in v6, None, "") + "/" + plen
        return self._cidr6(a, "." in v6, int(plen) if plen else None, plen or "")

    def _token4(self, m: re.Match[str]) -> str:
        a4 = _v4_int(m.group("v4"))
        if a4 is None:
            return m.group()
        mask = m.group("m4")
        if mask is None:
            return _fmt4(self._v4.map(a4))
        if "." in mask:
            mv = _v4_int(mask)
            n = _mask_len(mv, 32) if mv is not None else None
            if n is None:
                return _fmt4(self._v4.map(a4)) + "/" + mask
            return self._cidr4(a4, n, "") + "/" + mask
        if int(mask) > 32:
            return _fmt4(self._v4.map(a4)) + "/" + mask
        return self._cidr4(a4, int(mask), mask)
