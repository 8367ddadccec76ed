"""The spec's JSON Schema (cluster_specs/schema.json): its ``backend`` enum and backend
sections made anew from the registry; ``python -m launcher.schema cluster_specs/schema.json``
rewrites the file, and a test checks that it is current."""

from __future__ import annotations

import json
import re
from typing import Any

from launcher.backends import backend_class, names
from launcher.backends.options import schema


def refresh_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """The spec's JSON Schema ``doc`` with its ``backend`` enum and backend sections made
    anew from the registry: ``python -m launcher.schema cluster_specs/schema.json``
    rewrites the file, and a test checks that it is up to date."""
    props = doc["properties"]
    props["backend"]["enum"] = list(names())
    for name in names():
        cls = backend_class(name)
        if cls.OPTIONS is not None:
            props[name] = schema(cls.OPTIONS, f"Options of the {name} backend "
                                              f"(docs/{name}.md).")
    return doc


def refresh_schema_text(text: str) -> str:
    """The schema file's text with the lines ``refresh_schema`` makes anew rewritten in
    place (one line each, as the file writes them); the rest of the file is kept as is."""
    doc = refresh_schema(json.loads(text))
    lines = text.splitlines()
    derived = ["backend"] + [n for n in doc["properties"] if n in _sections(doc)]
    for name in derived:
        new = f'    "{name}": {json.dumps(doc["properties"][name])}'
        at = [i for i, line in enumerate(lines) if re.match(rf'    "{re.escape(name)}": ', line)]
        if at:
            lines[at[0]] = new + ("," if lines[at[0]].rstrip().endswith(",") else "")
        else:                       # a new backend: after the last section
            last = max(i for i, line in enumerate(lines)
                       if any(line.startswith(f'    "{n}": ') for n in derived))
            lines[last] = lines[last].rstrip(",") + ","
            lines.insert(last + 1, new)
    return "\n".join(lines) + "\n"


def _sections(doc: dict[str, Any]) -> list[str]:
    return [n for n in doc["properties"]["backend"]["enum"] if n in doc["properties"]]


if __name__ == "__main__":
    import sys

    path = sys.argv[1]
    with open(path, encoding="utf-8") as f:
        refreshed = refresh_schema_text(f.read())
    with open(path, "w", encoding="utf-8") as f:
        f.write(refreshed)
