"""Writing a bundle: the DESIGN.md layout plus ``manifest.json``, as a folder or a ``.tar.gz``.

The manifest keeps, for every artifact, the command or API call that produced it, its exit code,
stderr, start time and duration, and for every artifact that is absent, why: so whoever reads the
bundle later (kpdoctor or a person) can tell *unknown* from *healthy*.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kpdoctor.about import __version__
from kpdoctor.bundle.contents import Collected, NotCollected
from kpdoctor.outfile import create_folder, replacing


@dataclass
class Bundle:
    """A collected bundle in memory."""

    artifacts: list[Collected] = field(default_factory=list)
    skipped: list[NotCollected] = field(default_factory=list)
    node: str | None = None
    hostname: str | None = None
    collected_at: str = ""
    duration_ms: int = 0
    info: dict[str, object] = field(default_factory=dict)  # host_root, redaction, cluster access...

    def manifest(self) -> dict[str, object]:
        return {
            "tool": {"name": "kpdoctor", "version": __version__},
            "node": self.node,
            "hostname": self.hostname,
            "collected_at": self.collected_at,
            "duration_ms": self.duration_ms,
            **self.info,
            "artifacts": [a.manifest_entry() for a in self.artifacts],
            "not_collected": [s.manifest_entry() for s in self.skipped],
        }

    def files(self) -> list[tuple[str, bytes]]:
        manifest = json.dumps(self.manifest(), indent=2).encode() + b"\n"
        return [("manifest.json", manifest), *((a.path, a.data) for a in self.artifacts)]


def _checked(path: str) -> PurePosixPath:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"bundle path {path!r} leaves the bundle")
    return p


def write_dir(bundle: Bundle, dest: Path) -> Path:
    """Write the bundle into the (new or empty) folder ``dest``, readable by its owner only; no
    file is written through a link (kpdoctor/outfile.py)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    put = create_folder(dest)
    for path, data in bundle.files():
        put(str(_checked(path)), data)
    return dest


def write_tar(bundle: Bundle, dest: Path, top: str) -> Path:
    """Write the bundle as ``dest`` (.tar.gz) with every file under the folder ``top``: under a
    fresh name first, then renamed (kpdoctor/outfile.py), so an interrupted run never leaves a half
    archive under ``dest`` and a link planted at ``dest`` is replaced, never written through."""
    now = time.time()
    # it describes the node in detail: not for every local user
    with replacing(dest, 0o600) as fh, tarfile.open(fileobj=fh, mode="w:gz") as tf:
        for path, data in bundle.files():
            info = tarfile.TarInfo(f"{top}/{_checked(path)}")
            info.size = len(data)
            info.mtime = int(now)
            info.mode = 0o600
            tf.addfile(info, io.BytesIO(data))
    return dest
