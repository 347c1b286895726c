"""``temporal-ledger`` end to end on a real SQLite file.

A fixture records a small history through the Python API (a success, its replay, a
conflicting request, an unknown effect and a denial); each test then drives the
operator CLI as an operator would and checks what it prints, how it exits, and what
it leaves in the ledger. The CLI runs in this process (tests/cli_in_process.py), as
``python -m temporal_ledger.ledger`` runs it: a child interpreter's start for each of
some 60 calls was most of this file's time. The tests that need a real process (the
entry point, ``$LEDGER_URL`` as the shell passes it, a closed pipe, ``| head``) still
start one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporal_ledger.ledger import (
    ActionRequest,
    Authority,
    IdempotencyConflictError,
    Ledger,
)
from temporal_ledger.ledger._cli_parser import build_parser
from temporal_ledger.ledger._schema import output_problems
from temporal_ledger.ledger._testing_child import AUTHORITY, request
from temporal_ledger.ledger._wire import key_from_wire

from tests.cli_in_process import run_cli

ROOT = Path(__file__).resolve().parent.parent
EVENT_FIELDS = {
    "seq",
    "key",
    "action_id",
    "type",
    "payload",
    "recorded_at",
    "body_hash",
    "prev_hash",
    "hash",
}
SENT_TYPES = [
    "action.requested",
    "action.execution_started",
    "action.completed",
    "action.requested",
    "action.completed",
    "action.requested",
    "action.replay_refused",
]
RECONCILE = ["--actor", "ops@example.com", "--basis", "the mail log shows delivery"]


class FarSide:
    """Counts effects; optionally fails after acting, as a dropped connection does."""

    def __init__(self, output: Any = None, *, fail_after_acting: bool = False) -> None:
        self.calls = 0
        self.output = output
        self.fail_after_acting = fail_after_acting

    def __call__(self, req: ActionRequest, ctx: Any) -> Any:
        self.calls += 1
        if self.fail_after_acting:
            raise ConnectionError("connection reset after the request was sent")
        return self.output


@dataclass
class Populated:
    url: str
    path: Path
    sent_action: str  # the success's original action
    sent_replay: str  # the replay's action
    uncertain_action: str


@pytest.fixture
async def populated(tmp_path: Path) -> Populated:
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    async with Ledger.open(url) as ledger:
        mail = FarSide({"message_id": "m-1"})
        first = await ledger.execute(request("sent"), authority=AUTHORITY, adapter=mail)
        replay = await ledger.execute(request("sent"), authority=AUTHORITY, adapter=mail)
        with pytest.raises(IdempotencyConflictError):
            await ledger.execute(
                request("sent", payload={"line": "other"}), authority=AUTHORITY, adapter=mail
            )
        assert mail.calls == 1 and replay.replayed

        flaky = FarSide(fail_after_acting=True)
        uncertain = await ledger.execute(request("uncertain"), authority=AUTHORITY, adapter=flaky)
        assert flaky.calls == 1 and uncertain.effect == "unknown"

        denied = await ledger.execute(
            request("denied"), authority=Authority("intruder", ["mail.*"]), adapter=mail
        )
        assert denied.status == "denied" and mail.calls == 1
        assert ledger.verify().ok
    return Populated(url, path, first.action_id, replay.action_id, uncertain.action_id)


def cli(
    db: str | None,
    *args: str,
    cwd: Path = ROOT,
    ledger_url: str | None = None,
    stdout: Any = subprocess.PIPE,
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as an operator would, with $LEDGER_URL only when given: in this
    process, unless ``stdout`` is a file descriptor (then in a child that writes there)."""
    argv = ["--db", db] if db is not None else []
    if stdout is subprocess.PIPE:
        return run_cli([*argv, *args], cwd=cwd, ledger_url=ledger_url)
    env = {k: v for k, v in os.environ.items() if k != "LEDGER_URL"}
    env["PYTHONPATH"] = str(ROOT)
    if ledger_url is not None:
        env["LEDGER_URL"] = ledger_url
    return subprocess.run(
        [sys.executable, "-m", "temporal_ledger.ledger", *argv, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )


def cli_json(db: str, *args: str, status: int = 0) -> Any:
    done = cli(db, "--json", *args)
    assert done.returncode == status, done.stderr
    return json.loads(done.stdout)


def event_count(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM ledger_events").fetchone()[0]
    finally:
        conn.close()


def edit(path: Path, sql: str, *params: object) -> None:
    """Corrupt the file behind the ledger's back, as a stray script or attacker would."""
    conn = sqlite3.connect(path)
    with conn:
        assert conn.execute(sql, params).rowcount == 1
    conn.close()


# show ---------------------------------------------------------------------------------
def test_show_prints_the_state_and_every_event(populated: Populated) -> None:
    done = cli(populated.url, "show", "sent")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "status: succeeded" in out and "effect: observed" in out
    assert "next_operation: none" in out
    assert '"message_id": "m-1"' in out
    for type_ in set(SENT_TYPES):
        assert type_ in out
    assert f"reused_from={populated.sent_action}" in out
    assert "differs=payload" in out


def test_show_json_has_state_and_events(populated: Populated) -> None:
    shown = cli_json(populated.url, "show", "sent")
    state, events = shown["state"], shown["events"]
    assert (state["status"], state["effect"], state["next_operation"]) == (
        "succeeded",
        "observed",
        "none",
    )
    assert state["output"] == {"message_id": "m-1"}
    assert state["original_action_id"] == populated.sent_action
    assert state["events"] == len(SENT_TYPES)
    assert [e["type"] for e in events] == SENT_TYPES
    replayed = events[4]
    assert replayed["action_id"] == populated.sent_replay
    assert replayed["payload"]["reused_from_action_id"] == populated.sent_action
    assert events[6]["payload"]["dimensions"] == ["payload"]


def test_show_a_denied_key_keeps_it_free(populated: Populated) -> None:
    shown = cli_json(populated.url, "show", "denied")
    assert [e["type"] for e in shown["events"]] == [
        "action.requested",
        "action.authorization_refused",
        "action.completed",
    ]
    assert shown["events"][2]["payload"]["status"] == "denied"
    # A denial had no effect, so the key is still free to act.
    assert shown["state"]["next_operation"] == "start_action"


def test_show_an_unknown_key_fails(populated: Populated) -> None:
    done = cli(populated.url, "show", "never-seen")
    assert done.returncode == 1
    assert "no records" in done.stdout


#: A step's key as the Temporal side makes it, and the spelling a far side holds it in.
SLASHED = "order-ann smith/0195-run/charge"
SLASHED_ON_THE_WIRE = "order-ann~20smith~2F0195-run~2Fcharge"


async def test_show_takes_a_key_in_the_wire_form_a_far_side_holds(tmp_path: Path) -> None:
    assert Ledger.wire_key(SLASHED) == SLASHED_ON_THE_WIRE  # what a far side is sent
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with Ledger.open(url) as ledger:
        far = FarSide({"charge_id": "C-1"})
        await ledger.execute(request(SLASHED), authority=AUTHORITY, adapter=far)
        # A key that is spelled as a wire form itself is shown as it is, not decoded.
        twin = "twin~2Fkey"
        await ledger.execute(request(twin), authority=AUTHORITY, adapter=far)
        await ledger.execute(request("twin/key"), authority=AUTHORITY, adapter=far)

    done = cli(url, "show", SLASHED_ON_THE_WIRE)
    assert done.returncode == 0, done.stderr
    assert f"key: {SLASHED}\n" in done.stdout and "status: succeeded" in done.stdout
    assert repr(SLASHED_ON_THE_WIRE) in done.stderr and repr(SLASHED) in done.stderr
    shown = cli_json(url, "show", SLASHED_ON_THE_WIRE)
    assert shown["state"]["key"] == SLASHED
    assert {e["key"] for e in shown["events"]} == {SLASHED}
    assert shown["state"]["output"] == {"charge_id": "C-1"}

    literal = cli(url, "show", twin)
    assert literal.returncode == 0 and f"key: {twin}\n" in literal.stdout
    assert literal.stderr == ""

    # A key of non-ASCII characters has a wire form far longer than any key may be.
    long_key = "caf\u00e9 \u2603/" * 30
    long_wire = Ledger.wire_key(long_key)
    assert len(long_key) <= 255 < len(long_wire)
    async with Ledger.open(url) as ledger:
        await ledger.execute(request(long_key), authority=AUTHORITY, adapter=far)
    shown_long = cli_json(url, "show", long_wire)
    assert shown_long["state"]["key"] == long_key

    # The wire form of a key without records: refused, naming the key it spells.
    missing = cli(url, "show", "never~2Fseen")
    assert missing.returncode == 1
    assert "key 'never/seen': no records" in missing.stdout
    assert "'never~2Fseen'" in missing.stderr
    # Not a wire form (an escape of a kept letter, invalid UTF-8, percent-encoding): as given.
    for text in ("order~41", "order~FF", "order%2Fr1"):
        refused = cli(url, "show", text)
        assert refused.returncode == 1 and f"key {text!r}: no records" in refused.stdout
        assert refused.stderr == "", refused.stderr


@pytest.mark.parametrize("key", [SLASHED, "plain-key_1.0", "tilde~7E/x", "caf\u00e9 \u2603/r/1"])
def test_a_keys_wire_form_spells_that_key_back(key: str) -> None:
    assert key_from_wire(Ledger.wire_key(key)) == key


@pytest.mark.parametrize(
    "text", ["", "a~41", "a~2f", "a~FF", "a~C3", "a/b", "a%2Fb", "a~0A", "~" + "41" * 200]
)
def test_text_that_no_key_is_spelled_as_names_no_key(text: str) -> None:
    assert key_from_wire(text) is None


# events -------------------------------------------------------------------------------
def test_events_json_shape_and_chains(populated: Populated) -> None:
    events = cli_json(populated.url, "events")
    assert len(events) == event_count(populated.path) == len(SENT_TYPES) + 3 + 3
    heads: dict[str, str] = {}
    for event in events:
        assert set(event) == EVENT_FIELDS
        assert isinstance(event["payload"], dict)
        assert len(event["hash"]) == len(event["body_hash"]) == 64
        # Chains are per key: each record names the previous record of its own key.
        assert event["prev_hash"] == heads.get(event["key"], "")
        heads[event["key"]] = event["hash"]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_events_filters(populated: Populated) -> None:
    everything = cli_json(populated.url, "events")
    only = cli_json(populated.url, "events", "--key", "uncertain")
    assert {e["key"] for e in only} == {"uncertain"}
    assert only == [e for e in everything if e["key"] == "uncertain"]
    assert cli_json(populated.url, "events", "--limit", "2") == everything[:2]
    after = str(everything[3]["seq"])
    paged = cli_json(populated.url, "events", "--after", after, "--limit", "3")
    assert paged == everything[4:7]


def test_events_table(populated: Populated) -> None:
    done = cli(populated.url, "events", "--key", "denied")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["seq", "recorded_at", "key", "type", "action_id", "detail"]
    assert len(lines) == 2 + 3
    assert "action.authorization_refused" in lines[3]
    assert "status=denied" in lines[4]


# open-effects and reconcile ------------------------------------------------------------
def test_open_effects_lists_the_unknown_effect(populated: Populated) -> None:
    done = cli(populated.url, "open-effects")
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()[2:]
    assert len(rows) == 1
    assert rows[0].split()[:4] == ["uncertain", "failed", "unknown", "reconcile_effect"]
    assert "ConnectionError" in rows[0]

    listed = cli_json(populated.url, "open-effects")
    assert [s["key"] for s in listed] == ["uncertain"]
    assert listed[0]["effect"] == "unknown"
    assert listed[0]["outcome_action_id"] == populated.uncertain_action


async def test_reconcile_effect_confirmed_closes_the_effect(populated: Populated) -> None:
    done = cli(
        populated.url,
        "reconcile",
        "uncertain",
        "--verdict",
        "effect_confirmed",
        *RECONCILE,
        "--evidence",
        "maillog://2024-05-01#4411",
        "--evidence",
        "TICKET-7",
        "--output",
        '{"message_id": "m-9"}',
    )
    assert done.returncode == 0, done.stderr
    assert "effect_confirmed recorded" in done.stdout and "effect observed" in done.stdout

    assert cli_json(populated.url, "open-effects") == []
    assert cli(populated.url, "open-effects").stdout.strip() == "no open effects"

    shown = cli_json(populated.url, "show", "uncertain")
    state = shown["state"]
    assert (state["effect"], state["next_operation"]) == ("observed", "none")
    assert state["output"] == {"message_id": "m-9"}
    [verdict] = state["reconciliations"]
    assert verdict["verdict"] == "effect_confirmed" and verdict["actor"] == "ops@example.com"
    assert verdict["evidence"] == ["maillog://2024-05-01#4411", "TICKET-7"]
    last = shown["events"][-1]
    assert last["type"] == "action.reconciled"
    assert last["action_id"] == populated.uncertain_action
    assert last["payload"]["basis"] == "the mail log shows delivery"
    assert (
        "reconciled: effect_confirmed by ops@example.com"
        in cli(populated.url, "show", "uncertain").stdout
    )

    # The workflow's retry now gets the operator's output, without acting again.
    async with Ledger.open(populated.url) as ledger:
        far_side = FarSide({"message_id": "duplicate"})
        late = await ledger.execute(request("uncertain"), authority=AUTHORITY, adapter=far_side)
    assert far_side.calls == 0
    assert late.replayed and late.output == {"message_id": "m-9"}


def test_reconcile_json_prints_the_new_state(populated: Populated) -> None:
    state = cli_json(
        populated.url, "reconcile", "uncertain", "--verdict", "still_unknown", *RECONCILE
    )
    assert (state["effect"], state["next_operation"]) == ("unknown", "reconcile_effect")
    assert state["reconciliations"][0]["verdict"] == "still_unknown"
    # still_unknown is an answer, not a resolution: the effect stays open.
    assert [s["key"] for s in cli_json(populated.url, "open-effects")] == ["uncertain"]


def test_reconciling_a_success_is_refused_durably(populated: Populated) -> None:
    before = event_count(populated.path)
    done = cli(populated.url, "reconcile", "sent", "--verdict", "no_effect_confirmed", *RECONCILE)
    assert done.returncode == 1
    assert "decision on 'sent' refused" in done.stderr
    assert "observed, not unknown" in done.stderr
    assert done.stdout == ""
    assert event_count(populated.path) == before + 1

    shown = cli_json(populated.url, "show", "sent")
    refusal = shown["events"][-1]
    assert refusal["type"] == "action.reconcile_refused"
    assert refusal["payload"]["verdict"] == "no_effect_confirmed"
    assert refusal["payload"]["actor"] == "ops@example.com"
    assert "not unknown" in refusal["payload"]["reason"]
    # The refusal changed nothing about the outcome.
    assert (shown["state"]["status"], shown["state"]["effect"]) == ("succeeded", "observed")
    assert shown["state"]["reconciliations"] == []


# verify -------------------------------------------------------------------------------
def test_verify_passes_then_names_an_edited_completion(populated: Populated) -> None:
    done = cli(populated.url, "verify")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "13 events, 3 keys: OK"
    assert cli_json(populated.url, "verify") == {
        "ok": True,
        "events": 13,
        "keys": 3,
        "problems": [],
    }

    # Rewrite history: the original completion now claims a different message id.
    edit(
        populated.path,
        "UPDATE ledger_events SET payload = json_set(payload, '$.output.message_id', 'm-666')"
        " WHERE action_id = ? AND type = 'action.completed'",
        populated.sent_action,
    )
    done = cli(populated.url, "verify")
    assert done.returncode == 1
    assert "problem(s)" in done.stdout.splitlines()[0]
    assert "(action.completed, key 'sent'): payload edited" in done.stdout
    report = cli_json(populated.url, "verify", status=1)
    assert report["ok"] is False
    assert any("payload edited" in p for p in report["problems"])
    # The replay still carries the true output, so the mismatch is named too.
    assert any("replayed output differs" in p for p in report["problems"])


def test_verify_names_a_forged_tombstone(populated: Populated) -> None:
    # 'uncertain' was never compacted (unknown effects never are), so a tombstone there
    # can only be a forgery that erases the evidence an operator reconciles from.
    edit(
        populated.path,
        "UPDATE ledger_events SET payload = '{\"compacted\":true}'"
        " WHERE action_id = ? AND type = 'action.completed'",
        populated.uncertain_action,
    )
    assert cli(populated.url, "verify").returncode == 1


# compact ------------------------------------------------------------------------------
async def test_compact_keeps_a_tombstone_that_still_replays(populated: Populated) -> None:
    done = cli(populated.url, "compact", "--older-than", "0")
    assert done.returncode == 0, done.stderr
    # Only 'sent' has a final, known outcome: the unknown effect and the denial stay.
    assert done.stdout.strip() == "compacted 1 key(s)"
    assert cli_json(populated.url, "compact", "--older-than", "0") == {"compacted_keys": 0}

    shown = cli_json(populated.url, "show", "sent")
    assert "m-1" not in json.dumps(shown)
    assert shown["events"][-1]["type"] == "action.compacted"
    assert all(e["payload"] == {"compacted": True} for e in shown["events"][:-1])
    assert cli_json(populated.url, "open-effects")[0]["key"] == "uncertain"

    async with Ledger.open(populated.url) as ledger:
        far_side = FarSide({"message_id": "duplicate"})
        late = await ledger.execute(request("sent"), authority=AUTHORITY, adapter=far_side)
        with pytest.raises(IdempotencyConflictError):
            await ledger.execute(
                request("sent", instruction="other"), authority=AUTHORITY, adapter=far_side
            )
    assert far_side.calls == 0
    assert late.replayed and late.compacted and late.status == "succeeded"
    assert late.reused_from_action_id == populated.sent_action
    assert cli(populated.url, "verify").returncode == 0


# bad input ----------------------------------------------------------------------------
BAD_ARGUMENTS = [
    pytest.param(["frob"], "invalid choice: 'frob'", id="unknown-command"),
    pytest.param(
        ["reconcile", "uncertain", "--verdict", "maybe", *RECONCILE],
        "argument --verdict: invalid choice: 'maybe'",
        id="bad-verdict",
    ),
    pytest.param(
        ["reconcile", "uncertain", "--verdict", "effect_confirmed", *RECONCILE, "--output", "{no"],
        "argument --output: not valid JSON",
        id="output-not-json",
    ),
    pytest.param(
        ["reconcile", "uncertain", "--verdict", "effect_confirmed", "--basis", "b"],
        "required: --actor",
        id="missing-actor",
    ),
    pytest.param(
        ["events", "--limit", "0"],
        "argument --limit: must be a positive whole number",
        id="limit-zero",
    ),
    pytest.param(
        ["compact", "--older-than", "-1"],
        "argument --older-than: must be >= 0 seconds",
        id="negative-age",
    ),
    pytest.param(["compact"], "required: --older-than", id="compact-without-age"),
    pytest.param([], "required: COMMAND", id="no-command"),
    pytest.param(
        ["show", "sent", "--bogus"], "unrecognized arguments: --bogus", id="unknown-option"
    ),
    pytest.param(["show", ""], "argument key: key must be 1 to 255", id="empty-key"),
    pytest.param(["events", "--key", "a\tb"], "non-printable", id="unprintable-key"),
    pytest.param(
        ["reconcile", "uncertain", "--verdict", "still_unknown", "--actor", " ", "--basis", "b"],
        "argument --actor: must not be empty",
        id="blank-actor",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD_ARGUMENTS)
def test_bad_arguments_exit_2_and_change_nothing(
    populated: Populated, args: list[str], message: str
) -> None:
    before = event_count(populated.path)
    done = cli(populated.url, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert done.stdout == ""
    assert event_count(populated.path) == before


def test_missing_db_exits_2() -> None:
    done = cli(None, "events")
    assert done.returncode == 2
    assert "--db URL is required" in done.stderr


def test_db_from_the_environment(populated: Populated) -> None:
    env = {**os.environ, "LEDGER_URL": populated.url, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "temporal_ledger.ledger", "verify"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout


def test_sqlite_url_without_a_file_exits_2() -> None:
    done = cli("sqlite:///", "events")
    assert done.returncode == 2
    assert "names no file" in done.stderr


def test_unsupported_url_exits_2() -> None:
    done = cli("ledger.db", "events")
    assert "unsupported ledger URL" in done.stderr
    assert done.returncode == 2


def test_unsupported_url_is_named() -> None:
    done = cli("mysql://root@127.0.0.1/ledger", "events")
    assert done.returncode != 0
    assert "unsupported ledger URL 'mysql://root@127.0.0.1/ledger'" in done.stderr


def test_a_missing_ledger_file_exits_2_names_its_absolute_path_and_creates_nothing(
    tmp_path: Path,
) -> None:
    # A relative URL resolves against the current directory, and the message says where.
    expected = tmp_path.resolve() / "nowhere.db"
    for args in (["verify"], ["show", "k"], ["open-effects"]):
        done = cli("sqlite:///nowhere.db", *args, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert f"no ledger at {expected} " in done.stderr
        assert "--create" in done.stderr
        assert done.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no file, no -wal, no -shm


def test_create_makes_the_ledger_and_adopts_nothing_else(tmp_path: Path) -> None:
    done = cli(None, "--create", "--db", "sqlite:///new.db", "verify", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0 events, 0 keys: OK"
    assert event_count(tmp_path / "new.db") == 0
    # After the command too; and the file it made is a ledger the next run accepts.
    done = cli(None, "open-effects", "--db", "sqlite:///new.db", "--create", "--json", cwd=tmp_path)
    assert (done.returncode, json.loads(done.stdout)) == (0, []), done.stderr

    app = tmp_path / "app.db"
    conn = sqlite3.connect(app)
    with conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    for url, message in (
        (f"sqlite:///{app}", "is not a ledger"),
        (
            f"sqlite:///{tmp_path}/no/such/folder/x.db",
            f"folder {tmp_path}/no/such/folder does not exist: create it or pass another path",
        ),
    ):
        done = cli(url, "verify", "--create")
        assert done.returncode == 2, done.stderr
        assert message in done.stderr
    assert {p.name for p in tmp_path.iterdir()} == {"new.db", "app.db"}


def test_a_database_that_is_not_a_ledger_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    (tmp_path / "notes.txt").write_text("not sqlite at all\n")
    for url, args in (
        (f"sqlite:///{path}", ["verify"]),
        (f"sqlite:///{path}", ["events"]),
        (f"sqlite:///{path}", ["open-effects"]),
        (f"sqlite:///{path}", ["show", "k"]),
        (f"sqlite:///{tmp_path}/notes.txt", ["verify"]),
    ):
        done = cli(url, *args)
        assert done.returncode == 2, done.stderr
        assert "is not a ledger" in done.stderr
    done = cli(f"sqlite:///{tmp_path}", "verify")
    assert done.returncode == 2
    assert f"{tmp_path} is a directory" in done.stderr
    tables = {
        r[0]
        for r in sqlite3.connect(path).execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
        )
    }
    assert tables == {"t"}
    assert (tmp_path / "notes.txt").read_text() == "not sqlite at all\n"


def test_a_limit_that_is_not_a_number_is_named(populated: Populated) -> None:
    done = cli(populated.url, "events", "--limit", "abc")
    assert done.returncode == 2
    assert "not a whole number: 'abc'" in done.stderr
    assert "_positive_int" not in done.stderr


def test_the_remaining_exit_statuses(populated: Populated) -> None:
    done = cli(None, "--help")
    assert done.returncode == 0 and "Exit status" in done.stdout
    # A key with no records: `show` refuses (1), even as JSON; `events` just lists none.
    shown = cli_json(populated.url, "show", "never-seen", status=1)
    assert shown == {"state": shown["state"], "events": []}
    assert shown["state"]["key"] == "never-seen"
    done = cli(populated.url, "events", "--key", "never-seen")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 2


def test_an_unreachable_server_exits_1() -> None:
    pytest.importorskip("psycopg")
    done = cli("postgresql://nobody:secret@127.0.0.1:1/ledger", "verify")
    assert done.returncode == 1, done.stderr
    assert "127.0.0.1" in done.stderr and "secret" not in done.stderr
    assert "Traceback" not in done.stderr


# options before or after the command -----------------------------------------------------
PLACEMENTS = [
    pytest.param(["--json", "--db", "URL", "show", "sent"], id="both-before"),
    pytest.param(["show", "sent", "--db", "URL", "--json"], id="both-after"),
    pytest.param(["--db", "URL", "show", "sent", "--json"], id="db-before-json-after"),
    pytest.param(["--json", "show", "sent", "--db", "URL"], id="json-before-db-after"),
]


@pytest.mark.parametrize("args", PLACEMENTS)
def test_options_go_before_or_after_the_command(populated: Populated, args: list[str]) -> None:
    done = cli(None, *[populated.url if a == "URL" else a for a in args])
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["state"]["key"] == "sent" and len(shown["events"]) == len(SENT_TYPES)


def test_db_after_the_command_overrides_the_environment(
    populated: Populated, tmp_path: Path
) -> None:
    elsewhere = f"sqlite:///{tmp_path}/elsewhere.db"
    done = cli(None, "verify", ledger_url=elsewhere)
    assert done.returncode == 2
    assert f"no ledger at {tmp_path}/elsewhere.db" in done.stderr
    done = cli(None, "verify", "--db", populated.url, ledger_url=elsewhere)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "13 events, 3 keys: OK"
    assert not (tmp_path / "elsewhere.db").exists()


# a closed pipe ------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["events"], ["--json", "events"], ["show", "sent"]])
def test_a_closed_pipe_exits_quietly(populated: Populated, args: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader (`| head`) is gone before the first line is written
    try:
        done = cli(populated.url, *args, stdout=write)
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141  # 128 + SIGPIPE, as `cat` and `grep` report it


@pytest.fixture
async def big_ledger(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/big.db"
    async with Ledger.open(url) as ledger:
        # Far more output than a pipe holds, so a write after `head` exits must fail.
        big = request("big", payload={"line": "x" * 2_000_000})
        await ledger.execute(big, authority=AUTHORITY, adapter=FarSide({"ok": True}))
    return url


def test_piped_into_head(big_ledger: str) -> None:
    url = big_ledger
    command = f"{sys.executable} -m temporal_ledger.ledger --db {url} --json events | head -1"
    done = subprocess.run(
        ["bash", "-c", f"{command}; echo status=${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=60,
    )
    assert done.stdout == "[\nstatus=141\n"
    assert done.stderr == ""


# the output schema: what `show` asks for, what `reconcile` accepts --------------------
class Sent(BaseModel):
    message_id: str
    count: int = 0


SCHEMA_KEY = "mail 'bob'"  # the printed command must quote it


@pytest.fixture
async def schema_ledger(tmp_path: Path) -> tuple[str, Path]:
    path = tmp_path / "schema.db"
    url = f"sqlite:///{path}"

    def reset(req: ActionRequest, ctx: Any) -> Any:
        raise ConnectionResetError("connection reset by peer")

    async with Ledger.open(url) as ledger:
        outcome = await ledger.execute(
            request(SCHEMA_KEY, output_schema=Sent.model_json_schema()),
            authority=AUTHORITY,
            adapter=reset,
        )
    assert outcome.effect == "unknown"
    return url, path


def snapshot(path: Path) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        return [
            conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("ledger_events", "ledger_keys")
        ]
    finally:
        conn.close()


def test_show_says_what_to_do_next(schema_ledger: tuple[str, Path]) -> None:
    url, _ = schema_ledger
    done = cli(url, "show", SCHEMA_KEY)
    assert done.returncode == 0, done.stderr
    header, table = done.stdout.split("\n\n")
    for line in (
        f"key: {SCHEMA_KEY}",
        "status: failed",
        "effect: unknown",
        "next_operation: reconcile_effect",
        "todo: find out whether the effect happened",
        "output_schema: message_id (string), count (integer, optional)",
        "error: ConnectionResetError: connection reset by peer",
    ):
        assert line in header
    [command] = [line for line in header.splitlines() if "temporal-ledger reconcile" in line]
    argv = shlex.split(command)
    assert argv[:3] == ["temporal-ledger", "reconcile", SCHEMA_KEY]
    # Pasted unchanged, the printed command is refused: its actor and basis are the
    # template's placeholders.
    unchanged = cli(url, *argv[1:])
    assert unchanged.returncode == 2 and "placeholder 'YOU'" in unchanged.stderr
    # With the person's name and reason put in, this CLI accepts it, and its --output has
    # the schema's shape.
    argv[argv.index("--actor") + 1] = "ops-ann"
    argv[argv.index("--basis") + 1] = "the mail relay's log shows the message"
    args = build_parser().parse_args([*argv[1:], "--db", url])
    assert (args.key, args.verdict) == (SCHEMA_KEY, "effect_confirmed")
    assert set(args.output) == {"message_id", "count"}
    # Its placeholders are refused if sent unchanged; filled in, the output fits.
    problems = output_problems(Sent.model_json_schema(), args.output)
    assert [p.split(":", 1)[0] for p in problems] == ["message_id", "count"], problems
    filled = {"message_id": "m-1", "count": 2}
    assert output_problems(Sent.model_json_schema(), filled) == []
    assert table.splitlines()[0].split()[:4] == ["seq", "recorded_at", "key", "type"]
    assert "action.execution_started" in table


def test_effect_confirmed_must_fit_the_output_schema(schema_ledger: tuple[str, Path]) -> None:
    url, path = schema_ledger
    before = snapshot(path)
    confirm = ["reconcile", SCHEMA_KEY, "--verdict", "effect_confirmed", *RECONCILE]
    for extra, named in (
        ([], [("message_id", "string")]),
        (["--output", '{"count": "two"}'], [("message_id", "string"), ("count", "integer")]),
    ):
        done = cli(url, *confirm, *extra)
        assert done.returncode == 1, done.stderr
        # The ledger's reason names each missing or wrong field and the type it wants.
        reason = done.stderr.splitlines()[0]
        assert reason.startswith("temporal-ledger: error: effect_confirmed")
        for field, type_ in named:
            assert re.search(rf"{field}: [^;]*\b{type_}\b", reason), reason
        assert "--output must fit: message_id (string), count (integer, optional)" in done.stderr
        assert done.stdout == ""
        assert snapshot(path) == before  # nothing recorded, not even a refusal

    state = cli_json(url, *confirm, "--output", '{"message_id": "m-9", "count": 2}')
    assert (state["effect"], state["next_operation"]) == ("observed", "none")
    assert state["output"] == {"message_id": "m-9", "count": 2}
    assert len(snapshot(path)[0]) == len(before[0]) + 1


async def test_approve_records_a_decision_for_the_exact_request_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    gated = request("refund", capability="files.refund")
    async with Ledger.open(url) as ledger:
        waiting = await ledger.execute(
            gated, authority=AUTHORITY, adapter=FarSide(), requires_approval=True
        )
        assert waiting.error_type == "ApprovalRequired"
    fingerprint = gated.fingerprint()
    shown = cli(url, "show", "refund")
    assert shown.returncode == 0 and "await_approval" in shown.stdout
    assert f"temporal-ledger approve refund --fingerprint {fingerprint}" in shown.stdout

    other = request("refund", capability="files.refund", payload={"line": "2000"})
    for args, reason in (
        (["--fingerprint", other.fingerprint(), "--actor", "lead-ann"], "fingerprint"),
        (["--fingerprint", fingerprint, "--actor", gated.performer], "its own call"),
    ):
        refused = cli(url, "approve", "refund", *args, "--basis", "checked")
        assert refused.returncode == 1 and reason in refused.stderr, refused.stderr
    assert cli(url, "approve", "refund", "--fingerprint", fingerprint).returncode == 2
    approved = cli_json(
        url, "approve", "refund", "--fingerprint", fingerprint, "--actor", "lead-ann",
        "--basis", "the amount is right",
    )  # fmt: skip
    assert (approved["state"], approved["actor"]) == ("approved", "lead-ann")
    events = cli(url, "events", "--key", "refund").stdout
    assert "action.approved" in events and "actor=lead-ann" in events
    assert events.count("action.approval_refused") == 2
    assert cli(url, "verify").returncode == 0
    assert cli(url, "verify", "--gated", "files.*").returncode == 0  # nothing executed yet


async def test_verify_gated_names_executions_without_an_approval(populated: Populated) -> None:
    assert cli(populated.url, "verify").returncode == 0
    done = cli(populated.url, "verify", "--gated", "files.*")
    assert done.returncode == 1
    assert "started without an approval" in done.stdout and "'sent'" in done.stdout
