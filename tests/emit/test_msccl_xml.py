import re
from dataclasses import replace

import pytest
from lxml import etree

from collsynth.core.errors import CollsynthError
from collsynth.emit.msccl_xml import (
    ALGO_ATTRS,
    GPU_ATTRS,
    STEP_ATTRS,
    TB_ATTRS,
    XMLFormatError,
    ir_to_xml,
    read_xml,
    write_xml,
)
from collsynth.ir import STEP_TYPES, Algo, Gpu, Step, Threadblock
from collsynth.ir.validate import IRError
from collsynth.runtime import samples


def every_type_ir() -> Algo:
    """Two ranks whose threadblocks between them use every MSCCL step type (structure only)."""
    def steps(*specs):
        return tuple(Step(i, *spec) for i, spec in enumerate(specs))

    gpus = []
    for r in range(2):
        peer = 1 - r
        comm = Threadblock(0, peer, peer, 0, steps(
            ("s", "i", 0, "o", 0, 1), ("r", "i", 0, "o", 1, 1, -1, -1, True),
            ("rcs", "o", 1, "o", 1, 1, -1, -1, True), ("rrs", "i", 1, "i", 1, 1),
            ("rrc", "i", 0, "o", 1, 2), ("rrcs", "i", 0, "o", 0, 1)))
        local = Threadblock(1, -1, -1, 1, steps(
            ("cpy", "i", 0, "s", 0, 2), ("nop", "i", -1, "o", -1, 0, 0, 1),
            ("re", "s", 0, "o", 0, 1, 0, 2, True), ("re", "s", 1, "o", 0, 1)))
        gpus.append(Gpu(r, 2, 3, 2, (comm, local)))
    return Algo("every type", "allreduce", "LL128", 2, 3, 2, False, tuple(gpus), min_bytes=1024,
                max_bytes=1 << 30)


SAMPLES = [
    every_type_ir(),
    samples.ring_allgather(4),
    samples.ring_allgather(3, inplace=True),
    samples.ring_allreduce(4, channels=2),
    samples.ring_allreduce(3, inplace=True, fused=False),
    samples.allreduce_via_scratch(4),
    samples.pairwise_alltoall(3),
]


def test_every_step_type_is_covered_by_the_samples():
    used = {step.type for ir in SAMPLES for _, tb in ir.threadblocks() for step in tb.steps}
    assert used == set(STEP_TYPES)


@pytest.mark.parametrize("ir", SAMPLES, ids=lambda ir: ir.name)
def test_round_trip_gives_the_identical_ir(ir, tmp_path):
    text = ir_to_xml(ir)
    assert read_xml(text) == ir
    path = write_xml(ir, tmp_path / "algo.xml")
    assert read_xml(path) == ir
    assert read_xml(str(path)) == ir
    assert ir_to_xml(read_xml(text)) == text  # deterministic


@pytest.mark.parametrize("ir", SAMPLES, ids=lambda ir: ir.name)
def test_text_is_what_the_msccl_loader_reads(ir):
    text = ir_to_xml(ir)
    assert text.startswith("<algo ")  # no <?xml ...?> declaration
    assert "\t" not in text
    assert "<!--" not in text
    for line in text.splitlines():
        assert re.fullmatch(r"( {2})*<[^<>]*>", line), line  # one element per line, space indentation
    root = etree.fromstring(text.encode())
    assert tuple(root.attrib) == ALGO_ATTRS
    for gpu in root:
        assert tuple(gpu.attrib) == GPU_ATTRS
        for tb in gpu:
            assert tuple(tb.attrib) == TB_ATTRS
            for step in tb:
                assert tuple(step.attrib) == STEP_ATTRS
                assert step.get("hasdep") in ("0", "1")


def test_algo_attributes_carry_coll_inplace_outofplace_and_byte_range():
    ir = every_type_ir()
    root = etree.fromstring(ir_to_xml(ir).encode())
    assert root.attrib == {"name": "every type", "proto": "LL128", "nchannels": "2", "nchunksperloop": "3",
                           "ngpus": "2", "coll": "allreduce", "inplace": "0", "outofplace": "1",
                           "minBytes": "1024", "maxBytes": str(1 << 30)}
    inplace = etree.fromstring(ir_to_xml(samples.ring_allgather(3, inplace=True)).encode())
    assert (inplace.get("inplace"), inplace.get("outofplace")) == ("1", "0")


def test_reducescatter_is_written_in_the_spelling_current_loaders_accept():
    ir = samples.ring_allgather(2)
    with pytest.raises(IRError, match="use reducescatter"):
        ir_to_xml(Algo(ir.name, "reduce_scatter", ir.proto, 1, 2, 2, False, ir.gpus))
    legacy = ir_to_xml(ir).replace('coll="allgather"', 'coll="reduce_scatter"')
    assert read_xml(legacy).collective == "reducescatter"  # msccl-tools' spelling is read


def test_writer_refuses_an_invalid_ir_and_leaves_no_file(tmp_path):
    ir = samples.ring_allgather(3)
    gpu0 = ir.gpus[0]
    tb = gpu0.tbs[0]
    bad_step = replace(tb.steps[1], cnt=72)
    broken = Algo(ir.name, ir.collective, ir.proto, 1, 3, 3, False,
                  (Gpu(0, 1, 3, 0, (Threadblock(0, tb.send, tb.recv, 0, (tb.steps[0], bad_step, *tb.steps[2:])),)),
                   *ir.gpus[1:]))
    target = tmp_path / "bad.xml"
    with pytest.raises(IRError, match=r"gpu 0 tb 0 step 1: cnt=72 is outside 1..71"):
        write_xml(broken, target)
    assert list(tmp_path.iterdir()) == []


def test_write_replaces_atomically_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "algo.xml"
    target.write_text("old")
    write_xml(samples.ring_allgather(2), target)
    assert read_xml(target) == samples.ring_allgather(2)
    assert [p.name for p in tmp_path.iterdir()] == ["algo.xml"]
    with pytest.raises(XMLFormatError, match="does not exist"):
        write_xml(samples.ring_allgather(2), tmp_path / "missing" / "algo.xml")


MSCCL_TOOLS_STYLE = """<!-- written by hand in the older msccl-tools format -->
<algo name="ag2" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""


def test_reads_the_older_format_without_outofplace_and_byte_range():
    ir = read_xml(MSCCL_TOOLS_STYLE)
    assert (ir.collective, ir.ngpus, ir.inplace, ir.min_bytes, ir.max_bytes) == ("allgather", 2, False, 0, 0)
    assert [tb.steps[-1].type for tb in ir.gpus[1].tbs] == ["r", "cpy"]
    text = ir_to_xml(ir)
    assert 'outofplace="1" minBytes="0" maxBytes="0"' in text
    assert read_xml(text) == ir


@pytest.mark.parametrize("text, message", [
    ("<algo name='x'", r"not well-formed XML at line 1"),
    ("<graph/>", r"<xml text>:1: the root element is <graph>"),
    (MSCCL_TOOLS_STYLE.replace(' ngpus="2"', ""), r":2: <algo> attribute 'ngpus' is missing"),
    (MSCCL_TOOLS_STYLE.replace('i_chunks="1" o_chunks="2" s_chunks="0">\n    <tb id="0" send="1"',
                               'i_chunks="one" o_chunks="2" s_chunks="0">\n    <tb id="0" send="1"'),
     r":3: <gpu> attribute 'i_chunks' is 'one', not an integer"),
    (MSCCL_TOOLS_STYLE.replace('<tb id="1" send="-1" recv="-1" chan="0">\n      <step s="0" type="cpy" srcbuf="i" '
                               'srcoff="0" dstbuf="o" dstoff="0"',
                               '<tb id="1" send="-1" recv="-1" chan="0">\n      <op s="0" type="cpy" srcbuf="i" '
                               'srcoff="0" dstbuf="o" dstoff="0"'),
     r":9: unexpected <op> inside <tb>"),
    (MSCCL_TOOLS_STYLE.replace('inplace="0"', 'inplace="2"'), r"<algo> attribute 'inplace' is 2; it must be 0 or 1"),
    (MSCCL_TOOLS_STYLE.replace('hasdep="0"/>', 'hasdep="0">x</step>', 1), r":5: unexpected text 'x' inside <step>"),
])
def test_malformed_xml_gets_a_one_line_error_naming_element_attribute_and_line(text, message):
    with pytest.raises(XMLFormatError, match=message) as info:
        read_xml(text)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, CollsynthError)


def test_reading_validates_what_it_reads():
    text = MSCCL_TOOLS_STYLE.replace('<tb id="1" send="-1" recv="-1" chan="0">', '<tb id="2" send="-1" recv="-1" '
                                     'chan="0">', 1)
    with pytest.raises(IRError, match="threadblock ids must be contiguous from 0; found tb 2 at position 1"):
        read_xml(text)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(XMLFormatError, match="no such file"):
        read_xml(tmp_path / "nope.xml")
