"""The evidence shapes read line by line, each declared by its parser module
(:class:`~kpdoctor.parse.evidence_shape.EvidenceShape`): the one place a new shape is registered.
The content sniffer types a whole text by them, the segmenter a run of lines in a paste, and the
facts read their records (``Facts.records``); tests/test_evidence_shapes.py holds each to its
example."""

from __future__ import annotations

from typing import Any

from kpdoctor.parse import (
    arping,
    ethtool,
    ip_brief,
    ipvs_conn,
    kernel_config,
    neigh_stats,
    neighbours,
    softnet,
    tcpdump,
    xtrace,
)
from kpdoctor.parse.evidence_shape import EvidenceShape

REGISTERED: tuple[EvidenceShape[Any], ...] = (
    tcpdump.SHAPE,
    ethtool.SHAPE,
    ethtool.FEATURES,
    xtrace.SHAPE,
    ipvs_conn.SHAPE,
    kernel_config.SHAPE,
    arping.SHAPE,
    ip_brief.SHAPE,
    neigh_stats.SHAPE,
    neighbours.SHAPE,
    softnet.SHAPE,
)
