"""Allow ``python -m kpdoctor``."""

from kpdoctor.cli import main

main()
