"""healer.yaml's YAML: 1.2 floats (``1e-3`` is a number), no key given twice, string keys only, and a
bound on nesting, each refused with the file and where."""

from __future__ import annotations

import re
from typing import Any

import yaml

from healer.settings.schema import ConfigError

# Deep enough for any config (a tensor's nesting is its rank, at most 64 in numpy); PyYAML builds the
# document recursively, so a file nested thousands of levels deep would otherwise hit RecursionError.
MAX_YAML_DEPTH = 100
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def load_yaml(text: str, source: str) -> Any:
    """The YAML document, refusing excessive nesting and any mapping key that is not a string."""
    # Nesting first, from the parser's events: the parser keeps its own stack, it does not recurse.
    depth = 0
    for event in yaml.parse(text, Loader=_Yaml12FloatLoader):
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
