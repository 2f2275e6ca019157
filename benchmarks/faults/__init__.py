"""Issue 31's fault suite (``make faults``) and the pieces the poison tests share with it.

``proxy`` (an HTTP fault proxy in front of MinIO), ``poison`` (one builder per poison record
kind), ``stack`` (the suite's own ``scripts/stack`` instance on other ports), ``ledger`` (the
table's accounting), ``suite`` (the faults), ``soak`` (the long run), ``__main__`` (the command).
"""
