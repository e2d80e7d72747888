"""What ingest lets through its door: an event prepared for storage (validated,
scrubbed, hashed), and each record write checked and its text scrubbed before it is
relayed. Pure functions of the request: no sockets, no state."""

from __future__ import annotations

import base64
import binascii
import json

from kirolearn import contract, privacy, rules
from kirolearn.extract import rules as rule_records


class BadLine:
    """A line of an import (or a spool file) that is not JSON: rejected like an invalid
    event."""

    def __init__(self, reason: str):
        self.reason = reason


def decode(line: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        return BadLine(f"not JSON: {exc}")
    except RecursionError:
        return BadLine(f"is nested more than {contract.MAX_DEPTH} levels deep")


def prepare(event: object) -> tuple[dict, dict]:
    """Validate, verify the hash, scrub and re-hash one event (raises ContractError).

    Returns what storage stores (``contract.stored_form``: the row, with the scrubbed
    body's canonical JSON) and the scrubbed body itself. The body is serialized
    once, here; storage never re-encodes it.
    """
    if isinstance(event, BadLine):
        raise contract.ContractError([contract.FieldError("event", event.reason)])
    body_json, valid_ms = contract.validate_event(event)
    digest = contract.hash_json(body_json)
    claimed = event.get("content_hash")
    if claimed is not None and claimed != digest:
        raise contract.ContractError([contract.FieldError(
            "content_hash", "does not match the body (sha256 of its canonical JSON)")])
    body = event["body"]
    if privacy.may_need_scrub(body_json):
        body = privacy.scrub(body)
        if body != event["body"]:
            body_json = contract.canonical_json(body)
            digest = contract.hash_json(body_json)
    return contract.stored_form(event, body_json, valid_ms, digest), body


def check_put_record(body: dict) -> dict:
    """A record to save, scrubbed and checked against the contract (raises
    ContractError)."""
    record = body.get("record")
    if not isinstance(record, dict):
        raise contract.ContractError([contract.FieldError("record", "must be an object")])
    return {"record": contract.validate_record(privacy.scrub_record(record))}


def check_rule_file(body: dict) -> dict:
    """A rule file of a project (``put_rule_file``): its name, and its text scrubbed and
    made into its record (None: the file is gone)."""
    namespace, name, text = body.get("namespace"), body.get("name"), body.get("text")
    errors = []
    if not contract.is_namespace(namespace):
        errors.append(contract.FieldError("namespace", "must be a namespace"
                                          " (/actor/<user>/project/<id>/)"))
    if not isinstance(name, str) or not 0 < len(name) <= 500:
        errors.append(contract.FieldError("name", "must be the file's name, 1 to 500"
                                          " characters"))
    if text is not None and not (isinstance(text, str) and len(text) <= rules.MAX_BYTES):
        errors.append(contract.FieldError("text", f"must be the file's text (at most"
                                          f" {rules.MAX_BYTES} characters) or null"))
    if errors:
        raise contract.ContractError(errors)
    record = None if text is None else contract.validate_record(
        rule_records.record_of(namespace, name, privacy.scrub_text(text)))
    return {"record_id": rule_records.record_id(namespace, name), "namespace": namespace,
            "name": name, "record": record}


def check_exported(item: object) -> dict:
    """A line of an export that is a record (with its versions, validity and vector) or
    a tombstone: checked and scrubbed, in the form storage's ``put_records`` takes."""
    if isinstance(item, BadLine):
        raise contract.ContractError([contract.FieldError("line", item.reason)])
    if isinstance(item, dict) and set(item) == {"tombstone"}:
        return {"tombstone": contract.validate_tombstone(item["tombstone"])}
    record, versions, invalid_reason, embedding, stale, superseded_by = (
        contract.split_exported_record(item))
    if embedding is not None:
        try:
            embedding = {"hash": embedding["hash"],
                         "vector": base64.b64decode(embedding["vector"], validate=True)}
        except (binascii.Error, ValueError) as exc:
            raise contract.ContractError([contract.FieldError(
                "embedding.vector", f"is not base64 ({exc})")]) from exc
    return {"record": contract.validate_record(privacy.scrub_record(record)),
            "versions": [contract.validate_version(privacy.scrub_record(v)) for v in versions],
            "invalid_reason": (None if invalid_reason is None
                               else privacy.scrub_text(invalid_reason)),
            "embedding": embedding,
            "stale": stale and {**stale, "why": privacy.scrub_text(stale["why"])},
            "superseded_by": superseded_by}


def check_update(body: dict) -> dict:
    """An edit of a record (``title``, ``summary``, ``facts``, scrubbed and checked) or
    a record marked invalid (``invalid_reason``), with the reason for it."""
    target = check_forget(body)
    changes, reason = body.get("changes"), body.get("reason")
    errors = []
    if reason is not None and (not isinstance(reason, str) or not 0 < len(reason) <= 1000
                               or not reason.strip()):
        errors.append(contract.FieldError("reason", "must be text of 1 to 1000 characters"))
    if not isinstance(changes, dict) or not changes or (
            set(changes) - {"title", "summary", "facts"} and set(changes) != {"invalid_reason"}):
        errors.append(contract.FieldError("changes", "must change title, summary or facts,"
                                          " or give invalid_reason alone"))
    if errors:
        raise contract.ContractError(errors)
    if "invalid_reason" in changes:
        why = changes["invalid_reason"]
        if not isinstance(why, str) or not why.strip() or len(why) > 1000:
            raise contract.ContractError([contract.FieldError(
                "changes.invalid_reason", "must be text of 1 to 1000 characters")])
        clean = {"invalid_reason": privacy.scrub_text(why)}
    else:
        clean = privacy.scrub_record(changes)
        contract.check_record_changes(clean)
    return {**target, "changes": clean,
            "reason": None if reason is None else privacy.scrub_text(reason)}


def check_namespace(body: dict) -> dict:
    namespace = body.get("namespace")
    if not contract.is_namespace(namespace):
        raise contract.ContractError([contract.FieldError(
            "namespace", "must look like /actor/<user>/project/<id>/")])
    return {"namespace": namespace}


def check_prune(body: dict) -> dict:
    before_ms, namespace = body.get("before_ms"), body.get("namespace")
    if not isinstance(before_ms, int) or isinstance(before_ms, bool) or before_ms < 0:
        raise contract.ContractError([contract.FieldError(
            "before_ms", "must be a time in milliseconds since the epoch")])
    return {"before_ms": before_ms,
            "namespace": None if namespace is None else check_namespace(body)["namespace"]}


def check_scrub(body: dict) -> dict:
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise contract.ContractError([contract.FieldError("dry_run", "must be true or false")])
    return {"dry_run": dry_run}


def check_forget(body: dict) -> dict:
    """Which record to delete, and the namespaces it may be deleted from."""
    record_id, namespaces = body.get("record_id"), body.get("namespaces")
    errors = []
    if not isinstance(record_id, str) or not contract.is_record_id(record_id):
        errors.append(contract.FieldError("record_id", "must be mr_ followed by a ULID"))
    if (not isinstance(namespaces, list) or not namespaces
            or not all(isinstance(n, str) and contract.is_namespace(n) for n in namespaces)):
        errors.append(contract.FieldError("namespaces", "must be a non-empty list of"
                                          " namespaces (/actor/<user>/project/<id>/)"))
    if errors:
        raise contract.ContractError(errors)
    return {"record_id": record_id, "namespaces": namespaces}


def rejection(event: object, exc: contract.ContractError) -> dict:
    event_id = event.get("event_id") if isinstance(event, dict) else None
    return {"event_id": event_id if isinstance(event_id, str) else None, "status": "rejected",
            "reason": str(exc),
            "errors": [{"field": e.field, "message": e.message, "code": e.code}
                       for e in exc.errors]}
