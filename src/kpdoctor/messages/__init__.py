"""What kube-proxy, its node tools and the kernel can print, read from their source: the data
(one YAML file per component here), its schema and loader (:mod:`.schema`), templates as
regular expressions (:mod:`.templates`) and one matcher for them all (:mod:`.match`).

``python -m kpdoctor.messages > docs/messages.md`` writes the documentation from the data.
Importing this package reads nothing: the data is loaded when :func:`catalogue` is first called.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpdoctor.messages.match import Matcher
    from kpdoctor.messages.schema import Catalogue

__all__ = ["catalogue", "matcher"]


@functools.cache
def catalogue() -> Catalogue:
    """The catalogue shipped with kpdoctor, loaded and validated once per process."""
    from kpdoctor.messages.schema import load  # YAML is parsed only by a caller that needs it

    return load()


@functools.cache
def matcher() -> Matcher:
    """One matcher of the shipped catalogue per process (the intake and the checks share it)."""
    from kpdoctor.messages.match import Matcher

    return Matcher(catalogue())
