"""A synthetic but realistic memory corpus: what months of coding sessions leave behind.

Records look like the extractors' output: titles from requests ("Fix KeyError in
`billing/invoice_service.py`"), summaries of what was done and concluded, and facts
about files edited and read, commands run and errors raised. Files, identifiers and
topics are drawn with a Zipf skew, so a few are everywhere and most are rare, as in a
real project. Prompts are what a developer types: short asks, long explanations full
of common English, pasted tracebacks. Everything is seeded, so runs compare.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

AREAS = ["api", "auth", "billing", "db", "models", "jobs", "search", "cli", "web", "core",
         "payments", "notifications", "storage", "cache", "reports", "admin", "sync", "utils"]
NOUNS = ["user", "session", "invoice", "order", "account", "token", "webhook", "report",
         "migration", "schema", "queue", "worker", "config", "client", "handler", "event",
         "payment", "customer", "product", "cart", "email", "upload", "image", "export",
         "import", "search_index", "permission", "role", "team", "project", "audit_log"]
SUFFIXES = ["service", "repository", "controller", "handler", "utils", "models", "views",
            "serializer", "tasks", "client", "middleware", "schema", "factory", "parser"]
EXTENSIONS = [".py", ".py", ".py", ".ts", ".tsx", ".go", ".rs", ".sql", ".yaml", ".md"]
VERBS = ["get", "create", "update", "delete", "validate", "parse", "render", "sync", "fetch",
         "build", "load", "save", "retry", "refresh", "compute", "send", "resolve", "apply"]
TOPICS = ["pagination", "rate limiting", "caching", "retries with backoff", "connection pooling",
          "feature flags", "dependency injection", "structured logging", "idempotency keys",
          "optimistic locking", "soft deletes", "timezone handling", "CSV export",
          "OAuth refresh tokens", "webhook signatures", "database migrations", "N+1 queries",
          "background jobs", "input validation", "error reporting", "i18n", "dark mode",
          "websocket reconnects", "file uploads", "full-text search", "unit test fixtures",
          "type hints", "async IO", "memory leaks", "CI caching", "Docker layers",
          "cursor-based paging", "SSO login", "audit trails", "multi-tenancy", "sharding",
          "read replicas", "bulk inserts", "schema drift", "circuit breakers", "debouncing",
          "form state", "accessibility", "lazy loading", "code splitting", "hot reload",
          "snapshot tests", "property-based tests", "flaky tests", "load testing", "profiling",
          "cold starts", "secrets rotation", "CORS", "CSRF tokens", "password hashing", "2FA",
          "email templates", "push notifications", "image resizing", "S3 presigned URLs",
          "GraphQL resolvers", "protobuf schemas", "OpenAPI docs", "semantic versioning",
          "changelog generation", "release branches", "monorepo tooling", "lint rules",
          "deadlocks", "race conditions", "graceful shutdown", "health checks", "metrics",
          "tracing", "alerting", "backpressure", "dead letter queues", "cron schedules"]
ERROR_CLASSES = ["KeyError", "TypeError", "AttributeError", "ModuleNotFoundError", "IntegrityError",
                 "AssertionError", "TimeoutError", "ConnectionRefusedError", "JSONDecodeError",
                 "ValueError", "OperationalError", "IndexError", "RecursionError",
                 "PermissionError", "UnicodeDecodeError", "FileNotFoundError", "ImportError",
                 "NotImplementedError", "ZeroDivisionError", "RuntimeError", "ValidationError",
                 "HTTPError", "SSLError", "DeadlockDetected", "CancelledError"]
ERROR_DETAILS = ["'{n}_id'", "'NoneType' object has no attribute '{n}'",
                 "No module named '{n}_{s}'", "UNIQUE constraint failed: {n}s.email",
                 "expected 200, got 500 from /{n}s", "read timed out after 30s calling {n}",
                 "invalid literal for int() with base 10: '{n}'", "no such column: {n}.{s}",
                 "list index out of range in {n}", "maximum recursion depth exceeded in {n}",
                 "[Errno 13] Permission denied: '/var/{n}'", "field required: {n}"]
COMMANDS = ["pytest -q", "pytest -x tests/{test}", "npm test", "npm run build", "cargo test",
            "go test ./...", "make lint", "ruff check .", "mypy src", "alembic upgrade head",
            "docker compose up -d", "git rebase -i main", "tox -e py311", "pnpm lint",
            "python manage.py migrate", "uv pip install -e .", "terraform plan"]
LIBRARIES = ["SQLAlchemy", "pydantic", "FastAPI", "Django", "React", "Redis", "Celery",
             "httpx", "Postgres", "SQLite", "Kafka", "gRPC", "Tailwind", "Next.js", "tokio"]
FILLER = ["the", "a", "to", "and", "of", "in", "is", "it", "that", "this", "for", "on", "with",
          "we", "be", "should", "when", "not", "but", "if", "so", "as", "at", "by", "from", "are",
          "was", "or", "an", "can", "do", "does", "have", "has", "will", "would", "just", "also",
          "then", "there", "what", "why", "how", "which", "all", "some", "any", "more", "now",
          "new", "old", "still", "only", "make", "use", "need", "want", "fix", "change", "add",
          "remove", "check", "work", "works", "working", "code", "file", "files", "test", "tests",
          "function", "error", "issue", "problem", "bug", "value", "data", "run", "running",
          "call", "called", "return", "returns"]


class Vocabulary:
    """The project's files, identifiers and topics, drawn with a Zipf skew."""

    def __init__(self, rng: random.Random, files: int = 1500, identifiers: int = 4000) -> None:
        self.rng = rng
        self.files = list(dict.fromkeys(self._file() for _ in range(files * 2)))[:files]
        self.identifiers = list(dict.fromkeys(
            self._identifier() for _ in range(identifiers * 2)))[:identifiers]
        rng.shuffle(self.files)
        rng.shuffle(self.identifiers)

    def _file(self) -> str:
        r = self.rng
        stem = f"{r.choice(NOUNS)}_{r.choice(SUFFIXES)}"
        if r.random() < 0.2:
            return f"tests/{r.choice(AREAS)}/test_{stem}.py"
        return f"src/{r.choice(AREAS)}/{stem}{r.choice(EXTENSIONS)}"

    def _identifier(self) -> str:
        r = self.rng
        verb, noun = r.choice(VERBS), r.choice(NOUNS)
        style = r.random()
        if style < 0.6:
            return f"{verb}_{noun}" + (f"_{r.choice(SUFFIXES)}" if r.random() < 0.5 else "")
        if style < 0.85:
            return verb + "".join(p.title() for p in noun.split("_")) + r.choice(["", "Async"])
        return "".join(p.title() for p in noun.split("_")) + r.choice(SUFFIXES).title()

    def zipf(self, items: list[str]) -> str:
        """Rank r is drawn with weight ~ 1/r: a few items everywhere, a long tail."""
        index = int(len(items) ** self.rng.random()) - 1
        return items[min(index, len(items) - 1)]

    def file(self) -> str:
        return self.zipf(self.files)

    def identifier(self) -> str:
        return self.zipf(self.identifiers)

    def topic(self) -> str:
        return self.zipf(TOPICS)

    def error(self) -> str:
        detail = self.rng.choice(ERROR_DETAILS).format(n=self.rng.choice(NOUNS),
                                                        s=self.rng.choice(SUFFIXES))
        return f"{self.zipf(ERROR_CLASSES)}: {detail}"

    def command(self) -> str:
        return self.zipf(COMMANDS).format(test=self.file().rsplit("/", 1)[-1])

    def words(self, count: int) -> str:
        return " ".join(self.rng.choice(FILLER) for _ in range(count))


def _title(v: Vocabulary) -> tuple[str, str]:
    r = v.rng
    kind = r.random()
    if kind < 0.3:
        return "error", f"Fix {v.error().split(':')[0]} in `{v.file()}`"
    if kind < 0.5:
        return "tool_use", f"Add {v.topic()} to `{v.identifier()}`"
    if kind < 0.65:
        return "decision", f"Use {r.choice(LIBRARIES)} for {v.topic()}"
    if kind < 0.8:
        return "discovery", f"Why `{v.command()}` fails on {v.topic()}"
    if kind < 0.9:
        return "pattern", f"Refactor `{v.identifier()}` into `{v.file()}`"
    return "session_summary", f"Session: {v.topic()} and {v.topic()} in {r.choice(AREAS)}"


def _summary(v: Vocabulary) -> str:
    r = v.rng
    sentences = [
        f"Changed `{v.identifier()}` in `{v.file()}` so that {v.topic()} {v.words(6)}.",
        f"The failure came from {v.error()} when {v.words(5)} `{v.identifier()}` {v.words(4)}.",
        f"Decided to keep {v.topic()} in `{v.file()}` because {v.words(9)}.",
        f"`{v.command()}` now passes; {v.words(7)} {r.choice(LIBRARIES)} {v.words(3)}.",
        f"Next: {v.words(5)} {v.topic()} for `{v.identifier()}`.",
    ]
    return " ".join(r.sample(sentences, r.randint(1, 3)))


def _facts(v: Vocabulary) -> list[str]:
    r = v.rng
    makers = [
        lambda: f"edited `{v.file()}` (+{r.randint(1, 120)} −{r.randint(0, 60)})",
        lambda: f"read `{v.file()}`",
        lambda: f"ran `{v.command()}` → exit {r.choice([0, 0, 1, 2])},"
                f" {r.randint(0, 9)} failed",
        lambda: f"{v.error()} raised in `{v.identifier()}`",
        lambda: f"`{v.identifier()}` calls `{v.identifier()}`",
    ]
    return [r.choice(makers)() for _ in range(r.randint(1, 6))]


def records(count: int, namespaces: list[str], seed: int = 7) -> list[dict]:
    """`count` records spread over `namespaces` (the first holds most), oldest first."""
    rng = random.Random(seed)
    v = Vocabulary(rng)
    code = Vocabulary(random.Random(seed + 1))  # the lines each record's edits changed
    start = datetime(2026, 1, 1, tzinfo=UTC)
    step = timedelta(days=300) / max(count, 1)
    out = []
    for i in range(count):
        observation_type, title = _title(v)
        facts = _facts(v)
        files = sorted({f.split("`")[1] for f in facts if "`src/" in f or "`tests/" in f})
        namespace = namespaces[0] if rng.random() < 0.7 else rng.choice(namespaces)
        out.append({
            "record_id": f"R{i:025d}", "namespace": namespace, "title": title,
            "summary": _summary(v), "facts": facts,
            "concepts": [v.topic() for _ in range(rng.randint(1, 3))],
            "files_touched": files, "observation_type": observation_type,
            "strategy": "heuristic", "source_event_ids": [f"E{i:025d}"],
            "created_at": (start + step * i).isoformat(timespec="milliseconds"),
            "changes": "\n".join(f"{code.identifier()} = {code.identifier()}({code.words(3)})"
                                 for _ in range(code.rng.randint(2, 12))),
        })
    return out


PROMPT_SHAPES = [
    lambda v: f"fix the failing test in {v.file()}",
    lambda v: f"why does {v.command()} fail with {v.error()}?",
    lambda v: f"add {v.topic()} to {v.identifier()}",
    lambda v: f"where do we handle {v.topic()}?",
    lambda v: f"refactor {v.identifier()} so it uses {v.rng.choice(LIBRARIES)}",
    lambda v: f"what did we decide about {v.topic()} last week",
    lambda v: (f"I'm seeing {v.error()} again when I run {v.command()} — can you look at"
               f" {v.file()} and {v.identifier()} and tell me what changed?"),
    # long and full of common words: what makes an OR query slow
    lambda v: (f"ok so {v.words(25)} {v.file()} {v.words(30)} {v.identifier()} {v.words(25)}"
               f" {v.topic()} {v.words(20)}"),
    lambda v: (f"Please fix this. The test should pass but it does not and I want the code to"
               f" work when we run it again.\n\nTraceback (most recent call last):\n  File"
               f" \"{v.file()}\", line {v.rng.randint(10, 400)}, in {v.identifier()}\n    return"
               f" {v.identifier()}(data)\n  File \"{v.file()}\", line {v.rng.randint(10, 400)},"
               f" in {v.identifier()}\n{v.error()}\n\n{v.words(40)}"),
    lambda v: " ".join([v.words(60), v.topic(), v.words(60)]),
]


def prompts(count: int, seed: int = 11) -> list[str]:
    """Realistic prompts: short asks, long explanations, pasted tracebacks."""
    rng = random.Random(seed)
    v = Vocabulary(random.Random(7))  # the corpus's own files and identifiers
    v.rng = rng
    return [PROMPT_SHAPES[i % len(PROMPT_SHAPES)](v) for i in range(count)]


def short_queries(count: int, seed: int = 13) -> list[str]:
    """What someone types into a search box: one or two words, common or rare."""
    rng = random.Random(seed)
    v = Vocabulary(random.Random(7))
    v.rng = rng
    shapes = [
        lambda: v.identifier(),
        lambda: v.topic().split()[0],
        lambda: v.file().rsplit("/", 1)[-1].split(".")[0],
        lambda: f"{rng.choice(LIBRARIES)} {rng.choice(NOUNS)}",
        lambda: v.error().split(":")[0],
        lambda: f"{rng.choice(FILLER)} {rng.choice(NOUNS)}",
        lambda: rng.choice(FILLER),
    ]
    return [shapes[i % len(shapes)]() for i in range(count)]


def known_item_prompts(records: list[dict], count: int, seed: int = 17) -> list[tuple[str, str]]:
    """(prompt, record_id): a developer coming back to earlier work, naming it among
    plenty of ordinary words. A useful search puts that record in its top ten."""
    rng = random.Random(seed)
    v = Vocabulary(random.Random(7))
    v.rng = rng
    out = []
    for record in rng.sample(records, count):
        fact = rng.choice(record["facts"])
        out.append((f"{v.words(12)} {record['title']} {v.words(10)} {fact} {v.words(8)}",
                    record["record_id"]))
    return out
