"""The rows fed to Debezium and to pgoutbox (see generate.py)."""

SCHEMA_SQL = """
CREATE TABLE public.outbox (
    ord            int         NOT NULL,
    id             uuid        PRIMARY KEY,
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    tenant         text,
    payload        jsonb,
    created_at     timestamptz NOT NULL DEFAULT '2026-12-01 10:00:00+00'
);
CREATE TABLE public.outbox_text (LIKE public.outbox INCLUDING ALL);
ALTER TABLE public.outbox_text ALTER COLUMN payload TYPE text;
-- The layout of sql/outbox.sql (NOT NULL columns: Connect schemas say optional=false).
CREATE TABLE public.outbox_strict (LIKE public.outbox INCLUDING ALL);
ALTER TABLE public.outbox_strict ALTER COLUMN aggregate_type SET NOT NULL,
    ALTER COLUMN aggregate_id SET NOT NULL, ALTER COLUMN event_type SET NOT NULL,
    ALTER COLUMN tenant SET NOT NULL, ALTER COLUMN payload SET NOT NULL;
-- Other column types: a bigint key (a JSON number) and a uuid placed column.
CREATE TABLE public.outbox_typed (LIKE public.outbox INCLUDING ALL);
ALTER TABLE public.outbox_typed ALTER COLUMN aggregate_id TYPE bigint USING aggregate_id::bigint,
    ALTER COLUMN tenant TYPE uuid USING tenant::uuid;
"""

# Column types, as pgoutbox needs them to decide how to treat the payload.
TABLE_TYPES = {
    "public.outbox": {"payload": "jsonb"},
    "public.outbox_text": {"payload": "text"},
    "public.outbox_strict": {"payload": "jsonb", "not_null": ["aggregate_type",
                             "aggregate_id", "event_type", "tenant", "payload"]},
    "public.outbox_typed": {"payload": "jsonb", "aggregate_id": "int8", "tenant": "uuid"},
}
TABLES = ("outbox", "outbox_text", "outbox_strict", "outbox_typed")

# The 1.03 MB row: built in SQL (a command-line argument is limited to 128 KiB).
BIG_PREFIX = '{"blob": "'
BIG_SUFFIX = '"}'
BIG_TOTAL = 1_030_000
BIG_REPEAT = BIG_TOTAL - len(BIG_PREFIX) - len(BIG_SUFFIX)
BIG_SQL = f"('{BIG_PREFIX}' || repeat('x', {BIG_REPEAT}) || '{BIG_SUFFIX}')::jsonb"

COLUMNS = ("id", "aggregate_type", "aggregate_id", "event_type", "tenant", "payload")


def uid(n):
    return f"00000000-0000-4000-8000-{n:012d}"


# (table, label, id, aggregate_type, aggregate_id, event_type, tenant, payload SQL)
_ROWS = [
    ("outbox", "simple", 1, "order", "42", "OrderCreated", "acme", "'{\"a\": 1}'"),
    ("outbox", "nulls-and-empty", 2, "order", "43", "OrderUpdated", "acme",
     "'{\"id\": 7, \"tags\": [], \"note\": null, \"items\": [{\"sku\": \"X-1\", \"qty\": 2, "
     "\"gift\": null}], \"price\": 12.50, \"ok\": true, \"meta\": {}}'"),
    ("outbox", "unicode", 3, "customer", "c-9", "CustomerRenamed", "acme",
     "'{\"name\": \"Zo\u00eb \\\"q\\\" \\\\ /\", \"emoji\": \"\U0001F600\", "
     "\"ctl\": \"a\\tb\"}'"),
    ("outbox", "top-array", 4, "order", "44", "Batch", "acme", "'[1, 2, 3]'"),
    ("outbox", "top-string", 5, "order", "45", "Note", "acme", "'\"hello\"'"),
    ("outbox", "numbers", 6, "order", "46", "Priced", "acme",
     "'{\"big\": 12345678901234567890, \"neg\": -1, \"f\": 1e3, \"d\": 0.1, "
     "\"i\": 2147483648, \"z\": 0}'"),
    ("outbox", "nested-arrays", 7, "order", "47", "Shaped", "acme",
     "'{\"matrix\": [[1, 2], [3]], \"empty_obj\": {}, \"arr_null\": [null], "
     "\"strs\": [\"a\", \"b\"]}'"),
    ("outbox", "mixed-array", 8, "order", "48", "Mixed", "acme",
     "'{\"mixed\": [1, \"a\", true]}'"),
    ("outbox", "null-key", 20, "order", None, "NoKey", "acme", "'{\"k\": null}'"),
    ("outbox", "empty-key", 21, "order", "", "EmptyKey", "acme", "'{\"k\": \"\"}'"),
    ("outbox", "null-payload", 22, "order", "50", "Deleted", "acme", "NULL"),
    ("outbox", "json-null-payload", 23, "order", "51", "JsonNull", "acme", "'null'"),
    ("outbox", "big-payload", 24, "order", "52", "Big", "acme", BIG_SQL),
    ("outbox", "null-event-type", 25, "order", "53", None, "acme", "'{\"t\": 1}'"),
    ("outbox", "null-tenant", 26, "order", "54", "NoTenant", None, "'{\"t\": 2}'"),
    ("outbox", "exp-matrix", 9, "order", "60", "Probe", "acme", "'{\"m\": [[1, 2], [3]]}'"),
    ("outbox", "exp-arr-null", 10, "order", "61", "Probe", "acme", "'{\"n\": [null]}'"),
    ("outbox", "exp-arr-some-null", 11, "order", "62", "Probe", "acme",
     "'{\"n\": [1, null]}'"),
    ("outbox", "exp-int-long", 12, "order", "63", "Probe", "acme",
     "'{\"v\": [1, 3000000000]}'"),
    ("outbox", "exp-int-double", 13, "order", "64", "Probe", "acme", "'{\"v\": [1, 2.5]}'"),
    ("outbox", "exp-obj-diff", 14, "order", "65", "Probe", "acme",
     "'{\"o\": [{\"a\": 1}, {\"b\": 2}]}'"),
    ("outbox", "exp-long", 15, "order", "66", "Probe", "acme",
     "'{\"v\": 3000000000, \"w\": -2147483649, \"x\": 2147483647}'"),
    ("outbox", "exp-decimals", 16, "order", "67", "Probe", "acme",
     "'{\"a\": 0.000001, \"b\": 1e-7, \"c\": 123456789.5, \"d\": 10000000.0, "
     "\"e\": 1.0, \"f\": 0.001, \"g\": 3.14159265358979323846}'"),
    ("outbox", "exp-deep", 17, "order", "68", "Probe", "acme",
     "'{\"a\": {\"b\": {\"c\": null, \"d\": []}}, \"e\": [[]]}'"),
    ("outbox", "exp-empty-object", 18, "order", "69", "Probe", "acme", "'{}'"),
    ("outbox", "exp-big-int", 19, "order", "70", "Probe", "acme",
     "'{\"v\": 12345678901234567890}'"),
    ("outbox", "exp-bools-strings", 27, "order", "71", "Probe", "acme",
     "'{\"t\": true, \"f\": false, \"s\": [\"x\"], \"o\": [{\"a\": [true]}]}'"),
    ("outbox", "exp-obj-same", 28, "order", "72", "Probe", "acme",
     "'{\"o\": [{\"a\": 1}, {\"a\": 2}]}'"),
    ("outbox", "exp-obj-conflict", 29, "order", "73", "Probe", "acme",
     "'{\"o\": [{\"a\": 1}, {\"a\": \"x\"}]}'"),
    ("outbox", "exp-obj-null-field", 34, "order", "74", "Probe", "acme",
     "'{\"o\": [{\"a\": null, \"b\": []}, {\"a\": 1}]}'"),
    ("outbox", "exp-null-first", 35, "order", "75", "Probe", "acme",
     "'{\"n\": [null, 1]}'"),
    ("outbox", "exp-nested-obj-arr", 36, "order", "76", "Probe", "acme",
     "'{\"p\": {\"q\": [{\"r\": {\"s\": 1}}]}, \"arrs\": [[{\"x\": 1}]]}'"),
    ("outbox_strict", "strict", 40, "order", "80", "StrictCreated", "acme",
     "'{\"s\": 1}'"),
    ("outbox_typed", "typed", 41, "order", "9000000000", "Typed",
     "00000000-0000-4000-8000-0000000000aa", "'{\"t\": 3}'"),
    ("outbox_text", "text-controls", 33, "invoice", "k\t\"\\\u00e9\U0001F600\x01\x7f\u2028",
     "Controls", "acme", "E'line1\\nline2\\t\\x01\\x1f \u00e9 \U0001F600 \\\\ \"'"),
    ("outbox_text", "text-compact", 30, "invoice", "i-1", "InvoiceIssued", "acme",
     "'{\"a\":1,\"b\":[],\"c\":null}'"),
    ("outbox_text", "text-not-json", 31, "invoice", "i-2", "Plain", "acme",
     "'not json at all'"),
    ("outbox_text", "text-spacing", 32, "invoice", "i-3", "Spaced", "acme",
     "'{ \"x\" : [ 1 , 2 ] }'"),
]


def _lit(v):
    return "NULL" if v is None else "'" + v.replace("'", "''") + "'"


def insert_sql(only=None):
    """One transaction inserting every row (or the rows at indices `only`), in order."""
    return "BEGIN;\n" + insert_body(only) + "\nCOMMIT;"


def insert_body(only=None):
    """The INSERT statements."""
    parts = []
    for ord_, (table, _label, n, agg, key, typ, tenant, payload) in enumerate(_ROWS):
        if only is not None and ord_ not in only:
            continue
        parts.append(
            f"INSERT INTO public.{table} (ord, id, aggregate_type, aggregate_id, event_type, "
            f"tenant, payload) VALUES ({ord_}, '{uid(n)}', {_lit(agg)}, {_lit(key)}, "
            f"{_lit(typ)}, {_lit(tenant)}, {payload});")
    return "\n".join(parts)


def _text_values(table, n, agg, key, typ, tenant, payload):
    if payload == BIG_SQL:
        text = {"generate": {"prefix": BIG_PREFIX, "repeat": "x", "count": BIG_REPEAT,
                             "suffix": BIG_SUFFIX}}
    else:
        text = "(filled by generate.py from PostgreSQL)"
    return {"id": uid(n), "aggregate_type": agg, "aggregate_id": key, "event_type": typ,
            "tenant": tenant, "payload": text}


ROWS = [(f"public.{r[0]}", r[1], _text_values(*r[:1], *r[2:])) for r in _ROWS]

NULL_ROUTE_SQL = (
    "INSERT INTO public.outbox (ord, id, aggregate_type, aggregate_id, event_type, tenant, "
    f"payload) VALUES (99, '{uid(99)}', NULL, '99', 'Lost', 'acme', '{{\"r\": null}}');"
)
