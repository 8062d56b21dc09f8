"""Seeded mutation fuzzing of kpdoctor over its own real-format corpus.

The engine behind ``tests/test_fuzz_mutations.py`` (a short, fixed run in the test suite) and
``bench/fuzz.py`` (as long as asked, through the CLI too). It is a plain module, not a test file:
``bench/fuzz.py`` puts ``tests/`` on ``sys.path`` to import it.

* **Corpus**: every text file under ``tests/data/`` (``tests/data/upstream/`` included) and every
  demo bundle under ``src/kpdoctor/demo/bundles/``, read once.
* **Cases**: case ``index`` of run ``seed`` is built from ``random.Random(f"kpdoctor-fuzz:{seed}:{index}")``
  alone, so any case is rebuilt exactly from those two numbers (``make_case``), whatever ran
  before it. A case is a small tree of files and the paths to hand to kpdoctor: one mutated loose
  file, a group of related files (an upstream ``.save`` with its ``.cluster.json``) with one
  mutated, a copy of a demo bundle with files deleted, swapped or corrupted, or such a bundle
  packed as ``.tar.gz`` (or bz2, xz, plain tar) and then damaged.
* **Running**: ``run_in_process`` forks a child (so a hang can be killed and memory capped) that
  runs the real entry point, ``diagnose_paths(paths)`` and ``diagnose_paths(paths,
  command="verify")``, computes the exit code and renders every format of
  ``kpdoctor.report.FORMATS``. The child wraps every check and hooks ``InternalError.of``, so a
  failure kpdoctor contains keeps its traceback, and reports back what went wrong, if anything.

What counts as a finding (``Finding.category``):

``exception``      an exception escaped ``diagnose_paths`` or a renderer (the CLI prints "internal
                   error" and exits 4, with no report);
``check-error``    a check raised: ``run_all`` contains it (the report names it, exit code 4),
                   but it is a bug all the same;
``internal-error`` any other failure kpdoctor contains (reading an input, assembling the report);
``timeout``        the case took longer than the time bound (the child is killed);
``bad-exit``       ``exit_code`` gave something outside 0-4;
``invalid-json``   the JSON report does not parse, or is not encodable as UTF-8;
``temp-leak``      something was left in the temporary directory after the run.

Findings are grouped by ``Finding.key``: category, exception type and the innermost kpdoctor
frame (file and function, not the line, which moves as the code is edited).
"""

from __future__ import annotations

import bz2
import contextlib
import copy
import dataclasses
import faulthandler
import functools
import gzip
import io
import json
import lzma
import os
import random
import re
import resource
import select
import shutil
import signal
import struct
import tarfile
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
CORPUS_ROOTS = (REPO / "tests" / "data", SRC / "kpdoctor" / "demo" / "bundles")
BUNDLES_ROOT = SRC / "kpdoctor" / "demo" / "bundles"
SKIP_SUFFIXES = (".py", ".sh", ".md")  # generators and notes, not evidence

# ---------------------------------------------------------------------------------------------
# Crash classes already reported and being fixed by their owners. A finding whose key is listed
# here does not fail the in-suite fuzz tests (they xfail and name it instead). Empty this as the
# fixes land: (category, exception type, "file:function" of the innermost kpdoctor frame).
KNOWN_CRASHES: dict[tuple[str, str, str], str] = {}
# ---------------------------------------------------------------------------------------------


# Formats the repository has no sample file of (they are small): added to the corpus as is.
EXTRA_SAMPLES: dict[str, str] = {
    "healthz.json": (
        '{"lastUpdated": "2024-05-01 10:00:00.123456789 +0000 UTC m=+3600.000000001",'
        '"currentTime": "2024-05-01 10:07:30.5 +0000 UTC m=+4050.5", "nodeEligible": true}\n'
    ),
    "metrics.txt": (
        "# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were synced\n"
        "# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge\n"
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.7145570e+09\n"
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds 1.7145576e+09\n"
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total 21\n"
        'rest_client_requests_total{code="200",host="10.0.0.1:6443",method="GET"} 1234 1714557600000\n'
    ),
    "ip-j-addr.json": (
        '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"operstate":"UNKNOWN",'
        '"addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo"}]},'
        '{"ifindex":2,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":9001,'
        '"operstate":"UP","addr_info":[{"family":"inet","local":"10.188.166.140","prefixlen":24,"scope":"global",'
        '"label":"eth0"},{"family":"inet6","local":"fe80::1","prefixlen":64,"scope":"link"}]}]\n'
    ),
    "locks.txt": (
        "1: POSIX  ADVISORY  WRITE 1234 00:19:1047 0 EOF\n"
        "1: -> POSIX  ADVISORY  WRITE 5678 00:19:1047 0 EOF\n"
        "2: FLOCK  ADVISORY  WRITE 987 fd:01:3145730 0 EOF\n"
        "3: OFDLCK ADVISORY  READ  -1 00:06:9 0 EOF\n"
    ),
    "ps-aux.txt": (
        "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
        "root           1  0.0  0.1 167748 11784 ?        Ss   Nov20   0:05 /sbin/init\n"
        "root        2345  1.2  0.9 748552 73412 ?        Ssl  Nov20  12:01 /usr/local/bin/kube-proxy "
        "--config=/var/lib/kube-proxy/config.conf --hostname-override=node3 --v=2\n"
        "root        4242  0.0  0.0   7060  3456 pts/0    S+   10:00   0:00 sh -c 'iptables-save | wc -l'\n"
    ),
    "modules.txt": (
        "ip_vs_sh 16384 0 - Live 0x0000000000000000\n"
        "ip_vs 176128 6 ip_vs_rr,ip_vs_sh, Live 0x0000000000000000\n"
        "nf_conntrack 172032 6 xt_conntrack,nf_nat,ip_vs, Live 0x0000000000000000\n"
    ),
    "ipvsadm.txt": (
        "IP Virtual Server version 1.2.1 (size=4096)\n"
        "Prot LocalAddress:Port Scheduler Flags\n"
        "  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n"
        "TCP  10.96.0.1:443 rr\n"
        "  -> 172.18.0.2:6443             Masq    1      0          0\n"
        "UDP  10.96.0.10:53 rr persistent 10800\n"
        "  -> 10.244.0.3:53               Masq    0      0          7\n"
    ),
}


@dataclass(frozen=True)
class Corpus:
    files: tuple[tuple[str, bytes], ...]  # (path relative to the repository, content)
    groups: tuple[tuple[tuple[str, bytes], ...], ...]  # files that go together (same stem)
    bundles: tuple[tuple[str, dict[str, bytes]], ...]  # (bundle name, {path in bundle: content})

    def json_like(self) -> list[tuple[str, bytes]]:
        return [(n, d) for n, d in self.files if d.lstrip()[:1] in (b"{", b"[")]


@functools.lru_cache(maxsize=1)
def load_corpus() -> Corpus:
    files: list[tuple[str, bytes]] = []
    for root in CORPUS_ROOTS:
        for p in sorted(root.rglob("*")):
            if p.is_file() and not p.name.endswith(SKIP_SUFFIXES) and p.stat().st_size:
                files.append((p.relative_to(REPO).as_posix(), p.read_bytes()))
    files += [(f"fuzzing:{name}", text.encode()) for name, text in EXTRA_SAMPLES.items()]
    by_stem: dict[str, list[tuple[str, bytes]]] = {}
    for name, data in files:
        if "/upstream/" in name:
            d, _, base = name.rpartition("/")
            by_stem.setdefault(f"{d}/{base.split('.', 1)[0]}", []).append((name, data))
    groups = tuple(tuple(g) for _, g in sorted(by_stem.items()) if len(g) > 1)
    bundles = []
    for b in sorted(BUNDLES_ROOT.iterdir()):
        if (b / "manifest.json").is_file():
            tree = {p.relative_to(b).as_posix(): p.read_bytes() for p in sorted(b.rglob("*")) if p.is_file()}
            bundles.append((b.name, tree))
    return Corpus(tuple(files), groups, tuple(bundles))


# --------------------------------------------------------------------------------- mutations

INTERESTING_BYTES: tuple[bytes, ...] = (
    b"\x00", b"\xff", b"\xfe\xff", b"\xef\xbb\xbf", b"\n", b"\r", b"\r\n", b"\n\n\n", b'"', b"'", b"\\", b"`",
    b"{", b"}", b"[", b"]", b"<", b">", b":", b"=", b"-", b"--", b" ", b"\t", b"#", b"%", b"$", b"|", b"/", b"@",
    b"\x1b[2J", b"\x1b]0;t\x07", "²".encode(), "٣".encode(), "１".encode(), "\u2028".encode(), "\x85".encode(),
    b"\x1c", b"\x0b", b"\x0c", "\ufffd".encode(), b"\xc3", b"\xed\xa0\x80", b"9" * 40, b"-1", b"0x50", b"1e999",
    b"NaN", b"null", b"true", b"KUBE-SVC-", b"-A ", b"*nat\n", b"COMMIT\n", b"-j DNAT --to-destination ",
    b"E1008 21:01:55.367127  1 proxier.go:1] ", b"cpu=0 ", b"=", b"src=", b"users:((", b"kind: ",
)  # fmt: skip
INTERESTING_NUMBERS = (
    "-1", "0", "00", "65535", "65536", "4294967296", "18446744073709551616", "9" * 5000, "1e308", "1e999",
    "-0", "0x50", "NaN", "inf", "1.5", "²", "٣", "１２", "", " ", "1_000",
)  # fmt: skip
INTERESTING_ADDRESSES = (
    "999.1.1.1", "1.2.3", "0.0.0.0", "255.255.255.255", "::", "::1", "::ffff:10.0.0.1", "fe80::1%eth0",
    "10.0.0.1/33", "10.0.0.1:0x50", "[::1]:80", "", "null", "localhost", "10.0.0.1:99999", "1.2.3.4:-1",
)  # fmt: skip
INTERESTING_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1.5, 2**64, 10**30, "", "x", "-1", "0x50", "999.1.1.1", "::", [], {}, [None], {"": None},
    ["a", 1, None], {"kind": None}, {"items": None}, "\x00", "\u202e", "é" * 3,
)  # fmt: skip
_NUMBER_RX = re.compile(rb"(?<![\w.])\d+(?![\w])")
_ADDR_RX = re.compile(rb"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?(?:/\d+)?\b")
_WORD_RX = re.compile(rb"[A-Za-z][\w.-]{2,}")

Mutator = Callable[[random.Random, bytes, Corpus, int], tuple[bytes, str]]


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) or [b""]


def m_truncate(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    pos = rng.randrange(len(data) + 1)
    return data[:pos], f"truncated at byte {pos} of {len(data)}"


def m_bitflip(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    if not data:
        return b"\x01", "bit flip of an empty file"
    b = bytearray(data)
    n = rng.choice((1, 1, 2, 3, 8, 32))
    where = sorted(rng.randrange(len(b)) for _ in range(n))
    for pos in where:
        b[pos] ^= 1 << rng.randrange(8)
    return bytes(b), f"{n} bit flip(s) at {where[:6]}{'...' if n > 6 else ''}"


def m_insert(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    b = bytearray(data)
    n = rng.choice((1, 1, 2, 4, 16))
    done = []
    for _ in range(n):
        ins = rng.choice(INTERESTING_BYTES) if rng.random() < 0.8 else rng.randbytes(rng.randint(1, 8))
        pos = rng.randrange(len(b) + 1)
        b[pos:pos] = ins
        done.append((pos, ins[:12]))
    return bytes(b), f"inserted {done[:4]}{'...' if n > 4 else ''}"


def m_delete(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    b = bytearray(data)
    n = rng.choice((1, 1, 2, 4))
    done = []
    for _ in range(n):
        if not b:
            break
        pos = rng.randrange(len(b))
        length = rng.choice((1, 1, 2, 8, 64, max(1, len(b) // 10)))
        del b[pos : pos + length]
        done.append((pos, length))
    return bytes(b), f"deleted (offset, length) {done}"


def m_line_dup(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    times = rng.choice((1, 2, 10, 1000, 20000))
    line = lines[i] if lines[i].endswith(b"\n") else lines[i] + b"\n"
    times = max(1, min(times, limit // max(1, len(line))))
    lines[i : i + 1] = [line] * (times + 1)
    return b"".join(lines), f"line {i + 1} repeated {times} more time(s)"


def m_line_shuffle(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    lines = _lines(data)
    if rng.random() < 0.5:
        rng.shuffle(lines)
        return b"".join(lines), "all lines shuffled"
    a = rng.randrange(len(lines))
    b = min(len(lines), a + rng.randint(2, 20))
    window = lines[a:b]
    rng.shuffle(window)
    lines[a:b] = window
    return b"".join(lines), f"lines {a + 1}-{b} shuffled"


def m_line_delete(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    lines = _lines(data)
    frac = rng.choice((0.02, 0.1, 0.5))
    keep = [ln for ln in lines if rng.random() >= frac]
    return b"".join(keep), f"deleted {len(lines) - len(keep)} of {len(lines)} lines"


def m_encoding(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    text = data.decode("utf-8", errors="replace")
    how = rng.choice(
        ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1", "cp1252-bytes", "bom", "bom-twice", "crlf", "cr",
         "nul-interleave", "nul-sprinkle", "mixed-newlines", "bom-utf16-then-utf8")
    )  # fmt: skip
    if how in ("utf-16", "utf-16-le", "utf-16-be", "utf-32"):
        return text.encode(how), f"re-encoded as {how}"
    if how == "latin-1":
        return text.encode("latin-1", errors="replace"), "re-encoded as latin-1"
    if how == "cp1252-bytes":  # the high half of Latin-1/cp1252 dropped into the text
        b = bytearray(data)
        for _ in range(rng.randint(1, 10)):
            b.insert(rng.randrange(len(b) + 1), rng.randint(0x80, 0xFF))
        return bytes(b), "Latin-1 bytes inserted"
    if how == "bom":
        return b"\xef\xbb\xbf" + data, "UTF-8 BOM prepended"
    if how == "bom-twice":
        return b"\xef\xbb\xbf\xef\xbb\xbf" + data, "two UTF-8 BOMs prepended"
    if how == "crlf":
        return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"), "CRLF line ends"
    if how == "cr":
        return data.replace(b"\n", b"\r"), "CR line ends"
    if how == "nul-interleave":
        return bytes(x for c in data for x in (c, 0)), "a NUL after every byte (UTF-16-LE without BOM)"
    if how == "nul-sprinkle":
        b = bytearray(data)
        for _ in range(rng.randint(1, 5)):
            b.insert(rng.randrange(len(b) + 1), 0)
        return bytes(b), "NUL bytes inserted"
    if how == "mixed-newlines":
        lines = _lines(data)
        return b"".join(ln.rstrip(b"\r\n") + rng.choice((b"\n", b"\r\n", b"\r", b"\x0b", b"\x85")) for ln in lines), (
            "mixed line ends"
        )
    return b"\xff\xfe" + data, "UTF-16 BOM in front of UTF-8 text"


def _deep_json(n: int, rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return b"[" * n + b"0" + b"]" * n
    return b'{"a":' * n + b"0" + b"}" * n


def m_nesting(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    n = rng.choice((64, 257, 999, 1000, 5000, 100000))
    n = min(n, limit // 4)
    stripped = data.lstrip()
    how = rng.choice(("whole", "value", "wrap", "yaml-block", "yaml-flow"))
    if how == "value" and stripped[:1] in (b"{", b"["):
        colons = [m.start() for m in re.finditer(rb'":\s*', data)]
        if colons:
            pos = rng.choice(colons) + 2
            return data[:pos] + _deep_json(n, rng) + b', "fuzz":' + data[pos:], f"JSON value nested {n} deep"
    if how == "wrap" and stripped[:1] in (b"{", b"["):
        return b'{"kind":"List","items":' + b"[" * n + data + b"]" * n + b"}", f"JSON wrapped {n} deep"
    if how == "yaml-block":
        n = min(n, 3000)
        body = b"".join(b"  " * i + b"a:\n" for i in range(n)) + b"  " * n + b"b: 1\n"
        return data + b"\n---\n" + body, f"YAML block nesting {n} deep appended"
    if how == "yaml-flow":
        return data + b"\nfuzz: " + b"[" * n + b"]" * n + b"\n", f"YAML flow nesting {n} deep appended"
    return _deep_json(n, rng), f"whole file replaced by JSON nested {n} deep"


def m_huge(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    how = rng.choice(("long-line", "long-line-no-newline", "huge-number", "many-lines", "long-token"))
    if how in ("long-line", "long-line-no-newline"):
        n = rng.choice((70_000, 300_000, limit))
        n = min(n, limit)
        unit = rng.choice((b"A", b"x ", b"-A KUBE-SVC ", b"\\", b'"', b"=", b"9", b" "))
        blob = (unit * (n // len(unit) + 1))[:n]
        pos = rng.randrange(len(data) + 1)
        if how == "long-line-no-newline":
            return data + blob, f"{n} bytes of {unit!r} appended with no newline"
        return data[:pos] + blob + data[pos:], f"{n} bytes of {unit!r} inserted at {pos}"
    if how == "huge-number":
        nums = list(_NUMBER_RX.finditer(data))
        digits = rng.choice((20, 400, 4301, 5000, 100_000))
        big = b"9" * min(digits, limit)
        if not nums:
            return data + b" " + big + b"\n", f"a {len(big)}-digit number appended"
        m = rng.choice(nums)
        return data[: m.start()] + big + data[m.end() :], f"number at {m.start()} replaced by {len(big)} digits"
    if how == "many-lines":
        lines = [ln for ln in _lines(data) if ln.strip()] or [b"x\n"]
        line = rng.choice(lines)
        line = line if line.endswith(b"\n") else line + b"\n"
        times = max(1, min(200_000, limit // max(1, len(line))))
        return data + line * times, f"line {line[:40]!r} appended {times} times"
    words = list(_WORD_RX.finditer(data))
    if not words:
        return data + b"y" * min(limit, 100_000), "long token appended"
    m = rng.choice(words)
    n = min(rng.choice((1000, 100_000, limit)), limit)
    return data[: m.start()] + (m.group() * (n // max(1, len(m.group())) + 1))[:n] + data[m.end() :], (
        f"token {m.group()[:20]!r} at {m.start()} made {n} bytes long"
    )


def m_splice(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    name, other = rng.choice(corpus.files)
    how = rng.choice(("head-tail", "concat", "interleave", "insert"))
    if how == "head-tail":
        i, j = rng.randrange(len(data) + 1), rng.randrange(len(other) + 1)
        return data[:i] + other[j:], f"first {i} bytes + {name} from byte {j}"
    if how == "concat":
        return data + other, f"+ {name} appended"
    if how == "interleave":
        a, b = _lines(data), _lines(other)
        out = []
        for x, y in zip(a, b, strict=False):
            out += [x, y]
        out += a[len(b) :] + b[len(a) :]
        return b"".join(out), f"lines interleaved with {name}"
    pos = rng.randrange(len(data) + 1)
    return data[:pos] + other + data[pos:], f"{name} inserted at byte {pos}"


def m_tokens(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    rx, pool, what = rng.choice(
        ((_NUMBER_RX, INTERESTING_NUMBERS, "number"), (_ADDR_RX, INTERESTING_ADDRESSES, "address"))
    )
    found = list(rx.finditer(data))
    if not found:
        return m_insert(rng, data, corpus, limit)
    picks = sorted(rng.sample(found, min(len(found), rng.choice((1, 1, 3, 10)))), key=lambda m: m.start())
    out, last, done = [], 0, []
    for m in picks:
        new = rng.choice(pool).encode()
        out += [data[last : m.start()], new]
        last = m.end()
        done.append((m.group()[:20], new[:20]))
    out.append(data[last:])
    return b"".join(out), f"{what}s replaced: {done[:4]}"


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterable[tuple[Any, ...]]:
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _mutate_doc(rng: random.Random, doc: Any) -> tuple[Any, str]:
    paths = [p for p in _paths(doc) if p]
    if not paths:
        return rng.choice(INTERESTING_VALUES), "whole document replaced"
    path = rng.choice(paths)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    how = rng.choice(("replace", "replace", "replace", "delete", "duplicate", "wrap", "retype"))
    shown = "/".join(str(p) for p in path)
    if how == "delete":
        del parent[key]
        return doc, f"deleted {shown}"
    if how == "duplicate" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
        return doc, f"duplicated {shown}"
    if how == "wrap":
        parent[key] = [parent[key]] if rng.random() < 0.5 else {"x": parent[key]}
        return doc, f"wrapped {shown}"
    if how == "retype":
        v = parent[key]
        parent[key] = str(v) if not isinstance(v, str) else (int(v) if v.isascii() and v.isdigit() else [v])
        return doc, f"changed the type of {shown}"
    value = rng.choice(INTERESTING_VALUES)
    parent[key] = copy.deepcopy(value)
    return doc, f"{shown} := {json.dumps(value)[:40]}"


def m_structure(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    """JSON/YAML documents: one node replaced by a value of the wrong type, deleted, duplicated..."""
    try:
        return _structure(rng, data, corpus, limit)
    except RecursionError:  # already nested too deep to load (an earlier mutation)
        return m_tokens(rng, data, corpus, limit)


def _structure(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    text = data.decode("utf-8", errors="replace")
    if text.lstrip()[:1] in ("{", "["):
        try:
            doc = json.loads(text)
        except ValueError:
            return m_tokens(rng, data, corpus, limit)
        whats = []
        for _ in range(rng.choice((1, 1, 2, 5))):
            doc, what = _mutate_doc(rng, doc)
            whats.append(what)
        indent = rng.choice((None, 2))
        return json.dumps(doc, indent=indent).encode(), f"JSON: {'; '.join(whats)}"
    import yaml

    if text.count("[") + text.count("{") > 5000:  # PyYAML takes seconds on deep flow nesting
        return m_tokens(rng, data, corpus, limit)
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return m_tokens(rng, data, corpus, limit)
    if not docs or not any(isinstance(d, (dict, list)) for d in docs):
        return m_tokens(rng, data, corpus, limit)
    i = rng.randrange(len(docs))
    docs[i], what = _mutate_doc(rng, docs[i])
    return yaml.safe_dump_all(docs).encode(), f"YAML: {what}"


_RULE = re.compile(rb"^-A (\S+)(.*)$", re.M)
_JUMP = re.compile(rb"(-[jg] )(\S+)")
_ODD_MATCH_VALUES = (
    b"--probability 1.5", b"--probability -0.1", b"--probability NaN", b"--probability 0.50000000000000000001",
    b"--to-destination 10.0.0.1:0x50", b"--to-destination :80", b"--to-destination 10.0.0.1:99999",
    b"--to-destination [::1]:80", b"--to-destination 10.0.0.1-10.0.0.9:80-90", b"--dport 0", b"--dport 99999",
    b"--dport 1:65535", b"-d 999.1.1.1/32", b"-d 10.0.0.1/33", b"-s ::/0", b"-i eni+", b"! -i lo", b"-m statistic",
    b"--mode nth --every 0 --packet 0", b"-j", b"-j DNAT", b"-m comment --comment", b'--comment "a\\"b"',
)  # fmt: skip


def m_iptables(rng: random.Random, data: bytes, corpus: Corpus, limit: int) -> tuple[bytes, str]:
    """iptables-save rules changed the way a partial sync or a hand edit changes them: rules lost or
    doubled, jumps retargeted (loops included), odd match values."""
    rules = list(_RULE.finditer(data))
    if not rules:
        return m_tokens(rng, data, corpus, limit)
    chains = sorted({m.group(1) for m in rules} | {b"ACCEPT", b"DROP", b"RETURN", b"MASQUERADE", b"NOPE"})
    lines = data.split(b"\n")
    rule_lines = [i for i, ln in enumerate(lines) if ln.startswith(b"-A ")]
    done = []
    for _ in range(rng.choice((1, 1, 2, 5))):
        i = rng.choice(rule_lines)
        ln = lines[i]
        how = rng.choice(("drop", "dup", "retarget", "self-loop", "odd-value", "drop-dnat", "drop-chain-decl"))
        if how == "drop":
            lines[i] = b""
        elif how == "dup":
            lines[i] = ln + b"\n" + ln
        elif how in ("retarget", "self-loop") and _JUMP.search(ln):
            chain = ln.split()[1] if how == "self-loop" else rng.choice(chains)
            lines[i] = _JUMP.sub(lambda m, c=chain: m.group(1) + c, ln, count=1)
        elif how == "drop-dnat":
            dnat = [j for j in rule_lines if b"DNAT" in lines[j] or b"KUBE-MARK" in lines[j]]
            if dnat:
                i = rng.choice(dnat)
                lines[i] = b""
        elif how == "drop-chain-decl":
            decls = [j for j, x in enumerate(lines) if x.startswith(b":")]
            if decls:
                i = rng.choice(decls)
                lines[i] = b""
        else:
            lines[i] = ln + b" " + rng.choice(_ODD_MATCH_VALUES)
        done.append(f"{how} line {i + 1}")
    return b"\n".join(lines), f"rules changed: {', '.join(done)}"


FILE_MUTATIONS: dict[str, Mutator] = {
    "truncate": m_truncate,
    "bitflip": m_bitflip,
    "insert": m_insert,
    "delete": m_delete,
    "line-dup": m_line_dup,
    "line-shuffle": m_line_shuffle,
    "line-delete": m_line_delete,
    "encoding": m_encoding,
    "nesting": m_nesting,
    "huge": m_huge,
    "splice": m_splice,
    "tokens": m_tokens,
    "structure": m_structure,
    "iptables": m_iptables,
}


def mutate_file(rng: random.Random, data: bytes, corpus: Corpus, limit: int, kind: str | None = None) -> tuple[
    bytes, str, str
]:
    """One mutation (kind chosen at random unless given): (data, kind, what was done)."""
    if kind is None:
        structured = data.lstrip()[:1] in (b"{", b"[") or b"kind:" in data[:4096]
        rules = b"\n-A " in data[:65536]
        if (structured or rules) and rng.random() < 0.3:  # the mutations that keep the format readable
            kind = "structure" if structured else "iptables"
        else:
            kind = rng.choice(list(FILE_MUTATIONS))
        if (kind == "structure" and not structured) or (kind == "iptables" and not rules):
            kind = rng.choice(("tokens", "insert", "truncate"))
    out, what = FILE_MUTATIONS[kind](rng, data, corpus, limit)
    return out[: max(limit, 1)], kind, what


# ------------------------------------------------------------------------------------ cases


@dataclass
class Case:
    """A tree of files to write under an empty folder, and the paths (relative) to give kpdoctor."""

    seed: int
    index: int
    kind: str  # the mutation kind, as counted in reports ("bitflip", "bundle-delete", "tar-damage"...)
    source: str  # the corpus entry it was made from
    detail: str  # what was done, for the finding's summary
    files: dict[str, bytes]
    paths: list[str]

    @property
    def ident(self) -> str:
        return f"{self.seed}:{self.index}"

    def write(self, dest: Path) -> list[Path]:
        for rel, data in self.files.items():
            p = dest / rel
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
            except (IsADirectoryError, NotADirectoryError, FileExistsError):
                continue  # a file where the bundle has a folder (or the reverse): only an archive holds both
        return [dest / p for p in self.paths]

    def size(self) -> int:
        return sum(len(d) for d in self.files.values())


def _loose_name(rng: random.Random, source: str) -> str:
    """Loose files are typed by content: keep the name, or give a meaningless one."""
    base = source.rsplit("/", 1)[-1]
    return rng.choice((base, "out.txt", "Untitled 3", "paste.log", "x"))


def _bundle_mutation(rng: random.Random, tree: dict[str, bytes], corpus: Corpus, limit: int) -> tuple[str, str]:
    from kpdoctor.bundle.layout import BUNDLE_PATHS

    how = rng.choice(("delete", "corrupt", "corrupt", "swap", "empty", "manifest", "extra"))
    names = sorted(tree)
    if how == "delete":
        gone = rng.sample(names, rng.randint(1, max(1, len(names) // 2)))
        for g in gone:
            del tree[g]
        return "bundle-delete", f"deleted {gone}"
    if how == "corrupt":
        done = []
        for name in rng.sample(names, min(len(names), rng.choice((1, 1, 2, 3)))):
            tree[name], k, what = mutate_file(rng, tree[name], corpus, limit)
            done.append(f"{name}: {k} ({what})")
        return "bundle-corrupt", "; ".join(done)
    if how == "swap":  # content of one kind at the path of another: bundles are typed by path
        dest = rng.choice(sorted(BUNDLE_PATHS))
        if rng.random() < 0.5:
            src_name, data = rng.choice(corpus.files)
        else:
            src_name = rng.choice(names)
            data = tree[src_name]
        tree[dest] = data
        return "bundle-swap", f"{src_name} put at {dest}"
    if how == "empty":
        emptied = rng.sample(names, rng.randint(1, min(3, len(names))))
        for e in emptied:
            tree[e] = b""
        return "bundle-empty", f"emptied {emptied}"
    if how == "manifest":
        man = tree.get("manifest.json", b"{}")
        try:
            doc = json.loads(man)
        except ValueError:
            doc = {}
        what = ""
        if isinstance(doc, dict) and rng.random() < 0.5:
            arts = doc.get("artifacts")
            if isinstance(arts, list) and arts and isinstance(arts[0], dict):
                a = rng.choice(arts)
                field_ = rng.choice(("exit_code", "path", "stderr", "collected_at", "started_at"))
                a[field_] = rng.choice((*INTERESTING_VALUES, 2, 127, -9, "1", "\x1b[2J"))
                if field_ == "exit_code" and isinstance(a.get("path"), str) and a["path"] in tree:
                    tree[a["path"]] = b""
                what = f"artifact {a.get('path')!r}: {field_} := {str(a[field_])[:30]!r}"
            else:
                doc["not_collected"] = [{"path": "node/x", "reason": rng.choice(INTERESTING_VALUES)}] * rng.choice(
                    (1, 1000)
                )
                what = "not_collected entries added"
            tree["manifest.json"] = json.dumps(doc).encode()
        else:
            tree["manifest.json"], k, what = mutate_file(rng, man, corpus, limit, rng.choice(("structure", "nesting",
                                                                                               "truncate", "bitflip")))  # fmt: skip
        return "bundle-manifest", what
    # extra files: junk, unknown paths, odd names
    extra = rng.choice(
        ("node/unknown.txt", "notes/readme", "node/counters/T2/nstat.txt", "kube-proxy/log.txt.1",
         "node/\udcff\udcfename.txt", "deep/" * 40 + "f.txt", "node/counters/T0", ".hidden")
    )  # fmt: skip
    tree[extra] = rng.choice((rng.randbytes(256), b"", rng.choice(corpus.files)[1]))
    return "bundle-extra", f"added {extra!r}"


def _tar(tree: dict[str, bytes], top: str, rng: random.Random) -> tuple[bytes, str]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for rel, data in sorted(tree.items()):
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            info.mtime = 1_700_000_000
            try:
                tf.addfile(info, io.BytesIO(data))
            except (UnicodeEncodeError, ValueError):
                continue
    tar = raw.getvalue()
    comp = rng.choice(("gz", "gz", "gz", "gz", "bz2", "xz", "none"))
    if comp == "gz":
        return gzip.compress(tar, mtime=0), "gz"
    if comp == "bz2":
        return bz2.compress(tar), "bz2"
    if comp == "xz":
        return lzma.compress(tar), "xz"
    return tar, "plain tar"


def _damage_archive(rng: random.Random, blob: bytes) -> tuple[bytes, str]:
    how = rng.choice(("none", "truncate", "bitflip", "bitflip", "byte", "append", "header"))
    if how == "none" or not blob:
        return blob, "intact"
    if how == "truncate":
        pos = rng.randrange(len(blob))
        return blob[:pos], f"truncated at {pos} of {len(blob)}"
    if how == "bitflip":
        b = bytearray(blob)
        where = sorted(rng.randrange(len(b)) for _ in range(rng.choice((1, 1, 3))))
        for pos in where:
            b[pos] ^= 1 << rng.randrange(8)
        return bytes(b), f"bits flipped at {where}"
    if how == "byte":
        b = bytearray(blob)
        pos = rng.randrange(len(b))
        b[pos] = rng.randrange(256)
        return bytes(b), f"byte {pos} set"
    if how == "append":
        return blob + rng.randbytes(rng.randint(1, 2048)), "junk appended"
    b = bytearray(blob)
    pos = rng.randrange(min(len(b), 32))
    b[pos] ^= 0xFF
    return bytes(b), f"header byte {pos} inverted"


def make_case(seed: int, index: int, corpus: Corpus | None = None, limit: int = 8 * 1024**2) -> Case:
    """Case ``index`` of run ``seed``: rebuilt exactly from these two numbers (and the corpus)."""
    corpus = corpus or load_corpus()
    rng = random.Random(f"kpdoctor-fuzz:{seed}:{index}")
    shape = rng.choices(("file", "group", "bundle", "tar"), weights=(52, 10, 22, 16))[0]
    if shape == "file":
        source, data = rng.choice(corpus.files)
        data, kind, what = mutate_file(rng, data, corpus, limit)
        if rng.random() < 0.2:  # stack a second mutation
            data, kind2, what2 = mutate_file(rng, data, corpus, limit)
            kind, what = f"{kind}+{kind2}", f"{what}; then {what2}"
        name = _loose_name(rng, source)
        return Case(seed, index, kind, source, what, {name: data}, [name])
    if shape == "group" and corpus.groups:
        group = rng.choice(corpus.groups)
        members = [m for m in group if rng.random() < 0.8] or list(group)
        victim = rng.randrange(len(members))
        files: dict[str, bytes] = {}
        what = ""
        kind = ""
        for i, (name, data) in enumerate(members):
            base = name.rsplit("/", 1)[-1]
            if i == victim:
                data, kind, what = mutate_file(rng, data, corpus, limit)
                what = f"{base}: {what}"
            files[base] = data
        source = group[0][0].rsplit(".", 2)[0]
        return Case(seed, index, f"group-{kind}", source, what, files, sorted(files))
    name, tree0 = rng.choice(corpus.bundles)
    tree = dict(tree0)
    kind, what = _bundle_mutation(rng, tree, corpus, limit)
    if shape != "tar":
        return Case(seed, index, kind, f"demo/{name}", what, {f"{name}/{k}": v for k, v in tree.items()}, [name])
    if rng.random() < 0.5:  # the archive of an intact bundle, damaged
        tree, kind, what = dict(tree0), "tar", "intact bundle"
    blob, comp = _tar(tree, name, rng)
    blob, damage = _damage_archive(rng, blob)
    fname = rng.choice((f"{name}.tar.gz", "bundle.tgz", "upload"))
    return Case(
        seed, index, f"tar-{kind}" if kind != "tar" else "tar-damage", f"demo/{name}",
        f"{what}; packed as {comp} {fname}, {damage}", {fname: blob}, [fname],
    )  # fmt: skip


# --------------------------------------------------------------------------------- findings


@dataclass
class Finding:
    category: str  # exception | check-error | timeout | bad-exit | invalid-json | temp-leak | cli-...
    exc_type: str  # exception type, or "" when there is none
    where: str  # "kpdoctor/parse/k8s.py:parse_objects" (innermost kpdoctor frame), or a phase
    line: str  # "kpdoctor/parse/k8s.py:114" for the message
    message: str
    trace: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.category, self.exc_type, self.where)

    @property
    def known(self) -> str | None:
        return KNOWN_CRASHES.get(self.key)

    def summary(self) -> str:
        what = f"{self.exc_type}: " if self.exc_type else ""
        at = f" at {self.line}" if self.line else ""
        return f"[{self.category}] {what}{self.message[:200]}{at}"


@dataclass
class Outcome:
    case: Case
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    exit_codes: dict[str, int] = field(default_factory=dict)


def kpdoctor_frame(tb: list[traceback.FrameSummary]) -> tuple[str, str]:
    """("kpdoctor/x/y.py:func", "kpdoctor/x/y.py:123") of the innermost frame in kpdoctor's sources."""
    for fr in reversed(tb):
        fn = fr.filename.replace(os.sep, "/")
        i = fn.rfind("/kpdoctor/")
        if i != -1 and "/tests/" not in fn and "/bench/" not in fn:
            rel = fn[i + 1 :]
            return f"{rel}:{fr.name}", f"{rel}:{fr.lineno}"
    if tb:
        fr = tb[-1]
        return f"{Path(fr.filename).name}:{fr.name}", f"{Path(fr.filename).name}:{fr.lineno}"
    return "?", "?"


def finding_from_exception(category: str, exc: BaseException, phase: str) -> Finding:
    tb = traceback.extract_tb(exc.__traceback__)
    where, line = kpdoctor_frame(list(tb))
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-30))
    return Finding(category, type(exc).__name__, where, line, f"{phase}: {_one_line(str(exc))}", text[-6000:])


def where_from_traceback_text(text: str) -> tuple[str, str]:
    """The innermost kpdoctor frame of a printed traceback (``File ".../kpdoctor/x.py", line N, in f``)."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)
    for fn, ln, func in reversed(frames):
        fn = fn.replace(os.sep, "/")
        i = fn.rfind("/kpdoctor/")
        if i != -1:
            return f"{fn[i + 1 :]}:{func}", f"{fn[i + 1 :]}:{ln}"
    return "?", "?"


def innermost_in_dump(text: str) -> tuple[str, str]:
    """The innermost kpdoctor frame of a ``faulthandler`` dump (most recent call first)."""
    for fn, ln, func in re.findall(r'File "([^"]+)", line (\d+) in (\S+)', text):
        fn = fn.replace(os.sep, "/")
        i = fn.rfind("/kpdoctor/")
        if i != -1:
            return f"{fn[i + 1 :]}:{func}", f"{fn[i + 1 :]}:{ln}"
    return "in-process", ""


def _one_line(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= 300 else s[:297] + "..."


# --------------------------------------------------------------------------------- running

_CONTAINED: list[Finding] = []  # bugs kpdoctor met and contained (exit code 4), with their tracebacks
_STAGES: list[str] = []  # the stage of each, as the report names it


def _instrument() -> None:
    """In the forked child only: keep the traceback of every failure kpdoctor contains (a check
    that raised, a stage of the report, an unreadable input), which its report names in one line."""
    from kpdoctor.knowledge import CHECKS

    for code, spec in list(CHECKS.items()):

        def wrapped(*args: Any, _f: Any = spec.func, _code: str = code) -> Any:
            try:
                return list(_f(*args))
            except Exception as exc:
                _CONTAINED.append(finding_from_exception("check-error", exc, f"check {_code}"))
                _STAGES.append(f"check {_code}")
                raise

        CHECKS[code] = dataclasses.replace(spec, func=wrapped)
    try:
        from kpdoctor.model import InternalError
    except ImportError:  # an older tree: check errors only
        return
    original = InternalError.of.__func__  # type: ignore[attr-defined]

    def of(cls: Any, stage: str, exc: BaseException) -> Any:
        if not stage.startswith("check "):  # (checks: recorded by the wrapper above)
            _CONTAINED.append(finding_from_exception("internal-error", exc, stage))
            _STAGES.append(stage)
        return original(cls, stage, exc)

    InternalError.of = classmethod(of)  # type: ignore[method-assign, assignment]


def _child(paths: list[Path], tmp: Path) -> dict[str, Any]:
    from kpdoctor.diagnose import diagnose_paths, exit_code
    from kpdoctor.report import FORMATS

    _instrument()
    tempfile.tempdir = str(tmp)
    findings: list[Finding] = []
    codes: dict[str, int] = {}
    for command in ("diagnose", "verify"):
        before = len(_STAGES)
        try:
            report, _evidence = diagnose_paths(paths, command=command)
        except BaseException as exc:  # anything escaping is the finding
            findings.append(finding_from_exception("exception", exc, f"diagnose_paths(command={command!r})"))
            continue
        # bugs the report names that were not caught on their way (made without InternalError.of)
        traced = set(_STAGES[before:])
        for e in getattr(report, "errors", []):
            if e.stage not in traced:
                exc_type = e.error.split(":", 1)[0]
                findings.append(Finding("internal-error", exc_type, f"stage:{e.stage}", "", f"{e.stage}: {e.error}"))
        try:
            code = exit_code(report)
        except Exception as exc:
            findings.append(finding_from_exception("exception", exc, f"exit_code ({command})"))
            code = -1
        codes[command] = code
        if code not in (0, 1, 2, 3, 4):
            findings.append(Finding("bad-exit", "", f"exit_code:{command}", "", f"exit code {code}"))
        for fmt, render in FORMATS.items():
            for color in (False, True) if fmt == "text" else (False,):
                try:
                    out = render(report, color)
                except BaseException as exc:
                    findings.append(finding_from_exception("exception", exc, f"render {fmt} ({command})"))
                    continue
                if fmt != "json":
                    continue
                try:
                    json.loads(out)
                    out.encode("utf-8")
                except (ValueError, UnicodeError) as exc:
                    findings.append(
                        Finding("invalid-json", type(exc).__name__, f"render_json:{command}", "", _one_line(str(exc)))
                    )
    unique: dict[tuple[str, str, str], Finding] = {}
    for f in findings + _CONTAINED:  # the same failure in diagnose and verify is one finding
        unique.setdefault(f.key, f)
    findings = list(unique.values())
    left = sorted(p.name for p in tmp.iterdir())
    if left:
        findings.append(Finding("temp-leak", "", "tempdir", "", f"left in TMPDIR: {left[:5]}"))
    return {"findings": [dataclasses.asdict(f) for f in findings], "codes": codes}


MEMORY_LIMIT = 3 * 1024**3


def run_in_process(case: Case, timeout: float = 30.0, workdir: Path | None = None) -> Outcome:
    """Write the case, run it in a forked child (killed after ``timeout`` seconds), collect findings."""
    base = Path(tempfile.mkdtemp(prefix="kpd-fuzz-", dir=workdir))
    try:
        inputs = base / "in"
        inputs.mkdir()
        paths = case.write(inputs)
        tmp = base / "tmp"
        tmp.mkdir()
        return _fork_run(case, paths, tmp, timeout, base / "stack.txt")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def _warm_up() -> None:
    """Import (in the parent, once) what every child needs, so that no child pays for it."""
    import kpdoctor.checks
    import kpdoctor.diagnose
    from kpdoctor.report import FORMATS

    assert kpdoctor.checks.CHECKS and kpdoctor.diagnose.diagnose_paths and FORMATS


def _fork_run(case: Case, paths: list[Path], tmp: Path, timeout: float, stack: Path) -> Outcome:
    _warm_up()

    r, w = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(r)
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
            # shortly before the parent gives up: where the child is (from a C thread, so even
            # while a regular expression runs), to name the slow code
            dump = open(stack, "w")  # noqa: SIM115 - open until os._exit
            faulthandler.dump_traceback_later(max(0.5, timeout - 1.0), file=dump)
            try:
                res = _child(paths, tmp)
            except BaseException as exc:
                res = {"findings": [dataclasses.asdict(finding_from_exception("exception", exc, "fuzz child"))]}
            data = json.dumps(res).encode()
            view = memoryview(data)
            while view:
                n = os.write(w, view)
                view = view[n:]
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    timed_out = False
    try:
        while True:
            left = timeout - (time.perf_counter() - start)
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    out = Outcome(case, seconds=time.perf_counter() - start)
    if timed_out:
        text = stack.read_text(errors="replace") if stack.exists() else ""
        where, line = innermost_in_dump(text)
        out.findings.append(
            Finding("timeout", "", where, line, f"still running after {timeout:.0f} s (in {line or 'unknown'})", text)
        )
        return out
    try:
        res = json.loads(b"".join(chunks))
    except ValueError:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        why = f"killed by signal {sig}" if sig else f"exit status {os.waitstatus_to_exitcode(status)}"
        out.findings.append(Finding("exception", "ChildDied", "fuzz child", "", f"the child died ({why})"))
        return out
    out.findings = [Finding(**f) for f in res.get("findings", [])]
    out.exit_codes = res.get("codes", {})
    return out


_BOMB_BLOCK = 8 * 1024**2


def gzip_bomb(path: Path, members: int, member_bytes: int, fill: bytes = b"\0", top: str = "bomb") -> None:
    """A valid .tar.gz of ``members`` entries of ``member_bytes`` bytes of ``fill`` each, made in
    a fraction of a second however large: deflate restarts after a full flush, so one compressed
    block is written again and again (for the archive bomb tests and bench/archive_bomb.py)."""
    block = fill * _BOMB_BLOCK
    fresh = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = fresh.compress(block) + fresh.flush(zlib.Z_FULL_FLUSH)  # self-contained, byte-aligned
    live = zlib.compressobj(9, zlib.DEFLATED, -15)
    crc, size = 0, 0
    with open(path, "wb") as fh:
        fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")  # gzip header, mtime 0

        def emit(data: bytes) -> None:
            nonlocal crc, size
            fh.write(live.compress(data) + live.flush(zlib.Z_FULL_FLUSH))
            crc, size = zlib.crc32(data, crc), size + len(data)

        for i in range(members):
            info = tarfile.TarInfo(f"{top}/node/zeros-{i}.txt")
            info.size, info.mtime = member_bytes, 0
            emit(info.tobuf(tarfile.GNU_FORMAT))
            full, rest = divmod(member_bytes, _BOMB_BLOCK)
            for _ in range(full):
                fh.write(piece)
                crc = zlib.crc32(block, crc)
                size += _BOMB_BLOCK
            emit(fill * rest + b"\0" * (-member_bytes % tarfile.BLOCKSIZE))
        end = 2 * tarfile.BLOCKSIZE  # the end-of-archive marker, then zeros to a whole record
        emit(b"\0" * (end + -(size + end) % tarfile.RECORDSIZE))
        fh.write(live.flush(zlib.Z_FINISH))
        fh.write(struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF))
