"""This kpdoctor's own release (pyproject.toml's version), on the ground floor: the report,
the bundle and the agent's metrics name it without importing the library's front door."""

__version__ = "0.1.0"
