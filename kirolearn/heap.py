"""A process's freed memory handed back to the system.

glibc keeps what Python and the libraries free (a model's load, a burst of work, a
database's page cache given up) for reuse, and a long-lived process holds its peak
for good; ``malloc_trim`` returns the free pages. Elsewhere there is nothing to do.
"""

from __future__ import annotations

import ctypes


def release() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
