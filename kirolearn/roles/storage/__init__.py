"""The storage role, the single writer: ``role`` (the process: its sockets and ops),
``writer`` (its one connection to the store, and what it does when the store cannot be
written), ``handout`` (extraction batches out to workers, results back) and ``leases``
(who holds which batch)."""

from kirolearn.roles.storage.role import Storage

__all__ = ["Storage"]
