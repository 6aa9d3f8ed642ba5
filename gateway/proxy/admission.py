"""What all requests together may hold at once, and what each one holds.

Two budgets, both process-wide: upstream request slots (`limits.max_concurrent_requests`; a
fanned-out request takes one slot per upstream request it opens) and request-body bytes held in
memory (`limits.max_buffered_body_bytes`). A request takes its first slot and reserves room for
its body before the body is read, so a flood of slow or unfinished bodies is turned away with a
503 instead of filling memory. Everything a request took comes back in one `release`.
"""

from dataclasses import dataclass

from gateway.neutral.errors import Overloaded


@dataclass(slots=True)
class Ticket:
    """What one request holds."""

    slots: int = 0
    body_bytes: int = 0


class Budget:
    __slots__ = ("body_bytes", "max_body_bytes", "max_slots", "slots")

    def __init__(self, max_slots: int, max_body_bytes: int) -> None:
        self.max_slots = max_slots
        self.max_body_bytes = max_body_bytes
        self.slots = 0
        self.body_bytes = 0

    def take_slots(self, ticket: Ticket, n: int) -> None:
        if n <= 0:
            return
        if self.slots + n > self.max_slots:
            raise Overloaded("The gateway is at its concurrent request limit; retry later")
        self.slots += n
        ticket.slots += n

    def reserve_body(self, ticket: Ticket, n: int) -> None:
        """Room for a body of up to `n` bytes, before it is read."""
        extra = n - ticket.body_bytes
        if extra > 0 and self.body_bytes + extra > self.max_body_bytes:
            raise Overloaded("The gateway holds as many request bodies as it may at once; retry later")
        self.settle_body(ticket, n)

    def settle_body(self, ticket: Ticket, n: int) -> None:
        """The body's real size, once read (a decompressed body may exceed its reservation)."""
        self.body_bytes += n - ticket.body_bytes
        ticket.body_bytes = n

    def release(self, ticket: Ticket) -> None:
        self.slots -= ticket.slots
        self.body_bytes -= ticket.body_bytes
        ticket.slots = ticket.body_bytes = 0
