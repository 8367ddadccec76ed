"""Where a run is logged: the spec's ``tracking.mlflow`` over the environment's
``MLFLOW_TRACKING_*``, checked before anything starts (one line, exit 2). A password in
the URI and ``MLFLOW_TRACKING_TOKEN`` become the Authorization header, kept out of every
string that is printed or written."""

from __future__ import annotations

import base64
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from launcher.checks import experiment_problem, tracking_uri_problem
from launcher.errors import SpecError, UsageError

if TYPE_CHECKING:
    from launcher.spec import Spec

URI_ENV = "MLFLOW_TRACKING_URI"
EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"
TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"
USER_ENV, PASSWORD_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
INSECURE_ENV = "MLFLOW_TRACKING_INSECURE_TLS"


@dataclass(frozen=True)
class Target:
    """An MLflow tracking server and what to log there. ``base``: its URL without user
    or password (safe to print); ``auth``: the Authorization header, never shown."""

    base: str
    experiment: str
    run_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    auth: str | None = field(default=None, repr=False)
    insecure: bool = False

    def run_url(self, experiment_id: str, run_id: str) -> str:
        """The run's page in MLflow's UI."""
        return f"{self.base}/#/experiments/{experiment_id}/runs/{run_id}"


def resolve(spec: Spec, env: Mapping[str, str] | None = None) -> Target | None:
    """The spec's tracking target, else the environment's; None when tracking is off.
    UsageError (one line, exit 2) for a URI or an experiment name that cannot work."""
    env = os.environ if env is None else env
    settings = spec.tracking
    uri = settings.tracking_uri if settings and settings.tracking_uri else None
    where = "tracking.mlflow.tracking_uri"
    if uri is None:
        uri, where = env.get(URI_ENV) or None, URI_ENV
    if uri is None:
        if settings is not None:
            raise SpecError("tracking.mlflow.tracking_uri", "is not set and neither is "
                            f"${URI_ENV}: give the http(s) URL of an MLflow tracking server")
        return None
    problem = tracking_uri_problem(uri)
    if problem:
        raise UsageError(f"{where}: {problem}") if where == URI_ENV else \
            SpecError(where, problem)
    experiment = (settings.experiment if settings else None) or env.get(EXPERIMENT_ENV) \
        or spec.name
    problem = experiment_problem(experiment)
    if problem:
        raise UsageError(f"{EXPERIMENT_ENV} {problem}")
    base, auth = split_credentials(uri)
    return Target(base=base, experiment=experiment,
                  run_name=settings.run_name if settings else None,
                  tags=dict(settings.tags) if settings else {}, auth=auth or env_auth(env),
                  insecure=env.get(INSECURE_ENV, "").lower() in ("1", "true"))


def env_auth(env: Mapping[str, str]) -> str | None:
    """The Authorization header MLflow's own client would send: $MLFLOW_TRACKING_TOKEN,
    else $MLFLOW_TRACKING_USERNAME and $MLFLOW_TRACKING_PASSWORD."""
    if env.get(TOKEN_ENV):
        return f"Bearer {env[TOKEN_ENV]}"
    if env.get(USER_ENV) and env.get(PASSWORD_ENV):
        return basic(env[USER_ENV], env[PASSWORD_ENV])
    return None


def split_credentials(uri: str) -> tuple[str, str | None]:
    """(the URI without user and password, a Basic Authorization header or None)."""
    parts = urllib.parse.urlsplit(uri.rstrip("/"))
    if parts.username is None and parts.password is None:
        return urllib.parse.urlunsplit(parts), None
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + \
        (f":{parts.port}" if parts.port else "")
    base = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return base, basic(urllib.parse.unquote(parts.username or ""),
                       urllib.parse.unquote(parts.password or ""))


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
