"""The ingest role, the only door for events and record changes: ``role`` (the process:
its op table, the preparer thread, the spool drain), ``checks`` (what it lets through:
pure functions of a request) and ``searches`` (the searches it asks retrieval for)."""

from kirolearn.roles.ingest.role import Ingest

__all__ = ["Ingest"]
