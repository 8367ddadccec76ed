"""A stand-in for `kubectl` that replays recorded responses (no API server runs here).

State lives in $FAKE_KUBECTL_DIR: ``scenario.json`` (copied from recorded/: ``pods``, the
successive `kubectl get pods -o json` answers, and ``logs`` per pod), ``calls.jsonl`` (every
invocation), ``applied.yaml`` (what `apply -f -` received) and ``state.json``. Each `get pods`
answers the next recorded list (the last one again at the end), minus the pods deleted so
far, and only when the label selector names the run that was applied.
"""

import json
import os
import sys
from pathlib import Path

import yaml

DIR = Path(os.environ["FAKE_KUBECTL_DIR"])
RUN_LABEL = "tfcluster.io/run"


def load_state() -> dict:
    path = DIR / "state.json"
    return json.loads(path.read_text()) if path.exists() else {"gets": 0, "deleted": []}


def save_state(state: dict) -> None:
    (DIR / "state.json").write_text(json.dumps(state))


def option(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def applied_run() -> str | None:
    path = DIR / "applied.yaml"
    if not path.exists():
        return None
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs[0]["metadata"]["labels"].get(RUN_LABEL)


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--context")]
    scenario = json.loads((DIR / "scenario.json").read_text())
    with open(DIR / "calls.jsonl", "a") as f:
        f.write(json.dumps(argv) + "\n")
    state = load_state()
    if args[:2] == ["config", "current-context"]:
        if scenario.get("no_context"):
            print("error: current-context is not set", file=sys.stderr)
            return 1
        print("fake-cluster")
        return 0
    if args[:2] == ["get", "crd"]:
        print("customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org")
        return 0
    if args[:1] == ["apply"]:
        text = sys.stdin.read()
        (DIR / "applied.yaml").write_text(text)
        for doc in yaml.safe_load_all(text):
            print(f"{doc['kind'].lower()}/{doc['metadata']['name']} created")
        return 0
    if args[:2] == ["get", "pods"]:
        answers = scenario["pods"]
        answer = json.loads(json.dumps(answers[min(state["gets"], len(answers) - 1)]))
        state["gets"] += 1
        save_state(state)
        run = applied_run()
        wanted = option(args, "-l")
        items = []
        if run is not None and wanted == f"{RUN_LABEL}={run}":
            for pod in answer["items"]:
                pod["metadata"]["labels"][RUN_LABEL] = run
                if pod["metadata"]["name"] not in state["deleted"]:
                    items.append(pod)
        answer["items"] = items
        print(json.dumps(answer))
        return 0
    if args[:1] == ["logs"]:
        pod = next(a for a in args[1:] if not a.startswith("-") and a not in (
            option(args, "-n"), option(args, "-c")))
        for line in scenario.get("logs", {}).get(pod, []):
            print(line, flush=True)
        return 0
    if args[:2] == ["delete", "pod"]:
        state["deleted"].append(args[2])
        save_state(state)
        print(f'pod "{args[2]}" deleted')
        return 0
    if args[:2] in (["get", "jobset"], ["get", "tfjob"]):
        if args[2] in state.get("deleted_objects", []):
            print(f'Error from server (NotFound): {args[1]} "{args[2]}" not found',
                  file=sys.stderr)
            return 1
        print(json.dumps(scenario.get("controller", {"status": {}})))
        return 0
    if args[:1] == ["wait"]:
        return 0
    if args[:1] == ["delete"]:
        if len(args) > 2 and not args[2].startswith("-"):
            state.setdefault("deleted_objects", []).append(args[2])
            save_state(state)
        print(f"{args[1]} deleted")
        return 0
    print(f"fake kubectl: unexpected call {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
