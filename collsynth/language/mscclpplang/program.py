"""`mscclpp.language.program`: `MSCCLPPProgram(name, collective, num_ranks, instances, ...)` and the
module-level `chunk`, `rank`, `Json`, `Check`, which serve it as they serve MSCCLang's programs."""

from __future__ import annotations

from collsynth.collectives import Collective as Spec
from collsynth.language import Check, Json, chunk
from collsynth.language import MSCCLPPProgram as MSCCLangPPProgram
from collsynth.language.collectives import Collective, as_collective
from collsynth.language.mscclpp import rank
from collsynth.language.program import ProgramError
from collsynth.language.types import ReplicationPolicy


class MSCCLPPProgram(MSCCLangPPProgram):
    """MSCCL++'s constructor: no topology (every rank reaches every other), the rank count after the collective;
    the rest is MSCCLang's MSCCLPPProgram (collsynth.language.mscclpp)."""

    def __init__(self, name: str, collective: Spec | Collective, num_ranks: int, instances: int = 1,
                 protocol: str = "Simple", instr_fusion: bool = True,
                 replication_policy: ReplicationPolicy = ReplicationPolicy.duplicated,
                 num_threads_per_block: int = 1024, use_double_scratch_buffer: bool = False,
                 min_message_size: int = 0, max_message_size: int = 2**64 - 1) -> None:
        ranks = as_collective(collective).num_ranks
        if not isinstance(num_ranks, int) or num_ranks != ranks:
            raise ProgramError(f"MSCCLPPProgram {name!r}: num_ranks {num_ranks!r} but the collective has {ranks} "
                               "ranks; give the collective's rank count")
        super().__init__(name, num_ranks, collective, instances,
                         protocol, instr_fusion, replication_policy, num_threads_per_block,
                         use_double_scratch_buffer, min_message_size, max_message_size)


__all__ = ["Check", "Json", "MSCCLPPProgram", "chunk", "rank"]
