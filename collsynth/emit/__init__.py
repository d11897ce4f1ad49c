"""Emitters: the IR written in the formats other tools load (MSCCL-IR XML here; see each module)."""

from collsynth.emit.msccl_xml import XMLFormatError, ir_to_xml, read_xml, write_xml

__all__ = ["XMLFormatError", "ir_to_xml", "read_xml", "write_xml"]
