"""Who may read and write what: the authorization of a client of a daemon elsewhere.

A machine connected over TCP is let in by its CURVE key, and the key is its actor: the
name it was added under (``kirolearn keys add NAME``). The gateway checks every request
of such a client here before any role sees it (``check``), and stamps it with the
client's name, so that the roles know whose it is. The rule (docs/team.md):

- a client writes (events, records, edits, forgets) only into its own actor's
  namespaces: ``/actor/NAME/…`` and ``/actor/NAME+private/…``;
- it reads its own actor's namespaces, every project of them, and, beside them, the
  shared (not ``+private``) namespaces of other actors in the projects it may see
  (``may_see``): those it has contributed to (it has memories or events there, or is
  storing the prompt being answered there), and those an owner granted it with
  ``kirolearn keys grant``; never in a client's global project, which is its own.

A request that names a namespace outside that is refused whole with ``FORBIDDEN``
and changes nothing. Requests on the daemon's own machine (its ipc sockets, private
to its user) are the owner's and are not restricted.
Standard library and the project module only: the gateway imports it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from kirolearn import project


class Forbidden(Exception):
    """A request reaches what is not its client's; the message says what."""


def actors_of(client: str) -> tuple[str, str]:
    """The actors a client's key speaks for: its name, and its name made private."""
    return client, client + project.PRIVATE


def owns(client: str, namespace: str) -> bool:
    return namespace.startswith("/actor/") and project.parts(namespace)[0] in actors_of(client)


def own_namespaces(client: str, project_id: str) -> list[str]:
    return [project.namespace_for(actor, project_id) for actor in actors_of(client)]


def may_see(client: str, project_id: str, clients: Iterable[str], granted: set[str],
            contributed: Callable[[], bool]) -> bool:
    """Whether ``client`` reads the other actors' shared namespaces of a project: never
    in a client's global project (one's own is one's alone, and nobody else's may be
    joined); one granted to it; one it contributed to."""
    if any(project_id == project.global_project_id(name) for name in (client, *clients)):
        return False
    return project_id in granted or contributed()


# -- the requests a client elsewhere may make (gateway.REMOTE_OPS) -----------------------------

def _namespace(client: str, value: object, where: str) -> None:
    """Refuse a namespace that is not the client's; leave anything that is not a string
    to the role, which answers it as malformed."""
    if isinstance(value, str) and not owns(client, value):
        raise Forbidden(f"{where} {value!r} is not {client}'s: a key reaches only its own"
                        f" actor's namespaces (/actor/{client}/… and"
                        f" /actor/{client}{project.PRIVATE}/…)")


def _namespaces(client: str, value: object, where: str) -> None:
    if isinstance(value, list):
        for item in value:
            _namespace(client, item, where)


def _event(client: str, event: object, where: str) -> None:
    if isinstance(event, str):  # a line of a bulk import
        try:
            event = json.loads(event)
        except (ValueError, RecursionError):
            return  # not JSON: ingest rejects it
    if not isinstance(event, dict):
        return
    _namespace(client, event.get("namespace"), f"{where}'s namespace")
    actor = event.get("actor_id")
    if isinstance(actor, str) and actor not in actors_of(client):
        raise Forbidden(f"{where} is stored as {actor!r}, but this key is {client}'s: its"
                        f" events are {client}'s (or {client}{project.PRIVATE}'s)")


def check(client: str, target: str, op: str, body: dict) -> None:
    """Raise Forbidden when the request of ``client`` names what is not its own."""
    if target == "ingest" and op == "put_event":
        _event(client, body.get("event"), "the event")
        _namespace(client, body.get("global_namespace"), "global_namespace")
    elif target == "ingest" and op == "put_events":
        for field in ("events", "lines"):
            items = body.get(field)
            for index, item in enumerate(items if isinstance(items, list) else ()):
                _event(client, item, f"{field}[{index}]")
    elif target == "ingest" and op == "put_rule_file":
        _namespace(client, body.get("namespace"), "namespace")
    elif target == "ingest" and op == "put_record":
        record = body.get("record")
        if isinstance(record, dict):
            _namespace(client, record.get("namespace"), "the record's namespace")
    elif op in ("forget", "update_record", "get_records", "timeline"):
        _namespaces(client, body.get("namespaces"), "namespace")
    elif op == "search":
        _namespaces(client, body.get("namespaces"), "namespace")
        _namespace(client, body.get("namespace"), "namespace")
        _namespace(client, body.get("global_namespace"), "global_namespace")
        if isinstance(body.get("event"), dict):
            _namespace(client, body["event"].get("namespace"), "the event's namespace")
    elif op in ("resume_session", "session_context", "session_events", "brief"):
        _namespace(client, body.get("namespace"), "namespace")
    elif op != "ping":  # an op without a rule here is nobody's
        raise Forbidden(f"{target}.{op} has no authorization rule")
