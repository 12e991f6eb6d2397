"""healer.yaml's YAML: 1.2 floats (``1e-3`` is a number), no key given twice, string keys only, and a
bound on nesting, each refused with the file and where.

Read in one pass over the parser's events (libyaml's parser when PyYAML has it), each value built as its
event comes: PyYAML's usual way composes the whole document's node graph first (a node and two marks for
every scalar), which for a healer.yaml with golden suites written inline took ~60 MiB for 1 MiB of YAML
(100 models x 10 requests: the sidecar's peak RSS 124 MiB, issue 30) and stayed with the process as the
allocator's freed memory. The one pass reads the plain subset every healer.yaml uses: mappings with string
keys, sequences, scalars of YAML's standard tags, anchors and aliases (the nodes they expand to bounded:
_Expansion, in both readers). Anything else (a merge key ``<<``, a
``!!set``, a non-string key, a key given twice, nesting past the bound, a syntax error) is read again the
composed way, which reads it as before or raises the error it always raised (the file, the key path, the
line): one reader's semantics and messages, the one-pass reader never the last word on an error."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from healer.settings.schema import ConfigError

# Deep enough for any config (a tensor's nesting is its rank, at most 64 in numpy); PyYAML builds the
# document recursively, so a file nested thousands of levels deep would otherwise hit RecursionError.
MAX_YAML_DEPTH = 100
# Aliases may make a document's nodes many more than its text has ("billion laughs": 9 aliases of 9
# aliases of ... : 500 bytes that expand to 10^8 numbers). A document's nodes with every alias expanded
# are at most MAX_EXPANDED_NODES or EXPANSION_FACTOR x the nodes written in it, whichever is more: a
# config that shares a suite's tensors through anchors stays far below; a 1 MiB file stays linear.
MAX_EXPANDED_NODES = 100_000
EXPANSION_FACTOR = 10
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def load_yaml(text: str, source: str) -> Any:
    """The YAML document, refusing excessive nesting and any mapping key that is not a string."""
    with contextlib.suppress(Exception):  # outside the one-pass subset, or an error in the text
        return _OnePass(text).document()
    return _composed(text, source)  # reads it as before, or raises the error it always raised


def give_back_freed_memory() -> None:
    """The heap freed while reading (the file's text, the document, their temporaries) handed back to the
    system: glibc's malloc keeps freed memory for the process otherwise, and a sidecar's RSS would carry
    the size of its healer.yaml for good (100 models with suites inline: 6 MiB, issue 30). glibc only:
    elsewhere (musl, macOS) there is nothing to call, and nothing is done."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (ValueError, OSError):  # not a glibc system
        return None
    import ctypes  # only on glibc

    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()


def _composed(text: str, source: str) -> Any:
    """PyYAML's way: the document's node graph composed, its keys checked, then constructed."""
    # Nesting and aliases' expansion first, from the parser's events: the parser keeps its own stack.
    depth = 0
    expansion = _Expansion()
    for event in yaml.parse(text, Loader=_Yaml12FloatLoader):
        try:
            expansion.add(event)
        except _TooLarge as exc:
            raise ConfigError(source, "", str(exc)) from None
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                mark = event.start_mark
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
                raise ConfigError(source, "", f"nested more than {MAX_YAML_DEPTH} levels deep{where}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    loader = _Yaml12FloatLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_keys(node, source)
        return loader.construct_document(node)
    finally:
        loader.dispose()


class _TooLarge(Exception):
    """Aliases expand the document past its bound (the message says where)."""


class _Expansion:
    """The nodes of a document with every alias expanded, counted from its parser's events (nothing built):
    _TooLarge at the first alias past max(MAX_EXPANDED_NODES, EXPANSION_FACTOR x the nodes written so far)."""

    __slots__ = ("_anchors", "_open", "expanded", "own")

    def __init__(self) -> None:
        self._anchors: dict[str, int] = {}  # an anchored node's nodes, its aliases expanded
        self._open: list[list[Any]] = [[0, None]]  # each open collection's [nodes so far, anchor]
        self.own = 0  # nodes written in the text (an alias counts one)
        self.expanded = 0  # nodes once every alias is expanded

    def add(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.ScalarEvent):
            self.own += 1
            self.expanded += 1
            self._open[-1][0] += 1
            if event.anchor is not None:
                self._anchors[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            self.own += 1
            self.expanded += 1
            self._open.append([1, event.anchor])
        elif isinstance(event, yaml.CollectionEndEvent):
            nodes, anchor = self._open.pop()
            if anchor is not None:
                self._anchors[anchor] = nodes
            self._open[-1][0] += nodes
        elif isinstance(event, yaml.AliasEvent):
            nodes = self._anchors.get(event.anchor or "", 1)  # undefined or still open: 1
            self.own += 1
            self.expanded += nodes
            self._open[-1][0] += nodes
            limit = max(MAX_EXPANDED_NODES, EXPANSION_FACTOR * self.own)
            if self.expanded > limit:
                mark = event.start_mark
                where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "an alias"
                raise _TooLarge(
                    f"aliases expand the document past {limit} nodes at *{event.anchor} ({where}): at most "
                    f"{MAX_EXPANDED_NODES} or {EXPANSION_FACTOR}x the {self.own} nodes written, whichever is more"
                )


def _check_keys(root: yaml.Node, source: str) -> None:
    """Every mapping key must be a string: healer's keys all are, and a list or mapping as a key
    (``? [a, b]: 1``) cannot even be read into a dict. The error names the mapping's key path."""
    seen: set[int] = set()
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    while todo:
        node, path = todo.pop()
        if id(node) in seen:  # an alias: checked where its anchor is
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo += [(child, f"{path}[{i}]") for i, child in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.tag == _MERGE_TAG:  # "<<: *defaults" merges the other mapping's keys here
                    todo.append((value, path))
                    continue
                if not isinstance(key, yaml.ScalarNode) or key.tag != _STR_TAG:
                    raise ConfigError(
                        source,
                        path or "(top level)",
                        f"mapping keys must be strings, got {_describe_key(key)} as a key on line "
                        f"{key.start_mark.line + 1}",
                    )
                todo.append((value, f"{path}.{key.value}" if path else str(key.value)))


def _describe_key(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    kind = node.tag.rpartition(":")[2] if node.tag.startswith("tag:yaml.org,2002:") else node.tag
    return f"{node.value!r}, read as {kind} (quote it to make it a string)"


class _Yaml12FloatLoader(yaml.SafeLoader):
    """SafeLoader that reads 1e-3 and 5E+2 as floats, as YAML 1.2 does (PyYAML's 1.1 rules make them
    strings), and refuses a key given twice in one mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_Yaml12FloatLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


# ---- the one-pass reader -----------------------------------------------------------------------------

_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"
_SCALAR_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "str", "binary", "timestamp")
)


def _c_parser() -> Any:
    """libyaml's parser, when PyYAML was built with it (the pure-Python parser's events, ~25x faster)."""
    try:
        from yaml._yaml import CParser
    except ImportError:  # PyYAML without libyaml: the pure-Python parser's events
        return None
    return CParser


_CParser: Any = _c_parser()


class _Unsupported(Exception):
    """Outside the subset the one pass reads (or an error in the text): read the composed way."""


@dataclass
class _Open:
    """A mapping or sequence whose end has not come yet; a mapping's key waiting for its value."""

    value: Any
    mapping: bool
    key: str | None = None


class _OnePass:
    """The document built from the parser's events as they come, each scalar by the composed reader's own
    resolver and constructors (one node at a time, let go at once); _Unsupported outside the plain subset."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._helper = _Yaml12FloatLoader("")  # its resolver (YAML 1.2 floats) and scalar constructors
        self._anchors: dict[str, Any] = {}
        self._expansion = _Expansion()  # past its bound: _TooLarge, read again the composed way (its error)
        self._stack: list[_Open] = []
        self._root: Any = None

    def document(self) -> Any:
        parser: Any = _CParser(self._text) if _CParser is not None else _Yaml12FloatLoader(self._text)
        documents = 0
        try:
            while parser.check_event():
                event = parser.get_event()
                self._expansion.add(event)
                if isinstance(event, yaml.ScalarEvent):
                    self._scalar(event)
                elif isinstance(event, yaml.AliasEvent):
                    if self._expects_key() or event.anchor not in self._anchors:
                        raise _Unsupported
                    self._place(self._anchors[event.anchor])
                elif isinstance(event, yaml.CollectionStartEvent):
                    self._start(event)
                elif isinstance(event, yaml.CollectionEndEvent):
                    self._place(self._stack.pop().value)
                elif isinstance(event, yaml.DocumentStartEvent):
                    documents += 1
                    if documents > 1:  # more than one document: the composer's error
                        raise _Unsupported
        finally:
            parser.dispose()
        return self._root

    def _expects_key(self) -> bool:
        return bool(self._stack) and self._stack[-1].mapping and self._stack[-1].key is None

    def _scalar(self, event: yaml.ScalarEvent) -> None:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self._helper.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
        key = self._expects_key()
        if tag not in _SCALAR_TAGS or (key and tag != _STR_TAG):  # a merge key, a non-string key, a tag
            raise _Unsupported
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)  # type: ignore[arg-type]
        value = self._helper.yaml_constructors[tag](self._helper, node)
        self._anchor(event.anchor, value)
        self._place(value, key=key)

    def _start(self, event: yaml.CollectionStartEvent) -> None:
        mapping = isinstance(event, yaml.MappingStartEvent)
        kind, default = (yaml.MappingNode, _MAP_TAG) if mapping else (yaml.SequenceNode, _SEQ_TAG)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self._helper.resolve(kind, None, event.implicit)  # type: ignore[no-untyped-call]
        if self._expects_key() or tag != default or len(self._stack) >= MAX_YAML_DEPTH:
            raise _Unsupported
        value: Any = {} if mapping else []
        self._anchor(event.anchor, value)  # known before its contents, as the composer has it
        self._stack.append(_Open(value, mapping))

    def _anchor(self, anchor: str | None, value: Any) -> None:
        if anchor is not None:
            if anchor in self._anchors:  # an anchor given twice: the composer's error
                raise _Unsupported
            self._anchors[anchor] = value

    def _place(self, value: Any, *, key: bool = False) -> None:
        if not self._stack:
            self._root = value
            return
        top = self._stack[-1]
        if not top.mapping:
            top.value.append(value)
        elif key:
            if value in top.value:  # a key given twice
                raise _Unsupported
            top.key = value
        else:
            top.value[top.key] = value
            top.key = None
