"""Chakra execution-trace schema (`et_def.proto`, package `ChakraProtoMsg`) built without protoc.

The message classes are generated at import time from a `FileDescriptorProto` written out here field by
field. Field names, numbers and types follow Chakra's `schema/protobuf/et_def.proto` (the parts a
communication trace uses: AttributeProto and its list messages, GlobalMetadata, Node, IOInfo, Tensor, and
the NodeType / CollectiveCommType enums). Later Chakra additions (e.g. `Node.storage`, field 11) are left
out; protobuf keeps such fields as unknown fields when it reads a newer file, so nothing is lost.

The descriptors live in a private pool, so that importing Chakra's own generated `et_def_pb2` in the same
process cannot clash with ours.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "ChakraProtoMsg"
SCHEMA_FILE = "chakra/et_def.proto"

_F = descriptor_pb2.FieldDescriptorProto

# NodeType values (et_def.proto).
INVALID_NODE = 0
METADATA_NODE = 1
MEM_LOAD_NODE = 2
MEM_STORE_NODE = 3
COMP_NODE = 4
COMM_SEND_NODE = 5
COMM_RECV_NODE = 6
COMM_COLL_NODE = 7

NODE_TYPES = (
    ("INVALID_NODE", 0), ("METADATA_NODE", 1), ("MEM_LOAD_NODE", 2), ("MEM_STORE_NODE", 3), ("COMP_NODE", 4),
    ("COMM_SEND_NODE", 5), ("COMM_RECV_NODE", 6), ("COMM_COLL_NODE", 7), ("STORAGE_NODE", 8), ("BATCH_NODE", 9),
    ("CHECKPOINT_NODE", 10),
)
COLLECTIVE_COMM_TYPES = (
    ("ALL_REDUCE", 0), ("REDUCE", 1), ("ALL_GATHER", 2), ("GATHER", 3), ("SCATTER", 4), ("BROADCAST", 5),
    ("ALL_TO_ALL", 6), ("REDUCE_SCATTER", 7), ("REDUCE_SCATTER_BLOCK", 8), ("BARRIER", 9),
)

# AttributeProto's `value` oneof: (field name, number, scalar type or list message name).
_ATTRIBUTE_VALUES = (
    ("double_val", 3, _F.TYPE_DOUBLE), ("double_list", 4, "DoubleList"),
    ("float_val", 5, _F.TYPE_FLOAT), ("float_list", 6, "FloatList"),
    ("int32_val", 7, _F.TYPE_INT32), ("int32_list", 8, "Int32List"),
    ("int64_val", 9, _F.TYPE_INT64), ("int64_list", 10, "Int64List"),
    ("uint32_val", 11, _F.TYPE_UINT32), ("uint32_list", 12, "Uint32List"),
    ("uint64_val", 13, _F.TYPE_UINT64), ("uint64_list", 14, "Uint64List"),
    ("sint32_val", 15, _F.TYPE_SINT32), ("sint32_list", 16, "Sint32List"),
    ("sint64_val", 17, _F.TYPE_SINT64), ("sint64_list", 18, "Sint64List"),
    ("fixed32_val", 19, _F.TYPE_FIXED32), ("fixed32_list", 20, "Fixed32List"),
    ("fixed64_val", 21, _F.TYPE_FIXED64), ("fixed64_list", 22, "Fixed64List"),
    ("sfixed32_val", 23, _F.TYPE_SFIXED32), ("sfixed32_list", 24, "Sfixed32List"),
    ("sfixed64_val", 25, _F.TYPE_SFIXED64), ("sfixed64_list", 26, "Sfixed64List"),
    ("bool_val", 27, _F.TYPE_BOOL), ("bool_list", 28, "BoolList"),
    ("string_val", 29, _F.TYPE_STRING), ("string_list", 30, "StringList"),
    ("bytes_val", 31, _F.TYPE_BYTES), ("bytes_list", 32, "BytesList"),
)


def _field(message: descriptor_pb2.DescriptorProto, name: str, number: int, ftype: int | str, *,
           repeated: bool = False, oneof: int | None = None, enum: bool = False) -> None:
    field = message.field.add(name=name, number=number)
    field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if isinstance(ftype, str):  # a message or enum of this package
        field.type = _F.TYPE_ENUM if enum else _F.TYPE_MESSAGE
        field.type_name = f".{PACKAGE}.{ftype}"
    else:
        field.type = ftype
    if oneof is not None:
        field.oneof_index = oneof


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name=SCHEMA_FILE, package=PACKAGE, syntax="proto3")

    attribute = proto.message_type.add(name="AttributeProto")
    _field(attribute, "name", 1, _F.TYPE_STRING)
    _field(attribute, "doc_string", 2, _F.TYPE_STRING)
    attribute.oneof_decl.add(name="value")
    for name, number, ftype in _ATTRIBUTE_VALUES:
        _field(attribute, name, number, ftype, oneof=0)

    for name, _, ftype in _ATTRIBUTE_VALUES:
        if isinstance(ftype, str):  # the list messages: `repeated <scalar> values = 1`
            scalar = next(t for n, _, t in _ATTRIBUTE_VALUES if n == name.replace("_list", "_val"))
            _field(proto.message_type.add(name=ftype), "values", 1, scalar, repeated=True)

    metadata = proto.message_type.add(name="GlobalMetadata")
    _field(metadata, "version", 1, _F.TYPE_STRING)
    _field(metadata, "attr", 2, "AttributeProto", repeated=True)

    node_type = proto.enum_type.add(name="NodeType")
    for name, number in NODE_TYPES:
        node_type.value.add(name=name, number=number)
    comm_type = proto.enum_type.add(name="CollectiveCommType")
    for name, number in COLLECTIVE_COMM_TYPES:
        comm_type.value.add(name=name, number=number)

    node = proto.message_type.add(name="Node")
    _field(node, "id", 1, _F.TYPE_UINT64)
    _field(node, "name", 2, _F.TYPE_STRING)
    _field(node, "type", 3, "NodeType", enum=True)
    _field(node, "ctrl_deps", 4, _F.TYPE_UINT64, repeated=True)
    _field(node, "data_deps", 5, _F.TYPE_UINT64, repeated=True)
    _field(node, "start_time_micros", 6, _F.TYPE_UINT64)
    _field(node, "duration_micros", 7, _F.TYPE_UINT64)
    _field(node, "inputs", 8, "IOInfo")
    _field(node, "outputs", 9, "IOInfo")
    _field(node, "attr", 10, "AttributeProto", repeated=True)

    io_info = proto.message_type.add(name="IOInfo")
    for number, name in enumerate(("values", "shapes", "types"), start=1):
        _field(io_info, name, number, _F.TYPE_STRING)

    tensor = proto.message_type.add(name="Tensor")
    for number, name in enumerate(("tensor_id", "storage_id", "offset", "num_elem", "elem_bytes"), start=1):
        _field(tensor, name, number, _F.TYPE_UINT64)
    _field(tensor, "device", 6, _F.TYPE_STRING)
    return proto


def _build_classes() -> dict[str, type]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    names = ("AttributeProto", "GlobalMetadata", "Node", "IOInfo", "Tensor")
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}")) for name in names}


_CLASSES = _build_classes()
AttributeProto = _CLASSES["AttributeProto"]
GlobalMetadata = _CLASSES["GlobalMetadata"]
Node = _CLASSES["Node"]
IOInfo = _CLASSES["IOInfo"]
Tensor = _CLASSES["Tensor"]

__all__ = [
    "AttributeProto", "COLLECTIVE_COMM_TYPES", "COMM_COLL_NODE", "COMM_RECV_NODE", "COMM_SEND_NODE", "COMP_NODE",
    "GlobalMetadata", "IOInfo", "INVALID_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "METADATA_NODE", "NODE_TYPES",
    "Node", "Tensor",
]
