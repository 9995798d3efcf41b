"""graph.pb: exact round trips, and a one-line GraphFormatError for anything malformed."""
from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from graph_pb_helpers import parse, reencode
from ir_samples import ALL_SAMPLE_GRAPHS, every_op_graph, linear_graph
from sglc.errors import GraphFormatError
from sglc.ir import Graph, Op
from sglc.ir.serialize import FORMAT_VERSION, decode, encode, load, save
from sglc.passes.lower_constraints import lower_constraints
from sglc.wire.proto import graph_pb2 as pb

#: graph.pb files of format version 1 (no checksum), written by sglc before version 2 existed.
V1_FILES = sorted((Path(__file__).parent / "data").glob("*.v1.pb"))
#: Version 2 files (checksum; lowered FSMs stored as maps), written before format version 3.
V2_FILES = sorted((Path(__file__).parent / "data").glob("*.v2.pb"))
#: Version 3 files (each lowered FSM a typed message), written before format version 4.
V3_FILES = sorted((Path(__file__).parent / "data").glob("*.v3.pb"))
V4_FILES = sorted((Path(__file__).parent / "data").glob("*.v4.pb"))
#: Version 5 files (the ops of version 5; no grammar message), written before format version 6.
V5_FILES = sorted((Path(__file__).parent / "data").glob("*.v5.pb"))


def fails(data: bytes, *fragments: str) -> str:
    with pytest.raises(GraphFormatError) as info:
        decode(data)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.mark.parametrize("name", sorted(ALL_SAMPLE_GRAPHS))
def test_round_trip_is_exact(name):
    """decode(encode(g)) == g, prints identically, and re-encodes to the same bytes."""
    g = ALL_SAMPLE_GRAPHS[name]()
    data = encode(g)
    back = decode(data)
    assert back == g
    assert str(back) == str(g)
    assert encode(back) == data


def test_every_op_is_covered_by_the_round_trip_sample():
    """The hand-built sample exercises every op, so the round trip covers them all."""
    assert {n.op for n in every_op_graph().nodes} == set(Op)


def test_attribute_kinds_round_trip_exactly():
    """None, bools, ints of any size, floats (incl. -0.0, inf), str, bytes, nested lists/dicts keep kind and order."""
    values = {
        "none": None, "t": True, "f": False, "zero": 0, "neg": -7, "i64max": 2**63 - 1, "i64min": -(2**63),
        "huge": 10**40, "hugeneg": -(10**40), "one_float": 1.0, "negzero": -0.0, "inf": float("inf"),
        "ninf": float("-inf"), "tiny": 5e-324, "text": "héllo ✓ 𝄞", "empty": "", "raw": bytes(range(256)),
        "nested": [1, [2.0, [True, None, {"k": [b"", "v"]}]], {}], "order": {"z": 1, "a": 2, "m": 3},
    }
    g = Graph()
    g.meta.update(values)
    g.create_node(Op.GEN, attrs={"name": "x", **{f"x_{k}": v for k, v in values.items()}})
    back = decode(encode(g), check=False)
    assert back == g
    attrs = back.find("x").attrs
    assert type(attrs["x_t"]) is bool and type(attrs["x_zero"]) is int and type(attrs["x_one_float"]) is float
    assert str(attrs["x_negzero"]) == "-0.0"
    assert list(attrs["x_order"]) == ["z", "a", "m"] and list(back.meta) == list(values)


def test_save_and_load_round_trip(tmp_path):
    """save() then load() gives an equal graph; no temporary file is left behind."""
    g = every_op_graph()
    path = tmp_path / "graph.pb"
    save(g, path)
    assert load(path) == g
    assert [p.name for p in tmp_path.iterdir()] == ["graph.pb"]


def test_load_names_the_file_in_errors(tmp_path):
    """A bad file's error message starts with its path; a missing file is an OSError."""
    path = tmp_path / "bad.pb"
    path.write_bytes(b"\xff\xff\xff")
    with pytest.raises(GraphFormatError, match=r"bad\.pb: not a valid graph\.pb"):
        load(path)
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.pb")


def test_every_truncation_is_detected():
    """Every proper prefix of an encoded graph is refused (cuts at node boundaries included)."""
    data = encode(every_op_graph())
    for cut in range(len(data)):
        with pytest.raises(GraphFormatError):
            decode(data[:cut])


def test_random_bytes_are_refused():
    """Random byte strings (fixed seed) never decode to a graph."""
    rng = random.Random(1234)
    for _ in range(300):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        with pytest.raises(GraphFormatError):
            decode(data)


def test_empty_and_foreign_bytes_are_refused():
    """Empty input and a different protobuf message have no format version."""
    fails(b"", "no format version")
    fails(pb.Node(name="x", op="gen").SerializeToString())


def test_newer_format_version_is_refused_with_upgrade_hint():
    """A file from a newer sglc names both versions and says to upgrade."""
    data = reencode(encode(linear_graph()), lambda m: setattr(m, "format_version", FORMAT_VERSION + 1))
    message = fails(data)
    assert message == (
        f"graph.pb format version {FORMAT_VERSION + 1} is newer than this sglc supports ({FORMAT_VERSION}); upgrade sglc"
    )


def test_unknown_op_and_type_are_refused():
    """An op or type this sglc does not know is refused, naming the node."""
    fails(reencode(encode(linear_graph()), lambda m: setattr(m.nodes[1], "op", "teleport")),
          "node 1 (%constant_text) has unknown op 'teleport'")
    fails(reencode(encode(linear_graph()), lambda m: setattr(m.nodes[1], "type", "tensor")), "unknown type 'tensor'")


def test_dangling_input_and_guard_are_refused():
    """An input or guard naming no earlier node is refused."""
    def dangle(m):
        m.nodes[2].inputs[0] = "ghost"

    fails(reencode(encode(linear_graph()), dangle), "node 2 (%append) uses %ghost, which is not defined before it")

    def bad_guard(m):
        m.nodes[-1].guard.branch = "nowhere"

    fails(reencode(encode(every_op_graph()), bad_guard), "guarded by %nowhere")


def test_structural_corruption_is_refused():
    """Duplicate names, a stream out of range, a wrong node count and an invalid graph are refused."""
    def duplicate(m):
        m.nodes[1].name = m.nodes[0].name

    fails(reencode(encode(linear_graph()), duplicate), "duplicate node name %topic")
    fails(reencode(encode(linear_graph()), lambda m: setattr(m.nodes[1], "stream", 5)), "stream 5 does not exist")
    fails(reencode(encode(linear_graph()), lambda m: setattr(m, "num_nodes", 99)), "declares 99 nodes but holds 5")
    fails(reencode(encode(linear_graph()), lambda m: setattr(m, "num_streams", 0)), "num_streams")
    invalid = reencode(encode(linear_graph()), lambda m: m.nodes[3].attrs.entries[1].value.__setattr__("int_value", 0))
    fails(invalid, "holds an invalid graph: verify: %essay (gen)", "max_new_tokens=0")
    assert decode(invalid, check=False).find("essay").attrs["max_new_tokens"] == 0


def test_empty_attr_value_and_bad_big_int_are_refused():
    """An AttrValue with no kind set, or a non-numeric big int, is refused."""
    fails(reencode(encode(linear_graph()), lambda m: m.nodes[0].attrs.entries[0].value.Clear()), "has no value")
    fails(reencode(encode(linear_graph()),
                  lambda m: setattr(m.nodes[0].attrs.entries[0].value, "big_int_value", "12x")), "not an integer")


def test_encode_refuses_values_outside_the_attribute_domain():
    """A NaN or an object smuggled into attrs, or non-str meta, gives GraphFormatError at encode."""
    for bad in (float("nan"), object(), {1: "x"}):
        g = linear_graph()
        g.find("essay").attrs["extra"] = bad
        with pytest.raises(GraphFormatError, match="cannot encode graph 'linear'"):
            encode(g)
    g = linear_graph()
    g.find("essay").meta["line"] = 3  # type: ignore[assignment]
    with pytest.raises(GraphFormatError, match="meta must map str to str"):
        encode(g)


def test_encoding_is_deterministic():
    """Two equal graphs encode to identical bytes."""
    assert encode(every_op_graph()) == encode(every_op_graph())


# ----- the checksum (format version 2 and later) -----
def test_a_file_ends_with_the_sha256_of_everything_before_it():
    """encode() writes the current format (6) whose last 35 bytes are the checksum field over the rest."""
    data = encode(every_op_graph())
    assert FORMAT_VERSION == 6 and parse(data).format_version == 6
    assert data[-35:-32] == b"\x82\x01\x20" and data[-32:] == hashlib.sha256(data[:-35]).digest()


def test_a_flipped_bit_anywhere_is_a_checksum_mismatch():
    """Flipping any one bit inside the checksummed bytes (a string, a number, a tag) says so in one line."""
    data = encode(every_op_graph())
    rng = random.Random(7)
    offsets = [data.index(b"Provide the verdict for: ") + 3, 1, len(data) - 40] + [rng.randrange(len(data) - 35)
                                                                                  for _ in range(40)]
    for offset in offsets:
        flipped = bytearray(data)
        flipped[offset] ^= 1 << rng.randrange(8)
        fails(bytes(flipped), "graph.pb is corrupt: checksum mismatch")


def test_a_file_of_the_current_version_without_its_checksum_is_refused():
    """Dropping the checksum (the file's last 35 bytes) is refused, not read as an unchecked file."""
    fails(encode(linear_graph())[:-35], f"graph.pb is corrupt: a version {FORMAT_VERSION} file ends with a checksum")


def test_a_checksum_that_is_not_at_the_end_is_refused():
    """A checksum field followed by more bytes is refused (the checksum covers everything before it)."""
    data = encode(linear_graph()) + pb.Graph(name="appended").SerializeToString()
    fails(data, "checksum is not at the end")


@pytest.mark.parametrize("path", V1_FILES, ids=lambda p: p.name)
def test_version_1_files_without_a_checksum_still_load(path):
    """A committed version 1 file (no checksum) loads, verifies, and re-encodes in the current format."""
    data = path.read_bytes()
    assert parse(data).format_version == 1 and not parse(data).checksum
    graph = load(path)
    assert any(n.attrs.get("fsm") for n in graph.nodes), "the fixtures carry lowered FSMs"
    assert decode(encode(graph)) == graph


@pytest.mark.parametrize("path", V2_FILES, ids=lambda p: p.name)
def test_version_2_files_with_fsms_as_maps_still_load(path):
    """A committed version 2 file (a checksum, each lowered FSM a map) loads, verifies, and
    re-encodes in the current format to an equal graph."""
    data = path.read_bytes()
    assert parse(data).format_version == 2 and len(parse(data).checksum) == 32
    graph = load(path)
    assert any(n.attrs.get("fsm") for n in graph.nodes), "the fixtures carry lowered FSMs"
    assert decode(encode(graph)) == graph


@pytest.mark.parametrize("path", V3_FILES, ids=lambda p: p.name)
def test_version_3_files_still_load(path):
    """A committed version 3 file loads, verifies, and re-encodes in the current format to an equal graph."""
    data = path.read_bytes()
    assert parse(data).format_version == 3 and len(parse(data).checksum) == 32
    graph = load(path)
    assert any(n.attrs.get("fsm") for n in graph.nodes), "the fixtures carry lowered FSMs"
    assert decode(encode(graph)) == graph


@pytest.mark.parametrize("path", V4_FILES, ids=lambda p: p.name)
def test_version_4_files_still_load(path):
    """A committed version 4 file (written before the ops of version 5) loads, verifies, and re-encodes
    in the current format to an equal graph."""
    data = path.read_bytes()
    assert parse(data).format_version == 4 and len(parse(data).checksum) == 32
    graph = load(path)
    assert any(n.attrs.get("fsm") for n in graph.nodes), "the fixtures carry lowered FSMs"
    assert decode(encode(graph)) == graph


def test_the_version_4_fixtures_exist():
    """tests/data holds the version 4 files the compatibility test reads."""
    assert len(V4_FILES) >= 2


@pytest.mark.parametrize("path", V5_FILES, ids=lambda p: p.name)
def test_version_5_files_still_load(path):
    """A committed version 5 file (written before the grammar message of version 6) loads, verifies,
    equals its version 4 sibling, and re-encodes in the current format to an equal graph."""
    data = path.read_bytes()
    assert parse(data).format_version == 5 and len(parse(data).checksum) == 32
    graph = load(path)
    assert graph == load(path.with_name(path.name.replace(".v5.", ".v4.")))
    assert decode(encode(graph)) == graph and parse(encode(graph)).format_version == FORMAT_VERSION


def test_the_version_5_fixtures_exist():
    """tests/data holds the version 5 files the compatibility test reads."""
    assert len(V5_FILES) >= 2


def _with_version(version: int):
    def edit(msg: pb.Graph) -> None:
        msg.format_version = version
    return edit


def _rename_attr(old: str, new: str):
    def edit(msg: pb.Graph) -> None:
        for node in msg.nodes:
            for entry in node.attrs.entries:
                if entry.key == old:
                    entry.key = new
    return edit


def test_a_version_3_gen_spelled_max_tokens_reads_as_max_new_tokens():
    """Before version 4 a gen's attributes were the DSL's names: decode renames them, in place."""
    current = encode(linear_graph())
    old = reencode(reencode(current, _rename_attr("max_new_tokens", "max_tokens")), _with_version(3))
    assert b"max_new_tokens" not in old and b"max_tokens" in old
    graph = decode(old)
    assert graph == decode(current)
    assert list(graph.find("essay").attrs) == list(decode(current).find("essay").attrs)  # order kept


def test_the_old_spelling_in_a_version_4_file_is_refused_by_name():
    """From version 4 on, `max_tokens` is not a gen attribute: verify names it."""
    data = reencode(encode(linear_graph()), _rename_attr("max_new_tokens", "max_tokens"))
    fails(data, "holds an invalid graph", "max_tokens")


def test_an_older_file_with_the_new_spelling_is_refused():
    """A version 3 file cannot hold a name version 4 introduced (a hand-edited or mislabelled file)."""
    fails(reencode(encode(linear_graph()), _with_version(3)), "'max_new_tokens', which format version 4 introduced")


def test_the_version_3_fixtures_exist():
    """tests/data holds the version 3 files the compatibility test reads."""
    assert len(V3_FILES) >= 2


def test_the_version_2_fixtures_exist():
    """tests/data holds the version 2 files the compatibility test reads."""
    assert len(V2_FILES) >= 2


def test_the_version_1_fixtures_exist():
    """tests/data holds the version 1 files the compatibility test reads."""
    assert len(V1_FILES) >= 2


def test_a_lowered_fsm_that_does_not_rebuild_is_refused_on_decode():
    """An fsm whose tables are inconsistent (valid checksum) is refused when the file is read."""
    g = Graph("lowered")
    g.create_node(Op.GEN, attrs={"name": "x", "regex": "[0-9]+"}, meta={"source": "p.py:3"})
    data = encode(lower_constraints(g).graph)

    def break_fsm(m):
        next(e for e in m.nodes[0].attrs.entries if e.key == "fsm").value.fsm_value.initial = 10**6

    fails(reencode(data, break_fsm), "graph.pb: %x (gen) at p.py:3: invalid fsm")


def test_a_regex_edited_beside_its_fsm_is_refused_on_decode():
    """A regex attr that disagrees with the fsm that would run is refused (inspect shows what runs)."""
    g = Graph("lowered")
    g.create_node(Op.GEN, attrs={"name": "x", "regex": "[0-9]+"}, meta={"source": "p.py:3"})
    data = encode(lower_constraints(g).graph)

    def edit_regex(m):
        next(e for e in m.nodes[0].attrs.entries if e.key == "regex").value.string_value = "[a-z]+"

    fails(reencode(data, edit_regex), "%x (gen) at p.py:3", "fsm was compiled from '[0-9]+', but regex gives '[a-z]+'")


@pytest.mark.parametrize("value, fragment", [
    (pb.AttrValue(string_value="abc"), "meta num_api_spec_tokens='abc'"),
    (pb.AttrValue(float_value=2.5), "meta num_api_spec_tokens=2.5"),
    (pb.AttrValue(int_value=-3), "meta num_api_spec_tokens=-3"),
])
def test_graph_meta_of_the_wrong_type_is_refused_on_decode(value, fragment):
    """meta num_api_spec_tokens that is not an int in range is refused when the file is read."""
    def set_spec(m):
        m.meta.entries.add(key="num_api_spec_tokens").value.CopyFrom(value)

    fails(reencode(encode(linear_graph()), set_spec), "holds an invalid graph", fragment)


def test_names_from_the_file_keep_errors_one_short_line():
    """A node name with a newline or an op of 500 characters is quoted and cut in the error."""
    def edit(m):
        m.nodes[1].name = "a\nb"
        m.nodes[1].op = "x" * 500

    message = fails(reencode(encode(linear_graph()), edit), "node 1 (%'a\\nb') has unknown op 'xxx")
    assert len(message) < 200
