"""Checks on the data-plane verification: rules that do not do what the cluster says."""
