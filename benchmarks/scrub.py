"""Scrub benchmark: what the secret rules catch, what they wrongly take, what they cost.

- recall: of the test corpus (tests/secret_corpus.py: realistic secrets of many kinds
  and ``<private>`` as people type it), the share redacted, and the kinds caught whole
  (every sample of the kind) and missed;
- recall on formats (benchmarks/secret_formats.py: over 150 kinds of secret, one sample
  each, built from public references on secret formats apart from the tests' corpus): a
  secret counts as caught only when no 12 characters of it survive;
- false positives: the share of ordinary lines that the secret rules change, per kind
  of text: source code (kirolearn's, the standard library's security-minded modules,
  and the installed packages kirolearn depends on), prose (the docs), lockfile lines
  (package-lock.json: integrity hashes), UUIDs and commit hashes. ``<private>`` tags in
  those files are redacted on purpose and are not counted;
- throughput: scrub_text over those lines, in MB/s, and how many of them pass the
  cheap pre-check (the rest cost one Aho-Corasick pass).

Prints one JSON line per kind of text and one for the corpus (DESIGN.md §10); the
false-positive lines themselves go to stderr with ``--show``.

    python benchmarks/scrub.py           # every file named below
    python benchmarks/scrub.py --quick   # a few thousand lines of each kind
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
import sysconfig
import time
import uuid
from pathlib import Path

from harness import say

from kirolearn import privacy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
STDLIB = ["smtplib", "ftplib", "imaplib", "poplib", "getpass", "ssl", "hmac", "secrets", "uuid",
          "netrc", "urllib/request", "urllib/parse", "http/client", "http/cookiejar",
          "logging/handlers", "email/utils", "hashlib", "base64", "tokenize", "configparser",
          "xmlrpc/client"]
PACKAGES = ["click", "jinja2", "starlette", "httpx", "uvicorn", "mcp", "zmq", "tenacity"]


def _package_files(name: str) -> list[Path]:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.py"))


def texts(quick: bool) -> dict[str, list[str]]:
    """Ordinary lines by kind of text (none of them holds a secret)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code_files = sorted((ROOT / "kirolearn").rglob("*.py")) + sorted((ROOT / "shims").glob("*.py"))
    code_files += [stdlib / f"{name}.py" for name in STDLIB]
    for package in PACKAGES[:2] if quick else PACKAGES:
        code_files += _package_files(package)
    prose_files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    lock = (ROOT / "tests/e2e/package-lock.json").read_text("utf-8").splitlines()

    def lines(files: list[Path]) -> list[str]:
        return [line for f in files for line in f.read_text("utf-8", "replace").splitlines()
                if line.strip()]

    count = 2000 if quick else 20000
    return {
        "code": lines(code_files),
        "prose": lines(prose_files),
        "lockfile": [line for line in lock if line.strip()],
        "uuids": [str(uuid.UUID(bytes=hashlib.md5(str(i).encode()).digest()))
                  for i in range(count)],
        "hashes": [f"{hashlib.sha1(str(i).encode()).hexdigest()} fix: commit {i}"
                   for i in range(count)] + [hashlib.sha256(str(i).encode()).hexdigest()
                                             for i in range(count)],
    }


def false_positives(kind: str, lines: list[str], show: bool) -> dict:
    scrubber = privacy.scrubber()
    started = time.perf_counter()
    wrong = [line for line in lines if scrubber.secrets(line)]
    elapsed = time.perf_counter() - started
    size = sum(len(line) for line in lines)
    started = time.perf_counter()
    for line in lines:
        privacy.scrub_text(line + " ")  # past the cache of short strings
    scrub_s = time.perf_counter() - started
    if show:
        for line in wrong:
            say(f"{kind}: {line.strip()[:160]}")
    return {"bench": "scrub", "text": kind, "lines": len(lines),
            "false_positive_lines": len(wrong),
            "false_positive_rate": round(len(wrong) / max(1, len(lines)), 5),
            "precheck_pass_rate": round(sum(map(scrubber.may_match, lines)) / max(1, len(lines)),
                                        3),
            "rules_mb_per_s": round(size / 1e6 / max(elapsed, 1e-9), 2),
            "scrub_mb_per_s": round(size / 1e6 / max(scrub_s, 1e-9), 2)}


def recall() -> dict:
    import secret_corpus

    missed: dict[str, int] = {}
    caught = 0
    for kind, text, secret in secret_corpus.SECRETS:
        if secret in privacy.scrub_text(text):
            missed[kind] = missed.get(kind, 0) + 1
            say(f"missed {kind}: {text[:100]!r}")
        else:
            caught += 1
    kinds = {kind for kind, _, _ in secret_corpus.SECRETS}
    hidden = sum("HIDDEN" not in privacy.scrub_text(text) for _, text in secret_corpus.PRIVATE)
    return {"bench": "scrub", "text": "corpus", "secrets": len(secret_corpus.SECRETS),
            "kinds": len(kinds), "kinds_caught": len(kinds - set(missed)),
            "kinds_missed": sorted(missed), "secrets_redacted": caught,
            "recall": round(caught / len(secret_corpus.SECRETS), 4),
            "private_variants": len(secret_corpus.PRIVATE), "private_redacted": hidden}


def formats_recall() -> dict:
    from secret_formats import FORMATS

    missed = []
    for kind, text, secret in FORMATS:
        out = privacy.scrub_text(text)
        pieces = [secret] if len(secret) < 12 else [secret[i:i + 12] for i in
                                                     range(0, len(secret) - 11, 6)]
        if any(piece in out for piece in pieces):
            missed.append(kind)
            say(f"missed {kind}: {out[:120]!r}")
    return {"bench": "scrub", "text": "formats", "kinds": len(FORMATS),
            "kinds_caught": len(FORMATS) - len(missed), "kinds_missed": missed,
            "recall": round(1 - len(missed) / len(FORMATS), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--show", action="store_true", help="the wrongly redacted lines")
    args = parser.parse_args()
    started = time.perf_counter()
    privacy.scrubber()
    say(f"rules built in {time.perf_counter() - started:.2f} s")
    print(json.dumps(recall()), flush=True)
    print(json.dumps(formats_recall()), flush=True)
    for kind, lines in texts(args.quick).items():
        say(f"{kind}: {len(lines)} lines")
        print(json.dumps(false_positives(kind, lines, args.show)), flush=True)


if __name__ == "__main__":
    main()
