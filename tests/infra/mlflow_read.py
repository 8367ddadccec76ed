"""Read an MLflow run back with MLflow's own client and print it as JSON (run by
.venv-mlflow's Python: tests/infra/mlflow_server.py's ``read_run``). Usage: URL RUN_ID."""

import json
import sys

from mlflow.tracking import MlflowClient


def main(url: str, run_id: str) -> None:
    client = MlflowClient(url)
    run = client.get_run(run_id)
    history = {key: sorted([m.step, m.value] for m in client.get_metric_history(run_id, key))
               for key in run.data.metrics}
    artifacts: list[str] = []

    def walk(path=None):
        for item in client.list_artifacts(run_id, path):
            if item.is_dir:
                walk(item.path)
            else:
                artifacts.append(item.path)

    walk()
    runs = client.search_runs([run.info.experiment_id])
    print(json.dumps({"status": run.info.status, "params": run.data.params,
                      "tags": run.data.tags, "history": history,
                      "artifacts": sorted(artifacts), "experiment_runs": len(runs),
                      "experiment_id": run.info.experiment_id}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
