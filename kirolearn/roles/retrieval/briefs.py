"""The project's brief rewritten by the model extraction is configured with, for the
retrieval role: a page that reads better than the rule-made one, saying the same.

The rule-made brief (``search.brief``) is what an agent gets at once; the model's
rewrite of it is made in the background (one at a time, within extraction's hourly
budget and breaker) and given from then on, for as long as the rule-made page it was
made from is the same. The model is given the rule-made page only (made of records,
scrubbed again before it leaves), told to keep its facts and headings and add none,
and what it says back is cut to the brief's own size. Nothing waits for it: a model
that is slow, failing or spent leaves the rule-made brief in place.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import threading
import time
from collections import OrderedDict

from kirolearn import privacy
from kirolearn.extract import llm
from kirolearn.search import brief

KEPT = 64  # rewrites kept, the latest first out
PROMPT = """You are given a short brief about a software project, written by rules from \
an agent's memory of past work on it. Rewrite it as a clearer, more readable page for a \
coding agent about to start work there. Keep every fact, name, file path and date it \
holds; add nothing that is not in it; keep its headings in bold as they are; write \
markdown with no heading line of its own and at most {words} words. Answer with the page \
alone.

The brief:

{page}"""


class Rewriter:
    """Rewrites of briefs by the model, keyed by the rule-made page they were made from."""

    def __init__(self, extractor: llm.LLMExtractor, log: logging.Logger):
        self.extractor, self.log = extractor, log
        self.done: OrderedDict[str, str] = OrderedDict()
        self.asked: set[str] = set()
        self.lock = threading.Lock()
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="brief")

    def text(self, page: brief.Brief, tokens: int) -> str:
        """The brief as markdown: the model's rewrite of it when there is one, else the
        rule-made page (and a rewrite asked for, to be ready next time)."""
        markdown = page.markdown
        if not markdown:
            return ""
        key = hashlib.sha256(f"{tokens}\0{markdown}".encode()).hexdigest()
        with self.lock:
            if key in self.done:
                return self.done[key]
            if key in self.asked:
                return markdown
            self.asked.add(key)
        self.pool.submit(self._rewrite, key, markdown, tokens)
        return markdown

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _rewrite(self, key: str, markdown: str, tokens: int) -> None:
        now = time.monotonic()
        try:
            if not (self.extractor.budget.allows(now)
                    and self.extractor.breaker.allows("brief", now)):
                return  # asked again once the page changes
            prompt = PROMPT.format(words=tokens * 3 // 4, page=privacy.scrub_text(markdown))
            said, spent = self.extractor.backend.complete(prompt)
            self.extractor.budget.charge(time.monotonic(), spent or len(prompt) // 4)
            self.extractor.breaker.succeeded("brief")
        except Exception as exc:  # the rule-made brief stays
            self.extractor.breaker.failed("brief", time.monotonic())
            self.log.warning("the model did not rewrite a brief: %s", exc)
            return
        body = said.strip()
        if not body:
            return
        page = brief.HEADER + "\n\n" + body
        limit = tokens * 4
        if len(page) > limit:
            page = page[:limit].rsplit("\n", 1)[0]
        with self.lock:
            self.done[key] = privacy.scrub_text(page)
            while len(self.done) > KEPT:
                self.done.popitem(last=False)
