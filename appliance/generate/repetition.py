"""Degenerate output: a small model that starts repeating itself ("2000000000...", the same sentence again and
again) runs until its token budget is spent. The answer path checks the tail of the text as it grows and stops
the generation once a unit repeats past any natural use; such an answer is never cached."""
from __future__ import annotations

import re

# a unit of 1-80 characters repeated at least `times` more times in a row, ending the text
_TAIL = 600
_UNITS = [(re.compile(r"(.{%d,%d}?)\1{%d,}$" % (low, high, times), re.DOTALL), span)
          for low, high, times, span in ((1, 2, 15, 24), (3, 12, 5, 36), (13, 80, 2, 60))]


def repeated_tail(text: str) -> int | None:
    """Where the repetition at the end of `text` starts (keeping its first occurrence), or None: a run of one or
    two characters 16 times or more (24 characters or more), a short phrase 6 times, a sentence 3 times."""
    tail = text[-_TAIL:]
    for pattern, span in _UNITS:
        found = pattern.search(tail)
        if found and len(found.group(0)) >= span and found.group(1).strip():
            return len(text) - len(tail) + found.start() + len(found.group(1))
    return None
