"""Bad input, each with the exact message ``launch`` must print (exit status 2, nothing
started, nothing written into model_dir).

A case is (id, spec, argv, expected): ``spec`` is a dict merged into a valid base spec (a
key set to DROP is removed), or ``Raw(text)`` written as is, or ``Path(kind)`` for a spec
path that is not a readable file; ``argv`` are the options after SPEC; ``expected`` is
the last lines on stderr, with {spec}, {tmp}, {port}, {path} (the launcher's PATH) and
{resolver} (this machine's resolver's words for an unknown host name) filled in, in
``argv`` too. {tmp} holds ``a-file`` (not a directory, not executable), ``bin/train.sh``
(an executable shell script) and ``bin/no-shebang`` (an executable text file without a
``#!`` line, which the kernel refuses to start).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.backends import names as backend_names
from launcher.spec import TIMEOUT_DEFAULTS, TOP_LEVEL_KEYS


@dataclass(frozen=True)
class Raw:
    text: str


@dataclass(frozen=True)
class Path:
    kind: str       # "missing", "directory", "not-utf8", "proc-mem"


DROP = object()
TOP_KEYS = ", ".join(sorted(TOP_LEVEL_KEYS + backend_names()))    # the list grows with the spec
E = "launch: error: {spec}: "

CASES: list[tuple[str, object, list[str], str]] = [
    # --- files and JSON
    ("broken-json", Raw('{"cluster": '), [],
     E + "invalid JSON at line 1, column 13: Expecting value"),
    ("trailing-comma", Raw('{"cluster": {"worker": 1},\n}'), [],
     E + "invalid JSON at line 2, column 1: Expecting property name enclosed in double quotes"),
    ("empty-file", Raw(""), [], E + "invalid JSON at line 1, column 1: Expecting value"),
    ("yaml-not-json", Raw("cluster:\n  worker: 2\n"), [],
     E + "invalid JSON at line 1, column 1: Expecting value"),
    ("top-level-list", Raw('[{"cluster": {"worker": 1}}]'), [],
     E + "spec: must be an object, got a list"),
    ("missing-file", Path("missing"), [], "launch: error: spec file not found: {spec}"),
    ("directory", Path("directory"), [],
     "launch: error: spec path is a directory, not a file: {spec}"),
    ("not-utf8", Path("not-utf8"), [],
     "launch: error: spec file is not UTF-8 text: {spec} (invalid start byte)"),
    ("unreadable-device", Path("proc-mem"), [],
     "launch: error: spec file cannot be read: {spec} (Input/output error)"),
    # --- tracking (docs/tracking.md)
    ("tracking-file-uri", {"tracking": {"mlflow": {"tracking_uri": "file:///tmp/mlruns"}}}, [],
     E + "tracking.mlflow.tracking_uri: scheme 'file' is not supported: give the http:// or "
         "https:// URL of an MLflow tracking server (tfcluster logs through its REST API)"),
    ("tracking-empty-experiment", {"tracking": {"mlflow": {"tracking_uri": "http://h:5000",
                                                           "experiment": " "}}}, [],
     E + "tracking.mlflow.experiment: must not be empty"),
    # --- unknown keys
    ("typo-top-level", {"max_step": 10}, [],
     E + "max_step: unknown key (allowed: " + TOP_KEYS + ")"),
    ("typo-timeouts", {"timeouts": {"stal": 10}}, [],
     E + "timeouts.stal: unknown key (allowed: " + ", ".join(sorted(TIMEOUT_DEFAULTS)) + ")"),
    ("typo-restart-role", {"restart": {"workers": "never"}}, [],
     E + "restart.workers: unknown key (allowed: chief, evaluator, master, ps, worker)"),
    ("typo-restart-field", {"restart": {"ps": {"policy": "always", "retries": 2}}}, [],
     E + "restart.ps.retries: unknown key (allowed: backoff, max_restarts, policy)"),
    # --- cluster shape
    ("no-cluster", {"cluster": DROP}, [],
     E + "cluster: is required (job name to a list of addresses)"),
    ("cluster-list", {"cluster": ["localhost:2222"]}, [],
     E + "cluster: must be an object, got a list"),
    ("cluster-empty", {"cluster": {}}, [],
     E + "cluster: must name at least one job (chief, worker, ps)"),
    ("two-chiefs", {"cluster": {"chief": 2, "worker": 1}}, [],
     E + "cluster.chief: at most one chief task, got 2"),
    ("two-chief-addresses", {"cluster": {"chief": ["localhost", "localhost"]}}, [],
     E + "cluster.chief: at most one chief task, got 2"),
    ("master-with-chief", {"cluster": {"chief": 1, "master": 1}}, [],
     E + "cluster.master: legacy 'master' cannot be used together with 'chief'"),
    ("master-with-evaluator", {"cluster": {"master": 1, "worker": 1}, "evaluator": "localhost"},
     [], E + "evaluator: legacy 'master' cannot be used together with an evaluator"),
    ("evaluator-inside-cluster", {"cluster": {"chief": 1, "evaluator": 1}}, [],
     E + 'cluster.evaluator: the evaluator is given apart from cluster, as the top-level key '
         '"evaluator" (TensorFlow keeps it outside the cluster)'),
    ("unknown-job", {"cluster": {"workers": 2}}, [],
     E + "cluster.workers: unknown job name (allowed: chief, master, worker, ps)"),
    ("only-ps", {"cluster": {"ps": 2}}, [],
     E + "cluster: needs a task that trains: chief, master or worker"),
    ("zero-workers", {"cluster": {"chief": 1, "worker": 0}}, [],
     E + "cluster.worker: task count must be at least 1, got 0"),
    ("negative-workers", {"cluster": {"chief": 1, "worker": -2}}, [],
     E + "cluster.worker: task count must be at least 1, got -2"),
    ("huge-count", {"cluster": {"worker": 5000}}, [],
     E + "cluster.worker: task count 5000 is more than 4096"),
    ("count-is-bool", {"cluster": {"worker": True}}, [],
     E + "cluster.worker: must be a list of addresses or a count of tasks on localhost, got a "
         "boolean"),
    ("count-is-float", {"cluster": {"worker": 2.0}}, [],
     E + "cluster.worker: must be a list of addresses or a count of tasks on localhost, got a "
         "number"),
    ("addresses-as-string", {"cluster": {"worker": "localhost:2222"}}, [],
     E + "cluster.worker: must be a list of addresses or a count of tasks on localhost, got a "
         "string"),
    ("empty-address-list", {"cluster": {"chief": 1, "worker": []}}, [],
     E + "cluster.worker: must list at least one address (leave the job out instead)"),
    # --- addresses and ports
    ("address-not-string", {"cluster": {"worker": [2222]}}, [],
     E + "cluster.worker[0]: must be a string, got an integer"),
    ("port-too-big", {"cluster": {"worker": ["localhost:99999"]}}, [],
     E + "cluster.worker[0]: address 'localhost:99999': port 99999 is outside 1-65535"),
    ("port-zero", {"cluster": {"worker": ["localhost:0"]}}, [],
     E + "cluster.worker[0]: address 'localhost:0': port 0 is outside 1-65535"),
    ("port-not-number", {"cluster": {"worker": ["localhost:http"]}}, [],
     E + "cluster.worker[0]: address 'localhost:http': port 'http' is not a number"),
    ("negative-port", {"cluster": {"worker": ["localhost:-1"]}}, [],
     E + "cluster.worker[0]: address 'localhost:-1': port '-1' is not a number"),
    ("duplicate-address", {"cluster": {"worker": ["localhost:2222", "localhost:2222"]}}, [],
     E + "cluster.worker[1]: address localhost:2222 is already used by cluster.worker[0]"),
    ("duplicate-across-jobs",
     {"cluster": {"chief": ["LOCALHOST:2300"], "ps": ["localhost:2300"]}}, [],
     E + "cluster.ps[0]: address localhost:2300 is already used by cluster.chief[0]"),
    ("evaluator-reuses-ps", {"cluster": {"chief": 1, "ps": ["localhost:2400"]},
                             "evaluator": "localhost:2400"}, [],
     E + "evaluator: address localhost:2400 is already used by cluster.ps[0]"),
    ("ipv6-without-brackets", {"cluster": {"worker": ["::1:2222"]}}, [],
     E + "cluster.worker[0]: address '::1:2222': write IPv6 addresses as [ADDR]:PORT"),
    ("space-in-host", {"cluster": {"worker": ["my host:2222"]}}, [],
     E + "cluster.worker[0]: address 'my host:2222' has an invalid host name"),
    ("padded-address", {"cluster": {"worker": [" localhost"]}}, [],
     E + "cluster.worker[0]: address ' localhost' has leading or trailing spaces"),
    ("empty-host", {"cluster": {"worker": [":2222"]}}, [],
     E + "cluster.worker[0]: address ':2222' has an invalid host name"),
    # --- training length
    ("max-steps-and-epochs", {"epochs": 2, "examples": 1000, "batch_size": 10}, [],
     E + "epochs: give either max_steps or epochs/examples/batch_size, not both"),
    ("epochs-alone", {"max_steps": DROP, "epochs": 2}, [],
     E + "examples: is required together with epochs (max_steps is derived from epochs, "
         "examples, batch_size)"),
    ("negative-max-steps", {"max_steps": -5}, [], E + "max_steps: must be at least 1, got -5"),
    ("zero-epochs", {"max_steps": DROP, "epochs": 0, "examples": 10, "batch_size": 1}, [],
     E + "epochs: must be at least 1, got 0"),
    ("max-steps-string", {"max_steps": "3000"}, [],
     E + "max_steps: must be an integer, got a string"),
    ("max-steps-float", {"max_steps": 10.5}, [],
     E + "max_steps: must be an integer, got a number"),
    # --- command, model_dir, name, backend, env, timeouts, restart, resources
    ("no-model-dir", {"model_dir": DROP}, [],
     E + "model_dir: is required (a path or fsspec URL shared by every task)"),
    ("empty-model-dir", {"model_dir": " "}, [], E + "model_dir: must not be empty"),
    ("command-as-string", {"command": "python train.py"}, [],
     E + "command: must be a non-empty list of strings (the program and its arguments)"),
    ("command-empty", {"command": []}, [],
     E + "command: must be a non-empty list of strings (the program and its arguments)"),
    ("command-arg-number", {"command": ["python", "train.py", 3]}, [],
     E + "command[2]: must be a string, got an integer"),
    ("no-command-anywhere", {"command": DROP}, [],
     E + 'command: no command to run: set "command" in the spec or give it after --'),
    ("bad-name", {"name": "my job"}, [],
     E + "name: 'my job' must be letters, digits, '_', '.', '-' (at most 63)"),
    ("unknown-backend", {"backend": "yarn"}, [],
     E + "backend: unknown backend 'yarn' (allowed: local, ssh, slurm, kubernetes, docker)"),
    ("env-tf-config", {"env": {"TF_CONFIG": "{}"}}, [],
     E + "env.TF_CONFIG: is set by tfcluster for every task; do not set it"),
    ("env-not-string", {"env": {"BATCH": 64}}, [],
     E + "env.BATCH: must be a string, got an integer"),
    ("env-bad-name", {"env": {"1BAD": "x"}}, [],
     E + "env.1BAD: is not a valid environment variable name"),
    ("negative-timeout", {"timeouts": {"kill": -1}}, [],
     E + "timeouts.kill: must be at least 0.0, got -1"),
    ("zero-poll", {"timeouts": {"poll": 0}}, [], E + "timeouts.poll: must be greater than 0"),
    ("negative-preempt", {"timeouts": {"preempt": -5}}, [],
     E + "timeouts.preempt: must be at least 0.0, got -5"),
    ("nan-timeout", Raw('{"cluster": {"worker": 1}, "model_dir": "m", "timeouts": '
                        '{"stall": NaN}}'), [],
     E + "timeouts.stall: must be at least 0.0, got nan"),
    ("restart-policy-unknown", {"restart": {"worker": "sometimes"}}, [],
     E + "restart.worker.policy: must be one of never, on-failure, always, got 'sometimes'"),
    ("restart-negative-budget", {"restart": {"ps": {"max_restarts": -1}}}, [],
     E + "restart.ps.max_restarts: must be at least 0, got -1"),
    ("restart-negative-backoff", {"restart": {"chief": {"backoff": -2}}}, [],
     E + "restart.chief.backoff: must be at least 0.0, got -2"),
    ("unknown-strategy", {"strategy": "horovod"}, [],
     E + "strategy: unknown strategy 'horovod' (allowed: estimator, parameter_server, "
         "multi_worker_mirrored)"),
    ("pss-without-worker", {"cluster": {"chief": 1, "ps": 1}, "strategy": "parameter_server"},
     [], E + "strategy: parameter_server needs at least one ps and one worker"),
    ("keras-unknown", {"keras": "keras3"}, [],
     E + "keras: unknown Keras 'keras3' (allowed: tf-keras, jax)"),
    ("keras-jax-with-ps", {"keras": "jax"}, [],
     E + "keras: jax runs chief and workers as one collective of JAX processes: it has no "
         "parameter servers (remove cluster.ps)"),
    ("keras-jax-with-evaluator", {"keras": "jax", "cluster": {"worker": 2},
                                  "evaluator": "localhost"}, [],
     E + "keras: jax runs chief and workers as one collective of JAX processes: an evaluator "
         "cannot join it (remove evaluator; evaluate in the script, or in a job of its own)"),
    ("keras-jax-pss", {"keras": "jax", "cluster": {"worker": 2},
                       "strategy": "parameter_server"}, [],
     E + "keras: jax training is collective: every process takes each step (strategy "
         "multi_worker_mirrored, the default; remove strategy)"),
    ("keras-tf-keras-estimator", {"keras": "tf-keras", "strategy": "estimator"}, [],
     E + "keras: tf-keras is for TensorFlow 2 strategies (multi_worker_mirrored, "
         "parameter_server); an Estimator job runs on TensorFlow <= 2.15, whose tf.keras is "
         "Keras 2 already"),
    ("check-storage-string", {"check_storage": "yes"}, [],
     E + "check_storage: must be true or false, got a string"),
    ("tf-config-model-dir-string", {"tf_config_model_dir": "no"}, [],
     E + "tf_config_model_dir: must be true or false, got a string"),
    ("resources-memory", {"resources": {"worker": {"memory": "lots"}}}, [],
     E + "resources.worker.memory: must look like '4G', '512M' or '2Gi', got 'lots'"),
    # --- command line
    ("json-without-dry-run", {}, ["--json"], "launch: error: --json goes with --dry-run"),
    ("nothing-after-dashes", {}, ["--"],
     "launch: error: nothing after --: give the command to run, or leave out --"),
    ("unknown-option", {}, ["--dryrun"], "launch: error: unrecognized arguments: --dryrun"),
    # --- preflight: before anything starts
    ("explicit-port-taken", {"cluster": {"chief": 1, "ps": ["localhost:{port}"]}}, [],
     "launch: error: ps:0: port {port} is already in use on this machine (pick another port "
     "in the spec, or leave the port out to get a free one)"),
    ("remote-host-on-local-backend", {"cluster": {"chief": ["gpu-node-7.invalid:2222"]}}, [],
     "launch: error: cluster.chief[0]: host 'gpu-node-7.invalid' is not this machine, and "
     'backend "local" runs every task here (use --local to map every host to localhost, or '
     'backend "ssh")'),
    ("host-does-not-resolve", {"backend": "ssh", "cluster": {"chief": ["nosuch-host.invalid"]}},
     [], "launch: error: ssh preflight failed on 1 of 1 hosts; nothing was started:\n"
         "  nosuch-host.invalid (chief:0): cannot connect: ssh: Could not resolve hostname "
         "nosuch-host.invalid: {resolver}"),
    ("model-dir-under-a-file", {"model_dir": "{tmp}/a-file/model"}, [],
     "launch: error: model_dir {tmp}/a-file/model: the launcher cannot write it "
     "(NotADirectoryError: [Errno 20] Not a directory: '{tmp}/a-file/model')"),
    # --- the environment: programs, directories, drivers (any backend that can see them)
    ("program-not-on-path", {"command": ["trian.py", "--steps", "3"]}, [],
     "launch: error: ps:0, chief:0, worker:0: program trian.py not found on PATH ({path})"),
    ("python-not-on-path", {"command": ["python3.99", "train.py"]}, [],
     "launch: error: ps:0, chief:0, worker:0: program python3.99 not found on PATH ({path})"),
    ("program-path-missing", {"command": ["{tmp}/bin/nosuch.sh"]}, [],
     "launch: error: ps:0, chief:0, worker:0: program {tmp}/bin/nosuch.sh not found"),
    ("program-relative-to-workdir", {"command": ["./train.sh"], "workdir": "{tmp}"}, [],
     "launch: error: ps:0, chief:0, worker:0: program ./train.sh not found (relative to "
     "{tmp})"),
    ("program-not-executable", {"command": ["{tmp}/a-file"]}, [],
     "launch: error: ps:0, chief:0, worker:0: program {tmp}/a-file is not executable (chmod "
     "+x it, or start it with its interpreter)"),
    ("program-on-path-not-executable", {"command": ["a-file"], "env": {"PATH": "{tmp}"}}, [],
     "launch: error: ps:0, chief:0, worker:0: program a-file ({tmp}/a-file) is not "
     "executable (chmod +x it, or start it with its interpreter)"),
    ("program-is-a-directory", {"command": ["{tmp}/bin"]}, [],
     "launch: error: ps:0, chief:0, worker:0: program {tmp}/bin is a directory"),
    ("program-after-dashes-missing", {}, ["--", "no-such-trainer", "--flag"],
     "launch: error: ps:0, chief:0, worker:0: program no-such-trainer not found on PATH "
     "({path})"),
    ("role-program-missing", {"roles": {"ps": {"command": ["no-such-ps-server"]}}}, [],
     "launch: error: ps:0: program no-such-ps-server not found on PATH ({path})"),
    # found and executable, but the kernel would refuse to start it
    ("program-without-shebang", {"command": ["{tmp}/bin/no-shebang", "--steps", "3"]}, [],
     "launch: error: ps:0, chief:0, worker:0: program {tmp}/bin/no-shebang: no #! line and "
     "not a binary: the kernel refuses to start it (add a #! line, or start it with its "
     "interpreter)"),
    ("workdir-missing", {"workdir": "{tmp}/no-such-dir"}, [],
     "launch: error: ps:0, chief:0, worker:0: working directory {tmp}/no-such-dir does not "
     "exist"),
    ("role-workdir-missing", {"roles": {"worker": {"workdir": "{tmp}/gone"}}}, [],
     "launch: error: worker:0: working directory {tmp}/gone does not exist"),
    ("role-unknown", {"roles": {"workers": {"command": ["x"]}}}, [],
     E + "roles.workers: unknown key (allowed: chief, evaluator, master, ps, worker)"),
    ("role-without-tasks", {"roles": {"evaluator": {"command": ["x"]}}}, [],
     E + "roles.evaluator: the spec has no evaluator task (add it to evaluator or leave it "
         "out of roles)"),
    ("role-key-typo", {"roles": {"ps": {"cmd": ["x"]}}}, [],
     E + "roles.ps.cmd: unknown key (allowed: command, env, minimum, workdir)"),
    # --- elastic workers: roles.worker.minimum (the base spec: chief, 1 worker, 1 ps)
    ("minimum-negative", {"roles": {"worker": {"minimum": -1}}}, [],
     E + "roles.worker.minimum: must be at least 0, got -1"),
    ("minimum-above-count", {"roles": {"worker": {"minimum": 2}}}, [],
     E + "roles.worker.minimum: 2 is more than the 1 worker task of cluster.worker"),
    ("minimum-synchronous", {"cluster": {"chief": 1, "worker": 2},
                             "strategy": "multi_worker_mirrored",
                             "roles": {"worker": {"minimum": 1}}}, [],
     E + "roles.worker.minimum: multi_worker_mirrored is synchronous: every worker takes part "
         "in every step, so the job cannot go on with fewer (a minimum needs parameter_server, "
         "or estimator with a ps)"),
    ("minimum-pss-zero", {"strategy": "parameter_server", "roles": {"worker": {"minimum": 0}}},
     [], E + "roles.worker.minimum: must be at least 1, got 0"),
    ("minimum-not-a-worker", {"roles": {"chief": {"minimum": 1}}}, [],
     E + "roles.chief.minimum: only workers may be fewer: give it in roles.worker (the chief "
         "saves the checkpoints, a ps holds variables)"),
    ("role-env-reserved", {"roles": {"ps": {"env": {"TFCLUSTER_TASK_INDEX": "0"}}}}, [],
     E + "roles.ps.env.TFCLUSTER_TASK_INDEX: is set by tfcluster for every task; do not set "
         "it"),
    ("fsspec-unknown-protocol", {"model_dir": "nosuchfs://bucket/model"}, [],
     "launch: error: model_dir nosuchfs://bucket/model: unknown protocol nosuchfs:// (fsspec "
     "has no driver of that name)"),
    ("fsspec-driver-missing-gcs", {"model_dir": "gs://bucket/model"}, [],
     "launch: error: model_dir gs://bucket/model: the fsspec driver for gs:// is not "
     "installed for the launcher: pip install gcsfs"),
    ("fsspec-driver-missing-hdfs", {"model_dir": "hdfs://namenode:8020/model"}, [],
     "launch: error: model_dir hdfs://namenode:8020/model: the fsspec driver for hdfs:// is "
     "not installed for the launcher: pip install pyarrow (and Hadoop's Java libraries)"),
    ("fsspec-chained-driver-missing", {"model_dir": "simplecache::gs://bucket/model"}, [],
     "launch: error: model_dir simplecache::gs://bucket/model: the fsspec driver for gs:// is "
     "not installed for the launcher: pip install gcsfs"),
    ("run-dir-under-a-file", {"run_dir": "{tmp}/a-file/runs"}, [],
     "launch: error: run_dir {tmp}/a-file/runs: cannot create it ({tmp}/a-file is not a "
     "directory)"),
    ("run-dir-option-is-a-file", {}, ["--run-dir", "{tmp}/a-file"],
     "launch: error: run_dir {tmp}/a-file: cannot create it (a file of that name exists)"),
    ("run-dir-in-proc", {}, ["--run-dir", "/proc/tfcluster-runs"],
     "launch: error: run_dir /proc/tfcluster-runs: cannot create it in /proc (No such file "
     "or directory)"),
    ("deeply-nested-json", Raw('{"cluster": ' + "[" * 100000), [],
     E + "invalid JSON: lists or objects nested too deeply"),
]

# Commands that follow runs: (id, argv, expected). The run root is {tmp}/runs, holding
# ``ok-run`` (a run of this version), ``old-run`` (a run directory written by another
# version of tfcluster) and ``cut-run`` (its state.json cut short); nothing is written or
# stopped.
OLD = ("launch: error: {tmp}/runs/old-run was written by another version of tfcluster "
       "(state version 0, this launch reads version 1)")
UNKNOWN = ("launch: error: no run 'nosuch' under {tmp}/runs (`launch list` shows the runs; "
           "give --root for another run root)")
RUN_CASES: list[tuple[str, list[str], str]] = [
    ("status-unknown-run", ["status", "nosuch"], UNKNOWN),
    ("logs-unknown-run", ["logs", "nosuch", "-f"], UNKNOWN),
    ("cancel-unknown-run", ["cancel", "nosuch"], UNKNOWN),
    ("status-other-version", ["status", "old-run"], OLD),
    ("logs-other-version", ["logs", "{tmp}/runs/old-run"], OLD),
    ("cancel-other-version", ["cancel", "old-run"], OLD),
    ("logs-unknown-task", ["logs", "ok-run", "chief:7"],
     "launch: error: run ok-run has no task 'chief:7' (tasks: chief:0, launcher)"),
    ("status-ambiguous-prefix", ["status", "o"],
     "launch: error: run id 'o' is ambiguous under {tmp}/runs: ok-run, old-run"),
    ("status-not-a-run-dir", ["status", "{tmp}/runs/ok-run/logs"],
     "launch: error: {tmp}/runs/ok-run/logs is not a run directory (no state.json)"),
    ("status-damaged-state", ["status", "cut-run"],
     "launch: error: {tmp}/runs/cut-run/state.json is damaged: not JSON, or cut short "
     "(Unterminated string starting at: line 1 column 37 (char 36))"),
    ("logs-damaged-state", ["logs", "cut-run", "-f"],
     "launch: error: {tmp}/runs/cut-run/state.json is damaged: not JSON, or cut short "
     "(Unterminated string starting at: line 1 column 37 (char 36))"),
    ("status-other-root", ["status", "ok-run", "--root", "{tmp}/elsewhere"],
     "launch: error: no run 'ok-run' under {tmp}/elsewhere (`launch list` shows the runs; "
     "give --root for another run root)"),
]

# model_dir's lease (launcher/records/lease.py): (id, the lease file in {tmp}/model, argv,
# expected).
# A held lease is this test process's, on this host, with a fresh heartbeat ({pid}, {host});
# the model_dir is left as it was.
LEASE_HELD = ("launch: error: model_dir {tmp}/model is in use by run holder-run (host {host}, "
              "launcher pid {pid}, heartbeat 0s ago): follow it with `launch status "
              "holder-run`; wait for it to end (or --force if it is gone)")
LEASE_CORRUPT = ("launch: error: model_dir lease {tmp}/model/.tfcluster-lease.json cannot be "
                 "read ({why}): make sure no run uses this model_dir, then remove the file or "
                 "launch again with --force")
LEASE_CASES: list[tuple[str, str, list[str], str]] = [
    ("lease-held", "held", [], LEASE_HELD),
    ("lease-held-detach", "held", ["--detach"], LEASE_HELD),
    ("lease-held-dry-run-json", "held", ["--json"], "launch: error: --json goes with --dry-run"),
    ("lease-cut-short", '{"run_id": "holder-run", "host": "', [],
     LEASE_CORRUPT.replace("{why}", "not JSON: Unterminated string starting at: line 1 column "
                                    "34 (char 33)")),
    ("lease-foreign", '["not", "a", "lease"]', [],
     LEASE_CORRUPT.replace("{why}", "not a JSON object but list")),
    ("lease-missing-fields", '{"run_id": "holder-run"}', ["--detach"],
     LEASE_CORRUPT.replace("{why}", "no host, pid, started, heartbeat")),
]
