"""Rebuild the schema subsets in this folder (see README.md for the sources).

    python make_subset.py K8S_DEFINITIONS_JSON TFJOB_CRD_YAML [COMPOSE_SPEC_JSON]
    python make_subset.py jobset JOBSET_CRD_YAML
    python make_subset.py podgroups VOLCANO_PODGROUP_CRD_YAML COSCHEDULING_PODGROUP_CRD_YAML

K8S_DEFINITIONS_JSON: v1.30.0-local-strict/_definitions.json of kubernetes-validate 1.37.0
TFJOB_CRD_YAML: manifests/base/crds/kubeflow.org_tfjobs.yaml of kubeflow/training-operator v1.9.0
COMPOSE_SPEC_JSON: schema/compose-spec.json of compose-spec/compose-spec (commit in README.md)
JOBSET_CRD_YAML: config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml of
kubernetes-sigs/jobset v0.12.0
VOLCANO_PODGROUP_CRD_YAML: config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml of
volcano-sh/volcano v1.15.1
COSCHEDULING_PODGROUP_CRD_YAML: manifests/coscheduling/crd.yaml of
kubernetes-sigs/scheduler-plugins v0.34.7
"""

import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).parent
ROOTS = {"Job": "io.k8s.api.batch.v1.Job", "Service": "io.k8s.api.core.v1.Service"}
PREFIX = "/api/_definitions.json#/$defs/"


def strip(node):
    """Drop descriptions (most of the size); rewrite refs to this file's $defs."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "description" and isinstance(v, str):
                continue
            if k == "$ref" and isinstance(v, str) and v.startswith(PREFIX):
                v = "#/$defs/" + v[len(PREFIX):]
            out[k] = strip(v)
        return out
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v.split("/")[-1]
            else:
                yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def main(definitions: str, crd: str, compose: str | None = None) -> None:
    defs = json.loads(Path(definitions).read_text())["$defs"]
    keep, todo = {}, list(ROOTS.values())
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = strip(defs[name])
        todo.extend(refs(keep[name]))
    doc = {"$schema": "https://json-schema.org/draft/2020-12/schema",
           "$comment": "Subset of the Kubernetes v1.30.0 API definitions (strict: no unknown "
                       "fields); see README.md",
           "$defs": dict(sorted(keep.items())),
           "roots": {kind: {"$ref": f"#/$defs/{name}"} for kind, name in ROOTS.items()}}
    compact = {"separators": (",", ":")}
    (HERE / "k8s-v1.30.0-strict-subset.json").write_text(json.dumps(doc, **compact) + "\n")
    crd_doc = yaml.safe_load(Path(crd).read_text())
    version = next(v for v in crd_doc["spec"]["versions"] if v["name"] == "v1")
    schema = strip(version["schema"]["openAPIV3Schema"])
    (HERE / "tfjob-v1-crd-training-operator-v1.9.0.json").write_text(
        json.dumps(schema, **compact) + "\n")
    if compose:
        schema = strip(json.loads(Path(compose).read_text()))
        (HERE / "compose-spec.json").write_text(json.dumps(schema, **compact) + "\n")


def crd_schema(crd: str, version: str, out: str) -> None:
    """The openAPIV3Schema of one version of a CRD, descriptions dropped."""
    crd_doc = next(d for d in yaml.safe_load_all(Path(crd).read_text())
                   if d and d.get("kind") == "CustomResourceDefinition")
    found = next(v for v in crd_doc["spec"]["versions"] if v["name"] == version)
    schema = strip(found["schema"]["openAPIV3Schema"])
    (HERE / out).write_text(json.dumps(schema, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "jobset":
        crd_schema(sys.argv[2], "v1alpha2", "jobset-v1alpha2-crd-v0.12.0.json")
    elif sys.argv[1] == "podgroups":
        crd_schema(sys.argv[2], "v1beta1", "podgroup-volcano-v1beta1-crd-v1.15.1.json")
        crd_schema(sys.argv[3], "v1alpha1", "podgroup-coscheduling-v1alpha1-crd-v0.34.7.json")
    else:
        main(*sys.argv[1:4])
