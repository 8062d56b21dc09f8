"""Checks of workloads behind Services: connections lost when their Pods stop (seed 004)."""

# KP403 reads how containers stopped (timed stops, runtime logs) rather than Pod specs; it is
# registered with this package so that importing ``shutdown`` (checks/__init__.py) loads it too.
from kpdoctor.checks.termination import stop_timing

__all__ = ["stop_timing"]
