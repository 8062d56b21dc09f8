"""Safe extraction of bundle tarballs.

A bundle may come from anyone: entries with ``../`` or absolute paths, links that leave the
bundle, device files, decompression bombs and millions of tiny files are refused, each with a
one-line reason, and the rest of the archive is still used.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_TOTAL_BYTES = 4 * 1024**3  # uncompressed, whole archive
MAX_MEMBER_BYTES = 2 * 1024**3 + 1024**2
MAX_MEMBERS = 20_000


class ArchiveError(Exception):
    """The archive cannot be used at all."""


@dataclass
class Extracted:
    root: Path
    refused: list[tuple[str, str]] = field(default_factory=list)  # (member name, reason)


def is_archive(path: Path) -> bool:
    name = path.name.lower()
    if name.endswith((".tar.gz", ".tgz", ".tar", ".tar.xz", ".tar.bz2")):
        return True
    try:
        return tarfile.is_tarfile(path)
    except OSError:
        return False


def _safe_name(name: str) -> PurePosixPath | None:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        return None
    parts = [x for x in p.parts if x not in (".", "")]
    if not parts:
        return None
    return PurePosixPath(*parts)


def extract(archive: Path, dest: Path) -> Extracted:
    """Extract ``archive`` into ``dest`` (an empty directory), refusing anything unsafe."""
    out = Extracted(dest)
    total = 0
    try:
        tf = tarfile.open(archive, mode="r:*")  # noqa: SIM115 (closed by the with below)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"not a readable tar archive ({exc})") from None
    with tf:
        count = 0
        try:
            for member in tf:
                count += 1
                if count > MAX_MEMBERS:
                    out.refused.append(("...", f"more than {MAX_MEMBERS} entries: the rest ignored"))
                    break
                rel = _safe_name(member.name)
                if rel is None:
                    out.refused.append((member.name, "path leaves the bundle (absolute or '..')"))
                    continue
                if member.issym() or member.islnk():
                    out.refused.append((member.name, "link entries are not extracted"))
                    continue
                if member.isdir():
                    (dest / rel).mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    out.refused.append((member.name, "not a regular file"))
                    continue
                if member.size > MAX_MEMBER_BYTES:
                    out.refused.append((member.name, f"larger than {MAX_MEMBER_BYTES // 1024**2} MiB"))
                    continue
                total += member.size
                if total > MAX_TOTAL_BYTES:
                    out.refused.append((member.name, "archive expands past 4 GiB: the rest ignored"))
                    break
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                if not os.path.realpath(target).startswith(os.path.realpath(dest) + os.sep):
                    out.refused.append((member.name, "path leaves the bundle"))
                    continue
                src = tf.extractfile(member)
                if src is None:
                    out.refused.append((member.name, "unreadable entry"))
                    continue
                with src, open(target, "wb") as fh:
                    remaining = member.size
                    while remaining > 0:
                        chunk = src.read(min(1 << 20, remaining))
                        if not chunk:
                            break
                        fh.write(chunk)
                        remaining -= len(chunk)
        except (tarfile.TarError, OSError, EOFError) as exc:
            out.refused.append(("...", f"archive truncated or corrupt after {count} entries ({exc})"))
    return out
