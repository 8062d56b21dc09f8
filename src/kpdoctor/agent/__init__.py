"""``kpdoctor agent``: every node diagnosing itself, continuously (a DaemonSet).

The parts, in the order data flows: :mod:`.cluster` keeps the cluster current by list-and-watch;
:mod:`.loop` runs the cycles (collect the node, diagnose with the previous verification carried
over, gate counter findings through :mod:`.counters`); :mod:`.node_status` writes the Events and
the Node condition (the only writes to the cluster); :mod:`.metrics` and :mod:`.server` expose
the last cycle to Prometheus and to the node's operators; :mod:`.service` puts them together.
"""
