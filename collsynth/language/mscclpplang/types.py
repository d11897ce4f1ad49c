"""`mscclpp.language.types`: channel types (`memory`/`port` are MSCCLang's `sm`/`proxy`, `nvls`, `none`),
replication policies and `DataFormat` (collsynth.language.types)."""

from collsynth.language.buffers import Buffer
from collsynth.language.types import ChannelType, DataFormat, ReplicationPolicy

__all__ = ["Buffer", "ChannelType", "DataFormat", "ReplicationPolicy"]
