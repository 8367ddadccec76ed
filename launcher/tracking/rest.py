"""MLflow's documented REST API (``/api/2.0/mlflow/...``, and the tracking server's
artifact proxy ``/api/2.0/mlflow-artifacts/artifacts/...``) through the standard library:
no client to import, no protobuf to agree with TensorFlow's, the same in every place the
launcher runs. Imported by the tracker's own thread only."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from launcher.tracking.target import Target

TIMEOUT = 10.0              # s for one request: a slow server costs the tracker's thread alone
MAX_METRICS, MAX_PARAMS, MAX_TAGS = 1000, 100, 100    # runs/log-batch's limits per request
ARTIFACTS_SCHEME = "mlflow-artifacts:"
PARAM_MAX = 6000            # characters MLflow keeps of a param's value


class TrackingError(Exception):
    """A request the tracking server did not answer, or refused: its one-line reason
    (never the Authorization header)."""


class Client:
    """The few calls tfcluster makes, each one request."""

    def __init__(self, target: Target, timeout: float = TIMEOUT):
        self.target, self.timeout = target, timeout
        self._context = ssl._create_unverified_context() if target.insecure else None

    def _request(self, method: str, path: str, body: bytes | None,
                 content_type: str = "application/json") -> dict[str, Any]:
        request = urllib.request.Request(self.target.base + path, data=body, method=method)
        request.add_header("Content-Type", content_type)
        if self.target.auth:
            request.add_header("Authorization", self.target.auth)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout,
                                        context=self._context) as answer:
                text = answer.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            raise TrackingError(f"{method} {path}: HTTP {e.code} {_error_text(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = (e.reason if isinstance(e, urllib.error.URLError) else None) or e
            raise TrackingError(f"{method} {path}: {reason}") from None
        try:
            doc = json.loads(text) if text.strip() else {}
        except ValueError:
            raise TrackingError(f"{method} {path}: the answer is not JSON (is "
                                f"{self.target.base} an MLflow tracking server?)") from None
        return doc if isinstance(doc, dict) else {}

    def call(self, endpoint: str, body: dict[str, Any] | None = None,
             query: dict[str, str] | None = None) -> dict[str, Any]:
        """POST a JSON body to /api/2.0/mlflow/ENDPOINT, or GET with ``query``."""
        path = f"/api/2.0/mlflow/{endpoint}"
        if body is None:
            return self._request("GET", f"{path}?{urllib.parse.urlencode(query or {})}", None)
        return self._request("POST", path, json.dumps(body).encode())

    def experiment_id(self, name: str) -> str:
        """The experiment's id, created when there is none of that name."""
        try:
            found = self.call("experiments/get-by-name", query={"experiment_name": name})
            return str(found["experiment"]["experiment_id"])
        except TrackingError as e:
            if "RESOURCE_DOES_NOT_EXIST" not in str(e) and "HTTP 404" not in str(e):
                raise
        try:
            return str(self.call("experiments/create", {"name": name})["experiment_id"])
        except TrackingError as e:     # created meanwhile by a neighbour
            if "RESOURCE_ALREADY_EXISTS" not in str(e):
                raise
        found = self.call("experiments/get-by-name", query={"experiment_name": name})
        return str(found["experiment"]["experiment_id"])

    def create_run(self, experiment_id: str, name: str | None, start_ms: int,
                   tags: dict[str, str]) -> dict[str, Any]:
        body: dict[str, Any] = {"experiment_id": experiment_id, "start_time": start_ms,
                                "tags": [{"key": k, "value": v} for k, v in tags.items()]}
        if name:
            body["run_name"] = name
        return self.call("runs/create", body)["run"]

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run, None when the server has no such run (or it was deleted)."""
        try:
            run = self.call("runs/get", query={"run_id": run_id})["run"]
        except TrackingError as e:
            if "RESOURCE_DOES_NOT_EXIST" in str(e) or "HTTP 404" in str(e):
                return None
            raise
        return None if run["info"].get("lifecycle_stage") == "deleted" else run

    def update_run(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        body: dict[str, Any] = {"run_id": run_id, "status": status}
        if end_ms is not None:
            body["end_time"] = end_ms
        self.call("runs/update", body)

    def log_batch(self, run_id: str, metrics: Sequence[dict[str, Any]] = (),
                  params: dict[str, str] | None = None,
                  tags: dict[str, str] | None = None) -> None:
        """Metrics ({key, value, timestamp, step}), params and tags, in as many requests as
        MLflow's limits per request ask."""
        params_list = [{"key": k, "value": v[:PARAM_MAX]} for k, v in (params or {}).items()]
        tags_list = [{"key": k, "value": v} for k, v in (tags or {}).items()]
        metrics = list(metrics)
        while metrics or params_list or tags_list:
            body = {"run_id": run_id, "metrics": metrics[:MAX_METRICS],
                    "params": params_list[:MAX_PARAMS], "tags": tags_list[:MAX_TAGS]}
            self.call("runs/log-batch", body)
            metrics, params_list = metrics[MAX_METRICS:], params_list[MAX_PARAMS:]
            tags_list = tags_list[MAX_TAGS:]

    def upload(self, artifact_uri: str, name: str, data: bytes) -> None:
        """One file into the run's artifacts, through the server's artifact proxy."""
        if not artifact_uri.startswith(ARTIFACTS_SCHEME):
            raise TrackingError(f"the run's artifact store is {artifact_uri.split(':')[0]}, "
                                "not the server's proxy (mlflow server --artifacts-destination, "
                                "its default): artifacts not sent")
        where = artifact_uri[len(ARTIFACTS_SCHEME):].lstrip("/")
        path = urllib.parse.quote(f"{where}/{name}")
        self._request("PUT", f"/api/2.0/mlflow-artifacts/artifacts/{path}", data,
                      "application/octet-stream")


def _error_text(e: urllib.error.HTTPError) -> str:
    """The server's error_code and message (MLflow answers JSON), one line, short."""
    try:
        doc = json.loads(e.read().decode("utf-8", "replace"))
        text = f"{doc.get('error_code', '')}: {doc.get('message', '')}".strip(": ")
    except (ValueError, OSError, AttributeError):
        text = str(e.reason)
    return " ".join(text.split())[:300]
