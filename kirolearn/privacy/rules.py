"""What counts as a secret: detect-secrets' detectors, and what engineers paste that they miss.

Each rule is a regular expression with the kind it redacts to (``[REDACTED:<kind>]``),
the part of a match that is the secret, and its needles: lowercase strings one of
which every match contains. One Aho-Corasick pass finds the needles in a text, so
only the rules that can match run; a rule with no needle runs only on a text with a
long token in it (``LONG_TOKEN``), which every such rule needs.

detect-secrets is a maintained rule set, so its regex detectors are taken as they
are (``from_detect_secrets``); only what it says about each detector that a scrubber
needs is kept here (``DETECTORS``): the needles, and whether a detector's groups are
the secret or the whole match is. Importing it costs a shim most of its budget, so
the rules it gives are kept in the home (``save``/``load``), written by ingest at
every start and read by a shim that must scrub what it spools; where no ingest runs (a
machine connected to another's daemon), the shim and the MCP server read those of the
detect-secrets kirolearn was released with (``SHIPPED``, checked against the installed
one by the tests). One module, long as it is: the rules are a table read top to bottom.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kirolearn import __version__, paths

MARKER = re.compile(r"\[REDACTED:[a-z0-9-]+\]")
# Every needle-less rule needs one run of this many token characters.
LONG_TOKEN = re.compile(r"[A-Za-z0-9_-]{23}")


@dataclass(frozen=True)
class Rule:
    kind: str
    source: str  # the regular expression, compiled the first time the rule runs
    flags: int = 0
    needles: tuple[str, ...] = ()
    groups: bool = False  # the named group "s", or else all groups, is the secret
    accept: Callable[[re.Match, str], str | None] | None = field(default=None, compare=False)
    exact: tuple[str, ...] = ()  # needles matched in the text as it is
    # Lowercase strings one of which every match begins with: in ASCII text a match is
    # tried only where one does, not at every character (a pattern that starts with a
    # long case-blind alternation costs 0.3 µs a character to search).
    starts: tuple[str, ...] = ()
    long: bool = False  # every match holds a LONG_TOKEN run (in ASCII text)

    @functools.cached_property
    def pattern(self) -> re.Pattern:
        """Compiled on first use: most rules never run in a shim's short life."""
        return re.compile(self.source, self.flags)

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, kind) of each secret in text."""
        found = []
        pos = 0
        search = self._searcher(text)
        while (match := search(pos)) is not None:
            pos = max(match.end(), match.start() + 1)
            kind = self.kind
            if self.accept is not None:
                kind = self.accept(match, text)
                if kind is None:
                    pos = match.start() + 1  # a match it turned down may hide one it takes
                    continue
            if "s" in self.pattern.groupindex:
                start, end = match.span("s")
                if (end - start >= 4 and text[start] == "\\" and text[start + 1] == "\""
                        and text[end - 2:end] == "\\\""):
                    start, end = start + 2, end - 2  # quoted in JSON held in a string
                elif end - start >= 2 and text[start] in "'\"" and text[end - 1] == text[start]:
                    start, end = start + 1, end - 1  # a quoted value: the quotes stay
                if end > start:
                    found.append((start, end, kind))
            elif self.groups and self.pattern.groups:
                found += [(match.start(i), match.end(i), kind)
                          for i in range(1, self.pattern.groups + 1) if match.start(i) >= 0
                          and match.end(i) > match.start(i)]
            else:
                start, end = _trimmed(text, match.start(), match.end())
                if end > start:
                    found.append((start, end, kind))
        return found

    def _searcher(self, text: str) -> Callable[[int], re.Match | None]:
        """``pattern.search(text, pos)`` as a function of pos; with ``starts``, in ASCII
        text (where lowercasing keeps every character in its place, and a case-blind
        pattern matches ASCII letters only), the same match found by trying only the
        places where a start is."""
        if not self.starts or not text.isascii():
            return functools.partial(self.pattern.search, text)
        lowered = text.lower()
        places = sorted({at for start in self.starts for at in _places(lowered, start)})
        match = self.pattern.match

        def search(pos: int) -> re.Match | None:
            for at in places[bisect.bisect_left(places, pos):]:
                if (found := match(text, at)) is not None:
                    return found
            return None

        return search


def _places(text: str, part: str) -> list[int]:
    """Where part begins in text, overlaps included."""
    found = []
    at = text.find(part)
    while at >= 0:
        found.append(at)
        at = text.find(part, at + 1)
    return found


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """A whole match less the delimiters some detectors take in (``"``, ``=``, spaces)."""
    while start < end and text[start] in " \t\r\n\"'=:":
        start += 1
    while end > start and text[end - 1] in " \t\r\n\"'":
        end -= 1
    return start, end


# -- what detect-secrets has -------------------------------------------------------------------

# Per regex detector of detect-secrets 1.5: its needles ("exact" ones are matched in
# the text as it is, for detectors whose case-insensitive needles would be everywhere),
# whether its groups hold the secret, and whether every match holds a LONG_TOKEN run
# ("long": then, in ASCII text, it runs only beside one). A detector missing here still
# runs (gated by LONG_TOKEN); a test fails until it is described.
DETECTORS: dict[str, dict] = {
    "ArtifactoryDetector": {"exact": ("AKC", *(f"AP{c}" for c in "0123456789ABCDEF"))},
    "AWSKeyDetector": {"needles": ("akia", "asia", "abia", "acca", "a3t", "aws"),
                       "groups": True},
    "AzureStorageKeyDetector": {"needles": ("accountkey",)},
    "BasicAuthDetector": {"needles": ("://",), "groups": True},
    "CloudantDetector": {"needles": ("key", "pw", "pass", "token", "cloudant"), "groups": True,
                         "long": True},
    "DiscordBotTokenDetector": {},
    "GitHubTokenDetector": {"needles": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")},
    "GitLabTokenDetector": {"needles": ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-",
                                        "gr1348941", "glcbt-", "glimt-", "glptt-", "glagent-",
                                        "gloas-")},
    "IbmCloudIamDetector": {"needles": ("key", "pwd", "pass", "token"), "groups": True,
                            "long": True},
    "IbmCosHmacDetector": {"needles": ("secret",), "groups": True},
    "JwtTokenDetector": {"needles": ("eyj",)},
    "MailchimpDetector": {"needles": ("-us",)},
    "NpmDetector": {"needles": ("_authtoken",), "groups": True},
    "OpenAIDetector": {"needles": ("t3blbkfj",)},
    "PrivateKeyDetector": {"needles": ("private key", "putty-user-key-file")},
    "PypiTokenDetector": {"needles": ("pypi-",)},
    "SendGridDetector": {"needles": ("sg.",)},
    "SlackDetector": {"needles": ("xox", "hooks.slack.com")},
    "SoftlayerDetector": {"needles": ("key", "pwd", "pass", "token", "softlayer"),
                          "groups": True, "long": True},
    "SquareOAuthDetector": {"needles": ("sq0csp-",)},
    "StripeDetector": {"needles": ("k_live_",)},
    "TelegramBotTokenDetector": {},
    "TwilioKeyDetector": {},
}
# Left out, with the reason: what they flag is not a secret, or is flagged better here.
LEFT_OUT = {
    "IPPublicDetector": "a public IP address is not a secret",
    "KeywordDetector": "its assignments run to the end of a line of code; KEYED below"
                       " checks the value",
    "Base64HighEntropyString": "flags lockfile hashes and ids in ordinary code",
    "HexHighEntropyString": "flags commit hashes and checksums",
}


def _kind_of(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


def from_detect_secrets() -> list[dict]:
    """The regex detectors of the installed detect-secrets, as plain data (``load``
    compiles it): kind, pattern, flags, needles, exact needles, groups."""
    import importlib
    import inspect
    import pkgutil

    import detect_secrets.plugins
    from detect_secrets.plugins.base import RegexBasedDetector

    found = []
    for module_info in sorted(pkgutil.iter_modules(detect_secrets.plugins.__path__),
                              key=lambda m: m.name):
        module = importlib.import_module(f"detect_secrets.plugins.{module_info.name}")
        for name, value in sorted(vars(module).items()):
            if (not isinstance(value, type) or not issubclass(value, RegexBasedDetector)
                    or value.__module__ != module.__name__ or inspect.isabstract(value)
                    or name in LEFT_OUT):
                continue
            known = DETECTORS.get(name, {})
            for regex in value.denylist:
                found.append({"detector": name, "kind": _kind_of(value.secret_type),
                              "pattern": regex.pattern, "flags": int(regex.flags),
                              "needles": list(known.get("needles", ())),
                              "exact": list(known.get("exact", ())),
                              "groups": bool(known.get("groups", False))})
    return found


# -- what they miss ------------------------------------------------------------------------------

# (a value in JSON held in a string comes with its quotes escaped: \"…\")
_QUOTED_OR_BARE = r"""(?P<s>\\"(?:[^"\\\n]|\\[^"\n])*\\"|"[^"\n]*"|'[^'\n]*'|[^\s"'`,;)}\]]+)"""
_KEYWORD = (r"(?:pass(?:word|wd|phrase|code)?|pwd|pw|secret|token|credentials?|creds?"
            r"|api[_-]?key|apikey|access[_-]?key|auth[_-]?key|private[_-]?key|account[_-]?key"
            r"|client[_-]?key|service[_-]?key|db[_-]?key|database[_-]?key|priv[_-]?key"
            r"|key[_-]?pass|sharedaccesskey|sharedaccesssignature|signing[_-]?key"
            r"|encryption[_-]?key|master[_-]?key|contrase(?:ñ|n)a|key|signature|sig|jwt|dsn"
            r"|auth)")
# What each of _KEYWORD's words begins with (the tests check every match does).
_KEYWORD_STARTS = ("pass", "pwd", "pw", "secret", "token", "credential", "cred", "api",
                   "access", "auth", "priv", "account", "client", "service", "db", "database",
                   "key", "sharedaccess", "signing", "encryption", "master", "contrase", "sig",
                   "jwt", "dsn")
# The words of a key that name a secret by themselves only when its value looks like one
# (``APP_KEY=base64:…`` is, ``sort_key = "name"`` is not): a value of a secret's shape.
_WEAK_WORDS = ("key", "sig", "signature", "dsn", "auth", "cred", "creds")
# A key with a secret word, a separator and a value: ``DB_PASSWORD=…``, ``"token": "…"``,
# ``password = '…'``. The match starts at the word; what comes before it (DB_) stays.
_KEYED = (
    rf"(?P<word>{_KEYWORD})(?P<rest>[\w-]*)(?:\\?[\"'\]]){{0,2}}[ \t]*(?P<sep>:=|=>|[:=])(?!=)"
    rf"[ \t]*(?!\[REDACTED){_QUOTED_OR_BARE}")
# A key that ends like these names something about a secret, not the secret.
_NOT_THE_SECRET = re.compile(
    r"[_-]?(?:type|types|id|ids|name|names|file|filename|path|dir|url|uri|endpoint|length|len"
    r"|size|count|limit|ttl|expiry|expires|expires_at|expires_in|at|header|field|prefix"
    r"|format|env|var|policy|pattern|regex|required|enabled|label|placeholder|hint|min|max"
    r"|reset|changed|version|usage|used|budget|budgets|estimate|class|kind|mode|store|cache"
    r"|provider|manager|helper|source|command|cmd)$", re.IGNORECASE)
# Keys named "…key" that are no secret: a database's, a dictionary's, a keyboard's (the
# word before "key").
_NOT_A_SECRET_KEY = frozenset([
    "primary", "foreign", "sort", "partition", "range", "hash", "cache", "lookup", "dict", "map",
    "group", "row", "column", "index", "unique", "public", "pub", "composite", "natural",
    "surrogate", "object", "item", "entry", "record", "order", "shortcut", "hot", "short",
    "keyboard", "press", "pressed", "on", "event", "react", "vue", "list", "idempotency",
    "routing", "storage", "s3", "bucket", "field", "attr", "attribute", "prop", "message",
    "translation", "i18n", "l10n", "setting", "config", "option", "state", "query", "cursor",
    "next", "prev", "page", "pagination", "ssh", "gpg", "pgp", "license", "host", "known",
    "trusted", "verify", "verification", "template", "component", "dedup", "dedupe", "ordering",
    "lock", "mutex", "redis", "kv", "sequence"])
_KEY_WORDS = re.compile(r"[_\-.]+|(?<=[a-z0-9])(?=[A-Z])")
_PLACEHOLDER = re.compile(
    r"""^(?:\$|\{|<|%\(|%s|\*{3}|x{4,}$|\.\.\.|true$|false$|null$|none$|nil$|undefined$
    |\[|changeme$|secret$|password$|your[_-]|example|dummy|fake|test$|redacted|todo$)""",
    re.IGNORECASE | re.VERBOSE)
_CODE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:[(\[].*)?$")
_NUMBER = re.compile(r"[\d_.,]+")
_VERSION = re.compile(r"[\^~<>=]{0,2}v?\d+(?:\.\d+){1,3}(?:-[a-z]+(?:\.?\d+)?)?")  # ^3.9.8-rc.1
_WORD = re.compile(r"[A-Za-z][a-z]*")  # "keyword", "Token": a name, not a secret
_FORMAT = re.compile(r"%[-+ #0-9.]*[sdifrx(]|\{\w*\}")
_SECRET_WORD = re.compile(_KEYWORD, re.IGNORECASE)


def shaped_like_a_secret(value: str) -> bool:
    """Whether a value has a secret's form: one unbroken run of 16 characters or more,
    of several kinds (letters and digits, or both cases), of secret-like entropy, and not
    a path, a URL, a dotted name, a version or an identifier of words."""
    if len(value) < 16 or any(c.isspace() for c in value) or _PLACEHOLDER.match(value):
        return False
    if value.startswith(("/", "./", "~/", "http://", "https://")) or _VERSION.fullmatch(value):
        return False
    if re.fullmatch(r"[a-z_.:/-]+|[A-Z_.:/-]+|[A-Za-z]+(?:[._-][A-Za-z]+)*", value):
        return False  # words: a name, a setting, a dotted path
    kinds = sum(bool(re.search(pattern, value))
                for pattern in (r"[a-z]", r"[A-Z]", r"\d", r"[^A-Za-z0-9]"))
    if kinds < 2:
        return False
    counts = {c: value.count(c) for c in set(value)}
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 3.0


def _keyword_kind(word: str) -> str:
    word = word.lower()
    if word.startswith(("pass", "pwd", "contras")) or word.endswith("pass") or word == "pw":
        return "password"
    if word == "token":
        return "token"
    if "api" in word:
        return "api-key"
    return "secret"


def _looks_like_code(value: str, tight: bool) -> bool:
    """An unquoted value that reads as code or prose, not a secret: self.token,
    os.environ[…], get_secret(), (a, b), new_password, Optional, and (after "key: ")
    a plain word."""
    if value[0] in "([{" or (not tight and (
            re.fullmatch(r"[a-z][a-z-]*", value)  # a word
            or (re.fullmatch(r"[A-Za-z_]+", value) and _SECRET_WORD.search(value)))):  # passwd
        return True
    if not _CODE.match(value):
        return False
    if any(c in value for c in ".(["):
        return True  # an attribute, a call, an index
    return not any(c.isdigit() for c in value) and (
        "_" in value or (value[0].isupper() and not value.isupper()))


def _key_before(text: str, start: int) -> str:
    """The part of a key before its secret word (DB_ of DB_PASSWORD)."""
    begin = start
    while begin > 0 and (text[begin - 1].isalnum() or text[begin - 1] in "_-."):
        begin -= 1
    return text[begin:start]


def _another_word(word: str, rest: str, before: str) -> bool:
    """Whether a secret word is part of another word: tokenizer, passage, compass,
    monkey, design (but PGPASSWORD, storePassword, apiKey are keys)."""
    if rest and not (rest[0] in "_-" or rest.lower() == "s" or rest[0].isupper()):
        return True
    return bool(word.lower().startswith(("pass", "pw", "key", "sig", "auth", "cred", "dsn", "jwt"))
                and before and before[-1].isalpha()
                and not ((before.isupper() and word.isupper()) or word[0].isupper()))


def _weak_key(word: str, rest: str, before: str) -> bool | None:
    """Whether a key's word is a weak one (a key, a signature: only a value of a
    secret's shape is a secret), or None when the key names no secret at all
    (primary_key, sort_key, public_key, KEY_EXCHANGE, private_key_path…)."""
    if _NOT_THE_SECRET.search(rest) and not (word + rest).lower().endswith("private_key_id"):
        return None
    if word.lower().replace("-", "_") not in _WEAK_WORDS:
        return False
    if rest.strip("_-").lower() not in ("", "s") or _KEY_WORDS.split(
            before.strip("_-."))[-1].lower() in _NOT_A_SECRET_KEY:
        return None
    return True


def _keyed_value(match: re.Match, text: str, env_style: bool) -> tuple[str, bool] | None:
    """A keyed secret's value with its quotes taken off, and whether it was quoted;
    None when it is too short to be one or a placeholder."""
    value = match.group("s")
    if value.startswith("\\\"") and value.endswith("\\\"") and len(value) >= 4:
        value = value[1:-2] + '"'  # \"…\": JSON held in a string
    quoted = value[0] in "'\""
    value = value.strip("'\"").strip()
    if len(value) < (4 if quoted or env_style else 6) or _PLACEHOLDER.match(value):
        return None
    return value, quoted


def _plain_value(value: str, quoted: bool, tight: bool, json_key: bool, env_style: bool) -> bool:
    """Whether a value under a secret key reads as something else: a number, a
    version, a format string, or (but in a .env line) a sentence, a word, code."""
    if _NUMBER.fullmatch(value) or _VERSION.fullmatch(value) or _FORMAT.search(value):
        return True
    if env_style:
        return False
    if quoted:
        return any(c.isspace() for c in value) or bool(_WORD.fullmatch(value) and not json_key)
    return _looks_like_code(value, tight)


def _keyed(match: re.Match, text: str) -> str | None:
    """The kind of a keyed secret, or None when the value is not one (a count, a
    placeholder, a reference in code)."""
    word, rest = match.group("word"), match.group("rest")
    before = _key_before(text, match.start())
    if _another_word(word, rest, before):
        return None
    weak = _weak_key(word, rest, before)
    if weak is None:
        return None
    # key=value, as on a command line; KEY=value, as in a .env file or before a command
    # (not KEY = value, a constant in code)
    tight = match.group("sep") == "=" and not (
        text[match.start("sep") - 1].isspace() or text[match.end("sep")].isspace())
    env_style = tight and (before + word + rest).upper() == before + word + rest
    found = _keyed_value(match, text, env_style)
    if found is None:
        return None
    value, quoted = found
    if quoted and _APP_PASSWORD.fullmatch(value):
        return "password"  # Google's app passwords come as four groups of four
    if weak:  # a key, a signature: only a value of a secret's shape is one
        code = not quoted and (any(c in value for c in "([{")
                               or re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", value))
        return "secret" if shaped_like_a_secret(value) and not code else None
    # "password": "…" in JSON: the key alone says what the value is (a plain word too).
    json_key = quoted and text[match.start() - 1: match.start()] in ("\"", "'", "\\")
    if _plain_value(value, quoted, tight, json_key, env_style):
        return None
    return _keyword_kind(word)


# -- a value under a secret key of a JSON object, at any depth (``secret_key_kind``) ----------

_APP_PASSWORD = re.compile(r"[a-z]{4} [a-z]{4} [a-z]{4} [a-z]{4}")
# A JSON Web Key's private members (an object with "kty").
JWK_PRIVATE = frozenset(("d", "p", "q", "dp", "dq", "qi", "k", "oth"))
SECRET_KEYS = frozenset({
    "password", "passwd", "pass", "pwd", "passphrase", "secret", "token", "api_key", "apikey",
    "access_key", "secret_key", "private_key", "private_key_id", "client_secret", "auth",
    "auth_token", "access_token", "refresh_token", "id_token", "session_token", "credential",
    "credentials", "key_pass", "store_pass", "store_password", "key_password",
    "signing_key", "encryption_key", "master_key", "secret_access_key", "account_key",
    "shared_access_key", "webhook_secret", "signing_secret",
    "identity_token", "registry_token", "bearer", "authorization", "cookie",
})
_SNAKE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@functools.lru_cache(maxsize=4096)  # a body's keys repeat from one event to the next
def secret_key_kind(key: str) -> str | None:
    """The kind of secret a JSON object's key names (``DB_PASSWORD``, ``clientSecret``,
    ``private_key_id``, docker's ``auth``), or None: the value under such a key is
    redacted whole, whatever it looks like."""
    if not 3 <= len(key) <= 64:
        return None
    name = re.sub(r"[\s.\-]+", "_", _SNAKE.sub("_", key.strip())).lower()
    if name in SECRET_KEYS or any(name.endswith("_" + word) for word in SECRET_KEYS
                                  if word not in ("pass", "auth", "cookie", "bearer")):
        return _keyword_kind(name.rsplit("_", 1)[-1] if name not in SECRET_KEYS else name)
    return None


def secret_value(value: str) -> bool:
    """Whether a string under a secret key is a secret (not empty, a placeholder, a
    reference to one, or a redaction already)."""
    value = value.strip()
    return (len(value) >= 3 and not _PLACEHOLDER.match(value) and not MARKER.fullmatch(value)
            and value.lower() not in ("basic", "bearer", "oauth", "oauth2", "token", "none"))


def _flag_value(match: re.Match, text: str) -> str | None:
    value = match.group("s").strip("'\"")
    if len(value) < 4 or _PLACEHOLDER.match(value) or re.fullmatch(r"[A-Z_]+", value):
        return None  # --token TOKEN in a usage line
    word = match.groupdict().get("word") or "password"
    if re.search(r"[-_](?:file|env|stdin|fd)$", word, re.I) or value.startswith(("/", "./")):
        return None  # --password-file PATH: where the secret is, not the secret
    return _keyword_kind(word.rsplit("-", 1)[-1] if word.startswith("-") else word)


def _said_in_prose(match: re.Match, text: str) -> str | None:
    """A value said to be a password or token in a sentence: one that is no word, no
    placeholder, no path, with a digit or a sign among its letters."""
    value = match.group("s").rstrip(".,;:!?")
    if (len(value) < 6 or _PLACEHOLDER.match(value) or value.startswith(("/", "./", "~", "http"))
            or _VERSION.fullmatch(value) or _NUMBER.fullmatch(value)
            or not re.search(r"[A-Za-z]", value) or not re.search(r"[\d\W_]", value)
            or _FORMAT.search(value)):
        return None
    return _keyword_kind(match.group("word").replace(" ", "_"))


def _paired(match: re.Match, text: str) -> str | None:
    """A string literal's value after one that names a secret: a value that is no word,
    no placeholder, no format, and (after a name of a key or salt) of a secret's shape."""
    name, value = match.group("name"), match.group("s")[1:-1]
    if (_PLACEHOLDER.match(value) or _FORMAT.search(value) or _VERSION.fullmatch(value)
            or re.fullmatch(r"[\W_]*[A-Za-z]+(?:[._\- ][A-Za-z]+)*[\W_]*", value)
            or _NOT_THE_SECRET.search(name)):
        return None
    if re.search(r"pass|pwd|secret|token|credential", name, re.I):
        return _keyword_kind(_SECRET_WORD.search(name).group(0))
    return "secret" if shaped_like_a_secret(value) else None


def _kubernetes_data(match: re.Match, text: str) -> str | None:
    """A value of a Secret manifest's ``data:`` or ``stringData:``: the key it is under is
    the nearest line before it that is indented less."""
    if not re.search(r"(?m)^\s*[\"']?kind[\"']?\s*:\s*[\"']?Secret\b", text):
        return None
    indent = len(match.group("indent").expandtabs())
    for line in reversed(text[:match.start()].splitlines()):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if len(line) - len(line.lstrip()) < indent:
            return "kubernetes-secret" if re.fullmatch(
                r"\s*(?:data|stringData)\s*:\s*", line) else None
    return None


def _url_parameter(match: re.Match, text: str) -> str | None:
    """A query parameter's value under a name that says secret; ``key`` and ``code``
    alike only when the value has a secret's shape (``?sort_key=created_at`` is none)."""
    value, name = match.group("s"), match.group("name").lower()
    if _PLACEHOLDER.match(value) or "{" in value:
        return None
    strong = re.search(r"token|secret|password|passwd|pwd|signature|sig$|credential|auth",
                       name)
    if not strong and not shaped_like_a_secret(value):
        return None
    return "url-token"


def _authorization(match: re.Match, text: str) -> str | None:
    value = match.group("s").strip()
    if len(value) < 6 or any(c in value for c in "{}$+") or " " in value.strip():
        return None
    return "authorization"


def _not_placeholder(kind: str) -> Callable[[re.Match, str], str | None]:
    def accept(match: re.Match, text: str) -> str | None:
        value = match.group("s")
        return None if _PLACEHOLDER.match(value) or "{" in value else kind
    return accept


def _rule(kind: str, pattern: str, needles: tuple[str, ...], flags: int = 0,
          accept: Callable[[re.Match, str], str | None] | None = None) -> Rule:
    return Rule(kind, pattern, flags, needles, True, accept)


_I = re.IGNORECASE
_TOKEN = r"[A-Za-z0-9_-]"
OURS: list[Rule] = [
    # Key blocks, whole, to their end line (or to the end of the text when cut off).
    Rule("private-key", r"-{4,5} ?BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)? ?-{4,5}.*?"
         r"(?:-{4,5} ?END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)? ?-{4,5}|\Z)", re.DOTALL,
         ("----begin", "---- begin")),
    Rule("private-key", r"PuTTY-User-Key-File-\d.*?(?:Private-MAC: ?[0-9a-f]+|\Z)", re.DOTALL,
         ("putty-user-key-file",)),
    Rule("secret", _KEYED, re.IGNORECASE, ("pass", "pwd", "pw", "secret", "token", "cred",
                                           "key", "contras", "sig", "jwt", "dsn", "auth"),
         accept=_keyed, starts=_KEYWORD_STARTS),
    # Credentials in a URL (redis://:pw@host too) and tokens in its query.
    # (a password may hold "@" or "#" as people type it: the userinfo ends at the last
    # "@" before the host)
    _rule("url-password", r"\b[a-z][a-z0-9+.-]*://[^\s:/@?#\"'<>]*:(?P<s>[^\s/\"'<>]+)@"
          r"(?=[A-Za-z0-9\[][A-Za-z0-9.\-\]:]*(?:[/?#\s\"'<>]|$))",
          ("://",), _I, _not_placeholder("url-password")),
    # A query parameter whose name says secret: tokens, keys, presigned URLs' signatures
    # and credentials (X-Amz-Signature, X-Goog-Signature, sig, Signature, Policy).
    _rule("url-token", r"[?&;](?P<name>[\w.-]*(?:token|key|sig|signature|secret|password"
          r"|passwd|pwd|auth|credential|session|code|policy)[\w.-]*)=(?P<s>[^&\s#\"'<>]{8,})",
          ("token=", "key=", "sig=", "signature=", "secret=", "password=", "pwd=", "passwd=",
           "auth=", "credential=", "session=", "code=", "policy="), _I, _url_parameter),
    _rule("webhook-url", r"https://(?:hooks\.slack\.com/(?:services|workflows|triggers)"
          r"|discord(?:app)?\.com/api/webhooks|[\w.-]+\.webhook\.office\.com/webhookb2"
          r"|hooks\.zapier\.com/hooks/catch)/(?P<s>[^\s\"'<>]+)",
          ("hooks.slack.com", "/api/webhooks", "webhook.office.com", "hooks.zapier.com"), _I),
    # Headers and command lines.
    _rule("authorization", r"\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
          r"(?:(?:bearer|basic|token|digest|bot|apikey|sso-key|negotiate|ntlm|ssws)[ \t]+)?"
          r"(?P<s>[^\"'\r\n,]{6,})", ("authorization",), _I, _authorization),
    _rule("token", r"\bbearer[ \t]+(?P<s>[A-Za-z0-9._~+/=-]{16,})", ("bearer",), _I),
    # A flag whose name says secret (--db-password, --vault-token, -passphrase), and a
    # program's own short flag for one (ssh-keygen -N, sqlcmd -P, zip -P, ldapsearch -w).
    _rule("password", r"(?:^|[\s;|&(])--?(?P<word>[\w-]*(?:password|passwd|passphrase|pass"
          r"|pwd|token|api[-_]?key|secret|auth[-_]?key|credentials?|storepass|keypass)"
          r"(?:[-_](?:file|env|stdin|fd))?)(?:=|[ \t]+)(?!-)"
          r"(?P<s>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)",
          ("pass", "-pwd", "token", "-api", "secret", "-auth", "credential"),
          re.MULTILINE, _flag_value),
    _rule("password", r"\b(?:ssh-keygen\b[^\n|;&]*?[ \t]-[NP]|sqlcmd\b[^\n|;&]*?[ \t]-P"
          r"|(?:zip|unzip|7z|7za|rar|unrar)\b[^\n|;&]*?[ \t]-[Pp]|ldap\w+\b[^\n|;&]*?[ \t]-w"
          r"|mongo\w*\b[^\n|;&]*?[ \t]-p|(?:smbclient|rpcclient)\b[^\n|;&]*?[ \t]-U[ \t]*"
          r"[^\s%]+%|htpasswd\b[^\n|;&]*?[ \t]-\w*b\w*(?:[ \t]+-\w+)*[ \t]+[^\s-]\S*[ \t]+\S+"
          r"|az[ \t]+login\b[^\n|;&]*?[ \t]-p|openssl\b"
          r"[^\n|;&]*?[ \t]-(?:pass(?:in|out)?|k)[ \t]+(?:pass:)?)[ \t]*(?P<s>'[^'\n]*'"
          r"|\"[^\"\n]*\"|[^\s'\"]+)",
          ("ssh-keygen", "sqlcmd", "zip", "7z", "rar", "ldap", "mongo", "smbclient",
           "rpcclient", "htpasswd", "openssl", "az login"), 0, _flag_value),
    # A string literal naming a secret, then its value: define('DB_PASSWORD', '…'),
    # setProperty("mail.smtp.password", "…"), ("api_key", "…") in a list of pairs.
    _rule("secret", r"[\"'](?P<name>[\w.-]{0,40}(?:pass(?:word|wd|phrase)?|pwd|secret|token"
          r"|api[_-]?key|apikey|auth[_-]?key|private[_-]?key|salt|credentials?)[\w.-]{0,20})"
          r"[\"'][ \t]*,[ \t]*(?P<s>\"[^\"\n]{4,}\"|'[^'\n]{4,}')",
          ("pass", "pwd", "secret", "token", "key", "salt", "credential"), _I, _paired),
    # Files people paste from their machine: ~/.netrc, ~/.pgpass, docker's and npm's auth.
    _rule("password", r"\b(?:login|machine)[ \t]+\S+\s+password[ \t]+(?P<s>\S+)",
          ("login", "machine"), _I),
    _rule("password", r"(?m)^[^:\s#]+:(?:\d{2,5}|\*):[^:\s]+:[^:\s]+:(?P<s>\S+)$",
          (":5432:", ":5433:", ":*:")),
    _rule("auth", r"(?:^|[\s{,\"'])_?auth[\"']?[ \t]*[:=][ \t]*[\"']?"
          r"(?P<s>[A-Za-z0-9+/]{12,}={0,2})(?=[\"'\s,}]|$)", ("auth",)),
    _rule("cookie", r"\b(?:set-)?cookie[\"']?[ \t]*:[ \t]*(?P<s>[^\s;=\"']+=[^\r\n'\"]{6,})",
          ("cookie",), _I),
    _rule("password", r"(?:app[ _-]?password|gmail)[^\n]{0,30}?\b"
          r"(?P<s>[a-z]{4} ?[a-z]{4} ?[a-z]{4} ?[a-z]{4})\b",
          ("app password", "app-password", "app_password", "apppassword", "gmail"), _I),
    # A Twilio auth token beside its account's SID.
    _rule("twilio-auth-token", r"\bAC[a-f0-9]{32}[\"']?\s*[,:]\s*[\"']?(?P<s>[a-f0-9]{32})\b",
          ()),
    _rule("password", r"\b(?:mysql\w*|mariadb\w*)\b[^\n|;&]*?[ \t]-p(?P<s>[^\s'\"]+|'[^'\n]*'"
          r"|\"[^\"\n]*\")", ("mysql", "mariadb")),
    _rule("password", r"\b(?:sshpass[^\n|;&]*?[ \t]-p[ \t]*|redis-cli\b[^\n|;&]*?[ \t]-a[ \t]+"
          r"|docker[ \t]+login\b[^\n|;&]*?[ \t]-p[ \t]+)(?P<s>'[^'\n]*'|\"[^\"\n]*\""
          r"|[^\s'\"]+)", ("sshpass", "redis-cli", "docker")),
    _rule("basic-auth", r"\b(?:curl|https?|wget)\b[^\n|;&]*?[ \t](?:-u|--user|-a|--auth)"
          r"(?:[ \t]+|=)[\"']?[^\s:'\"]*:(?P<s>[^\s'\"]+)", ("curl", "http", "wget")),
    # Said in prose: "the wifi password is Tr0ub4dor&3", "token was 4f3c…".
    _rule("password", r"\b(?P<word>password|passphrase|passcode|pass|pwd|pin|token|secret"
          r"|api[ _-]?key)\b[ \t]+(?:is|was|is[ \t]+now|now[ \t]+is)[ \t]+[\"'`]?"
          r"(?P<s>[^\s\"'`]{6,}?)[\"'`]?(?=[\s,;)]|[.!?](?:\s|$)|$)",
          tuple(f"{word} {verb}" for word in ("password", "passphrase", "passcode", "pass",
                                                "pwd", "pin", "token", "secret", "key")
                for verb in ("is", "was", "now")), _I, _said_in_prose),
    # XML as build tools keep it: Maven's <password>, NuGet's <add key="ClearTextPassword"
    # value="…"/>, <property name="db.password" value="…"/>.
    _rule("password", r"<(?P<tag>[\w:.-]*(?:password|passwd|passphrase|secret|token|apikey"
          r"|api-key|api_key|privatekey|credentials?)[\w:.-]*)\b[^>/]*>[ \t]*(?P<s>[^<\s]"
          r"[^<]{2,})</(?P=tag)>", ("password", "passwd", "passphrase", "secret", "token",
                                     "apikey", "api-key", "api_key", "privatekey", "credential"),
          _I, _not_placeholder("password")),
    _rule("password", r"\b(?:key|name)[ \t]*=[ \t]*[\"'][^\"'\n]*(?:password|passwd|passphrase"
          r"|secret|token|apikey|api[_.-]key)[^\"'\n]*[\"'][ \t]+value[ \t]*=[ \t]*[\"']"
          r"(?P<s>[^\"'\n]{3,})[\"']", ("password", "passwd", "passphrase", "secret", "token",
                                           "apikey", "api_key", "api-key", "api.key"), _I,
          _not_placeholder("password")),
    # A Kubernetes Secret's data: every value under data/stringData of a manifest whose
    # kind is Secret (base64 is no disguise).
    Rule("kubernetes-secret", r"(?m)^(?P<indent>[ \t]+)[\w.-]+:[ \t]*(?P<s>\S[^\n]*?)[ \t]*$",
         0, ("kind: secret", "\"kind\": \"secret\""), accept=_kubernetes_data),
    # A JSON Web Key's private members ("d", "p", "q", "dp", "dq", "qi"; "k" of a
    # symmetric key), in a text that holds a JWK ("kty").
    _rule("private-key", r"\\?\"(?:d|p|q|dp|dq|qi|k)\\?\"[ \t]*:[ \t]*\\?\""
          r"(?P<s>[A-Za-z0-9_-]{16,})\\?\"", ("\"kty", "kty\\\"")),
    # Providers detect-secrets 1.5 has no detector for.
    _rule("openai-key", rf"\b(?P<s>sk-(?:proj-|svcacct-|admin-)?{_TOKEN}{{20,}})", ("sk-",)),
    _rule("anthropic-key", rf"\b(?P<s>sk-ant-(?:api|admin)\d\d-{_TOKEN}{{20,}})", ("sk-ant-",)),
    _rule("huggingface-token", r"\b(?P<s>hf_[A-Za-z0-9]{30,})", ("hf_",)),
    _rule("github-token", r"\b(?P<s>github_pat_[A-Za-z0-9_]{40,}|gh[pousr]_[A-Za-z0-9]{30,})",
          ("github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    _rule("slack-token", r"\b(?P<s>xox[abposre]-[A-Za-z0-9-]{10,})", ("xox",)),
    _rule("stripe-key", r"\b(?P<s>[rs]k_(?:live|test)_[A-Za-z0-9]{16,})", ("k_live_",
                                                                           "k_test_")),
    _rule("google-api-key", rf"\b(?P<s>AIza{_TOKEN}{{35}})", ("aiza",)),
    _rule("google-oauth", rf"\b(?P<s>GOCSPX-{_TOKEN}{{20,}}|ya29\.{_TOKEN}{{20,}})",
          ("gocspx-", "ya29.")),
    _rule("npm-token", r"\b(?P<s>npm_[A-Za-z0-9]{36})", ("npm_",)),
    _rule("json-web-token", rf"\b(?P<s>eyJ{_TOKEN}{{8,}}\.eyJ{_TOKEN}{{8,}}\.{_TOKEN}{{8,}})",
          ("eyj",)),
    _rule("aws-access-key", r"\b(?P<s>(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16})\b",
          ("akia", "asia", "abia", "acca")),
    _rule("digitalocean-token", r"\b(?P<s>do[por]_v1_[a-f0-9]{64})", ("_v1_",)),
    _rule("docker-token", rf"\b(?P<s>dckr_pat_{_TOKEN}{{20,}})", ("dckr_pat_",)),
    _rule("vault-token", rf"\b(?P<s>hv[sb]\.{_TOKEN}{{24,}})", ("hvs.", "hvb.")),
    _rule("shopify-token", r"\b(?P<s>shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})", ("shpat_", "shpca_",
                                                                          "shppa_", "shpss_")),
    _rule("databricks-token", r"\b(?P<s>dapi[a-f0-9]{32}(?:-\d)?)", ("dapi",)),
    _rule("atlassian-token", r"\b(?P<s>ATATT3[A-Za-z0-9_\-=]{20,})", ("atatt3",)),
    _rule("linear-key", r"\b(?P<s>lin_(?:api|oauth)_[A-Za-z0-9]{32,})", ("lin_api_",
                                                                       "lin_oauth_")),
    _rule("postman-key", r"\b(?P<s>PMAK-[a-f0-9]{24}-[a-f0-9]{34})", ("pmak-",)),
    _rule("grafana-token", rf"\b(?P<s>glsa_{_TOKEN}{{32}}_[a-f0-9]{{8}}|glc_{_TOKEN}{{32,}})",
          ("glsa_", "glc_")),
    _rule("supabase-token", r"\b(?P<s>sbp_[a-f0-9]{40})", ("sbp_",)),
    _rule("age-secret-key", r"\b(?P<s>AGE-SECRET-KEY-1[0-9A-Z]{58})", ("age-secret-key-",)),
    _rule("mailgun-key", r"\b(?P<s>key-[0-9a-f]{32})\b", ("key-",)),
    _rule("sentry-dsn", r"https://(?P<s>[0-9a-f]{32})@[\w.-]*sentry\.io", ("sentry.io",)),
    _rule("newrelic-key", r"\b(?P<s>NRAK-[A-Z0-9]{27})", ("nrak-",)),
    _rule("alibaba-key", r"\b(?P<s>LTAI[A-Za-z0-9]{20})", ("ltai",)),
    _rule("stripe-webhook-secret", r"\b(?P<s>whsec_[A-Za-z0-9+/=]{24,})", ("whsec_",)),
    Rule("azure-client-secret", r"(?<![A-Za-z0-9_~.-])(?P<s>[A-Za-z0-9_~.-]{3}\dQ~"
         r"[A-Za-z0-9_~.-]{31,34})", exact=("Q~",)),
    _rule("mapbox-token", rf"\b(?P<s>[ps]k\.eyJ{_TOKEN}{{20,}}\.{_TOKEN}{{20,}})",
          ("pk.eyj", "sk.eyj")),
    _rule("tailscale-key", r"\b(?P<s>tskey-[a-z]+-[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,})",
          ("tskey-",)),
    _rule("groq-key", r"\b(?P<s>gsk_[A-Za-z0-9]{48,})", ("gsk_",)),
    _rule("replicate-token", r"\b(?P<s>r8_[A-Za-z0-9]{37})", ("r8_",)),
    _rule("notion-token", r"\b(?P<s>ntn_[A-Za-z0-9]{40,}|secret_[A-Za-z0-9]{43})\b",
          ("ntn_", "secret_")),
    _rule("pulumi-token", r"\b(?P<s>pul-[a-f0-9]{40})", ("pul-",)),
    _rule("planetscale-token", r"\b(?P<s>pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_-]{32,})",
          ("pscale_",)),
    _rule("doppler-token", r"\b(?P<s>dp\.(?:st|pt|ct|sa|scim|audit)\.[A-Za-z0-9._-]{40,})",
          ("dp.st.", "dp.pt.", "dp.ct.", "dp.sa.", "dp.scim.", "dp.audit.")),
    _rule("terraform-token", r"\b(?P<s>[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_-]{60,})",
          (".atlasv1.",)),
    _rule("buildkite-token", r"\b(?P<s>bkua_[a-f0-9]{40})", ("bkua_",)),
    _rule("heroku-key", r"\b(?P<s>HRKU-[A-Za-z0-9_-]{60})", ("hrku-",)),
    _rule("1password-token", r"\b(?P<s>ops_eyJ[A-Za-z0-9_-]{50,})", ("ops_eyj",)),
    _rule("xai-key", r"\b(?P<s>xai-[A-Za-z0-9]{60,})", ("xai-",)),
    _rule("perplexity-key", r"\b(?P<s>pplx-[A-Za-z0-9]{40,})", ("pplx-",)),
    _rule("sourcegraph-token", r"\b(?P<s>sgp_[A-Za-z0-9_]{40,})", ("sgp_",)),
    _rule("netlify-token", r"\b(?P<s>nfp_[A-Za-z0-9]{36,})", ("nfp_",)),
    _rule("circleci-token", r"\b(?P<s>CCIPAT_[A-Za-z0-9_]{30,})", ("ccipat_",)),
    _rule("fly-token", r"\b(?P<s>fm2_[A-Za-z0-9+/=_,-]{40,})", ("fm2_",)),
    _rule("airtable-token", r"\b(?P<s>pat[A-Za-z0-9]{14}\.[a-f0-9]{64})", ("pat",)),
    _rule("firebase-key", r"\b(?P<s>AAAA[A-Za-z0-9_-]{7}:APA91b[A-Za-z0-9_-]{100,})",
          ("apa91b",)),
    _rule("dropbox-token", r"\b(?P<s>sl\.[A-Za-z0-9_-]{100,})", ("sl.",)),
    _rule("slack-token", r"\b(?P<s>xapp-\d-[A-Z0-9]+-\d+-[a-f0-9]{32,}|xoxe\.xox[bp]-\d-"
          r"[A-Za-z0-9]{100,})", ("xapp-", "xoxe.")),
    _rule("square-token", r"\b(?P<s>sq0atp-[A-Za-z0-9_-]{22}|EAAA[A-Za-z0-9_-]{60})",
          ("sq0atp-", "eaaa")),
    _rule("facebook-token", r"\b(?P<s>EAA[BCDGIMOQU][A-Za-z0-9]{80,})", ("eaa",)),
    _rule("google-refresh-token", rf"\b(?P<s>1//0{_TOKEN}{{40,}})", ("1//0",)),
    _rule("sentry-token", r"\b(?P<s>sntr[yu]s_[A-Za-z0-9+/=_-]{40,})", ("sntrys_", "sntryu_")),
    _rule("rubygems-key", r"\b(?P<s>rubygems_[a-f0-9]{48})", ("rubygems_",)),
    _rule("nuget-key", r"\b(?P<s>oy2[a-z0-9]{43})\b", ("oy2",)),
    _rule("figma-token", r"\b(?P<s>figd_[A-Za-z0-9_-]{40,})", ("figd_",)),
    _rule("hubspot-token", r"\b(?P<s>pat-(?:na|eu)\d-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}"
          r"-[a-f0-9]{4}-[a-f0-9]{12})", ("pat-na", "pat-eu")),
    _rule("dynatrace-token", r"\b(?P<s>dt0[a-z]\d{2}\.[A-Z0-9]{24}\.[A-Z0-9]{64})", ("dt0",)),
    _rule("brevo-key", r"\b(?P<s>xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16})", ("xkeysib-",)),
    _rule("newrelic-key", r"\b(?P<s>NRI[IQ]-[A-Za-z0-9_-]{32})", ("nrii-", "nriq-")),
    _rule("nvidia-key", r"\b(?P<s>nvapi-[A-Za-z0-9_-]{60,})", ("nvapi-",)),
    _rule("pinecone-key", r"\b(?P<s>pcsk_[A-Za-z0-9_]{40,})", ("pcsk_",)),
    _rule("tavily-key", r"\b(?P<s>tvly-[A-Za-z0-9_-]{24,})", ("tvly-",)),
    _rule("scaleway-key", r"\b(?P<s>SCW[A-Z0-9]{17})\b", ("scw",)),
    _rule("bitbucket-token", r"\b(?P<s>ATBB[A-Za-z0-9_=.-]{28,})", ("atbb",)),
    _rule("asana-token", r"\b(?P<s>[12]/\d{10,16}(?:/\d{10,16})?:[a-f0-9]{32})", ()),
    _rule("razorpay-key", r"\b(?P<s>rzp_live_[A-Za-z0-9]{14,})", ("rzp_live_",)),
    _rule("flutterwave-key", r"\b(?P<s>FLWSECK(?:_TEST)?-[a-f0-9]{32}-X)", ("flwseck",)),
    _rule("easypost-key", r"\b(?P<s>EZ[AT]K[a-f0-9]{54})", ("ezak", "eztk")),
    _rule("elevenlabs-key", r"\b(?P<s>sk_[a-f0-9]{48})\b", ("sk_",)),
    _rule("openrouter-key", r"\b(?P<s>sk-or-v1-[a-f0-9]{64})", ("sk-or-",)),
    _rule("cloudflare-token", r"\b(?P<s>cfut_[A-Za-z0-9_-]{40,}|v1\.0-[a-f0-9]{24}-[a-f0-9]{140,})",
          ("cfut_", "v1.0-")),
    _rule("gitlab-token", r"\b(?P<s>gl(?:pat|dt|rt|cbt|ptt|ft|imt|oas|soat)-[A-Za-z0-9_-]{20,})",
          ("glpat-", "gldt-", "glrt-", "glcbt-", "glptt-", "glft-", "glimt-", "gloas-",
           "glsoat-")),
    Rule("twilio-key", r"\b(?P<s>SK[a-f0-9]{32})\b", exact=("SK",)),
    _rule("azure-key", r"\b(?P<s>[A-Za-z0-9]{52}JQQJ99[A-Za-z0-9]{3}AZ[A-Za-z0-9]{4})",
          ("jqqj99",)),
]


# -- the cache a shim reads ------------------------------------------------------------------

def _cache_file(home: paths.Home) -> Path:
    return home.root / "secret-rules.json"


def save(home: paths.Home) -> list[dict]:
    """Write detect-secrets' rules where a shim and the other roles find them (ingest,
    at every start): those kirolearn ships when they are the installed version's (no
    import of detect-secrets, 13 MB held for good), else the library's own."""
    import importlib.metadata  # not at the top: a shim never saves

    found = _shipped_for(importlib.metadata.version("detect-secrets"))
    if found is None:
        found = from_detect_secrets()
    paths.write_private(_cache_file(home), json.dumps(
        {"kirolearn": __version__, "rules": found}).encode("utf-8"))
    return found


SHIPPED = Path(__file__).with_name("detect_secrets.json")  # {"detect-secrets": v, "rules"}


def _shipped_for(version: str) -> list[dict] | None:
    """The shipped rules, if they are those of this version of detect-secrets."""
    try:
        shipped = json.loads(SHIPPED.read_bytes())
    except (OSError, ValueError):
        return None
    return shipped["rules"] if shipped.get("detect-secrets") == version else None


def load(home: paths.Home) -> list[dict]:
    """detect-secrets' rules as ingest last saved them; where there is no such file (or
    one from another version of kirolearn), those kirolearn ships; the library's own
    if both are gone."""
    for path, key, value in ((_cache_file(home), "kirolearn", __version__),
                             (SHIPPED, None, None)):
        try:
            saved = json.loads(path.read_bytes())
            if (key is None or saved.get(key) == value) and isinstance(saved.get("rules"), list):
                return saved["rules"]
        except (OSError, ValueError, AttributeError):
            continue
    return from_detect_secrets()


def compile_all(found: list[dict]) -> list[Rule]:
    """Rules from detect-secrets' data (``from_detect_secrets``) followed by ours."""
    rules = []
    for item in found:
        rules.append(Rule(item["kind"], item["pattern"], item["flags"], tuple(item["needles"]),
                          item["groups"], exact=tuple(item["exact"]),
                          long=DETECTORS.get(item.get("detector"), {}).get("long", False)))
    return rules + OURS
