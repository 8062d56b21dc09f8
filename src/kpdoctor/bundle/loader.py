"""Turn what the user handed over (files, folders, tarballs) into typed artifacts.

Bundle folders (with ``manifest.json``) are typed by path; everything else by content. Nothing
here raises on bad input: every unusable input becomes a one-line ``InputProblem`` and the rest
is still used.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kpdoctor.bundle.archive import ArchiveError, extract, is_archive
from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.bundle.layout import BUNDLE_PATHS, KNOWN_UNUSED_PREFIXES
from kpdoctor.bundle.sniff import HEAD_BYTES, Typed, looks_binary, save_attrs, sniff
from kpdoctor.bundle.transcript import Part, has_prompt, hint_from_command, split_transcript
from kpdoctor.model import InputProblem

MAX_TRANSCRIPT_BYTES = 64 * 1024**2  # a pasted session is small; a huge file is a log
MAX_INLINE_BYTES = 256 * 1024**2  # non-log artifacts are read into memory up to this size
LAZY_BYTES = 4 * 1024**2  # above this, rule dumps and object lists are read when parsed, not kept
LAZY_KINDS = (Kind.IPTABLES_SAVE, Kind.K8S_OBJECTS)
_KIND_HINTS = {
    "hostname": Kind.HOSTNAME,
    "locks": Kind.LOCKS,
    "cmdline": Kind.KUBE_PROXY_CMDLINE,
    "os-release": Kind.OS_RELEASE,
    "modules": Kind.MODULES,
    "nf_conntrack-stat": Kind.NF_CONNTRACK_STAT,
    "conntrack-list": Kind.CONNTRACK_ENTRIES,
    "sysctl": Kind.SYSCTL,
}


@dataclass
class Evidence:
    """The immutable set of artifacts a run works on, plus what could not be used."""

    artifacts: list[Artifact] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    node: str | None = None
    collected_at: str | None = None
    _tempdirs: list[str] = field(default_factory=list)

    def of(self, kind: Kind) -> list[Artifact]:
        return [a for a in self.artifacts if a.kind == kind]

    def has(self, kind: Kind) -> bool:
        return any(a.kind == kind for a in self.artifacts)

    def close(self) -> None:
        for d in self._tempdirs:
            shutil.rmtree(d, ignore_errors=True)
        self._tempdirs.clear()


def load(paths: Iterable[str | Path]) -> Evidence:
    """Load every path; unusable ones become problems, never exceptions."""
    ev = Evidence()
    for raw in paths:
        path = Path(raw)
        label = str(raw)
        try:
            if not path.exists():
                ev.problems.append(InputProblem(label, "no such file or directory"))
            elif path.is_dir():
                _load_dir(ev, path, label)
            elif is_archive(path):
                _load_archive(ev, path, label)
            else:
                _load_file(ev, path, label)
        except PermissionError:
            ev.problems.append(InputProblem(label, "permission denied"))
        except OSError as exc:
            ev.problems.append(InputProblem(label, f"cannot read: {exc.strerror or exc}"))
    return ev


def _load_archive(ev: Evidence, path: Path, label: str) -> None:
    tmp = tempfile.mkdtemp(prefix="kpdoctor-")
    ev._tempdirs.append(tmp)
    try:
        out = extract(path, Path(tmp))
    except ArchiveError as exc:
        ev.problems.append(InputProblem(label, str(exc)))
        return
    for name, reason in out.refused:
        ev.problems.append(InputProblem(f"{label}:{name}", f"refused: {reason}"))
    root = Path(tmp)
    entries = [p for p in root.iterdir()]
    if len(entries) == 1 and entries[0].is_dir():
        root = entries[0]
    _load_dir(ev, root, label, display_root=label)


def _load_dir(ev: Evidence, root: Path, label: str, display_root: str | None = None) -> None:
    manifest_path = root / "manifest.json"
    manifest: dict[str, dict[str, object]] = {}
    bundle = manifest_path.is_file()
    if bundle:
        manifest = _read_manifest(ev, manifest_path, label)
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    dump = _is_cluster_info_dump(root)
    ignored_logs = 0
    for f in files:
        rel = f.relative_to(root).as_posix()
        shown = f"{display_root}:{rel}" if display_root else str(f)
        if rel == "manifest.json":
            continue
        if bundle and rel in BUNDLE_PATHS:
            kind, attrs = BUNDLE_PATHS[rel]
            entry = manifest.get(rel, {})
            exit_code = entry.get("exit_code")
            if isinstance(exit_code, int) and exit_code != 0 and f.stat().st_size == 0:
                stderr = str(entry.get("stderr") or "").strip().splitlines()
                why = stderr[0] if stderr else ""
                ev.problems.append(InputProblem(rel, f"not collected (exit {exit_code}{': ' + why if why else ''})"))
                continue
            attrs = dict(attrs)
            when = entry.get("collected_at") or entry.get("started_at")
            if isinstance(when, str) and when:
                attrs["time"] = when  # counter snapshots: the interval between T0 and T1
            _add_typed(ev, f, rel, Typed(kind, attrs))
            continue
        if bundle and rel.startswith(KNOWN_UNUSED_PREFIXES):
            continue
        if dump and rel.endswith("logs.txt") and "kube-proxy" not in rel:
            ignored_logs += 1
            continue
        _load_file(ev, f, rel if bundle or display_root else shown)
    if ignored_logs:
        ev.problems.append(InputProblem(label, f"cluster-info dump: {ignored_logs} logs of other Pods not read"))


def _is_cluster_info_dump(root: Path) -> bool:
    return (root / "nodes.json").is_file() and any(root.glob("*/pods.json"))


def _read_manifest(ev: Evidence, path: Path, label: str) -> dict[str, dict[str, object]]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError as exc:
        ev.problems.append(InputProblem(f"{label}/manifest.json", f"invalid JSON ({exc}); bundle typed by path only"))
        return {}
    if not isinstance(doc, dict):
        ev.problems.append(InputProblem(f"{label}/manifest.json", "not a JSON object"))
        return {}
    node = doc.get("node") or doc.get("node_name")
    if isinstance(node, str) and node:
        ev.node = ev.node or node
    collected = doc.get("collected_at")
    if isinstance(collected, str):
        ev.collected_at = ev.collected_at or collected
    entries: dict[str, dict[str, object]] = {}
    absent = doc.get("not_collected")
    if isinstance(absent, list):
        for a in absent:
            if isinstance(a, dict) and isinstance(a.get("path"), str):
                why = a.get("reason") or "no reason given"
                ev.problems.append(InputProblem(str(a["path"]), f"not collected: {why}"))
    arts = doc.get("artifacts")
    if isinstance(arts, list):
        for a in arts:
            if isinstance(a, dict) and isinstance(a.get("path"), str):
                entries[str(a["path"])] = a
    return entries


def _read_head(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(HEAD_BYTES)


def _load_file(ev: Evidence, path: Path, label: str) -> None:
    size = path.stat().st_size
    if size == 0:
        ev.problems.append(InputProblem(label, "empty file, skipped"))
        return
    head = _read_head(path)
    if looks_binary(head):
        ev.problems.append(InputProblem(label, "binary data, not text evidence: skipped"))
        return
    head_text = head.decode("utf-8", errors="replace")
    # A pasted session starts with its first command; a big file with no prompt in its head is
    # one command's output, and is not read whole just to look for prompts.
    if size <= MAX_TRANSCRIPT_BYTES and (size <= len(head) or has_prompt(head_text)):
        text = path.read_text(encoding="utf-8", errors="replace") if size > len(head) else head_text
        parts = split_transcript(text)
        if parts is not None:
            _load_transcript(ev, label, parts)
            return
    typed = sniff(head_text)
    if typed.kind is None:
        ev.problems.append(InputProblem(label, typed.reason))
        return
    _add_typed(ev, path, label, typed)


def _add_typed(ev: Evidence, path: Path, label: str, typed: Typed) -> None:
    assert typed.kind is not None
    size = path.stat().st_size
    if typed.kind == Kind.KUBE_PROXY_LOG:
        ev.artifacts.append(Artifact(label, typed.kind, path=os.fspath(path), attrs=typed.attrs, size=size))
        return
    if size > MAX_INLINE_BYTES:
        ev.problems.append(InputProblem(label, f"{size // 1024**2} MiB is too large for {typed.kind.value}: skipped"))
        return
    if typed.kind in LAZY_KINDS and size > LAZY_BYTES:
        # Parsed once into facts: keep the path, not a second copy of 100 MB of text in memory.
        attrs = typed.attrs
        if typed.kind == Kind.IPTABLES_SAVE and "backend" not in attrs:
            attrs = {**attrs, **save_attrs(_read_head(path).decode("utf-8", errors="replace"))}
        ev.artifacts.append(Artifact(label, typed.kind, path=os.fspath(path), attrs=attrs, size=size))
        return
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    if typed.kind == Kind.IPTABLES_SAVE and "backend" not in typed.attrs:
        typed = Typed(typed.kind, {**typed.attrs, **save_attrs(text)})
    kind = typed.kind
    assert kind is not None
    ev.artifacts.append(Artifact(label, kind, text=text, attrs=typed.attrs, size=size))


def _load_transcript(ev: Evidence, label: str, parts: list[Part]) -> None:
    used = 0
    when: str | None = None  # the output of the last `date`: when the following commands ran
    for p in parts:
        if not p.text.strip():
            continue
        if p.argv[0].rsplit("/", 1)[-1] == "date":
            when = p.text.strip().splitlines()[0]
            continue
        hints = hint_from_command(p.argv)
        if when is not None:
            hints["time"] = when
        forced = _KIND_HINTS.get(hints.pop("kind", ""))
        typed = Typed(forced, {}) if forced else sniff(p.text)
        if typed.kind is None:
            ev.problems.append(InputProblem(f"{label}:{p.first_line - 1}", f"output of `{p.command}`: {typed.reason}"))
            continue
        attrs = {**typed.attrs, **hints}
        if typed.kind == Kind.IPTABLES_SAVE and "backend" not in attrs:
            attrs.update({k: v for k, v in save_attrs(p.text).items() if k not in attrs})
        attrs["command"] = p.command
        ev.artifacts.append(
            Artifact(label, typed.kind, text=p.text, first_line=p.first_line, attrs=attrs, size=len(p.text))
        )
        used += 1
    if not used:
        ev.problems.append(InputProblem(label, "terminal transcript, but no command output kpdoctor reads"))
