"""``python -m kirolearn.roles.storage``: the supervisor starts the role so."""

from kirolearn.roles import base
from kirolearn.roles.storage.role import Storage

base.main(Storage)
