"""What a deadlocked run's threadblocks wait for, in words (the event loop's error message)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class _Plan(Protocol):
    """What is read of an engine.Plan (not imported: the engine imports this module)."""

    @property
    def labels(self) -> Sequence[tuple[int, int]]: ...
    @property
    def steps(self) -> Sequence[Sequence[Any]]: ...
    @property
    def step_labels(self) -> Sequence[Sequence[int]]: ...
    @property
    def connections(self) -> Sequence[tuple[int, int, int]]: ...


@dataclass(frozen=True)
class Waits:
    """Connections a stuck threadblock waits on: for a message (receive) or for a free slot (send)."""

    messages: frozenset[int]
    slots: frozenset[int]


def describe_stuck(plan_: _Plan, stuck: list[int], pc: list[int], nsteps: list[int], waits: Waits) -> str:
    parts = []
    for g in stuck[:4]:
        rank, tb_id = plan_.labels[g]
        tile, s = divmod(pc[g], nsteps[g])
        st = plan_.steps[g][s]
        if st.recv_conn >= 0 and st.recv_conn in waits.messages:
            sender, _, chan = plan_.connections[st.recv_conn]
            why = f"waits for a message from {sender} on channel {chan}"
        elif st.send_conn >= 0 and st.send_conn in waits.slots:
            _, receiver, chan = plan_.connections[st.send_conn]
            why = f"waits for a free FIFO slot to {receiver} on channel {chan} (its receiver is behind)"
        elif st.dep_tb >= 0:
            why = f"waits for tb {plan_.labels[st.dep_tb][1]} step {plan_.step_labels[st.dep_tb][st.dep_step]}"
        else:
            why = "cannot start"
        parts.append(f"gpu {rank} tb {tb_id} step {plan_.step_labels[g][s]} (tile {tile}) {why}")
    more = f" and {len(stuck) - 4} more threadblocks" if len(stuck) > 4 else ""
    return "; ".join(parts) + more
