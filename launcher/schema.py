"""The spec's JSON Schema, cluster_specs/schema.json, made from the declarations: the core
spec's (launcher/spec/: ``FIELDS``, from ``Spec``'s declared fields) and each registered
backend's options, declared the same way (launcher/spec/declared.py). ``python -m launcher.schema
cluster_specs/schema.json`` writes the file; a test checks that it is current."""

from __future__ import annotations

import json
import sys
from typing import Any

from launcher.backends import backend_class, names
from launcher.spec import DEFS, DEPENDENT_REQUIRED, FIELDS, REQUIRED
from launcher.spec.declared import section_schema

HEAD = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://tfcluster.dev/schema/cluster-spec.json",
    "title": "tfcluster cluster spec",
    "description": "One distributed TensorFlow job: its tasks, command, model_dir and end. "
                   "The launcher's own validation (launcher/spec/) is stricter and gives "
                   "the error messages; this schema is for editors and tools.",
}


def spec_schema() -> dict[str, Any]:
    """The whole spec's JSON Schema: the core fields, ``backend`` naming every registered
    backend, and each backend's section from its declared options."""
    props = {name: dict(field) for name, field in FIELDS.items()}
    props["backend"]["enum"] = list(names())
    for name in names():
        cls = backend_class(name)
        if cls.OPTIONS is not None:
            props[name] = section_schema(cls.OPTIONS, f"Options of the {name} backend "
                                                      f"(docs/{name}.md).")
    return {**HEAD, "type": "object", "additionalProperties": False,
            "required": list(REQUIRED), "properties": props,
            "dependentRequired": DEPENDENT_REQUIRED, "$defs": DEFS}


def _kind(field: dict[str, Any]) -> str:
    """A field's type in a few words, from its schema."""
    if "enum" in field:
        return " / ".join(json.dumps(v) for v in field["enum"])
    if "$ref" in field:
        ref = field["$ref"].rsplit("/", 1)[1]
        return {"seconds": "seconds", "env": "NAME: value", "address": "host[:port]"}.get(
            ref, ref)
    if "oneOf" in field:
        return " or ".join(_kind(f) for f in field["oneOf"])
    kind = field.get("type", "")
    if kind == "array":
        return "list of strings"
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


def _rows(prefix: str, fields: dict[str, Any]) -> list[str]:
    rows = []
    for name, field in fields.items():
        default = json.dumps(field["default"]) if "default" in field else ""
        what = field.get("description", "").replace("|", "\\|")
        rows.append(f"| `{prefix}{name}` | {_kind(field)} | {default} | {what} |")
    return rows


def field_table() -> str:
    """docs/spec.md's table of the core spec's fields, from the same declaration."""
    from launcher.spec import RESOURCE_FIELDS, RESTART_FIELDS, ROLE_FIELDS, TIMEOUTS

    rows = ["| field | kind | default | what it does |", "|---|---|---|---|"]
    top = spec_schema()["properties"]
    rows += _rows("", {k: v for k, v in top.items() if k not in ("$schema", "description")})
    rows += _rows("timeouts.", TIMEOUTS)
    rows += _rows("roles.ROLE.", ROLE_FIELDS)
    rows += _rows("resources.ROLE.", RESOURCE_FIELDS)
    rows += _rows("restart.ROLE.", RESTART_FIELDS)
    return "\n".join(rows)


def schema_text() -> str:
    return json.dumps(spec_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1] if len(sys.argv) > 1 else "cluster_specs/schema.json", "w",
              encoding="utf-8") as f:
        f.write(schema_text())
