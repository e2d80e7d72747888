"""LLM extractors against real endpoints on 127.0.0.1 that answer like OpenAI's and
Anthropic's APIs (scripted: good, garbage, slow, 429), and a real external command."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers.cli import here, kl, status
from helpers.events import NAMESPACE, make_event
from helpers.waits import wait_for
from test_heuristic import KIRO_CLI_SESSION

from kirolearn import config, contract, db, transport
from kirolearn.extract import heuristic, llm

GOOD = {"records": [{"title": "Export rows without a customer no longer crash",
                     "summary": "The CSV export read row['customer_id'] directly; it now"
                                " falls back to an empty column.",
                     "observation_type": "error", "facts": ["KeyError: 'customer_id'"],
                     "concepts": ["csv export"], "files_touched": ["src/billing/export.py"]}]}


class ScriptedEndpoint:
    """An HTTP server whose answers are scripted: (status, body, delay_s) per request."""

    def __init__(self, flavour: str):
        self.flavour = flavour
        self.script: list[tuple[int, object, float]] = []
        self.requests: list[dict] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                endpoint.requests.append({"path": self.path, "body": body, "headers": {
                    name.lower(): value for name, value in self.headers.items()}})
                status, answer, delay = (endpoint.script.pop(0) if endpoint.script
                                         else (500, "script ran out", 0))
                time.sleep(delay)
                payload = (endpoint.wrap(answer) if status == 200 else answer)
                data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wrap(self, answer: object) -> object:
        """A model's text as the API returns it."""
        text = answer if isinstance(answer, str) else json.dumps(answer)
        if self.flavour == "openai":
            return {"choices": [{"message": {"role": "assistant", "content": text}}],
                    "usage": {"total_tokens": 321}}
        return {"content": [{"type": "text", "text": text}],
                "usage": {"input_tokens": 300, "output_tokens": 21}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(params=["openai", "anthropic"])
def endpoint(request):
    server = ScriptedEndpoint(request.param)
    yield server
    server.close()


def extractor(endpoint: ScriptedEndpoint, **overrides) -> llm.LLMExtractor:
    cfg = {**config.defaults()["extraction"], "strategy": endpoint.flavour,
           "llm_url": endpoint.url + ("/v1" if endpoint.flavour == "openai" else ""),
           "llm_model": "scripted", "llm_api_key_env": "KL_TEST_KEY", "llm_timeout_s": 1.0,
           **overrides}
    made = llm.from_settings({"extraction": cfg}, logging.getLogger("test"))
    assert made is not None
    return made


def test_a_good_answer_becomes_llm_records(endpoint, monkeypatch):
    monkeypatch.setenv("KL_TEST_KEY", "sk-test-123")
    endpoint.script = [(200, GOOD, 0)]
    records, strategy = extractor(endpoint).extract(NAMESPACE, KIRO_CLI_SESSION)
    assert strategy == "llm-summary" and len(records) == 1
    record = contract.validate_record(records[0])
    assert record["title"] == GOOD["records"][0]["title"]
    assert record["source_event_ids"] == [e["event_id"] for e in KIRO_CLI_SESSION]
    sent = endpoint.requests[0]
    prompt = json.dumps(sent["body"])
    assert "pytest -q tests/test_export.py" in prompt and "[session_summary" in prompt
    if endpoint.flavour == "openai":
        assert sent["path"] == "/v1/chat/completions"
        assert sent["headers"]["authorization"] == "Bearer sk-test-123"
    else:
        assert sent["path"] == "/v1/messages"
        assert sent["headers"]["x-api-key"] == "sk-test-123"
        assert sent["headers"]["anthropic-version"] == "2023-06-01"


def test_a_model_record_is_as_old_as_its_work_and_says_no_title_twice(endpoint):
    """A batch extracted a day late (a backlog, an import) keeps the time of its last
    event; a summary that only repeats the title is not written."""
    week_old = [{**e, "valid_time": f"2026-05-14T10:{i:02d}:00.000Z"}
                for i, e in enumerate(KIRO_CLI_SESSION)]
    echo = {**GOOD["records"][0], "summary": "  export rows without a customer no longer"
                                             " crash. "}
    endpoint.script = [(200, {"records": [echo, GOOD["records"][0]]}, 0)]
    (said_twice, said), _ = extractor(endpoint).extract(NAMESPACE, week_old)
    last = week_old[-1]["valid_time"]
    assert said_twice["created_at"] == said["created_at"] == last
    assert said_twice["summary"] == "" and said["summary"] == GOOD["records"][0]["summary"]
    contract.validate_record(said_twice)
    assert said["anchors"] == {"src/billing/export.py": []}  # the file its batch edited
    assert said["changes"].startswith("customer = row.get('customer_id') or ''\n")


def test_garbage_then_a_good_answer_is_retried(endpoint):
    endpoint.script = [(200, "Sure! Here are some memories: ...", 0),
                       (200, {"records": "not a list"}, 0), (200, GOOD, 0)]
    _, strategy = extractor(endpoint).extract(NAMESPACE, KIRO_CLI_SESSION)
    assert strategy == "llm-summary" and len(endpoint.requests) == 3


def test_rate_limits_timeouts_and_errors_fall_back_to_the_heuristic_records(endpoint):
    endpoint.script = [(429, {"error": "rate limited"}, 0), (500, "oops", 0), (200, GOOD, 1.5)]
    records, strategy = extractor(endpoint).extract(NAMESPACE, KIRO_CLI_SESSION)
    assert strategy == "heuristic" and len(endpoint.requests) == 3
    assert records and all(r["strategy"] == "heuristic" for r in records)


def test_nothing_worth_keeping_is_no_records_not_a_failure(endpoint):
    endpoint.script = [(200, "```json\n{\"records\": []}\n```", 0)]
    assert extractor(endpoint).extract(NAMESPACE, KIRO_CLI_SESSION) == ([], "llm-summary")


def test_oversized_fields_are_cut_to_the_contract(endpoint):
    big = {"records": [{"title": "t " * 300, "summary": "s" * 9000, "observation_type": "odd",
                        "facts": ["f" * 900] * 80, "concepts": ["c" * 300],
                        "files_touched": ["x.py"]}]}
    endpoint.script = [(200, big, 0)]
    (record,), _ = extractor(endpoint).extract(NAMESPACE, KIRO_CLI_SESSION)
    contract.validate_record(record)
    assert len(record["title"]) <= 200 and len(record["summary"]) == 4000
    assert len(record["facts"]) == 50 and record["observation_type"] == "discovery"


def test_a_spent_budget_hands_batches_to_the_heuristic_extractor(endpoint, caplog):
    endpoint.script = [(200, GOOD, 0), (200, GOOD, 0)]
    made = extractor(endpoint, llm_calls_per_hour=1)
    assert made.extract(NAMESPACE, KIRO_CLI_SESSION)[1] == "llm-summary"
    with caplog.at_level(logging.WARNING):
        assert made.extract(NAMESPACE, KIRO_CLI_SESSION)[1] == "heuristic"
    assert len(endpoint.requests) == 1 and "budget" in caplog.text
    assert made.budget.left(time.monotonic())["calls"] == 0


def test_the_breaker_opens_per_namespace_and_half_opens_after_the_cooldown(endpoint):
    made = extractor(endpoint, breaker_failures=2, breaker_cooldown_s=0.5)
    endpoint.script = [(500, "down", 0)] * 6
    for _ in range(2):
        assert made.extract(NAMESPACE, KIRO_CLI_SESSION)[1] == "heuristic"
    calls = len(endpoint.requests)
    assert made.extract(NAMESPACE, KIRO_CLI_SESSION)[1] == "heuristic"
    assert len(endpoint.requests) == calls  # open: the model was left alone
    assert made.breaker.open(time.monotonic()) == [NAMESPACE]
    other = NAMESPACE.replace("a" * 64, "b" * 64)
    endpoint.script = [(200, GOOD, 0)]
    assert made.extract(other, KIRO_CLI_SESSION)[1] == "llm-summary"  # other projects unaffected
    wait_for(lambda: made.breaker.allows(NAMESPACE, time.monotonic()), timeout=5,
             message="the breaker's cool-down")
    endpoint.script = [(200, GOOD, 0)]
    assert made.extract(NAMESPACE, KIRO_CLI_SESSION)[1] == "llm-summary"  # half-open, closes
    assert made.breaker.open(time.monotonic()) == []


def test_an_external_command_reads_the_prompt_on_stdin(tmp_path):
    script = tmp_path / "model.py"
    script.write_text("import json, sys\nprompt = sys.stdin.read()\n"
                      "assert 'pytest -q tests/test_export.py' in prompt\n"
                      f"print(json.dumps({GOOD!r}))\n")
    cfg = {**config.defaults()["extraction"], "strategy": "command",
           "llm_command": f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"}
    made = llm.from_settings({"extraction": cfg}, logging.getLogger("test"))
    records, strategy = made.extract(NAMESPACE, KIRO_CLI_SESSION)
    assert strategy == "llm-summary" and records[0]["title"] == GOOD["records"][0]["title"]
    failing = llm.from_settings({"extraction": {**cfg, "llm_command": "false"}},
                                logging.getLogger("test"))
    assert failing.extract(NAMESPACE, KIRO_CLI_SESSION)[1] == heuristic.STRATEGY


@pytest.mark.parametrize("change, words", [
    ({"strategy": "gpt"}, "extraction.strategy"),
    ({"strategy": "openai", "llm_model": "m"}, "extraction.llm_url"),
    ({"strategy": "anthropic"}, "extraction.llm_model"),
    ({"strategy": "command"}, "extraction.llm_command"),
])
def test_a_strategy_that_cannot_work_is_a_configuration_error(change, words):
    with pytest.raises(config.ConfigError, match=words):
        llm.from_settings({"extraction": {**config.defaults()["extraction"], **change}},
                          logging.getLogger("test"))


def send_session(client: transport.Client) -> None:
    """The Kiro CLI session through ingest, as its shim would send it."""
    for event in KIRO_CLI_SESSION:
        event = {k: v for k, v in event.items() if k != "project_path"}  # batch-side field
        assert client.call("put_event", {"event": event})["status"] == "stored"


def records_exported() -> list[dict]:
    lines = kl("export", check=True).stdout.splitlines()
    return [r for r in map(json.loads, lines) if "record_id" in r]


def test_the_daemon_extracts_with_the_configured_model(home, monkeypatch, ctx):
    server = ScriptedEndpoint("openai")
    server.script = [(200, GOOD, 0)] * 4
    monkeypatch.setenv("KIROLEARN_EXTRACTION_STRATEGY", "gpt")
    refused = kl("start")
    assert refused.returncode == 1 and "configuration error: extraction.strategy" in refused.stderr
    monkeypatch.setenv("KIROLEARN_EXTRACTION_STRATEGY", "openai")
    monkeypatch.setenv("KIROLEARN_EXTRACTION_LLM_URL", server.url + "/v1")
    monkeypatch.setenv("KIROLEARN_EXTRACTION_LLM_MODEL", "scripted")
    # the prompt of session s-0 never ends its turn: the batch forms once all is quiet
    monkeypatch.setenv("KIROLEARN_STORAGE_BATCH_IDLE_S", "1")
    kl("start", check=True)
    secrets = make_event("prompt", "deploy with key AKIAIOSFODNN7EXAMPLE and"
                         " <private>my pin is 4711</private>", session_id="s-0")
    try:
        with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as client:
            assert client.call("put_event", {"event": secrets})["status"] == "stored"
            send_session(client)

        (record,) = wait_for(records_exported, timeout=20, message="the model's record")
        assert record["strategy"] == "llm-summary"
        assert record["title"] == GOOD["records"][0]["title"]
        (request,) = server.requests
        prompt = request["body"]["messages"][0]["content"]
        assert "deploy with key" in prompt  # the event went to the model, scrubbed
        assert "AKIAIOSFODNN7EXAMPLE" not in prompt and "4711" not in prompt
    finally:
        kl("stop", check=True)
        server.close()


def test_a_worker_killed_while_the_model_thinks_loses_nothing_and_repeats_nothing(
        home, monkeypatch, ctx):
    """Its batch is taken up again within seconds, not at the end of the 300 s lease."""
    server = ScriptedEndpoint("openai")
    server.script = [(200, GOOD, 120.0)] + [(200, GOOD, 0)] * 3  # the first never in time
    for name, value in (("STRATEGY", "openai"), ("LLM_URL", server.url + "/v1"),
                        ("LLM_MODEL", "scripted"), ("LLM_TIMEOUT_S", "300")):
        monkeypatch.setenv(f"KIROLEARN_EXTRACTION_{name}", value)
    kl("start", check=True)
    try:
        worker = next(r for r in status()["roles"] if r["role"] == "extraction")
        with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as client:
            send_session(client)
        wait_for(lambda: server.requests, message="the worker to ask the model")
        os.kill(worker["pid"], signal.SIGKILL)  # mid-batch: the model has not answered

        wait_for(records_exported, timeout=20, message="the re-dispatched batch's records")
        with db.reading(db.location(here())) as conn:  # done: a later result is ignored, not added
            assert {row[0] for row in conn.execute(
                "SELECT state FROM extraction_batches")} == {"done"}
        assert [r["strategy"] for r in records_exported()] == ["llm-summary"]
        logged = kl("logs", "storage", "-n", "200").stdout
        # storage finds the worker gone, or the supervisor tells it first
        assert (f"worker {worker['pid']} is gone; handing it out again" in logged
                or f"worker {worker['pid']} exited: handing out again 1 batch(es)" in logged)
    finally:
        kl("stop", check=True)
        server.close()


def test_status_shows_busy_workers_the_model_budget_and_what_waits(home, monkeypatch, ctx):
    server = ScriptedEndpoint("openai")
    server.script = [(200, GOOD, 4.0)]  # time enough to see the worker busy
    for name, value in (("STRATEGY", "openai"), ("LLM_URL", server.url + "/v1"),
                        ("LLM_MODEL", "scripted"), ("LLM_CALLS_PER_HOUR", "50")):
        monkeypatch.setenv(f"KIROLEARN_EXTRACTION_{name}", value)
    kl("start", check=True)
    try:
        with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as client:
            send_session(client)
            waiting = NAMESPACE.replace("a" * 64, "c" * 64)
            client.call("put_event", {"event": make_event("prompt", "half a turn",
                                                          namespace=waiting)})
        wait_for(lambda: server.requests, message="the worker to ask the model")
        busy = json.loads(kl("status", "--json", check=True).stdout)
        assert busy["extraction"]["strategy"] == "openai"
        assert [w["busy"] for w in busy["extraction"]["workers"]] == [True]

        def idle() -> dict | None:  # and its records committed (they reach storage after)
            now = json.loads(kl("status", "--json", check=True).stdout)
            finished = not now["extraction"]["workers"][0]["busy"] and not now["pending"]["batches"]
            return now if finished else None

        done = wait_for(idle, timeout=30, message="the worker to finish")
        worker = done["extraction"]["workers"][0]
        assert worker["batches_done"] == 1 and worker["breakers_open"] == []
        assert worker["llm_budget_left"]["calls"] == 49
        assert done["pending"]["events"] == 1
        assert done["pending"]["namespaces"] == [
            {"namespace": waiting, "pending_events": 1, "pending_batches": 0}]
        text = kl("status", check=True).stdout
        assert "extraction (openai): 1 worker(s), 0 busy; 1 batch(es) done" in text
        assert "model budget left this hour: 49 calls" in text
        assert f"  {waiting}: 1 event(s), 0 batch(es)" in text
    finally:
        kl("stop", check=True)
        server.close()
