"""MSCCL-IR XML: write an IR exactly as the MSCCL and RCCL runtimes load it, and read one back.

Facts this module relies on (checked against the public loaders: `src/misc/msccl/msccl_parser.cc` and
`src/include/msccl/msccl_struct.h` in Azure/msccl-executor-nccl and ROCm/rccl, the older SCCL-era loader
in microsoft/msccl, the interpreter kernels `msccl_kernel.cu` / `msccl_interpreter.h`, and the XML writer
`ir_to_xml` in microsoft/msccl-tools `msccl/language/ir.py`; summarized in our own words):

* Shape. `<algo>` holds one `<gpu>` per rank, each holding `<tb>` threadblocks, each holding `<step>`s.
  Attributes, in the order we write them:
  algo `name proto nchannels nchunksperloop ngpus coll inplace outofplace minBytes maxBytes`;
  gpu `id i_chunks o_chunks s_chunks`; tb `id send recv chan`;
  step `s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep`.
* The loaders' hand-written tokenizer expects `<` as the first non-blank character (an `<?xml ...?>`
  declaration fails on its `?>`), skips only spaces, `\\n` and `\\r` (a tab is a syntax error), reads
  attribute values verbatim (no entity decoding), at most 16 attributes per element and 4096 elements
  per rank. We therefore write no declaration, indent with spaces, and keep every attribute on one line.
* `coll`. msccl-executor-nccl and RCCL accept exactly `allreduce allgather reducescatter alltoall
  broadcast reduce gather scatter alltoallv send recv`. The older microsoft/msccl loader accepted
  `reduce_scatter` and `custom` instead, and msccl-tools emits `reduce_scatter` for ReduceScatter, which
  the current loaders refuse. No spelling of reduce-scatter is accepted by both generations; we write
  `reducescatter` (the current loaders) and read `reduce_scatter` too. All other names are shared.
* `minBytes`, `maxBytes`, `inplace`, `outofplace` are required by the current loaders (msccl-tools
  omits the last three). The scheduler picks an algorithm only for message sizes in [minBytes, maxBytes]
  (maxBytes 0 = no limit) and only for in-place calls if `inplace="1"`, out-of-place calls if
  `outofplace="1"`. An IR compiled for in-place buffers (input aliased into output as NCCL defines:
  AllGather input = this rank's slice of the output, ReduceScatter output = this rank's slice of the
  input, otherwise the same pointer) is only correct in place, so we write outofplace = not inplace.
* Sizes. The runtime cuts the larger of the rank's user buffers (count x sizeMultiplier, where the
  multiplier is ngpus for allgather/reducescatter/alltoall) into `nchunksperloop` equal chunks: chunk k
  of any buffer starts at k * (buffer / nchunksperloop). `i_chunks`, `o_chunks`, `s_chunks` are the
  number of such chunks in the input, output and scratch buffer (o_chunks may be 0 for an in-place
  algorithm that addresses only `i`). Large buffers are processed in tiles: each loop iteration moves
  one slice of every chunk and runs the whole step list on it.
* Limits the loaders enforce: 0 <= cnt < 72 (MSCCL_MAX_COUNT); step ids below MSCCL_MAX_NUM_STEPS (64 in
  msccl-executor-nccl and RCCL, 256 in microsoft/msccl v0.7.4; per target in collsynth/core/targets.py, with
  thread blocks per GPU, the 8-bit dependency field and each runtime's size rule); tb ids contiguous from 0
  ("thread block N is missing"); channel ids below MAXCHANNELS (32), and at most 32 threadblocks of a
  rank on one channel (MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL); send/recv peers -1 or another rank;
  a sending step needs a send peer and a receiving step a recv peer; offsets below the buffer's chunks.
* Step semantics (what the interpreter kernel does with src/dst): `s` sends src; `r` receives into dst;
  `rcs` receives into dst and forwards; `rrs` receives, adds the local src, forwards the sum; `rrc`
  receives, adds the local src and writes dst; `rrcs` does both; `cpy` copies src to dst; `re` adds
  src into dst (consecutive `re` into one dst with no dependency are fused by the loader, same result).
  In every reducing receive the local operand is `srcbuf[srcoff]` on the *receiver*. msccl-tools has a
  known defect here: a reduce between different chunk indices emits `rrc` with the sender's offset as
  the local operand. Our compiler puts the receiver's slot there.
* Dependencies. Each threadblock publishes a flag (iteration, step) after every step marked
  `hasdep="1"`; a step with `depid=B deps=S` spins until threadblock B of the same rank has published
  step >= S in this iteration. A step that others wait on therefore *must* carry hasdep="1". Several
  dependencies are written as `nop` steps just before the step (cnt 0, offsets -1); the loader folds a
  run of nops into the next non-nop step, which must itself carry a dependency, and drops trailing nops.

`ir_to_xml` and `write_xml` call `validate` first, so nothing the loaders would refuse is ever written;
`read_xml` validates what it reads, so a round trip gives the identical IR.
"""

from __future__ import annotations

import os
from pathlib import Path

from lxml import etree

from collsynth.compiler.split import TargetLimitError, target_violation
from collsynth.core.errors import CollsynthError
from collsynth.core.files import write_atomic
from collsynth.core.targets import Target, get_target
from collsynth.ir import MAX_STEPS_PER_TB, Algo, Gpu, Step, Threadblock
from collsynth.ir.validate import IRError, validate

ALGO_ATTRS = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace", "minBytes",
              "maxBytes")
GPU_ATTRS = ("id", "i_chunks", "o_chunks", "s_chunks")
TB_ATTRS = ("id", "send", "recv", "chan")
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")

# Spellings other tools write that mean one of ours.
_LEGACY_COLL = {"reduce_scatter": "reducescatter"}


class XMLFormatError(CollsynthError):
    """A malformed MSCCL-IR XML file: the message names the element, attribute and line."""


# --- writing --------------------------------------------------------------------------------------

def ir_to_xml(ir: Algo, target: Target | str | None = None) -> str:
    """The MSCCL-IR XML text of a validated IR: no declaration, two-space indentation, fixed attribute order.
    With a `target` (collsynth.core.targets) the text is what that runtime loads and selects: its `coll`
    spelling, and `maxBytes` written so that its size rule honours the IR's inclusive [min_bytes, max_bytes]
    (open-ended ranges as it accepts them); an IR the target's loader would refuse raises TargetLimitError."""
    validate(ir, max_steps_per_tb=None if target is not None else MAX_STEPS_PER_TB)  # a target checks its own
    coll, max_bytes = ir.collective, ir.max_bytes
    if target is not None:
        t = get_target(target)
        problem = target_violation(ir, t)
        if problem is not None:
            raise TargetLimitError(f"cannot write {ir.name!r} for {t.name}: {problem}")
        coll, max_bytes = t.coll(ir.collective), t.write_max_bytes(ir.max_bytes)
    algo = etree.Element("algo")
    _set(algo, ALGO_ATTRS, (ir.name, ir.proto, ir.nchannels, ir.nchunksperloop, ir.ngpus, coll,
                            int(ir.inplace), int(not ir.inplace), ir.min_bytes, max_bytes))
    for gpu in ir.gpus:
        gpu_elem = etree.SubElement(algo, "gpu")
        _set(gpu_elem, GPU_ATTRS, (gpu.id, gpu.i_chunks, gpu.o_chunks, gpu.s_chunks))
        for tb in gpu.tbs:
            tb_elem = etree.SubElement(gpu_elem, "tb")
            _set(tb_elem, TB_ATTRS, (tb.id, tb.send, tb.recv, tb.chan))
            for step in tb.steps:
                _set(etree.SubElement(tb_elem, "step"), STEP_ATTRS,
                     (step.s, step.type, step.srcbuf, step.srcoff, step.dstbuf, step.dstoff, step.cnt, step.depid,
                      step.deps, int(step.hasdep)))
    etree.indent(algo, space="  ")
    return etree.tostring(algo, encoding="unicode") + "\n"


def write_xml(ir: Algo, path: str | os.PathLike[str], target: Target | str | None = None) -> Path:
    """Write the IR's XML (for `target`, see ir_to_xml) atomically (temp file in the same directory, then rename);
    return the path."""
    text = ir_to_xml(ir, target)
    out = Path(path)
    directory = out.parent if str(out.parent) else Path(".")
    if not directory.is_dir():
        raise XMLFormatError(f"cannot write {out}: directory {directory} does not exist")
    return write_atomic(out, text)


def _set(elem: etree._Element, names: tuple[str, ...], values: tuple[object, ...]) -> None:
    for name, value in zip(names, values, strict=True):
        elem.set(name, str(value))


# --- reading --------------------------------------------------------------------------------------

def read_xml(source: str | os.PathLike[str]) -> Algo:
    """An IR from an MSCCL-IR XML file path or XML text; validated (raises XMLFormatError or IRError)."""
    label, data = _load(source)
    parser = etree.XMLParser(remove_comments=True, remove_pis=True, resolve_entities=False, no_network=True)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise XMLFormatError(f"{label}: not well-formed XML at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:  # lxml refuses some inputs (e.g. NUL bytes, unknown encodings) this way
        raise XMLFormatError(f"{label}: not well-formed XML ({exc})") from None
    ir = _algo(label, root)
    try:
        validate(ir, max_steps_per_tb=None)  # steps per threadblock are a target's limit (collsynth doctor)
    except IRError as exc:
        raise IRError(f"{label}: {exc}") from None
    return ir


def _load(source: str | os.PathLike[str]) -> tuple[str, bytes]:
    if isinstance(source, str) and source.lstrip().startswith("<"):
        return "<xml text>", source.encode("utf-8")
    from collsynth.core.files import read_bytes

    return str(source), read_bytes(source, XMLFormatError, "the MSCCL-IR XML")


def _algo(label: str, root: etree._Element) -> Algo:
    if root.tag != "algo":
        raise XMLFormatError(f"{label}:{root.sourceline}: the root element is <{root.tag}>; MSCCL-IR starts with "
                             "<algo>")
    attrs = _Attrs(label, root)
    coll = attrs.text("coll")
    inplace = attrs.flag("inplace")
    attrs.flag("outofplace", default=not inplace)  # checked for form; implied by inplace in our IR
    gpus = tuple(_gpu(label, elem) for elem in _children(label, root, "gpu"))
    return Algo(name=attrs.text("name"), collective=_LEGACY_COLL.get(coll, coll), proto=attrs.text("proto"),
                nchannels=attrs.integer("nchannels"), nchunksperloop=attrs.integer("nchunksperloop"),
                ngpus=attrs.integer("ngpus"), inplace=inplace, gpus=gpus, min_bytes=attrs.integer("minBytes", 0),
                max_bytes=attrs.integer("maxBytes", 0))


def _gpu(label: str, elem: etree._Element) -> Gpu:
    attrs = _Attrs(label, elem)
    tbs = tuple(_threadblock(label, tb) for tb in _children(label, elem, "tb"))
    return Gpu(id=attrs.integer("id"), i_chunks=attrs.integer("i_chunks"), o_chunks=attrs.integer("o_chunks"),
               s_chunks=attrs.integer("s_chunks"), tbs=tbs)


def _threadblock(label: str, elem: etree._Element) -> Threadblock:
    attrs = _Attrs(label, elem)
    steps = tuple(_step(label, step) for step in _children(label, elem, "step"))
    return Threadblock(id=attrs.integer("id"), send=attrs.integer("send"), recv=attrs.integer("recv"),
                       chan=attrs.integer("chan"), steps=steps)


def _step(label: str, elem: etree._Element) -> Step:
    attrs = _Attrs(label, elem)
    _children(label, elem, None)
    return Step(s=attrs.integer("s"), type=attrs.text("type"), srcbuf=attrs.text("srcbuf"),
                srcoff=attrs.integer("srcoff"), dstbuf=attrs.text("dstbuf"), dstoff=attrs.integer("dstoff"),
                cnt=attrs.integer("cnt"), depid=attrs.integer("depid", -1), deps=attrs.integer("deps", -1),
                hasdep=attrs.flag("hasdep", default=False))


def _children(label: str, elem: etree._Element, tag: str | None) -> list[etree._Element]:
    """The child elements, all of which must be <tag> (none at all when tag is None)."""
    children = [child for child in elem if isinstance(child.tag, str)]
    for child in children:
        if child.tag != tag:
            expected = f"only <{tag}> elements" if tag else "no child elements"
            raise XMLFormatError(f"{label}:{child.sourceline}: unexpected <{child.tag}> inside <{elem.tag}>, which "
                                 f"holds {expected}")
    if elem.text and elem.text.strip():
        raise XMLFormatError(f"{label}:{elem.sourceline}: unexpected text {elem.text.strip()[:20]!r} inside "
                             f"<{elem.tag}>")
    return children


class _Attrs:
    """Typed access to one element's attributes with errors that name the element and line."""

    def __init__(self, label: str, elem: etree._Element) -> None:
        from collsynth.ir.xml_schema import check_xml_attributes  # pydantic: only when a file is read

        self.label, self.elem = label, elem
        check_xml_attributes(str(elem.tag), dict(elem.attrib), f"{label}:{elem.sourceline}", XMLFormatError)

    def _where(self, name: str) -> str:
        return f"{self.label}:{self.elem.sourceline}: <{self.elem.tag}> attribute {name!r}"

    def text(self, name: str) -> str:
        value = self.elem.get(name)
        if value is None:
            raise XMLFormatError(f"{self._where(name)} is missing")
        return value

    def integer(self, name: str, default: int | None = None) -> int:
        value = self.elem.get(name)
        if value is None:
            if default is None:
                raise XMLFormatError(f"{self._where(name)} is missing")
            return default
        text = value.strip()
        digits = text[1:] if text.startswith("-") else text
        # the runtimes read these fields as 64-bit integers (maxBytes may be INT64_MAX for an open-ended range)
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 19 or not -(2**63) <= int(text) < 2**63:
            raise XMLFormatError(f"{self._where(name)} is {value[:21]!r}, not an integer (decimal digits, 64-bit)")
        return int(text)

    def flag(self, name: str, default: bool | None = None) -> bool:
        value = self.integer(name, None if default is None else int(default))
        if value not in (0, 1):
            raise XMLFormatError(f"{self._where(name)} is {value}; it must be 0 or 1")
        return bool(value)
