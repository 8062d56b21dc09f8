"""What kube-proxy, its node tools and the kernel can print, read from their source: the data
(one YAML file per component here), its schema and loader (:mod:`.catalogue`), templates as
regular expressions (:mod:`.templates`) and one matcher for them all (:mod:`.match`).

``python -m kpdoctor.messages > docs/messages.md`` writes the documentation from the data.
"""

from __future__ import annotations

import functools

from kpdoctor.messages.catalogue import Catalogue, CatalogueError, Message, load

__all__ = ["Catalogue", "CatalogueError", "Message", "catalogue"]


@functools.cache
def catalogue() -> Catalogue:
    """The catalogue shipped with kpdoctor, loaded and validated once per process."""
    return load()
