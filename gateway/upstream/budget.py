"""The answer bytes all of a process's answers may hold at once.

One answer is bounded on its own (`limits.max_answer_bytes`), but several large ones at once
(decompression bombs, each a small read that decodes to the bound) add up. Whoever holds an
answer's bytes takes room here as they grow, and past the room left the newest grower is the
one refused. Room is taken a step at a time (`STEP`), not per read: answers smaller than a step
never touch the budget, and their number is bounded by the requests in flight.
"""

STEP = 1024 * 1024


class OverBudget(Exception):
    """The answer would take more than the room left."""


class AnswerBudget:
    """Bytes held by answers, against a process-wide limit (`limits.max_buffered_answer_bytes`)."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, n: int) -> None:
        """`n` more bytes held; OverBudget, with nothing taken, when that is past the limit."""
        if self.held + n > self.limit:
            raise OverBudget
        self.held += n

    def give(self, n: int) -> None:
        self.held -= n
