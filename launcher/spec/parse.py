"""A spec file or text into a ``Spec``, one clear error per mistake: every error names the
field (``cluster.worker[1]``) and what is wrong with it; broken JSON names the line and
column. Unknown keys are errors: a typo must not be silently ignored."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from launcher.checks import check_keys, expect_dict, expect_str, fail
from launcher.errors import SpecError
from launcher.spec.cluster import (
    check_duplicates,
    parse_cluster,
    parse_evaluator,
    parse_keras,
    parse_name,
    parse_steps,
    parse_strategy,
)
from launcher.spec.declared import declared, value_of
from launcher.spec.model import TOP_LEVEL_KEYS, Spec
from launcher.spec.resources import check_devices
from launcher.spec.sections import parse_roles


def validate(raw: Any, source: str | None = None, *, backends: Sequence[str]) -> Spec:
    """Validate a decoded JSON document; return a Spec. ``backends``: the names of the
    registered backends, each also the key of its options section (checked by the backend
    itself, declared with key() as the spec is). The keys declared without rules between them
    are checked as declared (``Spec``'s fields); the others here, in order."""
    backends = tuple(backends)
    spec_obj = expect_dict(raw, "spec")
    check_keys(spec_obj, TOP_LEVEL_KEYS + backends, "")
    for f in declared(Spec):
        if f.metadata["required"] and f.name not in spec_obj:
            raise fail(f.name, f"is required ({f.metadata['required']})")
    cluster = parse_cluster(spec_obj["cluster"])
    evaluator = parse_evaluator(spec_obj, cluster)
    check_duplicates(cluster, evaluator)
    name = parse_name(spec_obj, source)
    values: dict[str, Any] = {f.name: value_of(f, spec_obj[f.name], f.name)
                              for f in declared(Spec)
                              if not f.metadata["hand"] and f.name in spec_obj}
    max_steps, epochs, examples, batch_size = parse_steps(spec_obj)
    backend = expect_str(spec_obj.get("backend", Spec.backend), "backend")   # its default
    if backend not in backends:
        raise fail("backend", f"unknown backend {backend!r} (allowed: {', '.join(backends)})")
    keras = parse_keras(spec_obj, cluster, evaluator)
    strategy = parse_strategy(spec_obj, cluster, keras)
    check_devices(values.get("resources", {}), cluster, evaluator)
    roles = parse_roles(spec_obj["roles"], cluster, evaluator, strategy) \
        if "roles" in spec_obj else {}
    return Spec(name=name, cluster=cluster, evaluator=evaluator,
                max_steps=max_steps, epochs=epochs, examples=examples, batch_size=batch_size,
                backend=backend, strategy=strategy, keras=keras, roles=roles, **values,
                backend_options={section: expect_dict(spec_obj[section], section)
                                 for section in backends if section in spec_obj},
                source=source)


def load_spec(path: str, overrides: dict[str, Any] | None = None, *,
              backends: Sequence[str]) -> Spec:
    """Read and validate a spec file; ``overrides`` replace top-level keys before validation.
    ``backends``: the registered backends' names (launcher.api.load_spec hands them)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise SpecError("", f"spec file not found: {path}") from None
    except IsADirectoryError:
        raise SpecError("", f"spec path is a directory, not a file: {path}") from None
    except PermissionError:
        raise SpecError("", f"spec file is not readable (permission denied): {path}") from None
    except UnicodeDecodeError as e:
        raise SpecError("", f"spec file is not UTF-8 text: {path} ({e.reason})") from None
    except OSError as e:
        raise SpecError("", f"spec file cannot be read: {path} ({e.strerror or e})") from None
    return parse_spec(text, source=path, overrides=overrides, backends=backends)


def parse_spec(text: str, source: str | None = None,
               overrides: dict[str, Any] | None = None, *, backends: Sequence[str]) -> Spec:
    """Parse JSON text into a Spec; raise SpecError naming the problem."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(
            "", f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}", source
        ) from None
    except RecursionError:
        raise SpecError("", "invalid JSON: lists or objects nested too deeply", source) from None
    if overrides and isinstance(raw, dict):
        raw = {**raw, **overrides}
    try:
        return validate(raw, source, backends=backends)
    except SpecError as e:
        if e.source is None and source is not None:
            raise SpecError(e.field, e.message, source) from None
        raise
