"""`mscclpp.language.buffer`: the buffer names (MSCCLang's `Buffer`: input "i", output "o", scratch "s")."""

from collsynth.language.buffers import Buffer

__all__ = ["Buffer"]
