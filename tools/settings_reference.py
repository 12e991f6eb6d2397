"""What the settings' declarations (healer/settings) generate: the configuration reference,
docs/configuration-reference.md; the schema of the Helm chart's ``config`` value (healer.yaml) in
deploy/helm/healer/values.schema.json, with the chart's own values that restate a healer default; and
in the guide, docs/configuration-guide.md, each key's own rules and its examples copied from
examples/configuration/. A development tool, not shipped; from the repository's root:

    python -m tools.settings_reference           # rewrite the three files
    python -m tools.settings_reference --check   # exit 1 naming each file that differs

tests/settings/test_settings_reference.py fails when a committed file is not what this generates.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import MISSING
from pathlib import Path
from typing import Any

from healer.settings import DeclaredKey, Settings, declared_keys, is_section

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "configuration-reference.md"
GUIDE = ROOT / "docs" / "configuration-guide.md"
CHART_SCHEMA = ROOT / "deploy" / "helm" / "healer" / "values.schema.json"
REGENERATE = "python -m tools.settings_reference"

# healer.yaml keys the chart writes itself from its other values (templates/_helpers.tpl,
# "healer.config") and refuses in .Values.config. The schema lets them through there, unchecked, so
# that the template's own message says where the value comes from.
CHART_DERIVED: Mapping[str, str] = {
    "store": "modelRepository",
    "live_repository": "modelRepository.mountPath (with an S3 store)",
    "rollback.engine": "always argo",
    "rollback.state_dir": "sidecar.stateDir",
    "rollback.argo": "argo.server, argo.namespace, argo.verifySSL, argo.caBundle",
    "rollback.replicas": "triton.namespace, triton.selector, triton.port",
    "sidecar.listen": "sidecar.port",
    "sidecar.drain.peers": "triton.namespace, triton.selector",
    "sidecar.drain.peer_urls": "never: the chart sets peers",
}
# The chart's own values that become one healer.yaml key: their schema is that key's, and their
# default in values.yaml must be healer's (tests/settings/test_settings_reference.py).
CHART_VALUES: Mapping[str, str] = {
    "argo.server": "rollback.argo.host",
    "argo.verifySSL": "rollback.argo.verify_ssl",
    "triton.port": "rollback.replicas.port",
    "modelRepository.s3.connectTimeoutSeconds": "store.s3.connect_timeout_s",
    "modelRepository.s3.readTimeoutSeconds": "store.s3.read_timeout_s",
}

# Each form of text (healer.settings.FORMS): how the reference names it and the schema checks it.
FORM_WORDS: Mapping[str, str] = {
    "address": "host:port",
    "url": "http(s) URL",
    "version": "positive integer",
    "model-name": "name: 1-128 of A-Z a-z 0-9 _ . -",
    "set-name": "name: A-Z a-z 0-9 _ . -",
}
FORM_SCHEMAS: Mapping[str, Mapping[str, Any]] = {
    "address": {"type": "string", "pattern": "^[^/]+:[0-9]+$"},
    "url": {"type": "string", "pattern": "^https?://"},
    "version": {"type": ["integer", "string"], "minimum": 1, "pattern": "^[1-9][0-9]*$"},
    "model-name": {"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"},
    "set-name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"},
}


# ---- walking the declarations --------------------------------------------------------------------------


def sections(root: type[Any] = Settings) -> Iterator[tuple[str, str, type[Any], Any]]:
    """(path, doc, class, default instance or None) of ``root`` and every section below it, depth first;
    a list's items are ``path[]``."""

    def walk(path: str, doc: str, cls: type[Any], default: Any) -> Iterator[tuple[str, str, type[Any], Any]]:
        yield path, doc, cls, default
        for d in declared_keys(cls):
            if d.spec.inline:
                continue
            child = f"{path}.{d.key}" if path else d.key
            if d.kind is tuple and is_section(d.item):
                yield from walk(f"{child}[]", d.spec.doc, d.item, None)
            elif is_section(d.kind):
                value = getattr(default, d.name) if default is not None else d.default
                yield from walk(child, d.spec.doc, d.kind, value if is_section(type(value)) else None)

    yield from walk("", "", root, None)


def rows(cls: type[Any], default: Any) -> Iterator[tuple[str, DeclaredKey, Any]]:
    """(key, declaration, default) of each key written in ``cls``'s mapping, inline sections' keys included;
    an alternative's default is MISSING."""
    for d in declared_keys(cls):
        if d.spec.inline:
            yield from rows(d.kind, None)
        elif d.spec.alternatives:
            for name, _, _ in d.spec.alternatives:
                yield name, d, MISSING
        else:
            yield d.key, d, getattr(default, d.name) if default is not None else d.default


def leaf_paths(root: type[Any] = Settings) -> list[str]:
    """Every key's full path (``models[].golden.timeout_s``): what the reference and the schema must cover."""
    return [
        f"{path}.{key}" if path else key for path, _, cls, default in sections(root) for key, _, _ in rows(cls, default)
    ]


def deprecated(root: type[Any] = Settings) -> list[tuple[str, str]]:
    """(full path, what to do) of every deprecated key."""
    return [
        (f"{path}.{key}" if path else key, todo)
        for path, _, cls, _ in sections(root)
        for key, todo in sorted(getattr(cls, "deprecated_keys", {}).items())
    ]


# ---- the reference -------------------------------------------------------------------------------------


def reference(root: type[Any] = Settings) -> str:
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated from the declarations in healer/settings by `{REGENERATE}`: do not edit. -->",
        "",
        "Every key of `healer.yaml`, as the loader ([`healer/settings`](../healer/settings/__init__.py)) reads it.",
        "Unknown keys are rejected; a key whose default is *required* must be given; relative paths resolve",
        "against the config file's folder; every error names the file, the key path and the problem. The rules",
        "that tie keys together are in [configuration-guide.md](configuration-guide.md#rules-the-loader-enforces).",
    ]
    for path, doc, cls, default in sections(root):
        title = f"`{path}`" if path else "Top level"
        lines += ["", f"## {title}", ""]
        if doc:
            lines += [_sentence(doc), ""]
        lines += ["| key | type | default | what it does |", "|---|---|---|---|"]
        for key, d, value in rows(cls, default):
            child = f"{path}.{key}" if path else key
            lines.append(f"| `{key}` | {_type_words(d, key, child)} | {_default_words(d, value)} | {_doc(d, key)} |")
    if gone := deprecated(root):
        lines += [
            "",
            "## Deprecated keys",
            "",
            "Accepted with a warning that names the file and the key, then ignored.",
            "",
        ]
        lines += ["| key | what to do |", "|---|---|", *(f"| `{path}` | {todo} |" for path, todo in gone)]
    if root is Settings:
        lines += [
            "",
            "## In the Helm chart",
            "",
            "The chart (`deploy/helm/healer`) renders `healer.yaml` from its `config` value, checked against these",
            "declarations by its `values.schema.json`. It writes these keys itself, and refuses them in `config`:",
            "",
            "| key | set from |",
            "|---|---|",
            *(f"| `{key}` | {source} |" for key, source in CHART_DERIVED.items()),
        ]
    return "\n".join(lines) + "\n"


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _anchor(path: str) -> str:
    return "#" + "".join(c for c in path.lower() if c.isalnum() or c in "-_")


def _doc(d: DeclaredKey, key: str) -> str:
    for name, _, doc in d.spec.alternatives:
        if name == key:
            return f"{doc} ({d.spec.doc})".replace("|", "\\|")
    return d.spec.doc.replace("|", "\\|")


def _type_words(d: DeclaredKey, key: str, path: str) -> str:
    for name, kind, _ in d.spec.alternatives:
        if name == key:
            return "path" if kind is Path else "list" if kind is tuple else "values"
    if d.kind is tuple:
        item = f"[mapping]({_anchor(path + '[]')})" if is_section(d.item) else _scalar_words(d, d.item)
        at_least = f", at least {d.spec.min_items}" if d.spec.min_items else ""
        if d.spec.one_or_list:
            return f"{item}, or a list of them{at_least}"
        return f"list of {item}{at_least}"
    if is_section(d.kind):
        return f"[mapping]({_anchor(path)})"
    words = _scalar_words(d, d.kind)
    return f"`{{{d.spec.under}: {words}}}`" if d.spec.under else words


def _scalar_words(d: DeclaredKey, kind: Any) -> str:
    spec = d.spec
    if kind in (bool, Path):
        return "true or false" if kind is bool else "path"
    if kind in (int, float):
        words = "integer" if kind is int else "number"
        if spec.minimum is not None and spec.maximum is not None:
            return f"{words}, {spec.minimum:g} to {spec.maximum:g}"
        return f"{words} ≥ {spec.minimum:g}" if spec.minimum is not None else words
    if spec.form is not None:
        return FORM_WORDS[spec.form]
    if spec.choices:
        names = [f"`{c}`" for c in spec.choices]
        return " or ".join(names) if len(names) == 2 else "one of " + ", ".join(names)
    return "string"


def _default_words(d: DeclaredKey, value: Any) -> str:
    if d.spec.default_doc is not None:
        return d.spec.default_doc
    if value is MISSING:
        return "—" if d.spec.alternatives else "*required*"
    if value is not None and (is_section(d.kind) or (d.kind is tuple and is_section(d.item))):
        return "see its section"
    return _literal(value)


def _literal(value: Any) -> str:
    if value is None:
        return "none"
    if value == "":
        return '`""`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{list(value) if isinstance(value, tuple) else value}`"


# ---- the chart's schema --------------------------------------------------------------------------------


def config_schema(root: type[Any] = Settings, derived: Mapping[str, str] = CHART_DERIVED) -> dict[str, Any]:
    """A JSON schema (draft-07) of healer.yaml for ``root``; the keys in ``derived`` (path: where the
    chart takes them from) are let through unchecked."""
    return _section_schema(root, None, "", derived)


def _section_schema(cls: type[Any], default: Any, path: str, derived: Mapping[str, str]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, d, value in rows(cls, default):
        child = f"{path}.{key}" if path else key
        if child in derived:
            properties[key] = {"description": f"set by the chart from {derived[child]}: leave it out of config"}
            continue
        properties[key] = _key_schema(d, key, value, child, derived)
        if d.required and default is None:
            required.append(key)
    for key, todo in sorted(getattr(cls, "deprecated_keys", {}).items()):
        properties[key] = {"description": f"deprecated: {todo}", "deprecated": True}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def _key_schema(d: DeclaredKey, key: str, value: Any, path: str, derived: Mapping[str, str]) -> dict[str, Any]:
    for name, kind, _ in d.spec.alternatives:
        if name == key:
            return {"description": _doc(d, key), **({"type": "string", "minLength": 1} if kind is Path else {})}
    if d.kind is tuple:
        item = _section_schema(d.item, None, path + "[]", derived) if is_section(d.item) else _scalar_schema(d, d.item)
        schema: dict[str, Any] = {"type": "array", "items": item}
        if d.spec.min_items:
            schema["minItems"] = d.spec.min_items
        if d.spec.one_or_list:  # one item written alone: the object keywords apply to it, items to a list
            schema = {**item, **schema, "type": ["object", "array"]}
    elif is_section(d.kind):
        schema = _section_schema(d.kind, value if is_section(type(value)) else None, path, derived)
    else:
        schema = _scalar_schema(d, d.kind)
        if d.spec.under is not None:
            schema = {
                "type": "object",
                "properties": {d.spec.under: schema},
                "required": [d.spec.under],
                "additionalProperties": False,
            }
    # null stands for the default where the loader says so (healer/settings/loader.py, _takes_default).
    if value is not MISSING and (d.optional or d.spec.blank_is_default or d.kind is tuple or is_section(d.kind)):
        schema = _or_null(schema, blank=d.spec.blank_is_default)
    return {"description": d.spec.doc, **schema}


def _scalar_schema(d: DeclaredKey, kind: Any) -> dict[str, Any]:
    spec = d.spec
    if kind is bool:
        return {"type": "boolean"}
    if kind in (int, float):
        schema: dict[str, Any] = {"type": "integer" if kind is int else "number"}
        if spec.minimum is not None:
            schema["minimum"] = spec.minimum
        if spec.maximum is not None:
            schema["maximum"] = spec.maximum
        return schema
    if spec.form is not None:
        return dict(FORM_SCHEMAS[spec.form])
    if spec.choices:
        return {"enum": list(spec.choices)}
    return {"type": "string", "minLength": 1}


def _or_null(schema: dict[str, Any], *, blank: bool) -> dict[str, Any]:
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    widened = {**schema, "type": [*kinds, "null"]}
    if blank:
        widened.pop("minLength", None)
    return widened


def chart_schema(current: Mapping[str, Any]) -> dict[str, Any]:
    """The chart's values.schema.json ``current`` with its ``config`` and the values in CHART_VALUES as
    the declarations say; everything else is the chart's own, kept as it is."""
    schema: dict[str, Any] = json.loads(json.dumps(current))
    config = config_schema()
    config["description"] = "healer.yaml (docs/configuration-reference.md), rendered into the healer-config ConfigMap"
    schema["properties"]["config"] = config
    for value_path, key_path in CHART_VALUES.items():
        *parents, name = value_path.split(".")
        node = schema
        for part in parents:
            node = node["properties"][part]
        node["properties"][name] = _chart_value_schema(key_path)
    _describe_from_values(schema)
    return schema


def _describe_from_values(schema: dict[str, Any]) -> None:
    """Give every chart value without a description in the schema the comment values.yaml has for it
    (tools/chart_readme.py reads them), so editors and `helm` show what each value does."""
    from tools.chart_readme import CHART, read_values

    comments = {v.path: v.description for v in read_values((CHART / "values.yaml").read_text()) if v.description}
    for path, text in comments.items():
        if path.split(".", 1)[0] == "config":
            continue  # healer.yaml: described by the declarations
        node: dict[str, Any] | None = schema
        for part in path.split("."):
            node = (node or {}).get("properties", {}).get(part)
            if not isinstance(node, dict):
                break
        if isinstance(node, dict) and not node.get("description"):
            node["description"] = text


def _chart_value_schema(key_path: str) -> dict[str, Any]:
    *parents, name = key_path.split(".")
    cls: type[Any] = Settings
    for part in parents:
        cls = next(d for d in declared_keys(cls) if d.key == part).kind
    d = next(d for d in declared_keys(cls) if d.key == name)
    return {"description": f"healer.yaml {key_path}: {d.spec.doc}", **_scalar_schema(d, d.kind)}


def declared_default(key_path: str) -> Any:
    """healer's default for ``key_path`` (``rollback.argo.host``), as the reference shows it."""
    *parents, name = key_path.split(".")
    cls: type[Any] = Settings
    default: Any = None
    for part in parents:
        d = next(d for d in declared_keys(cls) if d.key == part)
        value = getattr(default, d.name) if default is not None else d.default
        cls, default = d.kind, (value if is_section(type(value)) else None)
    d = next(d for d in declared_keys(cls) if d.key == name)
    return getattr(default, d.name) if default is not None else d.default


# ---- the guide: each key's own rules, and its examples as the files are -------------------------------

# What each form of text must be (healer/settings/loader.py, _read_form, checks it).
FORM_RULES: Mapping[str, str] = {
    "model-name": "1–128 of `A-Z a-z 0-9 _ . -`, not starting with `.` or `-`, no `..` (it becomes a path, "
    "an S3 key and a URL)",
    "version": "a positive integer (Triton's version directories are numbers)",
    "address": "`host:port` without a scheme or path: a host, a port from 1 to 65535",
    "url": "an `http://` or `https://` URL: a host, a port (when given) from 1 to 65535, and no `user:password@` "
    "(refused, and never repeated in the error)",
    "set-name": "1–100 of `A-Z a-z 0-9 _ . -`, no `..`, not `ledger`, `audit` or `lease`",
}
EXAMPLE = re.compile(r"(<!-- example: (?P<path>\S+) -->\n)```yaml\n.*?```\n", re.S)
RULES = re.compile(r"(<!-- rules: [^\n]* -->\n).*?(<!-- rules: end -->)", re.S)


def key_rules(root: type[Any] = Settings) -> list[str]:
    """The guide's list of each key's own rules, from the declarations: forms, choices, exactly-one
    alternatives and the maxima that say why."""
    forms: dict[str, list[str]] = {form: [] for form in FORM_WORDS}
    lines: list[str] = []
    for path, _, cls, default in sections(root):
        alternatives: set[str] = set()
        for key, d, _ in rows(cls, default):
            full = f"`{path}.{key}`" if path else f"`{key}`"
            if len(d.spec.alternatives) > 1:  # one alternative: a key the section's _BUILD step reads itself
                names = " or ".join(f"`{name}`" for name, _, _ in d.spec.alternatives)
                # Optional (an expected output judged by its expect): the section's _BUILD says when it is needed.
                alternatives.add(f"{'at most' if d.optional else 'exactly'} one of {names}")
            elif d.spec.alternatives:
                continue
            elif d.spec.form is not None:
                forms[d.spec.form].append(full)
            elif d.spec.choices:
                lines.append(f"- {full}: {_scalar_words(d, d.kind)};")
            elif d.spec.above_maximum is not None:
                lines.append(f"- {full}: {d.spec.above_maximum};")
        lines += [f"- `{path}`: {rule};" for rule in sorted(alternatives)]
    lines[:0] = [f"- {', '.join(keys)}: {FORM_RULES[form]};" for form, keys in forms.items() if keys]
    return [*lines[:-1], lines[-1].rstrip(";") + "."]


def guide(text: str) -> str:
    """The guide ``text`` with its examples as the files are and its list of each key's own rules."""
    text = EXAMPLE.sub(lambda m: m[1] + "```yaml\n" + (ROOT / m["path"]).read_text(encoding="utf-8") + "```\n", text)
    return RULES.sub(lambda m: m[1] + "\n".join(key_rules()) + "\n" + m[2], text)


# ---- writing and checking ------------------------------------------------------------------------------


def generated() -> dict[Path, str]:
    """Each generated file and the text it must have."""
    current = json.loads(CHART_SCHEMA.read_text(encoding="utf-8"))
    return {
        REFERENCE: reference(),
        CHART_SCHEMA: json.dumps(chart_schema(current), indent=2, ensure_ascii=False),
        GUIDE: guide(GUIDE.read_text(encoding="utf-8")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is not as generated")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stale:
        verb = "differs from the declarations: run" if args.check else "written by"
        print(f"{path.relative_to(ROOT)} {verb} `{REGENERATE}`", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
