"""One component of a ledger call, run N times: the profile of issue 30 (bench/README.md).

Run under valgrind with N and with 0; the difference over N is the component's instructions:

    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
        .venv/bin/python bench/instruction_components.py fingerprint 1000

Components: build, parse, fingerprint, admission, admit_fresh, complete (less
complete_setup), from_json, admit_replay (less replay_setup), pg_select, pool, hop. With
N > 0 the script also builds N requests up front (~72 k each on main), which every
component but complete and admit_replay (measured against their setup) carries.
"""

import asyncio
import functools
import sys
import time
import uuid
import warnings

import psycopg
from _requests import bench_request  # bench/ is sys.path[0] when run as a script
from psycopg_pool import AsyncConnectionPool
from temporal_ledger.ledger import ActionRequest, Authority, _answers, _completion, _pg_write, _rule
from temporal_ledger.ledger._canonical import combine, fingerprint_dimensions
from temporal_ledger.ledger._transaction import KeyRecord

warnings.simplefilter("ignore")
what, n = sys.argv[1], int(sys.argv[2])
PG = "postgresql://postgres@127.0.0.1:5432/postgres"
authority = Authority("bench", ["bench.*"])


request = bench_request


def admission(req):
    return functools.partial(_rule.admit, ask=_rule.Ask.of(req, authority))


now = time.time()


def fresh_tx(req):
    tx = _pg_write.UnchangedTransaction(req.key, None, now)
    claimed = admission(req)(tx, first=True, give_up=False, resubmitted=False)
    return tx, claimed


def completed(req):
    tx, claimed = fresh_tx(req)
    _sql, _params = tx.call()
    rec = KeyRecord.from_json(tx.written)
    tx2 = _pg_write.UnchangedTransaction(req.key, rec, now)
    _completion.complete(
        tx2,
        action_id=req.action_id,
        token=claimed.token,
        fields=_answers.success_fields({"ok": True}),
    )
    tx2.call()
    return tx2.written


reqs = [request(f"k{uuid.uuid4().hex[:6]}-{i}") for i in range(max(n, 1))]
settled = completed(reqs[0])
if what == "build":
    for i in range(n):
        request(f"k-{i}")
elif what == "parse":
    for r in reqs[:n]:
        ActionRequest.parse(r)
elif what == "fingerprint":
    for r in reqs[:n]:
        d = fingerprint_dimensions(r.identity())
        combine(d)
elif what == "admit_fresh":  # the rule + the write's parameters, no I/O
    parts = [admission(r) for r in reqs[:n]] if n else []
    t0 = 0
    for r, a in zip(reqs[:n], parts, strict=False):
        tx = _pg_write.UnchangedTransaction(r.key, None, now)
        a(tx, first=True, give_up=False, resubmitted=False)
        tx.call()
elif what == "admission":
    for r in reqs[:n]:
        admission(r)
elif what == "complete":
    txs = []
    for r in reqs[:n]:
        tx, c = fresh_tx(r)
        tx.call()
        txs.append((r, KeyRecord.from_json(tx.written), c))
    import os

    os.environ["MARK"] = "1"
    # measured: only this loop differs from "complete_setup"
    for r, rec, c in txs:
        tx2 = _pg_write.UnchangedTransaction(r.key, rec, now)
        _completion.complete(
            tx2, action_id=r.action_id, token=c.token, fields=_answers.success_fields({"ok": True})
        )
        tx2.call()
elif what == "complete_setup":
    for r in reqs[:n]:
        tx, c = fresh_tx(r)
        tx.call()
        KeyRecord.from_json(tx.written)
elif what == "from_json":
    for _ in range(n):
        KeyRecord.from_json(settled)
elif what == "admit_replay":  # the key's settled record, a replay decided and written
    rec = KeyRecord.from_json(settled)
    # same key, same identity: a new submission of reqs[0]
    r0 = reqs[0]
    for i in range(n):
        r = ActionRequest.model_construct(**{**dict(r0), "action_id": f"a{i}"})
        tx = _pg_write.UnchangedTransaction(r.key, KeyRecord.from_json(settled), now)
        admission(r)(tx, first=True, give_up=False, resubmitted=False)
        tx.call()
elif what == "replay_setup":
    r0 = reqs[0]
    for i in range(n):
        r = ActionRequest.model_construct(**{**dict(r0), "action_id": f"a{i}"})
        KeyRecord.from_json(settled)
elif what in ("pg_select", "pool", "hop"):

    async def main():
        pool = AsyncConnectionPool(PG, min_size=1, max_size=1, open=False)
        await pool.open(wait=True)
        conn = await pool.getconn()
        cur = psycopg.AsyncRawCursor(conn)
        await conn.set_autocommit(True)
        params = tuple(["x" * 40] * 22)
        sql = "SELECT " + ", ".join(f"${i}::text" for i in range(1, 23))
        for _ in range(3):
            await cur.execute(sql, params, prepare=False)
            await cur.fetchone()
        if what == "pg_select":
            for _i in range(n):
                await cur.execute(sql, params, prepare=False)
                await cur.fetchone()
        elif what == "pool":
            await pool.putconn(conn)
            for _i in range(n):
                c = await pool.getconn()
                await pool.putconn(c)
        elif what == "hop":
            loop = asyncio.get_running_loop()
            for _i in range(n):
                f = loop.create_future()
                loop.call_soon(f.set_result, None)
                await f
        await pool.close()

    asyncio.run(main())
else:
    raise SystemExit(what)
