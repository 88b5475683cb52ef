"""Issue 30, item 1: topology YAML is bounded before it expands.

Before: ``yaml.safe_load`` built a 507-byte, seven-level alias bomb cheaply
and ``Level(name=str(item["name"]))`` then stringified the expanded node
(×10 per level: an 80 MB error message, RSS 105 MB → 1.18 GB). Now
:func:`bounded_yaml.load` measures every node as expanded (aliases counted as
the subtree they name) before anything is built, and refuses a bomb of any
depth or shape, a recursive alias, nesting 10 000 deep, an oversized text and
a second document with one short line naming the limit. Legitimate anchors
(``<<: *nic``) still load, as does every preset, with both parsers (libyaml's
and PyYAML's own).
"""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from optimizer_service.catalog import load_topology, preset_names
from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware import bounded_yaml
from optimizer_service.hardware.bounded_yaml import DEFAULT_LIMITS, PREVIEW_CHARS, load, preview
from optimizer_service.hardware.topology import Topology

LIMITS = DEFAULT_LIMITS
MAX_MESSAGE = 300          # characters of a refusal: one short line, whatever the input


@pytest.fixture(params=["libyaml", "pure"], autouse=True)
def parser(request, monkeypatch):
    """Every test runs with the C parser (when PyYAML has it) and with PyYAML's own."""
    if request.param == "libyaml":
        if not getattr(yaml, "__with_libyaml__", False):
            pytest.skip("PyYAML without libyaml")
        monkeypatch.setattr(bounded_yaml, "_Loader", yaml.CSafeLoader)
    else:
        monkeypatch.setattr(bounded_yaml, "_Loader", yaml.SafeLoader)
    return request.param


def refusal(text: str, *, topology: bool = True) -> str:
    """The one line ``text`` is refused with (as a topology, or as bare YAML)."""
    with pytest.raises(InvalidInputError) as caught:
        if topology:
            Topology.from_yaml(text, source="topology YAML")
        else:
            load(text, source="topology YAML")
    message = str(caught.value)
    assert "\n" not in message and len(message) <= MAX_MESSAGE, message[:2000]
    return message


# ------------------------------------------------------------------ bombs
def sequence_bomb(levels: int, width: int = 10) -> str:
    """The classic: each anchor a list of ``width`` aliases of the one before."""
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def mapping_bomb(levels: int, width: int = 10) -> str:
    lines = ["a0: &a0 {" + ", ".join(f"k{j}: lol" for j in range(width)) + "}"]
    lines += [f"a{i}: &a{i} {{" + ", ".join(f"k{j}: *a{i - 1}" for j in range(width)) + "}"
              for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int, width: int = 10) -> str:
    """Merge keys: each mapping merges the one before and holds it ``width`` times."""
    lines = ["a0: &a0 {" + ", ".join(f"k{j}: lol" for j in range(width)) + "}"]
    lines += [f"a{i}: &a{i} {{<<: *a{i - 1}, " + ", ".join(f"m{j}: *a{i - 1}" for j in range(width)) + "}"
              for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def anchors(levels: int, indent: int, width: int = 10) -> str:
    """A sequence bomb as a block list (a value that holds every anchor), indented ``indent`` spaces."""
    pad = " " * indent
    lines = [f"{pad}- &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    lines += [f"{pad}- &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def bomb_in_level_name(levels: int) -> str:
    """Where the old code called ``str()`` on the expanded node: a level's name."""
    return f"name: bomb\nlevels:\n  - cardinality: 2\n    name:\n{anchors(levels, 6)}links: []\n"


def bomb_in_link_levels(levels: int) -> str:
    return ("name: bomb\nlevels:\n  - {name: gpu, cardinality: 2}\nlinks:\n"
            f"  - name: nv\n    bandwidth: 1GB/s\n    latency: 1us\n    levels:\n{anchors(levels, 6)}")


def bomb_in_description(levels: int) -> str:
    return (f"name: bomb\ndescription:\n{anchors(levels, 2)}levels:\n  - {{name: gpu, cardinality: 2}}\n"
            "links:\n  - {name: nv, level: gpu, bandwidth: 1GB/s, latency: 1us}\n")


SHAPES = {"sequences": sequence_bomb, "mappings": mapping_bomb, "merge keys": merge_bomb,
          "a level name": bomb_in_level_name, "a link's levels": bomb_in_link_levels,
          "description": bomb_in_description}


@pytest.mark.parametrize("levels", [3, 5, 7, 9])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_alias_bomb_is_refused_before_it_expands(shape, levels):
    text = SHAPES[shape](levels)
    assert len(text) < 4096
    message = refusal(text)
    assert "aliases" in message and "the most allowed" in message, message
    assert str(LIMITS.max_alias_nodes) in message or str(LIMITS.max_nodes) in message, message


def test_the_issues_bomb_of_seven_levels_is_refused_as_bare_yaml_too():
    text = sequence_bomb(7)
    assert len(text) < 600
    assert f"more than {LIMITS.max_alias_nodes} nodes" in refusal(text, topology=False)


def test_a_long_string_repeated_by_aliases_is_refused_by_its_expanded_text():
    text = f's: &s "{"x" * 2000}"\nrepeated: [{", ".join(["*s"] * 100)}]\n'      # 100 aliases: within the node budget
    assert f"more than {LIMITS.max_text} characters" in refusal(text, topology=False)


def test_a_chain_of_aliases_is_refused_by_its_expanded_depth():
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 40)]     # written 2 deep
    assert f"nested more than {LIMITS.max_depth} levels deep once its aliases" in refusal(
        "\n".join(lines), topology=False)


@pytest.mark.parametrize("text", ["&a [*a]", "&a {k: *a}", "a: &a {<<: *a}", "a: &a [1, [2, [3, *a]]]"])
def test_a_recursive_alias_is_refused(text):
    assert "is recursive" in refusal(text, topology=False)


@pytest.mark.parametrize("text", ["[" * 10_000 + "]" * 10_000, "{a: " * 10_000 + "}" * 10_000,
                                  "- " * 10_000 + "x"])
def test_nesting_ten_thousand_deep_is_refused_at_the_depth_limit(text):
    message = refusal(text)
    # Ours, or libyaml's own (recent libyaml scans ahead and stops at 1 000 levels first).
    assert f"nested more than {LIMITS.max_depth} levels deep" in message or "maximum nesting depth" in message, message


def test_an_oversized_text_is_refused_before_it_is_parsed_quoting_a_short_prefix():
    text = "name: big\ndescription: " + "x" * LIMITS.max_chars + "\n"
    message = refusal(text)
    assert f"more than the {LIMITS.max_chars} allowed" in message and "'name: big" in message
    assert message.count("x") <= PREVIEW_CHARS


def test_more_than_one_document_is_refused():
    assert "more than one YAML document" in refusal("name: a\n---\nname: b\n")


def test_too_many_nodes_even_without_aliases_are_refused():
    text = "[" + ", ".join(["1"] * (LIMITS.max_nodes + 1)) + "]"
    assert f"more than {LIMITS.max_nodes} nodes" in refusal(text, topology=False)


@pytest.mark.parametrize("text, message", [
    ("a: *missing", "names no anchor"),
    ("a: &x 1\nb: &x 2\n", "defined twice"),
    ("levels: [", "malformed YAML at line"),
    ("n: " + "9" * 5000, "a YAML value cannot be read"),
    ("d: 2020-13-45", "a YAML value cannot be read"),
    ("a: \x00b", "malformed YAML"),
])
def test_other_bad_yaml_is_one_line(text, message):
    assert message in refusal(text, topology=False)


# ------------------------------------------------------------ what still loads
NIC_SHARED = """\
name: shared-nic
x-nic: &nic {bandwidth: 12.5GB/s, latency: 5us, shared_by: 4}
levels:
  - {name: node, cardinality: 2}
  - {name: gpu, cardinality: 4}
links:
  - {name: nvlink, level: gpu, bandwidth: 150GB/s, latency: 1us}
  - {<<: *nic, name: nic, level: node}
  - {<<: *nic, name: nic2, level: node, channel: 1}
"""


def test_anchors_within_the_budget_still_load():
    data = load(NIC_SHARED)
    assert data == yaml.safe_load(NIC_SHARED)
    data.pop("x-nic")
    topology = Topology.from_dict(data)
    assert [(link.name, link.shared_by, link.channel) for link in topology.links] == [
        ("nvlink", 1, 0), ("nic", 4, 0), ("nic2", 4, 1)]
    assert Topology.from_yaml(topology.to_yaml()) == topology


def test_a_small_alias_bomb_within_the_budget_loads_as_safe_load_does():
    text = sequence_bomb(2, 5)           # 25 nodes added by aliases: harmless
    assert load(text) == yaml.safe_load(text)


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_as_safe_load_reads_it(name):
    text = resources.files("optimizer_service.hardware.presets").joinpath(f"{name}.yaml").read_text()
    assert load(text) == yaml.safe_load(text)
    topology = load_topology(name)
    assert Topology.from_yaml(topology.to_yaml()) == topology


def test_an_empty_text_is_none_as_with_safe_load():
    assert load("") is None and load("# nothing\n") is None


# ------------------------------------------------------------ what errors quote
def test_a_topology_error_quotes_a_short_preview_of_a_long_value():
    name = "9" + "x" * 50_000           # not a level name: quoted in the error, cut short
    message = refusal(f"levels:\n  - {{name: {name}, cardinality: 2}}\nlinks: []\n")
    assert "level name '9xxx" in message and message.count("x") <= PREVIEW_CHARS


@pytest.mark.parametrize("value", ["[a, b]", "{a: 1}", "12"])
def test_a_level_name_must_be_a_string_never_the_text_of_a_node(value):
    assert "must be a string" in refusal(f"levels:\n  - {{name: {value}, cardinality: 2}}\nlinks: []\n")


def test_a_link_level_must_be_a_name():
    assert "must be a list of at most" in refusal(
        "levels: [{name: gpu, cardinality: 2}]\nlinks: [{name: nv, levels: [[gpu]], bandwidth: 1GB/s, latency: 1us}]")


def test_preview_is_short_for_any_value():
    assert preview("x" * 10**6) == "'" + "x" * (PREVIEW_CHARS - 4) + "..."
    for value in (list(range(10**5)), {i: [i] * 100 for i in range(1000)}, 10 ** 4000 - 1, b"y" * 10**5):
        assert len(preview(value)) <= PREVIEW_CHARS
