"""The declared schema of MSCCL-IR XML attributes (collsynth.ir.xml_schema), on its own and through read_xml."""

from __future__ import annotations

import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.core.errors import CollsynthError
from collsynth.emit.msccl_xml import XMLFormatError, ir_to_xml, read_xml
from collsynth.ir import MSCCL_COLLECTIVES, STEP_TYPES
from collsynth.ir.xml_schema import Collective, StepKind, check_xml_attributes
from collsynth.runtime import samples

STEP = {"s": "0", "type": "s", "srcbuf": "i", "srcoff": "0", "dstbuf": "o", "dstoff": "0", "cnt": "1",
        "depid": "-1", "deps": "-1", "hasdep": "0"}
ALGO = {"name": "x", "proto": "Simple", "nchannels": "1", "nchunksperloop": "2", "ngpus": "2", "coll": "allgather",
        "inplace": "0", "outofplace": "1", "minBytes": "0", "maxBytes": "0"}


class Bad(CollsynthError):
    pass


def _message(tag, attributes):
    with pytest.raises(Bad) as info:
        check_xml_attributes(tag, attributes, "f.xml:3", Bad)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_the_enumerations_are_the_loaders_spellings():
    assert set(typing.get_args(Collective)) == {*MSCCL_COLLECTIVES, "reduce_scatter"}
    assert set(typing.get_args(StepKind)) == {str(t) for t in STEP_TYPES}


def test_good_attributes_pass_and_optional_ones_may_be_left_out():
    check_xml_attributes("step", STEP, "f.xml:3", Bad)
    check_xml_attributes("step", {k: v for k, v in STEP.items() if k not in ("depid", "deps", "hasdep")}, "w", Bad)
    check_xml_attributes("algo", {k: v for k, v in ALGO.items() if k not in ("outofplace", "minBytes", "maxBytes")},
                         "w", Bad)


@pytest.mark.parametrize(("tag", "change", "needle"), [
    ("step", {"srcof": "0"}, "<step> unknown attribute 'srcof'; did you mean 'srcoff'?"),
    ("step", {"hasdeps": "1"}, "unknown attribute 'hasdeps'; did you mean 'hasdep'?"),
    ("algo", {"maxbytes": "10"}, "unknown attribute 'maxbytes'; did you mean 'maxBytes'?"),
    ("step", {"cnt": "4.0"}, "attribute 'cnt' is '4.0', not an integer"),
    ("step", {"cnt": "0x10"}, "not an integer"),
    ("step", {"cnt": "1e3"}, "not an integer"),
    ("step", {"cnt": "NaN"}, "not an integer"),
    ("step", {"cnt": "٣"}, "not an integer"),  # a non-ASCII digit
    ("step", {"cnt": "99999999999999999999"}, "not an integer"),  # past 64 bits
    ("step", {"cnt": "72"}, "attribute 'cnt' is 72; it must be less than or equal to 71"),
    ("step", {"srcoff": "-2"}, "greater than or equal to -1"),
    ("step", {"type": "send"}, "attribute 'type' is 'send'; it must be"),
    ("step", {"srcbuf": "x"}, "attribute 'srcbuf' is 'x'; it must be 'i', 'o' or 's'"),
    ("step", {"hasdep": "2"}, "attribute 'hasdep' is 2; it must be 0 or 1"),
    ("step", {"dstoff": "1000000"}, "COLLSYNTH_MAX_CHUNKS"),
    ("algo", {"ngpus": "1000000000"}, "1000000000 ranks is above the cap of 16384 ranks; raise it with "
                                      "COLLSYNTH_MAX_RANKS=N"),
    ("algo", {"proto": "simple"}, "attribute 'proto' is 'simple'; it must be 'Simple', 'LL' or 'LL128'"),
    ("algo", {"nchannels": "0"}, "attribute 'nchannels' is 0"),
    ("algo", {"name": "x" * 300}, "attribute 'name'"),
    ("gpu", {"i_chunks": "-1"}, "attribute 'i_chunks' is -1"),
    ("tb", {"chan": "32"}, "attribute 'chan' is 32; it must be less than 32"),
])
def test_bad_attributes_are_one_line_naming_the_attribute(tag, change, needle):
    base = {"step": STEP, "algo": ALGO, "gpu": {"id": "0", "i_chunks": "1", "o_chunks": "2", "s_chunks": "0"},
            "tb": {"id": "0", "send": "1", "recv": "-1", "chan": "0"}}[tag]
    message = _message(tag, {**base, **change})
    assert message.startswith(f"f.xml:3: <{tag}> ") and needle in message, message


def test_a_missing_required_attribute_is_named():
    assert "attribute 'type' is missing" in _message("step", {k: v for k, v in STEP.items() if k != "type"})


def test_read_xml_refuses_an_unknown_attribute_with_its_line():
    text = ir_to_xml(samples.ring_allgather(2)).replace(' hasdep="', ' hasdeps="', 1)
    with pytest.raises(XMLFormatError, match=r"<xml text>:\d+: <step> unknown attribute 'hasdeps'; did you mean "
                                             r"'hasdep'\?"):
        read_xml(text)


@settings(max_examples=60, deadline=None)
@given(attribute=st.sampled_from(sorted(STEP)), value=st.text(max_size=6))
def test_read_xml_never_fails_other_than_in_one_line(attribute, value):
    # any value in any step attribute: either read (and then written back identically) or one line
    text = ir_to_xml(samples.ring_allgather(2))
    escaped = value.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")
    changed = text.replace(f'{attribute}="{STEP[attribute] if attribute != "type" else "s"}"',
                           f'{attribute}="{escaped}"', 1)
    try:
        ir = read_xml(changed)
    except CollsynthError as exc:
        assert "\n" not in str(exc)
    else:
        assert read_xml(ir_to_xml(ir)) == ir
