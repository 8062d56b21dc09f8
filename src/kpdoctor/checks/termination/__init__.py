"""Checks of workloads behind Services: connections lost when their Pods stop (seed 004)."""
