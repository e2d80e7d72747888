"""``python -m kirolearn.roles.retrieval``: the supervisor starts the role so."""

from kirolearn.roles import base
from kirolearn.roles.retrieval.role import Retrieval

base.main(Retrieval)
