"""The time a request names: "yesterday", "last week", "in May", "3 days ago",
"2026-05-14". A search lifts the records of the work done then (``steps.in_time``), as
records are as old as the work they tell of.

``span`` reads the first such phrase, relative to ``now`` (an aware datetime: its
time zone is the user's), and gives the half-open span ``[start, end)`` it names, or
None. A month named without a year is its latest one not after now; a weekday, its
latest one before today.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
           "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_MONTH = "|".join(MONTHS) + "|" + "|".join(m[:3] for m in MONTHS) + "|sept"
_COUNT = r"\d{1,3}|" + "|".join(NUMBERS)
PHRASE = re.compile(
    r"\b(?:(?P<iso>\d{4}-\d{2}-\d{2})"
    r"|(?P<day>today|yesterday)"
    r"|(?P<which>this|last|past|previous) (?P<unit>week|month|year)"
    r"|(?:the )?(?:last|past) (?P<span_count>" + _COUNT + r") (?P<span_unit>day|week|month)s?"
    r"|(?P<ago_count>" + _COUNT + r") (?P<ago_unit>day|week|month|year)s? ago"
    r"|(?:on |last )?(?P<weekday>" + "|".join(WEEKDAYS) + r")"
    r"|(?:in |during |early |late )(?P<month>" + _MONTH + r")\.?(?: (?P<year>\d{4}))?"
    r"|(?P<month_only>" + _MONTH + r")\.? (?P<month_year>\d{4}))\b",
    re.IGNORECASE)


def _midnight(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_span(now: datetime, name: str, year: str | None) -> tuple[datetime, datetime]:
    number = next(i for i, m in enumerate(MONTHS, 1) if m.startswith(name.lower()[:3]))
    latest = now.year if number <= now.month else now.year - 1  # not after now
    at = int(year) if year is not None else latest
    start = now.replace(year=at, month=number, day=1, hour=0, minute=0, second=0,
                        microsecond=0)
    end_year, end_month = (at + 1, 1) if number == 12 else (at, number + 1)
    return start, start.replace(year=end_year, month=end_month)


def _count(text: str) -> int:
    return int(text) if text.isdigit() else NUMBERS[text.lower()]


def span(text: str, now: datetime) -> tuple[datetime, datetime] | None:
    """The span of time the first time phrase of text names, or None (none named, or a
    time no calendar holds: "2026-02-30", "900 years ago")."""
    found = PHRASE.search(text)
    if found is None:
        return None
    try:
        return _span(found.groupdict(), now)
    except (ValueError, OverflowError):
        return None


def _span(part: dict[str, str | None], now: datetime) -> tuple[datetime, datetime]:
    today = _midnight(now)
    if part["iso"]:
        day = datetime.fromisoformat(part["iso"]).replace(tzinfo=now.tzinfo)
        return day, day + timedelta(days=1)
    if part["day"]:
        start = today - timedelta(days=part["day"].lower() == "yesterday")
        return start, start + timedelta(days=1)
    if part["unit"]:
        return _calendar(now, part["which"].lower(), part["unit"].lower())
    if part["span_unit"]:
        days = _count(part["span_count"]) * UNITS[part["span_unit"].lower()]
        return today - timedelta(days=days), now + timedelta(seconds=1)
    if part["ago_unit"]:  # that day; a week, month or year ago: the days around it
        unit = UNITS[part["ago_unit"].lower()]
        day = today - timedelta(days=_count(part["ago_count"]) * unit)
        half = timedelta(days=unit // 2)
        return day - half, day + half + timedelta(days=1)
    if part["weekday"]:
        back = (today.weekday() - WEEKDAYS.index(part["weekday"].lower())) % 7 or 7
        start = today - timedelta(days=back)
        return start, start + timedelta(days=1)
    if part["month"]:
        return _month_span(now, part["month"], part["year"])
    return _month_span(now, part["month_only"], part["month_year"])


def _calendar(now: datetime, which: str, unit: str) -> tuple[datetime, datetime]:
    """This, last (previous) or the past week, month or year."""
    today = _midnight(now)
    if which == "past":  # the last seven days, thirty days, year: up to now
        return today - timedelta(days=UNITS[unit]), now + timedelta(seconds=1)
    if unit == "week":
        start = today - timedelta(days=today.weekday())
        length = timedelta(days=7)
        return (start, now + timedelta(seconds=1)) if which == "this" else (start - length,
                                                                             start)
    if unit == "month":
        start = today.replace(day=1)
        if which == "this":
            return start, now + timedelta(seconds=1)
        previous = (start - timedelta(days=1)).replace(day=1)
        return previous, start
    start = today.replace(month=1, day=1)
    if which == "this":
        return start, now + timedelta(seconds=1)
    return start.replace(year=start.year - 1), start
