"""The retrieval role: ``role`` (the process: it answers searches, session starts and
the brief through ``search.Engine``) and ``briefs`` (the brief rewritten by a model in
the background)."""

from kirolearn.roles.retrieval.role import Retrieval

__all__ = ["Retrieval"]
