"""LLM extractors: a batch of events → memory records, written by a model.

Three backends, chosen with ``extraction.strategy``: ``openai`` (any OpenAI-compatible
chat-completions endpoint: OpenAI, Ollama, llama.cpp server, vLLM, LM Studio),
``anthropic`` (the Messages API) and ``command`` (a program that reads the prompt on
stdin and prints the answer, such as ``claude -p`` or ``kiro-cli chat
--no-interactive``). Events reach it already scrubbed of secrets and ``<private>``
spans by ingest.

The model is asked for one JSON object, ``{"records": [...]}``; an empty list means
nothing worth keeping. Answers are parsed strictly and fields cut to the contract's
caps. A call is tried at most three times (an unparseable answer, a timeout, HTTP 429
or 5xx); then, or when the hourly budget of calls or tokens is spent, or while the
namespace's circuit breaker is open, the heuristic extractor makes the records, so a
batch is never lost or stuck waiting for a model.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import shlex
import subprocess
import time
import urllib.error
import urllib.request
from typing import Protocol

import tenacity

from kirolearn import config, contract, privacy, tooluse
from kirolearn.extract import heuristic
from kirolearn.extract.anchors import changes_of_batch, of_batch

STRATEGY = "llm-summary"
EVENT_CHARS = 4000  # of one event's body in the prompt
PROMPT_CHARS = 60_000
ATTEMPTS = 3

INSTRUCTIONS = """You distil a coding agent's work into memory records that a developer \
(or the agent, next week) will read back before similar work. Below are the events of \
one batch, oldest first: prompts (what the developer asked), tool uses (what the agent \
did, as JSON), and turn summaries (what the agent concluded).

Answer with one JSON object and nothing else:
{"records": [{"title": "...", "summary": "...", "observation_type": "...", \
"facts": ["..."], "concepts": ["..."], "files_touched": ["..."]}]}

- title: what the work was about, at most 200 characters;
- summary: what was done, found or decided, and why, at most 4000 characters (empty rather
  than the title again);
- observation_type: one of tool_use, decision, error, discovery, pattern, session_summary;
- facts: short, specific statements (commands and their results, files changed, \
values), at most 500 characters each;
- concepts: keywords someone might search for; files_touched: paths as given.
Write a record only for something worth remembering. If nothing is, answer \
{"records": []}."""


class Garbage(ValueError):
    """An answer that is not the JSON asked for."""


class Retryable(RuntimeError):
    """A failure worth another attempt: timeout, 429, 5xx, garbage."""


def build_prompt(events: list[dict]) -> str:
    parts = [INSTRUCTIONS, ""]
    used = len(INSTRUCTIONS)
    for event in events:
        body = contract.body_text(event["body"])
        if len(body) > EVENT_CHARS:
            body = body[:EVENT_CHARS] + " [truncated]"
        entry = f"[{event['kind']} {event.get('valid_time', '')}]\n{body}\n"
        if used + len(entry) > PROMPT_CHARS:
            parts.append("[later events left out: the batch is too long]")
            break
        parts.append(entry)
        used += len(entry)
    return privacy.scrub_text("\n".join(parts))  # scrubbed in ingest; again, as it leaves


def _strings(value: object, limit: int, count: int) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Garbage("expected a list of strings")
    cleaned = [" ".join(v.split())[:limit] for v in value]
    return [v for v in cleaned if v][:count]


def parse_answer(text: str) -> list[dict]:
    """The records of an answer (empty: nothing worth keeping); Garbage otherwise."""
    match = re.search(r"\{.*\}", text, re.DOTALL)  # tolerate a ```json fence around it
    if not match:
        raise Garbage("no JSON object in the answer")
    try:
        answer = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise Garbage(f"not JSON: {exc}") from exc
    items = answer.get("records") if isinstance(answer, dict) else None
    if not isinstance(items, list):
        raise Garbage("no 'records' list")
    parsed = []
    for item in items:
        if not isinstance(item, dict):
            raise Garbage("a record is not an object")
        title, summary = item.get("title"), item.get("summary")
        if not isinstance(title, str) or not title.strip() or not isinstance(summary, str):
            raise Garbage("a record lacks its title or summary")
        kind = item.get("observation_type")
        title = tooluse.cut(title, 200)
        parsed.append({
            "title": title, "summary": heuristic.beyond(title, summary.strip())[:4000],
            "observation_type": kind if kind in contract.OBSERVATION_TYPES else "discovery",
            "facts": _strings(item.get("facts"), 500, 50),
            "concepts": _strings(item.get("concepts"), 100, 50),
            "files_touched": _strings(item.get("files_touched"), 500, 100),
        })
    return parsed


# -- backends ---------------------------------------------------------------------------------

def _post(url: str, body: dict, headers: dict, timeout_s: float) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:  # it holds the connection open until closed
            detail = exc.read()[:300]
        if exc.code == 429 or exc.code >= 500:
            raise Retryable(f"HTTP {exc.code} from {url}") from exc
        raise RuntimeError(f"HTTP {exc.code} from {url}: {detail!r}") from exc
    except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
        raise Retryable(f"{url}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise Retryable(f"{url} answered something that is not JSON") from exc


class OpenAIChat:
    def __init__(self, url: str, model: str, key: str, timeout_s: float):
        self.url, self.model, self.key, self.timeout_s = url.rstrip("/"), model, key, timeout_s

    def complete(self, prompt: str) -> tuple[str, int]:
        headers = {"authorization": f"Bearer {self.key}"} if self.key else {}
        answer = _post(f"{self.url}/chat/completions", {
            "model": self.model, "temperature": 0,
            "messages": [{"role": "user", "content": prompt}]}, headers, self.timeout_s)
        try:
            text = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise Retryable("no choices[0].message.content in the answer") from exc
        return str(text), int((answer.get("usage") or {}).get("total_tokens") or 0)


class AnthropicMessages:
    def __init__(self, url: str, model: str, key: str, timeout_s: float):
        self.url = (url or "https://api.anthropic.com").rstrip("/")
        self.model, self.key, self.timeout_s = model, key, timeout_s

    def complete(self, prompt: str) -> tuple[str, int]:
        answer = _post(f"{self.url}/v1/messages", {
            "model": self.model, "max_tokens": 4096,
            "messages": [{"role": "user", "content": prompt}]},
            {"x-api-key": self.key, "anthropic-version": "2023-06-01"}, self.timeout_s)
        try:
            text = "".join(part["text"] for part in answer["content"] if part["type"] == "text")
        except (KeyError, TypeError) as exc:
            raise Retryable("no text content in the answer") from exc
        usage = answer.get("usage") or {}
        return text, int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))


class Command:
    def __init__(self, command: str, timeout_s: float):
        self.argv, self.timeout_s = shlex.split(command), timeout_s

    def complete(self, prompt: str) -> tuple[str, int]:
        try:
            done = subprocess.run(self.argv, input=prompt, capture_output=True, text=True,
                                  timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise Retryable(f"{self.argv[0]} ran past {self.timeout_s} s") from exc
        if done.returncode != 0:
            raise Retryable(f"{self.argv[0]} exited {done.returncode}: {done.stderr[-300:]}")
        return done.stdout, (len(prompt) + len(done.stdout)) // 4  # tokens, roughly


# -- budget and breakers -----------------------------------------------------------------------

class Budget:
    """Calls and tokens spent in the last hour."""

    def __init__(self, calls: int, tokens: int):
        self.calls, self.tokens = calls, tokens
        self.spent: collections.deque[tuple[float, int]] = collections.deque()

    def _forget(self, now: float) -> None:
        while self.spent and self.spent[0][0] < now - 3600:
            self.spent.popleft()

    def allows(self, now: float) -> bool:
        self._forget(now)
        return (len(self.spent) < self.calls
                and sum(t for _, t in self.spent) < self.tokens)

    def charge(self, now: float, tokens: int) -> None:
        self.spent.append((now, tokens))

    def left(self, now: float) -> dict:
        self._forget(now)
        return {"calls": max(0, self.calls - len(self.spent)),
                "tokens": max(0, self.tokens - sum(t for _, t in self.spent))}


class Breaker:
    """Per namespace: open after `failures` failed batches in a row; after `cooldown_s`
    one batch may try again (half-open), and its outcome closes or re-opens it."""

    def __init__(self, failures: int, cooldown_s: float):
        self.failures, self.cooldown_s = failures, cooldown_s
        self.count: dict[str, int] = {}
        self.open_until: dict[str, float] = {}

    def allows(self, namespace: str, now: float) -> bool:
        return now >= self.open_until.get(namespace, 0)

    def succeeded(self, namespace: str) -> None:
        self.count.pop(namespace, None)
        self.open_until.pop(namespace, None)

    def failed(self, namespace: str, now: float) -> bool:
        """Record a failure; returns whether the breaker is now open."""
        self.count[namespace] = self.count.get(namespace, 0) + 1
        if self.count[namespace] >= self.failures:
            self.open_until[namespace] = now + self.cooldown_s
            return True
        return False

    def open(self, now: float) -> list[str]:
        return sorted(ns for ns, until in self.open_until.items() if until > now)


class Backend(Protocol):
    """A model behind an API or a command: the prompt in, (answer, tokens spent) out;
    Retryable for a failure worth another attempt."""

    def complete(self, prompt: str) -> tuple[str, int]: ...


class LLMExtractor:
    """Records from a model, the heuristic extractor's whenever the model cannot be used
    (its breaker is open, the hour's budget is spent, or it failed)."""

    strategy = STRATEGY

    def __init__(self, backend: Backend, budget: Budget, breaker: Breaker,
                 log: logging.Logger):
        self.backend, self.budget, self.breaker, self.log = backend, budget, breaker, log
        self._said_spent = False

    def extract(self, namespace: str, events: list[dict]) -> tuple[list[dict], str]:
        """(records, strategy used); never raises for a model's failure."""
        now = time.monotonic()
        if not self.breaker.allows(namespace, now):
            return heuristic.extract(namespace, events), heuristic.STRATEGY
        if not self.budget.allows(now):
            if not self._said_spent:
                self.log.warning("LLM budget for this hour is spent; the heuristic extractor"
                                 " takes over until it refills")
                self._said_spent = True
            return heuristic.extract(namespace, events), heuristic.STRATEGY
        self._said_spent = False
        prompt = build_prompt(events)
        try:
            items = self._ask(prompt)
        except Exception as exc:  # any failure: the batch still gets records
            opened = self.breaker.failed(namespace, time.monotonic())
            self.log.warning("LLM extraction failed (%s); heuristic records instead%s", exc,
                             "; breaker open" if opened else "")
            return heuristic.extract(namespace, events), heuristic.STRATEGY
        self.breaker.succeeded(namespace)
        ids = [e["event_id"] for e in events]
        # as old as the work it tells of (the batch's last event), as the heuristic's
        moments = [moment for e in events if (moment := heuristic.happened(e))]
        created_at = max(moments)[1] if moments else contract.now_iso()
        anchors = of_batch(events)  # each record's: those of the files it names
        changed = changes_of_batch(events)  # ... and the lines changed in them

        def changes(files: list[str]) -> dict:
            lines = dict.fromkeys(line for path in files for line in changed.get(path, []))
            text = "\n".join(lines)[:contract.MAX_CHANGES_CHARS].rstrip()
            return {"changes": text} if text else {}

        return [{**item, "record_id": contract.new_record_id(), "namespace": namespace,
                 "strategy": STRATEGY, "source_event_ids": ids, "created_at": created_at,
                 "anchors": {path: anchors[path] for path in item["files_touched"]
                             if path in anchors}, **changes(item["files_touched"])}
                for item in items], STRATEGY

    def status(self) -> dict:
        now = time.monotonic()
        return {"llm_budget_left": self.budget.left(now), "breakers_open": self.breaker.open(now)}

    def _ask(self, prompt: str) -> list[dict]:
        def attempt() -> list[dict]:
            if not self.budget.allows(time.monotonic()):
                raise RuntimeError("the hourly budget ran out between attempts")
            text, tokens = self.backend.complete(prompt)
            self.budget.charge(time.monotonic(), tokens or len(prompt) // 4)
            try:
                return parse_answer(text)
            except Garbage as exc:
                raise Retryable(f"unusable answer: {exc}") from exc

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(ATTEMPTS),
            wait=tenacity.wait_exponential(multiplier=0.2, max=2),
            retry=tenacity.retry_if_exception_type(Retryable), reraise=True)(attempt)


def from_settings(settings: dict, log: logging.Logger) -> LLMExtractor | None:
    """The configured LLM extractor, or None for the heuristic one (ConfigError for a
    strategy that cannot work)."""
    cfg = settings["extraction"]
    strategy = cfg["strategy"]
    key = os.environ.get(cfg["llm_api_key_env"], "") if cfg["llm_api_key_env"] else ""
    if strategy == "heuristic":
        return None
    if strategy == "openai":
        backend = OpenAIChat(cfg["llm_url"], cfg["llm_model"], key, cfg["llm_timeout_s"])
    elif strategy == "anthropic":
        backend = AnthropicMessages(cfg["llm_url"], cfg["llm_model"], key, cfg["llm_timeout_s"])
    elif strategy == "command":
        backend = Command(cfg["llm_command"], cfg["llm_timeout_s"])
    else:
        raise config.ConfigError(f"extraction.strategy: {strategy!r} is not one of heuristic,"
                                 " openai, anthropic, command")
    if strategy != "command" and not cfg["llm_model"]:
        raise config.ConfigError(f"extraction.llm_model: required for the {strategy} strategy")
    if strategy == "openai" and not cfg["llm_url"]:
        raise config.ConfigError("extraction.llm_url: required for the openai strategy")
    if strategy == "command" and not backend.argv:
        raise config.ConfigError("extraction.llm_command: required for the command strategy")
    return LLMExtractor(backend, Budget(cfg["llm_calls_per_hour"], cfg["llm_tokens_per_hour"]),
                        Breaker(cfg["breaker_failures"], cfg["breaker_cooldown_s"]), log)
