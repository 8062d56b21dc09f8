"""Metamorphic accuracy: does the answer survive the ways people paste?

Every corpus positive whose untransformed first finding is right is diagnosed again with its
evidence transformed the way people transform output before they post it, and the first
finding's cause is compared with the untransformed one:

- **grep**: only the lines that share a token with the evidence lines the untransformed run cites
  (what a `grep` for the signal keeps);
- **quote** (markdown ``> ``), **indent** (four spaces), **wrap80** / **wrap120** (hard line
  breaks at that column), **crlf** (Windows line ends);
- **strip-headers** (klog headers and leading timestamps taken off), **shift-times** (every klog
  and ISO time moved by 3 h 7 min, thread ids changed);
- **era** (a kube-proxy line whose message the catalogue has in both klog eras, written in the
  other one);
- **prompt** (a shell prompt with a host name before the output: ``root@node-7:~# cat FILE``);
- **interleave** (a line of other components' logs after every third line);
- **mask-x** (IPv4 addresses as ``10.x.x.x``), **mask-redacted** (as ``<redacted>``);
- **comments** (a comment in another language after every fourth line);
- **compose**: seeded random pairs and triples of the above;
- **one-paste** (cases of several files): every file of the case in one paste, in the case's
  order, a blank line between them, as people put everything into one issue body; and
  **one-paste-headed**, the same with a markdown heading naming each file before it.

A case with no finding after a transformation counts as changed. The transformations are generic:
none was written with a particular case in mind. Prints the share kept per transformation and
overall, and lists the changed pairs. One command: ``.venv/bin/python bench/metamorphic.py``
(``--help`` for options). Pure measurement: kpdoctor is run, never changed.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy  # bench/accuracy.py: the corpus, the runs and the judging

Transform = Callable[[str, "Context"], str]
SEED = 20261128
COMPOSITIONS = 3  # seeded compositions of two or three transformations per case

_KLOG = re.compile(
    r"(?P<level>[IWEF])(?P<mm>\d\d)(?P<dd>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?P<frac>\.\d+)?"
    r"(?P<sp>\s+)(?P<tid>\d+) "
)
_ISO = re.compile(r"(?P<date>\d{4}-\d\d-\d\d)[T ](?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)")
_LEADING_TIME = re.compile(
    r"^(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+(?:stdout|stderr)?\s*[FP]?\s*"
    r"|[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d\s+)"
)
_KLOG_HEADER = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)?\s+\d+ [\w.\-/]+:\d+\] ?")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_./-]{3,}")
# Other components' lines, as they print them (kubelet's klog, CoreDNS' plugin log, containerd's).
_OTHER_LINES = (
    'I1123 10:00:01.000000    1234 kubelet.go:2412] "SyncLoop (PLEG): event for pod" pod="default/web-7d9c" '
    'event="ContainerStarted"',
    "[INFO] plugin/reload: Running configuration SHA512 = 3c9d0f8f2c1a",
    'time="2024-10-08T21:01:55Z" level=info msg="Pulled image \\"nginx:1.25\\""',
    'I1123 10:00:02.500000    1234 prober.go:107] "Probe succeeded" probeType="Readiness" pod="default/web-7d9c"',
)
# Comments people write between pasted lines, in other languages.
_COMMENTS = ("# 这里开始报错", "# здесь ошибка", "# ここで失敗します", "# aqui falla el servicio", "// 여기서 실패")


@dataclasses.dataclass(frozen=True)
class Context:
    """What a transformation may know of the case: the tokens of the lines the untransformed run
    cited (for grep), its name (for a prompt's command)."""

    cited: frozenset[str]
    name: str


def _lines(text: str) -> list[str]:
    return text.split("\n")


def grep(text: str, ctx: Context) -> str:
    keep = [ln for ln in _lines(text) if any(t in ln for t in ctx.cited)]
    return "\n".join(keep) + "\n" if keep else text


def quote(text: str, ctx: Context) -> str:
    return "\n".join("> " + ln if ln else ">" for ln in _lines(text.rstrip("\n"))) + "\n"


def indent(text: str, ctx: Context) -> str:
    return "\n".join("    " + ln if ln else "" for ln in _lines(text.rstrip("\n"))) + "\n"


def _wrap(width: int) -> Transform:
    def wrap(text: str, ctx: Context) -> str:
        out = []
        for ln in _lines(text):
            while len(ln) > width:
                out.append(ln[:width])
                ln = ln[width:]
            out.append(ln)
        return "\n".join(out)

    return wrap


def crlf(text: str, ctx: Context) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def strip_headers(text: str, ctx: Context) -> str:
    out = []
    for ln in _lines(text):
        ln = _LEADING_TIME.sub("", ln)
        out.append(_KLOG_HEADER.sub("", ln, count=1))
    return "\n".join(out)


def shift_times(text: str, ctx: Context) -> str:
    def klog(m: re.Match[str]) -> str:
        h = (int(m["h"]) + 3) % 24
        mi = (int(m["m"]) + 7) % 60
        return (
            f"{m['level']}{m['mm']}{m['dd']} {h:02d}:{mi:02d}:{m['s']}{m['frac'] or ''}{m['sp']}{int(m['tid']) + 17} "
        )

    def iso(m: re.Match[str]) -> str:
        return f"{m['date']}T{(int(m['h']) + 3) % 24:02d}:{(int(m['m']) + 7) % 60:02d}:{m['s']}"

    return _ISO.sub(iso, _KLOG.sub(klog, text))


def era(text: str, ctx: Context) -> str:
    """A kube-proxy line whose message has both klog forms, in the other one (best effort: the
    message's reason goes into its first structured key, and back)."""
    glog, structured = _era_forms()
    out = []
    for ln in _lines(text):
        m = _KLOG_HEADER.search(ln)
        if m is None:
            out.append(ln)
            continue
        head, body = ln[: m.end()], ln[m.end() :]
        out.append(head + _convert(body, glog, structured))
    return "\n".join(out)


def _convert(
    body: str, glog: list[tuple[re.Pattern[str], str, str]], structured: list[tuple[re.Pattern[str], str]]
) -> str:
    for rx, msg, key in glog:
        g = rx.fullmatch(body.strip())
        if g is not None:
            value = g.group(g.lastindex or 0) if g.lastindex else ""
            return f'"{msg}"' + (f' {key}="{value}"' if key and value else "")
    for rx, template in structured:
        s = rx.fullmatch(body.strip())
        if s is not None:
            return template.replace("{}", s.group(1) or "")
    return body


_ERA: list[Any] = []


def _era_forms() -> tuple[list[tuple[re.Pattern[str], str, str]], list[tuple[re.Pattern[str], str]]]:
    if _ERA:
        return _ERA[0]  # type: ignore[no-any-return]
    sys.path.insert(0, str(accuracy.SRC))
    from kpdoctor.messages import catalogue
    from kpdoctor.messages.templates import compile_template

    glog: list[tuple[re.Pattern[str], str, str]] = []
    structured: list[tuple[re.Pattern[str], str]] = []
    for m in catalogue():
        if m.component != "kube-proxy" or m.structured is None:
            continue
        key = m.structured.keys[0] if m.structured.keys else ""
        glog.append((re.compile(compile_template(m.template).pattern), m.structured.msg, key))
        names = compile_template(m.template).names
        # one value: the reason, written back into the printf form (a message printed only in
        # the structured form, "command failed" err=..., has no printf form to keep it in)
        if len(names) == 1 and key:
            value = f'{key}="([^"]*)"'
            rx = re.compile(re.escape(f'"{m.structured.msg}"') + r"(?: [^ ]*)*? " + value + r".*")
            parts = compile_template(m.template).parts
            rendered = "".join(p if isinstance(p, str) else "{}" for p in parts)
            structured.append((rx, rendered))
    _ERA.append((glog, structured))
    return glog, structured


def prompt(text: str, ctx: Context) -> str:
    return f"root@node-7:~# cat {ctx.name}\n" + text


def _after_every(text: str, n: int, pool: Sequence[str]) -> str:
    """A line of ``pool`` after every ``n``-th line of ``text``."""
    out = []
    for i, ln in enumerate(_lines(text)):
        out.append(ln)
        if i % n == n - 1:
            out.append(pool[i % len(pool)])
    return "\n".join(out)


def interleave(text: str, ctx: Context) -> str:
    return _after_every(text, 3, _OTHER_LINES)


def mask_x(text: str, ctx: Context) -> str:
    return _IPV4.sub(lambda m: m.group(0).split(".")[0] + ".x.x.x", text)


def mask_redacted(text: str, ctx: Context) -> str:
    return _IPV4.sub("<redacted>", text)


def comments(text: str, ctx: Context) -> str:
    return _after_every(text, 4, _COMMENTS)


TRANSFORMS: dict[str, Transform] = {
    "grep": grep,
    "quote": quote,
    "indent": indent,
    "wrap80": _wrap(80),
    "wrap120": _wrap(120),
    "crlf": crlf,
    "strip-headers": strip_headers,
    "shift-times": shift_times,
    "era": era,
    "prompt": prompt,
    "interleave": interleave,
    "mask-x": mask_x,
    "mask-redacted": mask_redacted,
    "comments": comments,
}


def _one_paste(headed: bool) -> Callable[[Sequence[tuple[str, str]]], str]:
    def join(files: Sequence[tuple[str, str]]) -> str:
        blocks = [(f"### {name}\n\n" if headed else "") + text.strip("\n") for name, text in files]
        return "\n\n".join(blocks) + "\n"

    return join


# Transformations of a case's files as a whole (cases of several files only).
CASE_TRANSFORMS: dict[str, Callable[[Sequence[tuple[str, str]]], str]] = {
    "one-paste": _one_paste(False),
    "one-paste-headed": _one_paste(True),
}


def joined(case: accuracy.Case, name: str, dest: Path) -> accuracy.Case:
    """The case with its files joined into one (``CASE_TRANSFORMS[name]``)."""
    folder = Path(tempfile.mkdtemp(prefix=f"{case.id}--{name}-", dir=dest))
    files = [(f.name, f.read_text(encoding="utf-8", errors="replace")) for f in case.files]
    out = folder / "paste.txt"
    out.write_bytes(CASE_TRANSFORMS[name](files).encode("utf-8"))
    return dataclasses.replace(case, folder=folder, files=(out,))


def compositions(case_id: str) -> list[tuple[str, ...]]:
    """Seeded pairs and triples of transformations (the same for a case in every run)."""
    rng = random.Random(f"{SEED}:{case_id}")
    names = sorted(TRANSFORMS)
    out: list[tuple[str, ...]] = []
    while len(out) < COMPOSITIONS:
        combo = tuple(rng.sample(names, rng.choice((2, 3))))
        if combo not in out:
            out.append(combo)
    return out


def cited_tokens(report: dict[str, Any], case: accuracy.Case) -> frozenset[str]:
    """The tokens of the evidence lines the first finding (and what it folds) cites."""
    first = accuracy.ranked(report)[0]
    texts: list[str] = []
    todo = [first]
    while todo:
        f = todo.pop()
        texts += [str(e.get("text") or "") for e in f.get("evidence") or []]
        todo += f.get("folded") or []
    return frozenset(t for text in texts for t in _TOKEN.findall(text))


def transformed(case: accuracy.Case, names: Sequence[str], ctx: Context, dest: Path) -> accuracy.Case:
    folder = Path(tempfile.mkdtemp(prefix=f"{case.id}--{'+'.join(names)}-", dir=dest))
    files = []
    for f in case.files:
        text = f.read_text(encoding="utf-8", errors="replace")
        local = dataclasses.replace(ctx, name=f.name)
        for n in names:
            text = TRANSFORMS[n](text, local)
        out = folder / f.name
        out.write_bytes(text.encode("utf-8"))
        files.append(out)
    return dataclasses.replace(case, folder=folder, files=tuple(files))


def first_cause(report: dict[str, Any] | None) -> str:
    top = accuracy.ranked(report)
    return str(top[0].get("cause")) if top else "-"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=Path, action="append", help="a corpus folder (repeatable; default: cases)")
    ap.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    ap.add_argument("--only", action="append", default=[], help="only this transformation (repeatable)")
    ap.add_argument("--no-compose", action="store_true", help="leave out the seeded compositions")
    args = ap.parse_args(argv)
    folders = args.cases or [accuracy.CASES]
    cases = [c for folder in folders for c in accuracy.load_cases(folder, args.case) if not c.negative]
    names = [n for n in TRANSFORMS if not args.only or n in args.only]
    whole = [n for n in CASE_TRANSFORMS if not args.only or n in args.only]
    kept: dict[str, list[int]] = {n: [0, 0] for n in [*names, "compose", *whole]}
    changed: list[str] = []
    baseline = 0
    with tempfile.TemporaryDirectory(prefix="kpdoctor-metamorphic-") as tmp:
        for case in cases:
            out = accuracy.run_in_process(case)
            before = first_cause(out.report)
            if before not in case.accept:
                continue  # only cases whose untransformed first finding is right
            baseline += 1
            ctx = Context(cited_tokens(out.report or {}, case), "")
            runs = [(n, (n,)) for n in names]
            if not args.no_compose and not args.only:
                runs += [("compose", combo) for combo in compositions(case.id)]
            jobs = [(label, combo, transformed(case, combo, ctx, Path(tmp))) for label, combo in runs]
            if len(case.files) > 1:
                jobs += [(n, (n,), joined(case, n, Path(tmp))) for n in whole]
            for label, combo, variant in jobs:
                after = first_cause(accuracy.run_in_process(variant).report)
                kept[label][1] += 1
                if after == before:
                    kept[label][0] += 1
                else:
                    changed.append(f"  {case.id:34} {'+'.join(combo):40} {before} -> {after}")
    print(f"{baseline} of {len(cases)} positives named first untransformed; each run again per transformation")
    total = [sum(k for k, _ in kept.values()), sum(n for _, n in kept.values())]
    for label, (k, n) in kept.items():
        if n:
            print(f"  {label:16} {k:5}/{n:<5} ({100 * k / n:5.1f}%) first finding unchanged")
    if total[1]:
        print(f"  {'overall':16} {total[0]:5}/{total[1]:<5} ({100 * total[0] / total[1]:5.1f}%)")
    if changed:
        print(f"\nchanged ({len(changed)}): case, transformation(s), first finding before -> after")
        print("\n".join(changed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
