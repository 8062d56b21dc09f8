"""Built-in example bundles, one per seed scenario, shipped inside the package."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Demo:
    name: str
    description: str
    order: int


def _bundles_dir() -> Path:
    return Path(str(resources.files("kpdoctor.demo"))) / "bundles"


def _discover() -> list[Demo]:
    out: list[Demo] = []
    root = _bundles_dir()
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        manifest = d / "manifest.json"
        if not manifest.is_file():
            continue
        meta = json.loads(manifest.read_text(encoding="utf-8"))
        out.append(Demo(d.name, str(meta.get("description", "")), int(meta.get("demo_order", 99))))
    return sorted(out, key=lambda x: (x.order, x.name))


DEMOS = _discover()


def demo_path(name: str) -> Path:
    return _bundles_dir() / name
