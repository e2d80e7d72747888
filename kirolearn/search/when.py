"""The time a request names: "yesterday", "last week", "in May", "3 days ago",
"2026-05-14", "on October 24, 2023", "the last week of August 2023", "the Sunday before
25 October 2022", "between August 11 and 15 2023", "in summer 2021", "in 2023". A search lifts
the records of the work done then (``steps.in_time``), as records are as old as the
work they tell of.

``span`` gives the half-open span ``[start, end)`` a request names, relative to ``now``
(an aware datetime: its time zone is the user's), or None. A date the request spells
out (a day, a part of a month, a month and year, a season or a year) comes first; a
relative phrase beside it ("last week, as mentioned on November 6, 2023") is read from
that date, and the span runs from the time it names to the date (what was told then of
the week before it). Without a date, the first relative phrase. A day or a month named
without a year is its latest one that has begun by now; a weekday, its latest one
before today. "The week before" a date, or the day named before it, runs to the date
included: work of that week may be told of on the day.
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
           "seven": 7, "eight": 8, "nine": 9, "ten": 10}
SEASONS = {"spring": (3, 3), "summer": (6, 3), "autumn": (9, 3), "fall": (9, 3),
           "winter": (12, 3)}  # first month, months (northern)
VERBS = ("may", "march")  # months that are verbs, too
ORDINALS = {"first": 0, "second": 1, "third": 2, "fourth": 3}
_MONTH = "|".join(MONTHS) + "|" + "|".join(m[:3] for m in MONTHS) + "|sept"
_COUNT = r"\d{1,3}|" + "|".join(NUMBERS)
_YEAR = r"(?:19|20)\d\d"
_WEEKDAY = "|".join(WEEKDAYS)

RELATIVE = re.compile(
    r"\b(?:(?P<day>today|yesterday)"
    r"|(?P<which>this|last|past|previous) (?P<unit>week|month|year)"
    r"|(?:the )?(?:last|past) (?P<span_count>" + _COUNT + r") (?P<span_unit>day|week|month)s?"
    r"|(?P<ago_count>" + _COUNT + r") (?P<ago_unit>day|week|month|year)s? ago"
    r"|(?:on |last )?(?P<weekday>" + _WEEKDAY + r"))\b",
    re.IGNORECASE)


def _day(tag: str) -> str:
    """A day of a month, spelled either way ("October 24, 2023", "24th of October
    2023", "Oct. 24"), its groups tagged (a pattern may hold two days)."""
    return (rf"(?:(?P<{tag}m1>{_MONTH})\.? (?P<{tag}d1>\d{{1,2}})(?:st|nd|rd|th)?"
            rf"|(?P<{tag}d2>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?(?P<{tag}m2>{_MONTH})\.?)"
            rf"(?:,? ?(?P<{tag}y>{_YEAR}))?")


# Each date a request may spell out, tried in this order (the first found wins).
BETWEEN = re.compile(rf"\bbetween {_day('a')} and (?:{_day('b')}|(?P<and_day>\d{{1,2}})"
                     rf"(?:st|nd|rd|th)?,? ?(?P<and_year>{_YEAR})?)\b", re.IGNORECASE)
DAY = re.compile(
    rf"\b(?:(?:the )?(?:(?P<count>{_COUNT}) (?P<count_unit>day|week)s?|(?P<before>week"
    rf"|weekend|day|{_WEEKDAY})) before )?(?:{_day('')}|(?P<iso>\d{{4}}-\d{{2}}-\d{{2}}))\b",
    re.IGNORECASE)
MONTH_PART = re.compile(
    rf"\b(?:(?:the )?(?P<nth>first|second|third|fourth|last) week of"
    rf"|(?:the )?(?P<half>first|second) half of"
    rf"|(?:(?:the |in the )?(?:beginning|start) of|early)(?P<early>)"
    rf"|(?:(?:the |in the )?end of|late)(?P<late>)"
    rf"|(?:(?:the |in the )?middle of|mid-?)(?P<mid>)"
    rf"|in|during) (?P<month>{_MONTH})\.?(?:,? (?P<year>{_YEAR}))?\b"
    rf"|\b(?P<month_only>{_MONTH})\.? (?P<month_year>{_YEAR})\b",
    re.IGNORECASE)
SEASON = re.compile(rf"\b(?P<season>{'|'.join(SEASONS)}) (?:of )?(?P<year>{_YEAR})\b",
                    re.IGNORECASE)
YEAR = re.compile(rf"\b(?:in|during|of|since) (?P<year>{_YEAR})\b", re.IGNORECASE)

Span = tuple[datetime, datetime]


def span(text: str, now: datetime) -> Span | None:
    """The span of time text names (see above), or None (none named, or a time no
    calendar holds: "February 30, 2026", "900 years ago")."""
    try:
        dated = _dated(text, now)
        if dated is None:
            found = RELATIVE.search(text)
            return _relative(found.groupdict(), now) if found else None
        (start, end), (left, right) = dated
        also = next((m for m in RELATIVE.finditer(text)
                     if m.end() <= left or m.start() >= right), None)
        if also is None:
            return start, end
        since, _ = _relative(also.groupdict(), end - timedelta(seconds=1))
        return min(since, start), end
    except (ValueError, OverflowError):
        return None


def _dated(text: str, now: datetime) -> tuple[Span, tuple[int, int]] | None:
    """The first date text spells out, and where it lies in the text."""
    for pattern, read in ((BETWEEN, _between), (DAY, _of_day), (MONTH_PART, _of_month),
                          (SEASON, _of_season), (YEAR, _of_year)):
        for found in pattern.finditer(text):
            if not _a_verb(found.groupdict()):
                return read(found.groupdict(), now), found.span()
    return None


def _a_verb(part: dict[str, str | None]) -> bool:
    """Whether a day read is more likely a verb and a number: "step 2 may fail", "may
    3 retries" (a month that is a verb, in lower case, without a year)."""
    month = part.get("m1") or part.get("m2")
    return month in VERBS and not part.get("y")


def _date(part: dict[str, str | None], tag: str, now: datetime,
          year: str | None = None) -> datetime:
    """The day of ``_day(tag)``'s groups: in its year (or ``year``), else its latest
    one that has begun by now."""
    month = _month(part[f"{tag}m1"] or part[f"{tag}m2"])
    day = int(part[f"{tag}d1"] or part[f"{tag}d2"])
    named = part[f"{tag}y"] or year
    if named:
        return _at(now, int(named), month, day)
    if calendar.monthrange(now.year, month)[1] >= day and _at(now, now.year, month, day) <= now:
        return _at(now, now.year, month, day)
    return _at(now, now.year - 1, month, day)  # not yet this year (or no Feb 29 this year)


def _at(now: datetime, year: int, month: int, day: int) -> datetime:
    """That day's midnight, in now's time zone."""
    return now.replace(year=year, month=month, day=day, hour=0, minute=0, second=0,
                       microsecond=0)


def _between(part: dict[str, str | None], now: datetime) -> Span:
    """"between August 11 and August 15 2023", "between 3 and 9 May": both days
    included; the first takes the last's month and year when it names none."""
    if part["and_day"]:  # "... and 15 2023": the first's month
        first = _date(part, "a", now, part["and_year"])
        last = first.replace(day=int(part["and_day"]))
    else:
        last = _date(part, "b", now)
        first = _date(part, "a", now, part["ay"] or str(last.year))
        if first > last and not part["ay"]:  # "between December 28 and January 3"
            first = first.replace(year=first.year - 1)
    return min(first, last), max(first, last) + timedelta(days=1)


def _of_day(part: dict[str, str | None], now: datetime) -> Span:
    """A day, or a time before it to the day included ("the week before", "the Sunday
    before", "two weeks before": that day and the days around it)."""
    if part["iso"]:
        day = datetime.fromisoformat(part["iso"]).replace(tzinfo=now.tzinfo)
    else:
        day = _date(part, "", now)
    end = day + timedelta(days=1)
    before = (part["before"] or "").lower()
    if part["count"]:
        unit = UNITS[part["count_unit"].lower()]
        back = day - timedelta(days=_count(part["count"]) * unit)
        return back - timedelta(days=unit // 2), end
    if before in ("week", "weekend"):
        return day - timedelta(days=7), end
    if before == "day":
        return day - timedelta(days=1), end
    if before:
        return day - timedelta(days=(day.weekday() - WEEKDAYS.index(before)) % 7 or 7), end
    return day, end


def _of_month(part: dict[str, str | None], now: datetime) -> Span:
    """A month, or a part of one: a week of it (the last: its last seven days), a half,
    its beginning, middle or end (ten days each)."""
    name, year = (part["month"], part["year"]) if part["month"] else (part["month_only"],
                                                                       part["month_year"])
    starts, ends = _month_span(now, name, year)
    days = (ends - starts).days
    if part["nth"]:
        nth = part["nth"].lower()
        first = days - 7 if nth == "last" else 7 * ORDINALS[nth]
        parts = (first, first + 7)
    elif part["half"]:
        parts = (0, 15) if part["half"].lower() == "first" else (15, days)
    elif part["early"] is not None:
        parts = (0, 10)
    elif part["late"] is not None:
        parts = (days - 10, days)
    elif part["mid"] is not None:
        parts = (10, 20)
    else:
        return starts, ends
    if year is None and starts + timedelta(days=parts[0]) > now:  # not begun this year
        starts = starts.replace(year=starts.year - 1)
    return starts + timedelta(days=parts[0]), starts + timedelta(days=parts[1])


def _of_season(part: dict[str, str | None], now: datetime) -> Span:
    first, months = SEASONS[part["season"].lower()]
    start = _at(now, int(part["year"]), first, 1)
    end_month = first + months
    return start, start.replace(year=start.year + (end_month - 1) // 12,
                                month=(end_month - 1) % 12 + 1)


def _of_year(part: dict[str, str | None], now: datetime) -> Span:
    start = _at(now, int(part["year"]), 1, 1)
    return start, start.replace(year=start.year + 1)


def _midnight(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _month(name: str) -> int:
    return next(i for i, m in enumerate(MONTHS, 1) if m.startswith(name.lower()[:3]))


def _month_span(now: datetime, name: str, year: str | None) -> Span:
    number = _month(name)
    latest = now.year if number <= now.month else now.year - 1  # not after now
    at = int(year) if year is not None else latest
    start = _at(now, at, number, 1)
    end_year, end_month = (at + 1, 1) if number == 12 else (at, number + 1)
    return start, start.replace(year=end_year, month=end_month)


def _count(text: str) -> int:
    return int(text) if text.isdigit() else NUMBERS[text.lower()]


def _relative(part: dict[str, str | None], now: datetime) -> Span:
    """The span a phrase relative to now names."""
    today = _midnight(now)
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
    back = (today.weekday() - WEEKDAYS.index(part["weekday"].lower())) % 7 or 7
    start = today - timedelta(days=back)
    return start, start + timedelta(days=1)


def _calendar(now: datetime, which: str, unit: str) -> Span:
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
