"""The cluster spec: parse and validate JSON into plain data, one clear error per mistake.

Each key is declared once (launcher/spec/declared.py): ``Spec``'s fields, ``Timeouts``,
``Resources`` and ``RoleSettings`` carry their JSON Schema, default and description, from
which cluster_specs/schema.json (launcher/schema.py), the keys the parser accepts, the
defaults it fills in and docs/spec.md's field table come. The rules between keys are written
by hand: the job's shape in cluster.py, the sections in sections.py, the order in parse.py.
"""

from launcher.spec.cluster import NAME_PATTERN
from launcher.spec.model import (
    ADDRESS_PATTERN,
    DEFS,
    DEPENDENT_REQUIRED,
    FIELDS,
    REQUIRED,
    RESOURCE_FIELDS,
    TIMEOUTS,
    TOP_LEVEL_KEYS,
    Spec,
)
from launcher.spec.parse import load_spec, parse_spec, validate
from launcher.spec.resources import RESOURCE_KEYS, Resources, resources_for
from launcher.spec.sections import (
    KERAS_JAX,
    KERAS_ROUTES,
    RESTART_FIELDS,
    ROLE_FIELDS,
    ROLE_KEYS,
    STRATEGIES,
    TF_KERAS,
    MlflowSettings,
    RoleSettings,
    TensorBoardSettings,
)
from launcher.spec.timeouts import TIMEOUT_DEFAULTS, Timeouts
from orchestrator.roles import ROLES

__all__ = [
    "ADDRESS_PATTERN", "DEFS", "DEPENDENT_REQUIRED", "FIELDS", "KERAS_JAX", "KERAS_ROUTES",
    "NAME_PATTERN", "REQUIRED", "RESOURCE_FIELDS", "RESOURCE_KEYS", "RESTART_FIELDS",
    "ROLES", "ROLE_FIELDS", "ROLE_KEYS", "STRATEGIES", "TF_KERAS", "TIMEOUTS",
    "TIMEOUT_DEFAULTS", "TOP_LEVEL_KEYS", "MlflowSettings", "Resources", "RoleSettings",
    "Spec", "TensorBoardSettings", "Timeouts", "load_spec", "parse_spec", "resources_for",
    "validate",
]
