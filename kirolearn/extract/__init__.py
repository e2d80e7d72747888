"""Extraction: a batch of events becomes memory records.

An extractor is the heuristic one (``heuristic``: deterministic, no network, the
default) or a model (``llm``: an OpenAI-compatible endpoint, the Anthropic Messages
API or a command, each a ``llm.Backend``), chosen by ``extraction.strategy``.
"""

from __future__ import annotations

import logging
from typing import Protocol

from kirolearn.extract import heuristic, llm


class Extractor(Protocol):
    strategy: str

    def extract(self, namespace: str, events: list[dict]) -> tuple[list[dict], str]:
        """Records for a batch (events in time order, bodies decoded) and the strategy
        that made them; never raises for a model's failure."""
        ...

    def status(self) -> dict:
        """What ``kirolearn status`` shows of it (a model's budget and breakers)."""
        ...


def from_settings(settings: dict, log: logging.Logger) -> Extractor:
    """The configured extractor (ConfigError for a strategy that cannot work)."""
    return llm.from_settings(settings, log) or heuristic.HeuristicExtractor()
