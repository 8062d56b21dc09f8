"""A CNI network configuration (``/etc/cni/net.d/*.conf`` or ``*.conflist``): which plugins set up
a Pod's interface, and the settings of a Linux-bridge one.

Why: a bridge CNI decides whether a Pod reaches its own Service (its ``hairpinMode``, or
``promiscMode`` on the bridge); kubelet's ``--hairpin-mode`` does not for CNI plugins.

Formats (the CNI specification's network configuration, JSON): a ``.conflist`` is
``{"cniVersion", "name", "plugins": [{"type": ...}, ...]}``, a ``.conf`` one plugin's object at the
top. The reference bridge plugin (containernetworking/plugins, plugins/main/bridge) reads
``bridge`` (default ``cni0``), ``hairpinMode`` and ``promiscMode`` (both false by default);
flannel's plugin hands its ``delegate`` object to the bridge plugin unless the delegate names
another ``type``. Nothing here raises: what is not such a configuration gives None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kpdoctor.parse.structured import StructuredError, load_json

DEFAULT_BRIDGE = "cni0"


@dataclass(frozen=True, slots=True)
class BridgeSetup:
    """The Linux-bridge plugin of a configuration (itself, or flannel's delegate)."""

    bridge: str
    hairpin: bool
    promisc: bool
    via: str  # "bridge", or "flannel" (its delegate)
    line: int  # where its plugin's "type" is written
    text: str


@dataclass(frozen=True, slots=True)
class CniConfig:
    name: str
    bridge: BridgeSetup | None


def looks_like_cni_config(doc: object) -> bool:
    """A network configuration: a ``cniVersion`` with plugins, or a plugin's ``type``."""
    return isinstance(doc, dict) and "cniVersion" in doc and (isinstance(doc.get("plugins"), list) or "type" in doc)


def parse_cni_config(text: str, first_line: int = 1) -> CniConfig | None:
    try:
        doc = load_json(text)
    except StructuredError:
        return None
    if not looks_like_cni_config(doc):
        return None
    plugins = [p for p in doc.get("plugins", [doc]) if isinstance(p, dict)]
    bridge = None
    for p in plugins:
        kind = p.get("type")
        conf: dict[str, Any] | None = None
        if kind == "bridge":
            conf = p
        elif kind == "flannel":
            got = p.get("delegate")
            delegate: dict[str, Any] = got if isinstance(got, dict) else {}
            conf = delegate if delegate.get("type", "bridge") == "bridge" else None
        if conf is None:
            continue
        line, said = _line_of(text, first_line, f'"{kind}"')
        bridge = BridgeSetup(
            str(conf.get("bridge") or DEFAULT_BRIDGE),
            conf.get("hairpinMode") is True,
            conf.get("promiscMode") is True,
            str(kind),
            line,
            said,
        )
        break
    return CniConfig(str(doc.get("name", "")), bridge)


def _line_of(text: str, first_line: int, needle: str) -> tuple[int, str]:
    for i, ln in enumerate(text.splitlines()):
        if needle in ln:
            return first_line + i, ln.strip()
    return first_line, text.strip().splitlines()[0] if text.strip() else ""
