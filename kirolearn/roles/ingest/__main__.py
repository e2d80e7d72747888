"""``python -m kirolearn.roles.ingest``: the supervisor starts the role so."""

from kirolearn.roles import base
from kirolearn.roles.ingest.role import Ingest

base.main(Ingest)
