"""healer.yaml's YAML: 1.2 floats (``1e-3`` is a number), no key given twice, string keys only, YAML 1.1's
merge key (``<<: *defaults``), and a bound on nesting, each refused with the file and where.

Read in one pass over the parser's events (libyaml's parser when PyYAML has it), each value built as its
event comes: PyYAML's usual way composes the whole document's node graph first (a node and two marks for
every scalar), which for a healer.yaml with golden suites written inline took ~60 MiB for 1 MiB of YAML
(100 models x 10 requests: the sidecar's peak RSS 124 MiB, issue 30) and stayed with the process as the
allocator's freed memory. The one pass reads the plain subset every healer.yaml uses: mappings with string
keys, sequences, scalars of YAML's standard tags, anchors and aliases (the nodes they expand to bounded:
_Expansion, in both readers) and merge keys. Anything else (a ``!!set``, a non-string key, a key given
twice, a ``<<`` of anything but a mapping or a list of mappings, nesting past the bound, a syntax error) is
read again the composed way, which reads it as before or raises the error it always raised (the file, the
key path, the line): one reader's semantics and messages, the one-pass reader never the last word on an
error.

A merge key (YAML 1.1, https://yaml.org/type/merge.html) brings in the keys of a mapping, or of each
mapping in a list, that the mapping it is in does not give itself: a key given explicitly wins over a
merged one (and is no duplicate of it), and an earlier mapping in the list wins over a later one. Both
readers do it themselves (PyYAML 6.0.4's own merge lets the last mapping of a list win for most keys).
The merged keys follow the explicit ones. A ``<<`` given twice in one mapping is a key given twice."""

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
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"


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
    (``? [a, b]: 1``) cannot even be read into a dict; no key given twice in one mapping (``<<`` included);
    a merge key's value a mapping or a list of mappings. The error names the key path and the line."""
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
            lines: dict[str | None, int] = {}  # each key given so far (None: a merge key): its line, 0-based
            for key, value in node.value:
                if key.tag == _MERGE_TAG:  # "<<: *defaults" merges the other mapping's keys here
                    _check_given_once(lines, None, key)
                    where = f"{path}.<<" if path else "<<"
                    todo += _merged_nodes(value, where, key.start_mark.line + 1, source)
                    continue
                if not isinstance(key, yaml.ScalarNode) or key.tag != _STR_TAG:
                    raise ConfigError(
                        source,
                        path or "(top level)",
                        f"mapping keys must be strings, got {_describe_key(key)} as a key on line "
                        f"{key.start_mark.line + 1}",
                    )
                _check_given_once(lines, key.value, key)
                todo.append((value, f"{path}.{key.value}" if path else str(key.value)))


def _check_given_once(lines: dict[str | None, int], name: str | None, key: yaml.Node) -> None:
    """A key given twice in one mapping (``name`` None: a merge key, not a key '<<' in quotes): the error
    PyYAML's constructor raised here (healer's, PyYAML silently keeps the last), the file's line its own."""
    if name in lines:
        shown, hint = ("<<", "; merge several mappings with one: <<: [*a, *b]") if name is None else (name, "")
        raise yaml.constructor.ConstructorError(
            None, None, f"duplicate key {shown!r} (first on line {lines[name] + 1}){hint}", key.start_mark
        )
    lines[name] = key.start_mark.line


def _merged_nodes(value: yaml.Node, where: str, line: int, source: str) -> list[tuple[yaml.Node, str]]:
    """The mappings a merge key's ``value`` brings in, each with its key path: ``value`` itself or each
    item of its list. Anything else is a ConfigError naming the file, ``where`` and the ``<<``'s line."""
    if _is_mapping(value):
        return [(value, where)]
    if isinstance(value, yaml.SequenceNode) and value.tag == _SEQ_TAG:
        for i, item in enumerate(value.value):
            if not _is_mapping(item):
                raise ConfigError(
                    source,
                    f"{where}[{i}]",
                    f"on line {line}, a merge key's list must hold only mappings (each an alias of one, as in "
                    f"<<: [*a, *b]), got {_describe_node(item)}",
                )
        return [(item, f"{where}[{i}]") for i, item in enumerate(value.value)]
    raise ConfigError(
        source,
        where,
        f"on line {line}, a merge key takes a mapping or a list of mappings (an alias of an anchored mapping, "
        f"as in <<: *defaults), got {_describe_node(value)}",
    )


def _is_mapping(node: yaml.Node) -> bool:
    return isinstance(node, yaml.MappingNode) and node.tag == _MAP_TAG


def _describe_node(node: yaml.Node) -> str:
    standard = "tag:yaml.org,2002:"
    tag = f"!!{node.tag[len(standard) :]}" if node.tag.startswith(standard) else node.tag
    if isinstance(node, yaml.ScalarNode):
        return "nothing (null)" if tag == "!!null" else f"{node.value!r}, read as {tag.lstrip('!')}"
    if node.tag not in (_SEQ_TAG, _MAP_TAG):
        return f"a {tag}"  # !!set, !!omap, !!pairs, a tag of its own
    return "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"


def _describe_key(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    kind = node.tag.rpartition(":")[2] if node.tag.startswith("tag:yaml.org,2002:") else node.tag
    return f"{node.value!r}, read as {kind} (quote it to make it a string)"


class _Yaml12FloatLoader(yaml.SafeLoader):
    """SafeLoader that reads 1e-3 and 5E+2 as floats, as YAML 1.2 does (PyYAML's 1.1 rules make them
    strings), and merge keys as the module says (explicit keys win, then the first mapping merged). Its
    document's keys are _check_keys' first: strings, none given twice, each ``<<`` of mappings."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._merged: dict[yaml.MappingNode, list[tuple[yaml.Node, yaml.Node]]] = {}  # each node's pairs

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):  # PyYAML's own error
            return super().construct_mapping(node, deep=deep)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in self._pairs(node, set()):
            mapping[self.construct_object(key_node, deep=deep)] = self.construct_object(value_node, deep=deep)
        return mapping

    def _pairs(self, node: yaml.MappingNode, merging: set[int]) -> list[tuple[yaml.Node, yaml.Node]]:
        """``node``'s key and value nodes, its merges brought in; nothing changed in the node graph (PyYAML's
        flatten_mapping rewrites it, and a mapping merged before it is built would lose its ``<<``)."""
        own: list[tuple[yaml.Node, yaml.Node]] = node.value
        if not any(key.tag == _MERGE_TAG for key, _ in own):
            return own
        if node in self._merged:
            return self._merged[node]
        merging.add(id(node))
        pairs = [(key, value) for key, value in node.value if key.tag != _MERGE_TAG]
        given = {key.value for key, _ in pairs}
        for key, value in node.value:
            if key.tag != _MERGE_TAG:
                continue
            for merged in value.value if isinstance(value, yaml.SequenceNode) else [value]:  # _check_keys'
                if id(merged) in merging:
                    raise yaml.constructor.ConstructorError(
                        None, None, "a merge key merges a mapping it is in (an alias of it)", key.start_mark
                    )
                for merged_key, merged_value in self._pairs(merged, merging):
                    if merged_key.value not in given:
                        given.add(merged_key.value)
                        pairs.append((merged_key, merged_value))
        merging.discard(id(node))
        self._merged[node] = pairs
        return pairs


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
    """A mapping or sequence whose end has not come yet; a mapping's key waiting for its value (``merging``:
    its ``<<``), and the mappings its ``<<`` brings in, merged at its end."""

    value: Any
    mapping: bool
    key: str | None = None
    merging: bool = False
    merges: list[dict[str, Any]] | None = None


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
                    self._place(self._end(self._stack.pop()))
                elif isinstance(event, yaml.DocumentStartEvent):
                    documents += 1
                    if documents > 1:  # more than one document: the composer's error
                        raise _Unsupported
        finally:
            parser.dispose()
        return self._root

    def _expects_key(self) -> bool:
        top = self._stack[-1] if self._stack else None
        return top is not None and top.mapping and top.key is None and not top.merging

    def _scalar(self, event: yaml.ScalarEvent) -> None:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self._helper.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
        key = self._expects_key()
        if key and tag == _MERGE_TAG and event.anchor is None:
            top = self._stack[-1]
            if top.merges is not None:  # "<<" given twice: the composed reader's error
                raise _Unsupported
            top.merging = True
            return
        if tag not in _SCALAR_TAGS or (key and tag != _STR_TAG):  # a non-string key, a tag
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

    def _end(self, opened: _Open) -> Any:
        """The mapping or sequence complete: a mapping's merges brought in, each key it lacks (explicit
        keys win; of the mappings merged, the first)."""
        if opened.merges:
            mapping: dict[str, Any] = opened.value
            for merged in opened.merges:
                for name, value in merged.items():
                    mapping.setdefault(name, value)
        return opened.value

    def _merge(self, top: _Open, value: Any) -> None:
        """``value``, given to ``top``'s ``<<``: a mapping or a list of mappings, each complete (not one
        the merge is inside); anything else the composed reader's error."""
        merges = value if isinstance(value, list) else [value]
        for merged in merges:
            if not isinstance(merged, dict) or any(merged is opened.value for opened in self._stack):
                raise _Unsupported
        top.merges = list(merges)
        top.merging = False

    def _place(self, value: Any, *, key: bool = False) -> None:
        if not self._stack:
            self._root = value
            return
        top = self._stack[-1]
        if top.merging:
            self._merge(top, value)
        elif not top.mapping:
            top.value.append(value)
        elif key:
            if value in top.value:  # a key given twice
                raise _Unsupported
            top.key = value
        else:
            top.value[top.key] = value
            top.key = None
