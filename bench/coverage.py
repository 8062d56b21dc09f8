"""How much of what the programs can print does kpdoctor know, and name rightly?

Two figures, per component (and per release for the call-site lists):

* **recall**: of the log and error call sites read from each release's source
  (``bench/callsites/*.json``, made by ``bench/callsites.py``), the share whose message has an entry
  in the catalogue (``src/kpdoctor/messages/``); ``--missing`` lists the call sites without one;
* **naming**: every entry that is not benign, written as a real line (kube-proxy's in both klog
  eras, a wrapper once with each payload its program can print), diagnosed by kpdoctor as a
  pasted log: the share named with its cause (the entry's ``cause``, or one it ``suggests``), with
  another cause, or with nothing; and every benign entry, whose line must raise nothing at
  warning or above (an alarm).

    .venv/bin/python bench/coverage.py                 # both, every component
    .venv/bin/python bench/coverage.py --recall --missing kube-proxy
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import kpdoctor  # noqa: E402
import kpdoctor.checks  # noqa: E402 - declares the checks and signatures (an entry point)
from kpdoctor.messages import catalogue  # noqa: E402
from kpdoctor.messages.match import Matcher  # noqa: E402
from kpdoctor.messages.schema import Message  # noqa: E402
from kpdoctor.messages.templates import TemplateError, compile_template, render  # noqa: E402
from kpdoctor.model import Severity  # noqa: E402

CALLSITES = REPO / "bench" / "callsites"
GLOG = "{level}1113 16:15:07.931291       1 proxier.go:1481] {text}"


def recall(missing: str | None) -> None:
    matcher = Matcher(catalogue())
    for path in sorted(CALLSITES.glob("*.json")):
        doc = json.loads(path.read_text())
        component, release = doc["component"], doc["release"]
        every = [s for s in doc["sites"] if s.get("format")]
        # not messages: a format with no literal word ("%v", "%s, %s": what it prints is its
        # operand's), and the test doubles a real kube-proxy never runs (fake.go)
        sites = [s for s in every if _worded(str(s["format"])) and not s["file"].endswith("/fake.go")]
        known = 0
        absent = []
        for s in sites:
            if matcher.match(site_line(s), component):
                known += 1
            else:
                absent.append(s)
        share = known / len(sites) if sites else 0.0
        left = len(every) - len(sites)
        print(f"recall {component:12} {release:28} {known:5}/{len(sites):<5} {share:6.1%}  ({left} not messages)")
        if missing in (component, "all"):
            for s in absent:
                print(f"    {s['file']}:{s['line']} {s['call']} {s['format']!r}")


def _worded(fmt: str) -> bool:
    """Has the format a literal word of 3 letters (what a template needs)?"""
    return re.search(r"[A-Za-z]{3}", re.sub(r"%[-+# 0]*\d*(?:\.\d+)?[a-zA-Z%]", "", fmt)) is not None


def site_line(site: dict[str, object]) -> str:
    """A line the call site prints: a structured call's ``"msg" key="..."``, else its format
    with each verb given a sample (a ``{`` in a Go format is a literal brace)."""
    text = str(site["format"]).replace("{", "{{").replace("}", "}}")
    call = str(site["call"])
    structured = call.endswith("S") or call.startswith("logger.")
    if structured:
        keys = " ".join(f'{k}="x"' for k in site.get("keys") or [])  # type: ignore[union-attr]
        return f'"{site["format"]}" {keys}'.rstrip()
    try:
        return render(text)
    except TemplateError:  # no literal word ("%v: %s"): nothing a line could be told by
        return text


Line = tuple[str, tuple[Message, ...]]  # a rendered line, and the messages that decide its cause (payload first)


def _lines(m: Message, payloads: dict[str, list[Message]], wrappers: dict[str, list[Message]]) -> list[Line]:
    """The entry as the lines a user would paste: a kube-proxy message as its log line (both klog
    eras; a wrapper once with each payload its program prints); another program's message inside
    each kube-proxy wrapper that carries that program's output, else alone; the kernel's as dmesg
    prints it. Each with the messages whose causes it should be named with: the payload's (and
    the wrapper's, which reads it), else the message's own."""
    if m.component == "kernel":
        return [(f"[12345.678901] {render(m.template)}", (m,))]
    if m.component != "kube-proxy":
        inner = render(m.template)
        # a routine message alone (inside a wrapper that says "failed", the wrapper alarms)
        around = wrappers.get(m.component, []) if m.kind != "benign" else []
        return [(_glog(w, render(w.template, {"value": inner})), (m, w)) for w in around] or [(inner, (m,))]
    # the kernel's messages are dmesg lines, not the errno text a wrapper of "kernel" carries
    inner_msgs = payloads.get(m.payload or "", []) if m.payload != "kernel" else []
    if not compile_template(m.template).names:
        inner_msgs_printf: list[Message] = []  # no placeholder: the printf form prints no payload
    else:
        inner_msgs_printf = inner_msgs
    out: list[Line] = []
    if m.payload and inner_msgs_printf:
        out += [(_glog(m, render(m.template, {"value": render(p.template)})), (p, m)) for p in inner_msgs_printf]
    else:
        out.append((_glog(m, render(m.template)), (m,)))
    if m.structured is not None:
        for p in (inner_msgs if m.structured.keys else []) or [None]:
            t = render(p.template) if p is not None else "boom"
            keys = " ".join(f'{k}="{t}"' for k in m.structured.keys)
            out.append((_glog(m, f'"{m.structured.msg}" {keys}'.rstrip()), (p, m) if p is not None else (m,)))
    return out


def _glog(m: Message, text: str) -> str:
    return GLOG.format(level=m.level or "E", text=text)


def _wanted(deciding: tuple[Message, ...]) -> set[str]:
    """The causes a line should be named with: its payload's (when not routine) and the
    wrapper's suggestions, else the wrapper's own."""
    out: set[str] = set()
    for m in deciding:
        if m.kind == "benign":
            continue
        out.update(c for c in [m.cause, *m.suggests] if c)
        if m.kind == "cause":
            break
    return out


VERDICTS = ("named", "named, not first", "another cause", "nothing", "no cause in the data")


def naming(show: str | None) -> None:
    cat = catalogue()
    payloads: dict[str, list[Message]] = defaultdict(list)
    wrappers: dict[str, list[Message]] = defaultdict(list)
    for m in cat:
        if m.kind != "benign":
            payloads[m.component].append(m)
        if m.component == "kube-proxy" and m.payload and m.kind != "benign":
            wrappers[m.payload].append(m)
    lines: dict[str, Counter[str]] = defaultdict(Counter)
    entries: dict[str, Counter[str]] = defaultdict(Counter)
    with tempfile.TemporaryDirectory() as tmp:
        for m in cat:
            worst = 0
            for i, (line, deciding) in enumerate(_lines(m, payloads, wrappers)):
                f = Path(tmp) / f"{m.component}-{m.id}-{i}.log"
                f.write_text(line + "\n")
                report = kpdoctor.run([f], min_severity=Severity.INFO)
                causes = [x.cause for x in report.findings]
                loud = [x for x in report.findings if x.severity >= Severity.WARNING]
                if m.kind == "benign":
                    lines[m.component]["benign alarm" if loud else "benign quiet"] += 1
                    if loud and show in (m.component, "all"):
                        print(f"    alarm {m.key}: {line!r} -> {causes}")
                    continue
                wanted = _wanted(deciding)
                if not wanted:
                    verdict = "no cause in the data"
                elif causes and causes[0] in wanted:
                    verdict = "named"
                elif set(causes) & wanted:
                    verdict = "named, not first"
                elif causes:
                    verdict = "another cause"
                else:
                    verdict = "nothing"
                lines[m.component][verdict] += 1
                worst = max(worst, VERDICTS.index(verdict))
                if verdict != "named" and show in (m.component, "all"):
                    print(f"    {verdict} {m.key}: {line[:160]!r} -> {causes[:3]} (wanted {sorted(wanted)})")
            if m.kind != "benign":
                entries[m.component][VERDICTS[worst]] += 1
            else:
                entries[m.component]["benign alarm" if lines[m.component]["benign alarm"] else "benign quiet"] += 0
    entries["all"] = sum(entries.values(), Counter())
    lines["all"] = sum(lines.values(), Counter())
    for component in [*sorted(c for c in lines if c != "all"), "all"]:
        e, t = entries[component], lines[component]
        shown = sum(e[v] for v in VERDICTS)
        share = e["named"] / shown if shown else 0.0
        print(
            f"naming {component:12} entries named {e['named']}/{shown} ({share:.0%}): "
            + ", ".join(f"{v} {e[v]}" for v in VERDICTS[1:])
            + f"; lines named {t['named']}/{sum(t[v] for v in VERDICTS)}; benign alarms {t['benign alarm']}/"
            f"{t['benign alarm'] + t['benign quiet']}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--recall", action="store_true", help="only the recall against the call-site lists")
    ap.add_argument("--naming", action="store_true", help="only the naming of rendered entries")
    ap.add_argument("--missing", metavar="COMPONENT", help="list the call sites with no entry (or 'all')")
    ap.add_argument("--show", metavar="COMPONENT", help="list the lines not named with their cause (or 'all')")
    a = ap.parse_args()
    both = not a.recall and not a.naming
    if a.recall or both:
        recall(a.missing)
    if a.naming or both:
        naming(a.show)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
