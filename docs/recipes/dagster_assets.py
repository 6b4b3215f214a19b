"""Dagster definitions that hand days of `orders` to idem, two ways.

orders (asset, partitioned by day)
    Materializing a partition runs `idem publish --wait` in a subprocess: the
    step publishes the event and follows it to its outcome. Exit 0 is a
    materialization with the rows as metadata; any other exit raises Failure
    with idem's JSON line attached.
idem_orders_results (sensor)
    For loads that something else starts (cron, Airflow, a `then:` upstream):
    the sensor reads idem's results stream (IDEM_RESULTS, subject
    idem.result.orders) with an ordered, ephemeral consumer and reports an
    AssetMaterialization of the external asset idem/orders, with its
    partition and rows, for each loaded result. Use one or the other for a
    dataset, not both.

What the exit codes, the JSON line and the run_id mean: docs/SCHEDULERS.md.

Needs dagster (1.9 or later) and, for the sensor, nats-py. The idem config
comes from IDEM_CONFIG (or --config); the NATS URL and credentials from the
environment (IDEM_NATS_URL, IDEM_NATS_USER, IDEM_NATS_PASSWORD or
IDEM_NATS_CREDS), for idem and the sensor alike.

The command a test runs is marked `# recipe-shell: NAME`, a raw
triple-quoted string: e2e/recipes_test.go fills {dataset},
{partition} and {run_id} and runs it against a real `idem serve`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
from typing import Any

import nats
import nats.errors
from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetSpec,
    DailyPartitionsDefinition,
    Definitions,
    Failure,
    MaterializeResult,
    MetadataValue,
    RetryPolicy,
    SensorEvaluationContext,
    SensorResult,
    asset,
    sensor,
)
from nats.js.api import ConsumerConfig, DeliverPolicy

DATASET = "orders"
RESULTS_STREAM = "IDEM_RESULTS"
RESULTS_PREFIX = "idem.result"

daily = DailyPartitionsDefinition(start_date="2026-11-01", timezone="UTC")

# --------------------------------------------------------------------------
# 1. An asset that publishes and waits.
#
# The run_id is the Dagster run's, or its root run's when this run
# re-executes an earlier one (retry from failure, a run retry): every
# attempt at the same materialization sends the same run_id, so idem loads
# the day once. Step retries (RetryPolicy) stay in the same run. A new
# materialization of the partition is a new run_id and loads again.
#
# Exit 1 (dead-lettered, or rejected by a check) and 2 (usage or config)
# are failures no retry mends; 3 (still loading at --timeout, nothing
# cancelled) and 4 (NATS unreachable) are retried: the next attempt waits
# again, without a second load.
# --------------------------------------------------------------------------

# recipe-shell: publish_wait
PUBLISH_WAIT = r"""idem publish {dataset} {partition} --run-id {run_id} --wait --timeout 30m"""

# Beyond --timeout: idem answers first; this only bounds a hung process.
SUBPROCESS_TIMEOUT_S = 35 * 60
RETRYABLE_EXITS = (3, 4)


def idem_run_id(context: AssetExecutionContext) -> str:
    """The same for every attempt at one materialization."""
    return f"dagster__{context.run.root_run_id or context.run_id}"


def last_json_line(stdout: str) -> dict[str, Any]:
    """idem's last stdout line; {} when there is none (a crash before it)."""
    lines = stdout.strip().splitlines()
    if not lines:
        return {}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"unparsed": lines[-1]}


@asset(
    name=DATASET,
    partitions_def=daily,
    retry_policy=RetryPolicy(max_retries=3, delay=60),
    description="orders, loaded into PostgreSQL by idem (delete_insert on event_date).",
)
def orders(context: AssetExecutionContext) -> MaterializeResult:
    cmd = PUBLISH_WAIT.format(dataset=DATASET, partition=context.partition_key, run_id=idem_run_id(context))
    context.log.info(f"running {cmd}")
    try:
        # stderr (idem's progress) goes to the step's compute log as it comes.
        proc = subprocess.run(shlex.split(cmd), stdout=subprocess.PIPE, text=True,
                              timeout=SUBPROCESS_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as e:
        raise Failure(description=f"idem publish did not exit within {SUBPROCESS_TIMEOUT_S}s",
                      allow_retries=True) from e
    result = last_json_line(proc.stdout)
    if proc.returncode == 0:
        rows = result.get("rows") or {}
        return MaterializeResult(metadata={
            "status": result.get("status", ""),  # loaded, or skipped: this run had loaded it already
            "run_id": result.get("run_id", ""),
            "rows_inserted": rows.get("inserted", 0),
            "rows_updated": rows.get("updated", 0),
            "rows_deleted": rows.get("deleted", 0),  # -1: not counted (a TRUNCATE)
            "attempts": result.get("attempts", 0),
            "stream_seq": result.get("stream_seq", 0),
            "seconds": result.get("seconds", 0.0),
        })
    raise Failure(
        description=(f"idem publish {DATASET} {context.partition_key} exited {proc.returncode}: "
                     f"{result.get('status', 'no result')} {result.get('error', '')}").strip(),
        metadata={"exit_code": proc.returncode, "idem_result": MetadataValue.json(result)},
        allow_retries=proc.returncode in RETRYABLE_EXITS,
    )


# --------------------------------------------------------------------------
# 2. A sensor that reports idem's loads as materializations.
#
# The cursor is the results stream's last sequence read: each evaluation
# reads what came after it (the first one, everything the stream still
# holds: seven days by default). One result per terminal outcome; only
# "loaded" is a materialization (a skip changed nothing; dead letters and
# rejections are logged).
# --------------------------------------------------------------------------

IDEM_ORDERS = AssetSpec(
    key=AssetKey(["idem", DATASET]),
    partitions_def=daily,
    description="orders as idem loads it, whoever publishes the event.",
)

# Bounds one evaluation; the next one goes on from the cursor.
MAX_RESULTS_PER_TICK = 500


def materializations(results: list[dict[str, Any]], asset_key: AssetKey = IDEM_ORDERS.key) -> list[AssetMaterialization]:
    """One materialization per loaded result of DATASET, in stream order."""
    out = []
    for r in results:
        if r.get("dataset") != DATASET or r.get("status") != "loaded":
            continue
        rows = r.get("rows") or {}
        out.append(AssetMaterialization(
            asset_key=asset_key,
            partition=r["partition"],
            description=f"loaded by idem, run {r['run_id']}, attempt {r.get('attempts', 0)}",
            metadata={
                "run_id": r["run_id"],
                "rows_inserted": rows.get("inserted", 0),
                "rows_updated": rows.get("updated", 0),
                "rows_deleted": rows.get("deleted", 0),
                "attempts": r.get("attempts", 0),
                "stream_seq": r.get("stream_seq", 0),
                "audit_id": r.get("audit_id", 0),
                "finished_at": r.get("finished_at", ""),
            },
        ))
    return out


async def read_results(after_seq: int, limit: int = MAX_RESULTS_PER_TICK) -> tuple[list[dict[str, Any]], int]:
    """The results of DATASET stored after after_seq, and the last sequence read."""
    opts: dict[str, Any] = {"servers": [os.environ.get("IDEM_NATS_URL", "nats://127.0.0.1:4222")]}
    if creds := os.environ.get("IDEM_NATS_CREDS"):
        opts["user_credentials"] = creds
    elif user := os.environ.get("IDEM_NATS_USER"):
        opts["user"], opts["password"] = user, os.environ.get("IDEM_NATS_PASSWORD", "")
    nc = await nats.connect(**opts)
    try:
        js = nc.jetstream()
        if after_seq:
            cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after_seq + 1)
        else:
            cfg = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
        sub = await js.subscribe(f"{RESULTS_PREFIX}.{DATASET}", stream=RESULTS_STREAM,
                                 ordered_consumer=True, config=cfg)
        out, last = [], after_seq
        try:
            while len(out) < limit:
                try:
                    msg = await sub.next_msg(timeout=2)
                except nats.errors.TimeoutError:
                    break  # nothing more now
                last = msg.metadata.sequence.stream
                out.append(json.loads(msg.data))
                if msg.metadata.num_pending == 0:
                    break  # caught up
        finally:
            await sub.unsubscribe()
        return out, last
    finally:
        await nc.close()


@sensor(name="idem_orders_results", minimum_interval_seconds=60)
def idem_orders_results(context: SensorEvaluationContext) -> SensorResult:
    after = int(context.cursor) if context.cursor else 0
    results, last = asyncio.run(read_results(after))
    for r in results:
        if r.get("status") in ("dead_lettered", "rejected"):
            context.log.warning(f"idem {r.get('dataset')} {r.get('partition')} run {r.get('run_id')}: "
                                f"{r['status']} ({r.get('error_kind')}): {r.get('error')}")
    return SensorResult(asset_events=materializations(results), cursor=str(last))


defs = Definitions(assets=[orders, IDEM_ORDERS], sensors=[idem_orders_results])
