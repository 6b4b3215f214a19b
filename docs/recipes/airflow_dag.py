"""Airflow DAGs that hand a day of `orders` to idem, three ways.

idem_orders_bash
    A BashOperator runs `idem publish --wait`: one task publishes the event
    and follows it to its outcome. The task holds a worker slot while it waits.
idem_orders_pod
    The same command in a pod (KubernetesPodOperator), its JSON handed to
    Airflow through /airflow/xcom/return.json.
idem_orders_deferred
    Publish without waiting, then a deferrable operator polls idem's HTTP API
    from the triggerer until the partition is loaded: no worker slot is held.

What the exit codes, the JSON line and the run_id mean: docs/SCHEDULERS.md.

Works with Airflow 2.x and 3 (the imports fall back to the 2.x paths). The
pod DAG needs apache-airflow-providers-cncf-kubernetes and is left out when
it is missing. The idem config comes from IDEM_CONFIG (or --config) on the
worker; IDEM_NATS_URL and the NATS credentials from the environment.

Each command a test runs is a module constant marked `# recipe-shell: NAME`,
a raw triple-quoted string: e2e/recipes_test.go renders {{ ds }}
and {{ run_id }} and runs it against a real `idem serve`. Keep the markers
when you copy a command out.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum

try:  # Airflow 3: the Task SDK
    from airflow.sdk import DAG, BaseOperator, task
except ImportError:  # Airflow 2.x
    from airflow import DAG
    from airflow.decorators import task
    from airflow.models import BaseOperator

try:  # Airflow 3: BashOperator lives in the standard provider
    from airflow.providers.standard.operators.bash import BashOperator
except ImportError:  # Airflow 2.x
    from airflow.operators.bash import BashOperator

try:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:
    from airflow.exceptions import AirflowException, AirflowFailException

from airflow.triggers.base import BaseTrigger, TriggerEvent

try:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from kubernetes.client import models as k8s
except ImportError:  # no cncf.kubernetes provider: no pod DAG
    KubernetesPodOperator = None

DATASET = "orders"

# --------------------------------------------------------------------------
# 1. BashOperator: publish and wait in one task.
#
# The run_id is Airflow's: a retry of this task, or a clear of it, sends the
# same run_id, so idem never loads the day twice (a retry inside JetStream's
# duplicate window follows the first event; a later one is skipped by the
# ledger: status "skipped", exit 0). To load a day again on purpose, trigger
# a new DAG run or use `idem publish --force`.
#
# --timeout stays under execution_timeout so that idem, not Airflow, ends a
# slow wait (exit 3: nothing is cancelled, the retry waits again).
#
# Exit codes: 0 loaded (or already loaded), 1 failed for good, 2 usage or
# config, 3 still loading at --timeout, 4 NATS unreachable. idem never exits
# 99, which BashOperator's default skip_on_exit_code would turn into
# "skipped": do not wrap the command in a script that does. Airflow retries
# every non-zero exit, 1 included: such a retry finds the same dead letter
# (inside the duplicate window) or fails a new event the same way, so keep
# the retries few; the deferrable DAG below fails those without retrying.
#
# The last stdout line (one JSON object) is the task's XCom; progress goes to
# stderr, into the task log.
# --------------------------------------------------------------------------

# recipe-shell: publish_wait
PUBLISH_WAIT = r"""idem publish orders {{ ds }} --run-id '{{ run_id }}' --wait --timeout 30m"""

default_args = {
    "retries": 3,
    "retry_delay": timedelta(minutes=5),
    "execution_timeout": timedelta(minutes=40),
}

with DAG(
    dag_id="idem_orders_bash",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    default_args=default_args,
    tags=["idem"],
):
    publish = BashOperator(
        task_id="publish_orders",
        bash_command=PUBLISH_WAIT,
        env={"IDEM_CONFIG": "/etc/idem/idem.yaml"},
        append_env=True,  # keep PATH and the NATS credentials of the worker
    )

    @task
    def rows_written(result: str) -> int:
        """Reads the JSON line idem printed last (the BashOperator's XCom)."""
        r = json.loads(result)
        rows = r.get("rows") or {}
        print(f"{r['dataset']} {r['partition']}: {r['status']}, run {r['run_id']}, attempt {r['attempts']}")
        return rows.get("inserted", 0) + rows.get("updated", 0)

    rows_written(publish.output)

# --------------------------------------------------------------------------
# 2. KubernetesPodOperator: the same command in a pod.
#
# In a pod the XCom is not stdout: with do_xcom_push=True a sidecar reads
# /airflow/xcom/return.json once the main container ends, and a missing or
# empty file fails the task. The wrapper writes idem's last stdout line there
# whatever the exit code, prints everything to the pod's log, and exits with
# idem's code. IDEM_XCOM_DIR moves the file (a test sets it); leave it unset
# in a pod.
#
# The image needs /bin/sh: deploy/Dockerfile's image is distroless (no
# shell), so build one that adds a shell around the same static binary, e.g.
#   FROM busybox:stable
#   COPY --from=idem:dev /usr/local/bin/idem /usr/local/bin/idem
# The config comes from the ConfigMap `idem` (deploy/kubernetes/configmap.yaml),
# mounted at /etc/idem.
# --------------------------------------------------------------------------

# recipe-shell: pod_wrapper
POD_WRAPPER = r"""xcom="${IDEM_XCOM_DIR:-/airflow/xcom}"
out="$(mktemp)"
idem publish orders {{ ds }} --run-id '{{ run_id }}' --wait --timeout 30m >"$out"
rc=$?
cat "$out"
mkdir -p "$xcom"
tail -n 1 "$out" >"$xcom/return.json"
rm -f "$out"
exit "$rc"
"""

if KubernetesPodOperator is not None:
    with DAG(
        dag_id="idem_orders_pod",
        schedule="@daily",
        start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
        catchup=False,
        default_args=default_args,
        tags=["idem"],
    ):
        KubernetesPodOperator(
            task_id="publish_orders",
            name="idem-publish-orders",
            namespace="data",
            image="registry.example/idem-shell:1",
            cmds=["/bin/sh", "-c"],
            arguments=[POD_WRAPPER],  # templated: {{ ds }} and {{ run_id }} are rendered
            env_vars=[
                k8s.V1EnvVar(name="IDEM_CONFIG", value="/etc/idem/idem.yaml"),
                k8s.V1EnvVar(name="IDEM_NATS_URL", value="nats://nats.data:4222"),
            ],
            # NATS user and password (or creds) from a Secret: see docs/SECURITY.md.
            env_from=[k8s.V1EnvFromSource(secret_ref=k8s.V1SecretEnvSource(name="idem-publisher"))],
            volumes=[k8s.V1Volume(name="idem-config", config_map=k8s.V1ConfigMapVolumeSource(name="idem"))],
            volume_mounts=[k8s.V1VolumeMount(name="idem-config", mount_path="/etc/idem", read_only=True)],
            do_xcom_push=True,
            get_logs=True,
            on_finish_action="delete_pod",
        )

# --------------------------------------------------------------------------
# 3. Deferrable: publish, then wait in the triggerer.
#
# The first task publishes without --wait: exit 0 once JetStream has the
# event, whose stream sequence its one stdout line (the XCom) names. Not
# --json here: that prints an indented object, and the XCom would be its
# last line, "}".
# The second defers to IdemPartitionTrigger, which asks idem's API
#   GET /api/v1/partitions/<dataset>/<partition>
# until this run_id has loaded the partition (success), or the partition's
# latest attempt, by this run_id, was dead-lettered or rejected by its
# checks: then the task fails without retries (fix the data or the config,
# then `idem dlq replay`). "failed" (a retry is coming), "running", "missing",
# "late", "waiting" and "none" keep it waiting. A success by another run_id
# does not count: that is an older load, not this run's.
#
# With http.token_for_reads the API wants the operator token: the trigger
# sends the triggerer's IDEM_API_TOKEN (never part of the serialized trigger,
# which Airflow stores in its database).
#
# The triggerer imports the trigger by its classpath: this file's module name
# as seen from the DAG folder (on sys.path). Move both classes to a module of
# your own (plugins/, a package) if the file lives in a subfolder.
# --------------------------------------------------------------------------

# recipe-shell: publish_only
PUBLISH_ONLY = r"""idem publish orders {{ ds }} --run-id '{{ run_id }}'"""

# The trigger's request from a shell, to see what a deferred task is waiting
# for (IDEM_API_URL: idem serve's http.addr, e.g. http://idem.data:9464).
# recipe-shell: status_check
STATUS_CHECK = r"""curl -fsS ${IDEM_API_TOKEN:+-H "Authorization: Bearer $IDEM_API_TOKEN"} "$IDEM_API_URL/api/v1/partitions/orders/{{ ds }}" | jq -r '.status + " " + (.run_id // "-")'"""

TRIGGER_MODULE = Path(__file__).stem

# Statuses that end the wait in failure when the latest attempt is this run's.
FAILED_FOR_GOOD = ("dead_lettered", "rejected")


def partition_outcome(p: dict[str, Any], run_id: str) -> dict[str, Any] | None:
    """The event that ends the wait for run_id, from one API answer; None to poll again."""
    ours = [a for a in (p.get("attempts") or {}).get("list") or [] if a.get("run_id") == run_id]
    base = {"dataset": p.get("dataset"), "partition": p.get("partition"), "run_id": run_id}
    if any(a.get("status") == "success" for a in ours):
        latest = p.get("run_id") == run_id
        return {**base, "status": "success", "rows": p.get("rows") if latest else None,
                "finished_at": p.get("finished_at") if latest else None}
    if p.get("run_id") == run_id and p.get("status") in FAILED_FOR_GOOD:
        return {**base, "status": p["status"], "error": p.get("error"), "error_kind": p.get("error_kind"),
                "checks": [c.get("name") for c in p.get("checks") or [] if c.get("status") != "pass"]}
    return None


class IdemPartitionTrigger(BaseTrigger):
    """Polls idem's API until run_id's load of one partition has an outcome."""

    def __init__(self, api_url: str, dataset: str, partition: str, run_id: str,
                 poll_interval: float = 30.0, token_env: str = "IDEM_API_TOKEN"):
        super().__init__()
        self.api_url = api_url.rstrip("/")
        self.dataset = dataset
        self.partition = partition
        self.run_id = run_id
        self.poll_interval = poll_interval
        self.token_env = token_env

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{TRIGGER_MODULE}.IdemPartitionTrigger", {
            "api_url": self.api_url, "dataset": self.dataset, "partition": self.partition,
            "run_id": self.run_id, "poll_interval": self.poll_interval, "token_env": self.token_env,
        })

    def _url(self) -> str:
        return (f"{self.api_url}/api/v1/partitions/{urllib.parse.quote(self.dataset, safe='')}"
                f"/{urllib.parse.quote(self.partition, safe='')}")

    def _get(self) -> dict[str, Any]:
        req = urllib.request.Request(self._url(), headers={"Accept": "application/json"})
        if token := os.environ.get(self.token_env):
            req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.load(resp)

    async def run(self):
        while True:
            try:
                # urllib blocks: run it off the triggerer's event loop.
                p = await asyncio.to_thread(self._get)
            except urllib.error.HTTPError as e:
                if e.code < 500:  # 400 bad partition, 401 token, 404 unknown dataset
                    yield TriggerEvent({"status": "error", "run_id": self.run_id,
                                        "error": f"GET {self._url()}: {e.code} {e.read().decode(errors='replace')}"})
                    return
                self.log.warning("idem API answered %s; asking again", e.code)
            except (urllib.error.URLError, OSError, ValueError) as e:
                self.log.warning("idem API unreachable (%s); asking again", e)
            else:
                if (outcome := partition_outcome(p, self.run_id)) is not None:
                    yield TriggerEvent(outcome)
                    return
                self.log.info("%s %s is %s; waiting for run %s", self.dataset, self.partition,
                              p.get("status"), self.run_id)
            await asyncio.sleep(self.poll_interval)


class IdemPartitionSensor(BaseOperator):
    """Waits, deferred, until this run has loaded the partition; its XCom is the outcome."""

    template_fields = ("api_url", "partition", "run_id")

    def __init__(self, *, dataset: str, partition: str, run_id: str, api_url: str,
                 poll_interval: float = 30.0, wait_timeout: timedelta = timedelta(hours=2), **kwargs):
        super().__init__(**kwargs)
        self.dataset = dataset
        self.partition = partition
        self.run_id = run_id
        self.api_url = api_url
        self.poll_interval = poll_interval
        self.wait_timeout = wait_timeout

    def execute(self, context):
        self.defer(
            trigger=IdemPartitionTrigger(self.api_url, self.dataset, self.partition, self.run_id, self.poll_interval),
            method_name="execute_complete",
            timeout=self.wait_timeout,
        )

    def execute_complete(self, context, event: dict[str, Any]):
        status = event.get("status")
        if status == "success":
            return event
        what = f"{event.get('dataset') or self.dataset} {event.get('partition') or self.partition} run {event.get('run_id')}"
        if status in FAILED_FOR_GOOD:
            # A retry would find the same dead letter: fail for good.
            raise AirflowFailException(f"{what}: {status} ({event.get('error_kind')}): {event.get('error')}")
        raise AirflowException(f"{what}: {event.get('error')}")


with DAG(
    dag_id="idem_orders_deferred",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 3, "retry_delay": timedelta(minutes=5)},
    tags=["idem"],
):
    published = BashOperator(
        task_id="publish_orders",
        bash_command=PUBLISH_ONLY,
        env={"IDEM_CONFIG": "/etc/idem/idem.yaml"},
        append_env=True,
    )
    loaded = IdemPartitionSensor(
        task_id="wait_for_orders",
        dataset=DATASET,
        partition="{{ ds }}",
        run_id="{{ run_id }}",
        api_url="{{ var.value.idem_api_url }}",
    )
    published >> loaded
