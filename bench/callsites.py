"""Extract kube-proxy's log and error call sites from a Kubernetes source tree (no Go toolchain).

Reads Go files under kube-proxy's code paths (a directory, or a git dir at a commit), and lists
every call of klog/glog (Info*, Warning*, Error*, Fatal*, Exit*, V(n).*), of contextual loggers
(logger.Info / logger.Error / logger.V(n).Info, where logger comes from klog.FromContext,
klog.Background, klog.LoggerWith*, .WithValues/.WithName, or is declared klog.Logger/logr.Logger,
or is named ``logger``), of logrus (vendored moby/ipvs logs through it), of fmt.Errorf and
errors.New (their text becomes the payload of a wrapping message), and of
utilruntime.HandleError*.

Only facts are written: file, line, call, level, V-level, the message or format string (Go
literal unquoted; literals joined by ``+`` are joined; a non-literal message is null and its
source text is in ``expr``) and, for structured calls, the key names.

Conventions:
  * ``line`` is the line of the called method's name (where the call's "(" normally is, so the
    line klog prints in its header for a one-line call).
  * ``call`` is ``<pkg>.<Method>`` with the package named by its import path, not its local alias
    (``klog``, ``glog``, ``logrus``, ``fmt``, ``errors``, ``utilruntime``); a verbose call is
    ``klog.V.InfoS`` (``v`` holds the level); a contextual logger call is ``logger.Info``,
    ``logger.Error`` or ``logger.V.Info``.
  * ``level`` is I, W, E, F (klog), or D for logrus debug; null for fmt.Errorf/errors.New.
    ``v`` is the V-level as an int, the expression text when it is not a literal, else null.
  * Print-style calls (Info, Warning, Error, Fatal with no ``f``/``S``) join their operands as
    fmt.Sprint does: a literal contributes its text, a non-literal ``%v``; if any operand is
    non-literal, ``expr`` holds the whole argument list's source text. If no operand is literal,
    ``format`` is null.
  * ``keys``: structured calls only (…S, logger.*, HandleErrorWithContext, …): the key names in
    order, with ``err`` first when an error argument other than literal ``nil`` is passed (klog
    prints it as err=...). A non-literal key is written ``<expr>``. Other calls: null.

Usage examples:
  python bench/callsites.py --tree /tmp/ksrc/kubernetes-1.20.2 --release v1.20.2 \\
      --source "Debian kubernetes 1.20.5+really1.20.2-1.1+deb12u1" -o out.json
  python bench/callsites.py --git-dir /path/repo.git --commit 70cefcddc \\
      --k8s-root vendor/k8s.io/kubernetes/ --vendor-root vendor/ --release v1.30.3 -o out.json
  python bench/callsites.py --git-dir k8s.git --commit ffd718af \\
      --lib sigs.k8s.io/knftables=/path/knftables.git@v0.0.13 --release v1.28.0 -o out.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PATHS = [
    "cmd/kube-proxy/",
    "pkg/proxy/",
    "pkg/util/iptables/",
    "pkg/util/ipset/",
    "pkg/util/ipvs/",
    "pkg/util/conntrack/",
    "pkg/util/node/",
]
DEFAULT_EXCLUDE = ["pkg/proxy/kubemark/"]  # hollow proxy for kubemark: not kube-proxy
DEFAULT_LIBS = [
    "sigs.k8s.io/knftables/",
    "github.com/moby/ipvs/",
    "github.com/docker/libnetwork/ipvs/",
]

# ----------------------------------------------------------------------------------------------
# Go tokenizer (enough of the spec for call-site extraction)


@dataclass
class Tok:
    kind: str  # id, str, rune, num, op
    text: str  # source text
    line: int
    start: int  # byte offset in source
    end: int
    value: str | None = None  # unquoted value for str


_ID_RE = re.compile(r"[A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_\u0080-\U0010ffff]*")
_NUM_RE = re.compile(r"\.?[0-9][0-9A-Za-z_.]*(?:[eEpP][+-][0-9_]+)?[i]?")
_OPS = sorted(
    [
        "<<=",
        ">>=",
        "&^=",
        "...",
        "&&",
        "||",
        "<-",
        "++",
        "--",
        "==",
        "!=",
        "<=",
        ">=",
        ":=",
        "+=",
        "-=",
        "*=",
        "/=",
        "%=",
        "&=",
        "|=",
        "^=",
        "<<",
        ">>",
        "&^",
        "~",
        "+",
        "-",
        "*",
        "/",
        "%",
        "&",
        "|",
        "^",
        "<",
        ">",
        "=",
        "!",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        ",",
        ";",
        ".",
        ":",
    ],
    key=len,
    reverse=True,
)

_SIMPLE_ESC = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, "'": 39, '"': 34}


def unquote_interpreted(body: str) -> str:
    """Unquote the inside of a Go "..." literal (escapes may yield raw bytes: decode as UTF-8)."""
    out = bytearray()
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        e = body[i + 1] if i + 1 < n else ""
        if e in _SIMPLE_ESC:
            out.append(_SIMPLE_ESC[e])
            i += 2
        elif e == "x":
            out.append(int(body[i + 2 : i + 4], 16))
            i += 4
        elif e == "u":
            out += chr(int(body[i + 2 : i + 6], 16)).encode("utf-8")
            i += 6
        elif e == "U":
            out += chr(int(body[i + 2 : i + 10], 16)).encode("utf-8")
            i += 10
        elif e in "01234567":
            out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        else:  # not valid Go; keep as written
            out += ("\\" + e).encode("utf-8")
            i += 2
    return out.decode("utf-8", errors="replace")


def tokenize(src: str) -> list[Tok]:
    toks: list[Tok] = []
    i = 0
    n = len(src)
    line = 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
            continue
        if c in " \t\r\ufeff":
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += src.count("\n", i, j)
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                if src[j] == "\\":
                    j += 1
                elif src[j] == "\n":  # unterminated; stop at end of line
                    break
                j += 1
            text = src[i : j + 1]
            toks.append(Tok("str", text, line, i, j + 1, unquote_interpreted(src[i + 1 : j])))
            i = j + 1
            continue
        if c == "`":
            j = src.find("`", i + 1)
            j = n - 1 if j < 0 else j
            text = src[i : j + 1]
            toks.append(Tok("str", text, line, i, j + 1, src[i + 1 : j].replace("\r", "")))
            line += text.count("\n")
            i = j + 1
            continue
        if c == "'":
            j = i + 1
            while j < n and src[j] != "'":
                if src[j] == "\\":
                    j += 1
                j += 1
            toks.append(Tok("rune", src[i : j + 1], line, i, j + 1))
            i = j + 1
            continue
        if c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit()):
            m = _NUM_RE.match(src, i)
            assert m
            toks.append(Tok("num", m.group(0), line, i, m.end()))
            i = m.end()
            continue
        m = _ID_RE.match(src, i)
        if m:
            toks.append(Tok("id", m.group(0), line, i, m.end()))
            i = m.end()
            continue
        for op in _OPS:
            if src.startswith(op, i):
                toks.append(Tok("op", op, line, i, i + len(op)))
                i += len(op)
                break
        else:
            toks.append(Tok("op", c, line, i, i + 1))
            i += 1
    return toks


# ----------------------------------------------------------------------------------------------
# imports

IMPORT_KINDS = {
    "k8s.io/klog/v2": "klog",
    "k8s.io/klog": "klog",
    "github.com/golang/glog": "glog",
    "github.com/sirupsen/logrus": "logrus",
    "github.com/Sirupsen/logrus": "logrus",
    "fmt": "fmt",
    "errors": "errors",
    "github.com/pkg/errors": "errors",
    "k8s.io/apimachinery/pkg/util/runtime": "utilruntime",
    "k8s.io/kubernetes/pkg/util/runtime": "utilruntime",
    "github.com/go-logr/logr": "logr",
}


def parse_imports(toks: list[Tok]) -> dict[str, str]:
    """Map local package name -> kind (klog, glog, fmt, ...) for the packages we care about."""
    names: dict[str, str] = {}

    def add(alias: str | None, path: str) -> None:
        kind = IMPORT_KINDS.get(path)
        if kind is None or alias in ("_", "."):
            return
        if alias is None:
            alias = {"k8s.io/klog/v2": "klog", "github.com/pkg/errors": "errors"}.get(
                path, path.rstrip("/").split("/")[-1]
            )
        names[alias] = kind

    i = 0
    n = len(toks)
    while i < n:
        t = toks[i]
        if t.kind == "id" and t.text == "import":
            i += 1
            if i < n and toks[i].text == "(":
                i += 1
                while i < n and toks[i].text != ")":
                    alias = None
                    if toks[i].kind == "id" or toks[i].text == ".":
                        alias = toks[i].text
                        i += 1
                    if i < n and toks[i].kind == "str":
                        add(alias, toks[i].value or "")
                    i += 1
            else:
                alias = None
                if i < n and (toks[i].kind == "id" or toks[i].text == "."):
                    alias = toks[i].text
                    i += 1
                if i < n and toks[i].kind == "str":
                    add(alias, toks[i].value or "")
            continue
        if t.kind == "id" and t.text in ("func", "type", "var", "const"):
            break  # imports come first
        i += 1
    return names


# ----------------------------------------------------------------------------------------------
# primary-expression chains: IDENT ( . IDENT | (args) | [index] )*

CLOSE = {"(": ")", "[": "]", "{": "}"}


def match_close(toks: list[Tok], i: int) -> int:
    """Index of the bracket closing toks[i] (an opener)."""
    depth = 0
    n = len(toks)
    j = i
    while j < n:
        t = toks[j].text if toks[j].kind == "op" else None
        if t in ("(", "[", "{"):
            depth += 1
        elif t in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return n - 1


@dataclass
class Seg:
    kind: str  # id, sel, call, index
    name: str = ""
    tok: Tok | None = None
    args: list[list[Tok]] | None = None  # call: top-level comma-separated args
    lparen: int = 0
    rparen: int = 0


def split_args(toks: list[Tok], lo: int, hi: int) -> list[list[Tok]]:
    """Top-level comma-separated token lists of toks[lo:hi]."""
    args: list[list[Tok]] = []
    cur: list[Tok] = []
    j = lo
    while j < hi:
        t = toks[j]
        if t.kind == "op" and t.text in CLOSE:
            k = match_close(toks, j)
            cur.extend(toks[j : k + 1])
            j = k + 1
            continue
        if t.kind == "op" and t.text == ",":
            args.append(cur)
            cur = []
        else:
            cur.append(t)
        j += 1
    if cur:
        args.append(cur)
    return args


def parse_chain(toks: list[Tok], i: int) -> list[Seg]:
    segs = [Seg("id", toks[i].text, toks[i])]
    j = i + 1
    n = len(toks)
    while j < n:
        t = toks[j]
        if t.kind == "op" and t.text == "." and j + 1 < n and toks[j + 1].kind == "id":
            segs.append(Seg("sel", toks[j + 1].text, toks[j + 1]))
            j += 2
        elif t.kind == "op" and t.text == "(":
            k = match_close(toks, j)
            segs.append(Seg("call", segs[-1].name, segs[-1].tok, split_args(toks, j + 1, k), j, k))
            j = k + 1
        elif t.kind == "op" and t.text == "[":
            k = match_close(toks, j)
            segs.append(Seg("index"))
            j = k + 1
        else:
            break
    return segs


# ----------------------------------------------------------------------------------------------
# classification


KLOG_METHODS = {
    # method: (level, style, message-arg index, error-arg index or None)
    "Info": ("I", "print", 0, None),
    "Infoln": ("I", "println", 0, None),
    "Infof": ("I", "printf", 0, None),
    "InfoDepth": ("I", "print", 1, None),
    "InfoS": ("I", "struct", 0, None),
    "InfoSDepth": ("I", "struct", 1, None),
    "Warning": ("W", "print", 0, None),
    "Warningln": ("W", "println", 0, None),
    "Warningf": ("W", "printf", 0, None),
    "WarningDepth": ("W", "print", 1, None),
    "Error": ("E", "print", 0, None),
    "Errorln": ("E", "println", 0, None),
    "Errorf": ("E", "printf", 0, None),
    "ErrorDepth": ("E", "print", 1, None),
    "ErrorS": ("E", "struct", 1, 0),
    "ErrorSDepth": ("E", "struct", 2, 1),
    "Fatal": ("F", "print", 0, None),
    "Fatalln": ("F", "println", 0, None),
    "Fatalf": ("F", "printf", 0, None),
    "FatalDepth": ("F", "print", 1, None),
    "Exit": ("F", "print", 0, None),
    "Exitln": ("F", "println", 0, None),
    "Exitf": ("F", "printf", 0, None),
    "ExitDepth": ("F", "print", 1, None),
}
VERBOSE_METHODS = {k: v for k, v in KLOG_METHODS.items() if k.startswith("Info") or k in ("ErrorS",)}
LOGRUS_METHODS = {
    "Debug": ("D", "print", 0, None),
    "Debugf": ("D", "printf", 0, None),
    "Debugln": ("D", "println", 0, None),
    "Info": ("I", "print", 0, None),
    "Infof": ("I", "printf", 0, None),
    "Infoln": ("I", "println", 0, None),
    "Warn": ("W", "print", 0, None),
    "Warnf": ("W", "printf", 0, None),
    "Warning": ("W", "print", 0, None),
    "Warningf": ("W", "printf", 0, None),
    "Error": ("E", "print", 0, None),
    "Errorf": ("E", "printf", 0, None),
    "Errorln": ("E", "println", 0, None),
    "Fatal": ("F", "print", 0, None),
    "Fatalf": ("F", "printf", 0, None),
    "Panicf": ("F", "printf", 0, None),
}
LOGGER_METHODS = {"Info": ("I", "struct", 0, None), "Error": ("E", "struct", 1, 0)}
LOGGER_SOURCES = {"FromContext", "Background", "TODO", "LoggerWithValues", "LoggerWithName", "NewKlogr"}


def src_text(src: str, toks: list[Tok]) -> str:
    if not toks:
        return ""
    return re.sub(r"\s*\n\s*", " ", src[toks[0].start : toks[-1].end])


def literal(toks: list[Tok]) -> str | None:
    """Value of an arg made only of string literals joined by '+' (parentheses allowed)."""
    parts: list[str] = []
    expect_str = True
    inner = [t for t in toks if not (t.kind == "op" and t.text in ("(", ")"))]
    if not inner:
        return None
    for t in inner:
        if expect_str:
            if t.kind != "str":
                return None
            parts.append(t.value or "")
        elif not (t.kind == "op" and t.text == "+"):
            return None
        expect_str = not expect_str
    return None if expect_str else "".join(parts)


def v_level(args: list[list[Tok]], src: str) -> int | str | None:
    if not args:
        return None
    a = args[0]
    if len(a) == 1 and a[0].kind == "num":
        try:
            return int(a[0].text, 0)
        except ValueError:
            return a[0].text
    return src_text(src, a)


class FileScan:
    def __init__(self, path: str, src: str):
        self.path = path
        self.src = src
        self.toks = tokenize(src)
        self.imports = parse_imports(self.toks)
        self.klog = {a for a, k in self.imports.items() if k in ("klog", "glog")}
        self.logger_vars: set[str] = {"logger"}
        self.verbose_vars: dict[str, tuple[str, int | str | None]] = {}  # var -> (kind, v)
        self._scan_decls()

    # variables bound to loggers / klog.V(n) results (file-wide, name based)
    def _scan_decls(self) -> None:
        toks = self.toks
        n = len(toks)
        for i, t in enumerate(toks):
            # X klog.Logger / X logr.Logger (params, fields, var decls)
            if (
                t.kind == "id"
                and i + 3 < n
                and toks[i + 1].kind == "id"
                and self.imports.get(toks[i + 1].text) in ("klog", "logr")
                and toks[i + 2].text == "."
                and toks[i + 3].text == "Logger"
            ):
                self.logger_vars.add(t.text)
            if t.kind == "op" and t.text in (":=", "=") and i >= 1 and toks[i - 1].kind == "id":
                if i + 1 >= n or toks[i + 1].kind != "id":
                    continue
                var = toks[i - 1].text
                segs = parse_chain(toks, i + 1)
                kind, v = self._chain_kind(segs)
                if kind == "logger":
                    self.logger_vars.add(var)
                elif kind in ("klogV", "loggerV"):
                    self.verbose_vars[var] = (kind, v)

    def _chain_kind(self, segs: list[Seg]) -> tuple[str | None, int | str | None]:
        """What a whole chain evaluates to: a logger, a klog.V(n) Verbose, a logger.V(n), or None."""
        if not segs:
            return None, None
        head = segs[0].name
        rest = segs[1:]
        kind: str | None = None
        v: int | str | None = None
        k = 0
        if head in self.klog and len(rest) >= 2 and rest[0].kind == "sel" and rest[1].kind == "call":
            if rest[0].name == "V":
                kind, v = "klogV", v_level(rest[1].args or [], self.src)
                k = 2
            elif rest[0].name in LOGGER_SOURCES:
                kind = "logger"
                k = 2
            else:
                return None, None
        elif head in self.verbose_vars and not rest:
            return self.verbose_vars[head]
        elif head in self.logger_vars:
            kind = "logger"
        else:
            # something.logger / something.Logger field
            j = 0
            while j < len(rest) and rest[j].kind == "sel":
                if rest[j].name in ("logger", "Logger", "log") and (j + 1 == len(rest) or rest[j + 1].kind != "call"):
                    kind = "logger"
                    k = j + 1
                    break
                j += 1
            if kind is None:
                return None, None
        # logger modifiers
        while k + 1 < len(rest) and rest[k].kind == "sel" and rest[k + 1].kind == "call":
            name = rest[k].name
            if kind in ("logger", "loggerV") and name in ("WithValues", "WithName", "WithCallDepth"):
                k += 2
            elif kind == "logger" and name == "V":
                kind, v = "loggerV", v_level(rest[k + 1].args or [], self.src)
                k += 2
            else:
                return None, None
        if k != len(rest):
            return None, None
        return kind, v

    def sites(self) -> Iterator[dict[str, Any]]:
        toks = self.toks
        for i, t in enumerate(toks):
            if t.kind != "id" or (i > 0 and toks[i - 1].text == "."):
                continue
            segs = parse_chain(toks, i)
            for k, seg in enumerate(segs):
                if seg.kind != "call" or k < 2 or segs[k - 1].kind != "sel":
                    continue
                recv = segs[: k - 1]
                site = self._classify(recv, segs[k - 1].name, seg)
                if site is not None:
                    yield site

    def _classify(self, recv: list[Seg], method: str, call: Seg) -> dict[str, Any] | None:
        args = call.args or []
        tok = call.tok
        assert tok is not None
        if len(recv) == 1:
            kind = self.imports.get(recv[0].name)
            if kind in ("klog", "glog") and method in KLOG_METHODS:
                return self._site(tok, f"{kind}.{method}", KLOG_METHODS[method], None, args)
            if kind == "logrus" and method in LOGRUS_METHODS:
                return self._site(tok, f"logrus.{method}", LOGRUS_METHODS[method], None, args)
            if kind == "fmt" and method == "Errorf":
                return self._site(tok, "fmt.Errorf", (None, "printf", 0, None), None, args)
            if kind == "errors" and method == "New":
                return self._site(tok, "errors.New", (None, "print", 0, None), None, args)
            if kind == "utilruntime" and method == "HandleError":
                return self._site(tok, "utilruntime.HandleError", ("E", "error", 0, 0), None, args)
            if kind == "utilruntime" and method == "HandleErrorWithContext":
                return self._site(tok, "utilruntime.HandleErrorWithContext", ("E", "struct", 2, 1), None, args)
            if kind == "utilruntime" and method == "HandleErrorWithLogger":
                return self._site(tok, "utilruntime.HandleErrorWithLogger", ("E", "struct", 2, 1), None, args)
        rkind, v = self._chain_kind(recv)
        if rkind == "klogV" and method in VERBOSE_METHODS:
            pkg = self.imports.get(recv[0].name, "klog")
            if pkg not in ("klog", "glog"):
                pkg = "klog"
            return self._site(tok, f"{pkg}.V.{method}", VERBOSE_METHODS[method], v, args)
        if rkind == "logger" and method in LOGGER_METHODS:
            return self._site(tok, f"logger.{method}", LOGGER_METHODS[method], None, args)
        if rkind == "loggerV" and method == "Info":
            return self._site(tok, "logger.V.Info", LOGGER_METHODS["Info"], v, args)
        return None

    def _site(
        self, tok: Tok, call: str, spec: tuple[str | None, str, int, int | None], v: Any, args: list[list[Tok]]
    ) -> dict[str, Any]:
        level, style, mi, ei = spec
        fmt_: str | None = None
        expr: str | None = None
        keys: list[str] | None = None
        if style == "printf":
            a = args[mi] if mi < len(args) else []
            fmt_ = literal(a)
            if fmt_ is None:
                expr = src_text(self.src, a)
        elif style in ("print", "println"):
            ops = args[mi:]
            lits = [literal(a) for a in ops]
            if any(x is not None for x in lits):
                parts: list[str] = []
                prev_lit = True
                for idx, x in enumerate(lits):
                    if style == "println" and idx:
                        parts.append(" ")
                    elif style == "print" and idx and x is None and not prev_lit:
                        parts.append(" ")  # fmt.Sprint: space between two non-string operands
                    parts.append(x if x is not None else "%v")
                    prev_lit = x is not None
                fmt_ = "".join(parts)
            if any(x is None for x in lits):
                expr = ", ".join(src_text(self.src, a) for a in ops)
        elif style == "error":  # HandleError(err)
            expr = src_text(self.src, args[0]) if args else ""
        elif style == "struct":
            a = args[mi] if mi < len(args) else []
            fmt_ = literal(a)
            if fmt_ is None:
                expr = src_text(self.src, a)
            keys = []
            if ei is not None and ei < len(args):
                e = args[ei]
                if not (len(e) == 1 and e[0].text == "nil"):
                    keys.append("err")
            kv = args[mi + 1 :]
            for j in range(0, len(kv), 2):
                kt = kv[j]
                kl = literal(kt)
                keys.append(kl if kl is not None else f"<{src_text(self.src, kt)}>")
        return {
            "file": self.path,
            "line": tok.line,
            "call": call,
            "level": level,
            "v": v,
            "format": fmt_,
            "keys": keys,
            "expr": expr,
        }


# ----------------------------------------------------------------------------------------------
# sources


class Source:
    def list(self, prefix: str) -> list[str]:
        raise NotImplementedError

    def read(self, path: str) -> str:
        raise NotImplementedError


class DirSource(Source):
    def __init__(self, root: str):
        self.root = Path(root)

    def list(self, prefix: str) -> list[str]:
        base = self.root / prefix
        if not base.is_dir():
            return []
        out = []
        for dp, _dn, fn in os.walk(base):
            for f in fn:
                out.append(str(Path(dp, f).relative_to(self.root)).replace(os.sep, "/"))
        return sorted(out)

    def read(self, path: str) -> str:
        return (self.root / path).read_bytes().decode("utf-8", errors="replace")


class GitSource(Source):
    def __init__(self, git_dir: str, commit: str):
        self.git = ["git", "--git-dir", git_dir]
        self.commit = subprocess.run(
            [*self.git, "rev-parse", "--verify", commit + "^{commit}"], check=True, capture_output=True, text=True
        ).stdout.strip()

    def list(self, prefix: str) -> list[str]:
        spec = ["--", prefix.rstrip("/")] if prefix else []
        r = subprocess.run(
            [*self.git, "ls-tree", "-r", "--name-only", self.commit, *spec],
            check=True,
            capture_output=True,
            text=True,
        )
        return sorted(p for p in r.stdout.splitlines() if p.startswith(prefix))

    def read(self, path: str) -> str:
        r = subprocess.run([*self.git, "show", f"{self.commit}:{path}"], check=True, capture_output=True)
        return r.stdout.decode("utf-8", errors="replace")


def open_source(spec_dir: str | None, git_dir: str | None, commit: str | None) -> Source:
    if spec_dir:
        return DirSource(spec_dir)
    if git_dir and commit:
        return GitSource(git_dir, commit)
    raise SystemExit("give --tree DIR, or --git-dir DIR and --commit REV")


def wanted(path: str, excludes: Iterable[str], skip_dirs: Iterable[str]) -> bool:
    if not path.endswith(".go") or path.endswith("_test.go"):
        return False
    if any(path.startswith(e) for e in excludes):
        return False
    parts = path.split("/")[:-1]
    return not any(d in parts for d in skip_dirs)


def extract(
    src: Source, root: str, paths: list[str], label: str, excludes: list[str], skip_dirs: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Sites of files under root+path for each path; file names are label+path-relative-to-root."""
    sites: list[dict[str, Any]] = []
    present: list[str] = []
    for p in paths:
        files = [f for f in src.list(root + p) if wanted(f[len(root) :], excludes, skip_dirs)]
        if not files:
            continue
        present.append(label + p)
        for f in files:
            rel = label + f[len(root) :]
            text = src.read(f)
            if text.startswith("version https://git-lfs.github.com/spec/"):
                raise SystemExit(f"{f}: is a Git LFS pointer, not source")
            sites.extend(FileScan(rel, text).sites())
    return sites, present


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Writes JSON: {component, release, source, paths, extracted_by, sites:[...]}; see the module "
        "docstring for field conventions.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = ap.add_argument_group("where the source is")
    g.add_argument("--tree", help="a source tree on disk")
    g.add_argument("--git-dir", help="a (bare) git directory; needs --commit")
    g.add_argument("--commit", help="commit, tag or branch to read in --git-dir")
    g.add_argument(
        "--k8s-root",
        default="",
        help="where the Kubernetes tree starts inside the tree/commit, e.g. vendor/k8s.io/kubernetes/ (default: top)",
    )
    g.add_argument("--vendor-root", default=None, help="where vendored modules live (default: <k8s-root>vendor/)")
    g.add_argument(
        "--lib",
        action="append",
        default=[],
        metavar="MODULE=GITDIR@REV",
        help="also scan a library from its own repository, recorded as vendor/MODULE/... "
        "(for trees that do not vendor it); repeatable",
    )
    ap.add_argument("--paths", nargs="+", default=DEFAULT_PATHS, help="component paths under the k8s root")
    ap.add_argument("--libs", nargs="*", default=DEFAULT_LIBS, help="vendored module paths to scan when present")
    ap.add_argument("--exclude", nargs="*", default=DEFAULT_EXCLUDE, help="path prefixes to leave out")
    ap.add_argument(
        "--skip-dir", nargs="*", default=["testing", "testdata"], help="directory names to leave out (fakes for tests)"
    )
    ap.add_argument("--component", default="kube-proxy")
    ap.add_argument("--release", required=True)
    ap.add_argument("--source", default=None, help="how the source was obtained (recorded verbatim)")
    ap.add_argument("-o", "--output", help="output JSON file (default: stdout)")
    a = ap.parse_args(argv)

    src = open_source(a.tree, a.git_dir, a.commit)
    root = a.k8s_root
    if root and not root.endswith("/"):
        root += "/"
    vroot = a.vendor_root if a.vendor_root is not None else root + "vendor/"
    if vroot and not vroot.endswith("/"):
        vroot += "/"
    sites, present = extract(src, root, a.paths, "", a.exclude, a.skip_dir)
    lib_sites, lib_present = extract(src, vroot, a.libs, "vendor/", [], a.skip_dir)
    sites += lib_sites
    present += lib_present
    for spec in a.lib:
        mod, _, loc = spec.partition("=")
        gd, _, rev = loc.rpartition("@")
        lsrc = GitSource(gd, rev)
        ls, _lp = extract(lsrc, "", [""], f"vendor/{mod.rstrip('/')}/", [], a.skip_dir)
        sites += ls
        present += [f"vendor/{mod.rstrip('/')}/ (read at {rev} = {lsrc.commit})"]
    sites.sort(key=lambda s: (s["file"], s["line"]))
    source = a.source
    if source is None:
        source = f"{a.git_dir}@{getattr(src, 'commit', '')}" if a.git_dir else a.tree
    doc = {
        "component": a.component,
        "release": a.release,
        "source": source,
        "paths": present,
        "extracted_by": "bench/callsites.py",
        "sites": sites,
    }
    text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    if a.output:
        Path(a.output).parent.mkdir(parents=True, exist_ok=True)
        Path(a.output).write_text(text, encoding="utf-8")
        print(f"{a.output}: {len(sites)} sites from {len(present)} paths", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
