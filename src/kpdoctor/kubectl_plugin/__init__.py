"""``kubectl kpdoctor``: kpdoctor driven from kubectl (docs/kubectl.md).

``kubectl kpdoctor node NODE`` runs ``kpdoctor diagnose --live`` in a short-lived debug Pod on that
node and streams its report back; ``kubectl kpdoctor cluster`` reads what the agents (the
DaemonSet in deploy/) wrote on every Node into one table, grouped by cause.
"""
