"""Which Service the user means: ``--service`` as people write it, against the Services in the
evidence (a port by name or number, a bare name, the closest names when there is no match)."""

from __future__ import annotations

from kpdoctor.dataplane.service_info import read_service
from kpdoctor.parse.k8s import K8sObject


class ServiceNotFound(ValueError):
    """A ``--service`` that names no Service (port) in the evidence; ``str()`` is the one line
    the user reads, with the closest names when there are some."""


def _ports_of(svc: K8sObject) -> list[tuple[str, int | None, str]]:
    """(name, number, protocol) of each port a Service declares."""
    return [(p.name, p.port, p.protocol) for p in read_service(svc).ports]


def resolve_service(services: list[K8sObject], wanted: str) -> tuple[str, str]:
    """A ``--service`` as users write it, as the filter :func:`service_matches` takes, and a
    notice to print (or ""). ``NS/NAME``, ``NS/NAME:PORT`` with the port's name or its number
    (users think ``kubectl port-forward svc/web 80``; ``53`` is both DNS ports, ``53/udp`` one),
    and a bare ``NAME`` when one namespace has it. Raises :class:`ServiceNotFound` saying what
    exists: "did you mean ns1/svc1".

    kube-proxy names a port ``NS/NAME:PORTNAME`` (just ``NS/NAME`` for a single unnamed port),
    and so do results and findings; the filter is made of those labels."""
    import difflib

    text = wanted.strip()
    name_part, _, port_part = text.partition(":")
    refs: dict[str, K8sObject] = {}
    for svc in services:
        refs.setdefault(f"{svc.namespace or 'default'}/{svc.name}", svc)
    if "/" in name_part:
        ref = name_part
        if ref not in refs:
            name = ref.split("/", 1)[1]
            same = sorted(r for r in refs if r.split("/", 1)[1] == name)
            close = same or difflib.get_close_matches(ref, list(refs), n=3, cutoff=0.6)
            raise ServiceNotFound(f"no Service {ref} in the evidence" + _hint(close, refs))
    else:
        same = sorted(r for r in refs if r.split("/", 1)[1] == name_part)
        if len(same) > 1:
            raise ServiceNotFound(
                f"Services named {name_part} are in several namespaces: give NS/NAME ({', '.join(same)})"
            )
        if not same:
            names = {r.split("/", 1)[1]: r for r in refs}
            close = [names[n] for n in difflib.get_close_matches(name_part, list(names), n=3, cutoff=0.6)]
            raise ServiceNotFound(f"no Service named {name_part} in the evidence (give NS/NAME)" + _hint(close, refs))
        ref = same[0]
    if not port_part:
        return ref, (f"--service {wanted} means {ref}" if ref != text else "")
    ports = _ports_of(refs[ref])
    number, _, proto = port_part.partition("/")
    labels = [f"{ref}:{n}" if n else ref for n, _, _ in ports if n == port_part]
    if not labels and number.isascii() and number.isdigit():
        labels = [
            f"{ref}:{n}" if n else ref
            for n, num, pr in ports
            if num == int(number[:6]) and (not proto or pr == proto.upper())
        ]
    if not labels:
        known = ", ".join(f"{n or '(unnamed)'} = {num}/{pr}" for n, num, pr in ports) or "none"
        raise ServiceNotFound(f"{ref} has no port {port_part} (its ports: {known})")
    labels = list(dict.fromkeys(labels))
    return ",".join(labels), (f"--service {wanted} means {', '.join(labels)}" if labels != [text] else "")


def _hint(close: list[str], refs: dict[str, K8sObject]) -> str:
    if close:
        return f"; did you mean {' or '.join(close)}?"
    if not refs:
        return " (no Services in the evidence)"
    some = sorted(refs)
    return f" (Services: {', '.join(some[:8])}{' ...' if len(some) > 8 else ''})"
