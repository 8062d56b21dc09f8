"""kpdoctor: find out why Kubernetes Services are unreachable on a node, with proof.

As a library::

    import kpdoctor
    report = kpdoctor.run(["node-dump/"], node="worker-1")
    for f in report.findings:            # ranked: the root cause first
        print(f.code, f.cause, f.severity.label, f.summary)
    report.to_json()                     # the `kpdoctor.report/v1` document

A run is self-contained and repeatable: it keeps nothing between runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from kpdoctor.about import __version__

__all__ = ["__version__", "run"]

if TYPE_CHECKING:
    from kpdoctor.bundle.loader import Evidence
    from kpdoctor.model import Report, Severity


def run(
    inputs: Iterable[str | Path] | Evidence,
    *,
    node: str | None = None,
    command: str = "diagnose",
    min_severity: Severity | None = None,
    service: str | None = None,
) -> Report:
    """Diagnose the evidence in ``inputs`` (files, folders, bundles, archives; or an
    :class:`~kpdoctor.bundle.loader.Evidence` already loaded, e.g. from a live collection) and
    return the report. ``command="verify"`` runs only the data-plane verification and its checks;
    ``service`` narrows the verification to one Service (``namespace/name``). Unreadable inputs
    are the report's ``problems``; a bug in a stage is one of its ``errors``, never an exception.
    """
    import kpdoctor.checks  # noqa: F401 - declares every check and log signature (an entry point)
    from kpdoctor.bundle.loader import Evidence, load
    from kpdoctor.diagnose import diagnose_evidence
    from kpdoctor.model import Severity

    sev = Severity.WARNING if min_severity is None else min_severity
    if isinstance(inputs, Evidence):
        return diagnose_evidence(inputs, node=node, min_severity=sev, command=command, service=service)
    evidence = load(inputs)
    try:
        return diagnose_evidence(evidence, node=node, min_severity=sev, command=command, service=service)
    finally:
        evidence.close()
