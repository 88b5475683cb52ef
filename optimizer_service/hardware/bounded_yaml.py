"""A YAML loader for text from outside, bounded before anything is expanded.

``yaml.safe_load`` is safe against code execution but not against size: an
alias (``*a``) names a node that is built once and *shared*, so a few hundred
bytes of nested aliases ("billion laughs") compose to a tiny graph that is a
gigabyte once anything walks it as a tree — ``str()``, ``repr()``, JSON, an
error message that quotes the value. A topology arrives from a dashboard form
and from every rank's ``Register``, so :func:`load` refuses such a document
before it is constructed:

1. **Size.** At most ``max_chars`` characters, checked before the parser sees
   a byte.
2. **Depth while composing.** Nodes are composed from the parser's events by
   a loop, not by PyYAML's recursive composer, and a document nested deeper
   than ``max_depth`` (``[[[[…]]]]``) is refused at its first too-deep
   collection: no ``RecursionError``, no work past the limit.
3. **Recursive aliases** (an alias inside the node its anchor names) are
   refused where they occur: the node graph stays acyclic.
4. **Expansion.** Each node's size *as expanded* — every alias counted as the
   whole subtree it names — is computed once per node (memoized over the
   composed graph, so the check is linear in the text), and the document is
   refused when, expanded, it has more than ``max_nodes`` nodes, more than
   ``max_alias_nodes`` of them added by aliases, more than ``max_text``
   characters of scalars, or is nested deeper than ``max_depth``.
5. **One document** per text.

Reading of the issue: aliases are *allowed* within a small budget rather than
refused outright, because people write ``<<: *nic`` to share a link's fields
between links. ``max_alias_nodes`` (1 000 by default) is far above what such
sharing adds to a real topology (a few hundred nodes for dozens of links) and
far below an alias bomb: ten aliases of ten aliases of a ten-element list
already add about 1 200 nodes.

Only then does PyYAML's ``SafeConstructor`` build Python values (it builds an
aliased subtree once; what it returns is as big as the budget allows). Every
refusal is one :class:`InvalidInputError` line naming the limit; a message
quotes at most :data:`PREVIEW_CHARS` characters of the input (:func:`preview`).
The C parser (libyaml) is used when PyYAML has it, only for speed; the result
is the same.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from optimizer_service.errors import InvalidInputError

#: Characters of an input value an error message may quote.
PREVIEW_CHARS = 60

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class YamlLimits:
    """How big one document may be, as written and as expanded."""

    max_chars: int = 64 * 1024          # characters of text
    max_nodes: int = 10_000             # nodes, every alias counted as the subtree it names
    max_alias_nodes: int = 1_000        # of those, nodes that aliases add to what is written
    max_text: int = 128 * 1024          # characters of scalars, as expanded
    max_depth: int = 32                 # nesting of collections, as expanded


DEFAULT_LIMITS = YamlLimits()

_preview_repr = reprlib.Repr()
_preview_repr.maxstring = PREVIEW_CHARS
_preview_repr.maxother = PREVIEW_CHARS
_preview_repr.maxlevel = 3


def preview(value: object, width: int = PREVIEW_CHARS) -> str:
    """A short ``repr`` of a value from outside, for error messages: never longer
    than ``width`` characters, and built without walking the whole value (a
    string is cut before ``repr``; lists and mappings show their first items)."""
    if isinstance(value, str):
        text = repr(value[:width])
    else:
        try:
            text = _preview_repr.repr(value)
        except ValueError:          # an int past Python's digit limit for str()
            text = f"<{type(value).__name__}>"
    return text if len(text) <= width else text[: width - 3] + "..."


def load(text: str, *, source: str = "YAML", limits: YamlLimits = DEFAULT_LIMITS) -> Any:
    """The one YAML document in ``text`` as Python values (None for an empty
    text), refused with one line naming ``source`` and the limit it passes."""
    if not isinstance(text, str):
        raise InvalidInputError(f"{source}: expected YAML text, got {type(text).__name__}")
    if len(text) > limits.max_chars:
        raise InvalidInputError(f"{source}: {len(text)} characters of YAML, more than the {limits.max_chars} "
                                f"allowed (it starts {preview(text)})")
    try:
        loader = _Loader(text)          # PyYAML's reader checks the characters here
    except yaml.YAMLError as error:
        raise InvalidInputError(f"{source}: malformed YAML{_where(error)}: {_problem(error)}") from None
    try:
        root, written = _compose(loader, source, limits)
        if root is None:
            return None
        _check_expansion(root, written, source, limits)
        try:
            return loader.construct_document(root)
        except (ValueError, OverflowError) as error:    # a scalar its type refuses: 2020-13-45, 5 000 digits
            raise InvalidInputError(f"{source}: a YAML value cannot be read: "
                                    f"{_problem(str(error).split(';')[0])}") from None
    except yaml.YAMLError as error:
        raise InvalidInputError(f"{source}: malformed YAML{_where(error)}: {_problem(error)}") from None
    finally:
        loader.dispose()


# ------------------------------------------------------------------ composing
def _compose(loader, source: str, limits: YamlLimits) -> tuple[Node | None, int]:
    """The first document's node graph, built by a loop over the parser's events
    (PyYAML's composer recurses once per level), and how many nodes it wrote.

    Tags are resolved as PyYAML's composer resolves them; anchors are recorded
    when their node starts, so an alias to a collection still open is recursive."""
    loader.get_event()                                  # StreamStart
    if loader.check_event(StreamEndEvent):
        loader.get_event()
        return None, 0
    loader.get_event()                                  # DocumentStart
    anchors: dict[str, Node] = {}
    open_anchors: set[str] = set()
    stack: list[list] = []                              # [collection node, its anchor, a mapping's pending key]
    written = 0
    root: Node | None = None
    while root is None:
        event = loader.get_event()
        if isinstance(event, AliasEvent):
            if event.anchor not in anchors:
                raise InvalidInputError(f"{source}: malformed YAML{_at(event)}: alias {preview(event.anchor)} "
                                        "names no anchor before it")
            if event.anchor in open_anchors:
                raise InvalidInputError(f"{source}: YAML alias {preview(event.anchor)}{_at(event)} is recursive "
                                        "(it is inside the node its anchor names); recursive aliases are refused")
            node: Node = anchors[event.anchor]
        elif isinstance(event, (SequenceEndEvent, MappingEndEvent)):
            node, anchor, _ = stack.pop()
            node.end_mark = event.end_mark
            open_anchors.discard(anchor)
        else:
            written += 1
            if written > limits.max_nodes:
                raise InvalidInputError(f"{source}: YAML has more than {limits.max_nodes} nodes, the most allowed")
            node = _start_node(loader, event)
            if event.anchor is not None:
                if event.anchor in anchors:
                    raise InvalidInputError(f"{source}: malformed YAML{_at(event)}: anchor {preview(event.anchor)} "
                                            "is defined twice")
                anchors[event.anchor] = node
            if not isinstance(node, ScalarNode):
                if len(stack) + 1 > limits.max_depth:
                    raise InvalidInputError(f"{source}: YAML{_at(event)} is nested more than {limits.max_depth} "
                                            "levels deep, the most allowed")
                stack.append([node, event.anchor, None])
                if event.anchor is not None:
                    open_anchors.add(event.anchor)
                continue
        if not stack:
            root = node
        elif isinstance(stack[-1][0], SequenceNode):
            stack[-1][0].value.append(node)
        elif stack[-1][2] is None:
            stack[-1][2] = node
        else:
            stack[-1][0].value.append((stack[-1][2], node))
            stack[-1][2] = None
    loader.get_event()                                  # DocumentEnd
    if not loader.check_event(StreamEndEvent):
        raise InvalidInputError(f"{source}: the text holds more than one YAML document (a line '---' or '...' "
                                "separates them); give one")
    return root, written


def _start_node(loader, event) -> Node:
    """The node a scalar or collection-start event begins (PyYAML's ``Composer`` rules for tags)."""
    tag = event.tag
    if isinstance(event, ScalarEvent):
        if tag is None or tag == "!":
            tag = loader.resolve(ScalarNode, event.value, event.implicit)
        return ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
    if isinstance(event, SequenceStartEvent):
        if tag is None or tag == "!":
            tag = loader.resolve(SequenceNode, None, event.implicit)
        return SequenceNode(tag, [], event.start_mark, None, flow_style=event.flow_style)
    if isinstance(event, MappingStartEvent):
        if tag is None or tag == "!":
            tag = loader.resolve(MappingNode, None, event.implicit)
        return MappingNode(tag, [], event.start_mark, None, flow_style=event.flow_style)
    raise yaml.composer.ComposerError(None, None, f"unexpected {type(event).__name__}", event.start_mark)


# ------------------------------------------------------------------ expansion
def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return node.value
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: Node, written: int, source: str, limits: YamlLimits) -> None:
    """Refuse a document whose expanded tree passes a limit; each node's
    ``(nodes, scalar characters, depth)`` as expanded is computed once, children
    first, without recursion (the graph is acyclic: :func:`_compose` refused cycles)."""
    sizes: dict[int, tuple[int, int, int]] = {}
    pending: list[tuple[Node, bool]] = [(root, False)]
    while pending:
        node, children_done = pending.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if not children_done:
            pending.append((node, True))
            pending.extend((child, False) for child in children if id(child) not in sizes)
            continue
        if isinstance(node, ScalarNode):
            size = (1, len(node.value), 0)
        else:
            parts = [sizes[id(child)] for child in children]
            size = (1 + sum(p[0] for p in parts), sum(p[1] for p in parts), 1 + max((p[2] for p in parts), default=0))
        sizes[id(node)] = size
        nodes, text, depth = size
        if nodes > limits.max_nodes:
            raise InvalidInputError(f"{source}: YAML expands to more than {limits.max_nodes} nodes once its aliases "
                                    f"are followed, the most allowed{_at(node)}")
        if nodes - written > limits.max_alias_nodes:
            raise InvalidInputError(f"{source}: YAML aliases add more than {limits.max_alias_nodes} nodes to what is "
                                    f"written, the most allowed{_at(node)}; write the repeated parts out")
        if text > limits.max_text:
            raise InvalidInputError(f"{source}: YAML expands to more than {limits.max_text} characters of text once "
                                    f"its aliases are followed, the most allowed{_at(node)}")
        if depth > limits.max_depth:
            raise InvalidInputError(f"{source}: YAML is nested more than {limits.max_depth} levels deep once its "
                                    f"aliases are followed, the most allowed{_at(node)}")


# ------------------------------------------------------------------ messages
def _at(thing) -> str:
    mark = getattr(thing, "start_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _where(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _problem(error: yaml.YAMLError | str) -> str:
    """The parser's complaint (or ``error`` itself), on one line of at most twice :data:`PREVIEW_CHARS`."""
    problem = error if isinstance(error, str) else (
        getattr(error, "problem", None) or getattr(error, "reason", None) or "cannot be parsed")
    text = " ".join(str(problem).split())
    return text if len(text) <= 2 * PREVIEW_CHARS else text[: 2 * PREVIEW_CHARS - 3] + "..."
