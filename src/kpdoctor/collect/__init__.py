"""Sources: read-only collection from a live node and the Kubernetes API into a bundle.

Everything here only reads: fixed argv vectors (no shell), a timeout on every command and API
call, a bound on the whole run, and nothing that takes the xtables lock, loads a kernel module or
creates a table as a side effect.
"""
