"""Recompute the hash chains and the ledger's invariants, naming each problem found."""

from __future__ import annotations

import fnmatch
import zlib
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ._canonical import payload_text, sha256_hex
from ._models import EventType
from ._transaction import TALLY_STRIPES, Tally

if TYPE_CHECKING:
    from ._models import LedgerEvent
    from ._recorder import Recorder
    from ._transaction import KeyRecord

#: Events that answer a request. Every request gets exactly one final answer (a
#: completion or a refusal), or is deferred; a deferred request that is submitted again
#: (its ``action_id`` again) may get its final answer later, never two of them.
RESOLUTIONS = frozenset({EventType.COMPLETED, EventType.REPLAY_REFUSED, EventType.DEFERRED})


def body_hash(payload: dict[str, Any]) -> str:
    return sha256_hex(payload_text(payload).encode())


def chain_hash(
    *, prev_hash: str, key: str, action_id: str | None, type: str, body: str, recorded_at: str
) -> str:
    """The hash that links one event to the previous event of the same key.

    Chains are per key so that appends for different keys never contend; the key's
    head hash and event count live in ``ledger_keys``, so a dropped tail is seen too.
    The fields are joined by a unit separator, which no key, id or type can contain.
    """
    fields = (prev_hash, key, action_id or "", type, body, recorded_at)
    return sha256_hex("\x1f".join(fields).encode())


def stripe_of(key: str) -> int:
    """The tally stripe a key counts in."""
    return zlib.crc32(key.encode()) % TALLY_STRIPES


def head_mark(head: str) -> int:
    """A chain head as the signed 64-bit number the tally XORs (0 for no events)."""
    value = int(head[:16] or "0", 16)
    return value - (1 << 64) if value >= 1 << 63 else value


class VerifyReport(BaseModel):
    ok: bool
    events: int
    keys: int
    problems: list[str]


def verify_ledger(recorder: Recorder, *, gated: tuple[str, ...] = ()) -> VerifyReport:
    tally = recorder.tally()
    events = recorder.events()
    records = {r.key: r for r in recorder.records()}
    problems, heads, counts = _check_chains(events, records)
    if tally is not None:
        problems += _check_tally(heads, counts, records, tally)
    problems += _check_resolutions(events, records)
    problems += _check_replays(events)
    problems += _check_fencing(events)
    problems += _check_approvals(events, gated)
    return VerifyReport(ok=not problems, events=len(events), keys=len(records), problems=problems)


def _where(event: LedgerEvent) -> str:
    return f"seq {event.seq} ({event.type}, key {event.key!r})"


#: The fields of an event that its hash covers, by the name chain_hash gives them, with its
#: body's hash.
_CHAINED = ("prev_hash", "key", "action_id", "type", "recorded_at")


def _check_chains(
    events: list[LedgerEvent], records: dict[str, KeyRecord]
) -> tuple[list[str], dict[str, str], dict[str, int]]:
    """The chains' problems, and each key's chain head and count of events in the log."""
    problems = []
    heads: dict[str, str] = {}
    counts: dict[str, int] = defaultdict(int)
    tombstoned: list[LedgerEvent] = []
    compacted_through: dict[str, int] = {}
    for event in events:
        if event.type == EventType.COMPACTED:
            compacted_through[event.key] = event.seq
        elif event.compacted:
            tombstoned.append(event)
        expected_prev = heads.get(event.key, "")
        if event.prev_hash != expected_prev:
            problems.append(
                f"{_where(event)}: hash chain broken: it does not follow the previous record of "
                "its key (a record was dropped, inserted or reordered before it)"
            )
        chained = {name: getattr(event, name) for name in _CHAINED}
        if chain_hash(**chained, body=event.body_hash) != event.hash:
            problems.append(f"{_where(event)}: record hash mismatch: the record was edited")
        if not event.compacted and body_hash(event.payload) != event.body_hash:
            problems.append(f"{_where(event)}: payload edited: it no longer matches its body hash")
        heads[event.key] = event.hash
        counts[event.key] += 1
    for event in tombstoned:
        # A body may only be gone if a later compaction record of its key says so;
        # otherwise replacing a body by the tombstone would erase evidence unseen.
        if compacted_through.get(event.key, 0) < event.seq:
            problems.append(
                f"{_where(event)}: body replaced by a tombstone with no compaction record "
                "after it (evidence erased?)"
            )
    for key, record in records.items():
        if record.head_hash != heads.get(key, "") or record.events != counts.get(key, 0):
            problems.append(
                f"key {key!r}: the key's state names {record.events} records ending in "
                f"{record.head_hash[:12] or 'nothing'}, the log holds {counts.get(key, 0)} "
                "(records were dropped or added)"
            )
    for key in heads.keys() - records.keys():
        problems.append(f"key {key!r}: records in the log but no key state")
    return problems, heads, counts


def _check_tally(
    heads: dict[str, str],
    counts: dict[str, int],
    records: dict[str, KeyRecord],
    stored: dict[int, Tally],
) -> list[str]:
    """The ledger-wide tally against the log and the key states: a key deleted whole (its
    records and its state) is missing from both, but not from the tally."""
    keys, held, digests = ([0] * TALLY_STRIPES for _ in range(3))
    for key in records:
        keys[stripe_of(key)] += 1
    for key, head in heads.items():
        stripe = stripe_of(key)
        held[stripe] += counts[key]
        digests[stripe] ^= head_mark(head)
    problems = []
    for stripe in range(TALLY_STRIPES):
        counted = stored.get(stripe)
        if counted is None:
            problems.append(f"tally stripe {stripe}: missing from ledger_stripes (deleted?)")
            continue
        if (counted.keys, counted.events) != (keys[stripe], held[stripe]):
            problems.append(
                f"tally stripe {stripe}: the ledger counted {counted.keys} keys holding "
                f"{counted.events} records, the key states and the log hold {keys[stripe]} "
                f"keys and {held[stripe]} records (a whole key was deleted, or records were "
                "dropped or added outside the ledger)"
            )
        elif counted.digest != digests[stripe]:
            problems.append(
                f"tally stripe {stripe}: the chain heads of its keys are not the ones the "
                "ledger counted (a key was replaced outside the ledger)"
            )
    return problems


def _check_resolutions(events: list[LedgerEvent], records: dict[str, KeyRecord]) -> list[str]:
    problems = []
    requests: dict[str, LedgerEvent] = {}
    resolved: dict[str, list[LedgerEvent]] = defaultdict(list)
    for event in events:
        if event.type == EventType.REQUESTED and event.action_id:
            if event.action_id in requests:
                problems.append(f"{_where(event)}: action {event.action_id} requested twice")
            requests[event.action_id] = event
        elif event.type in RESOLUTIONS and event.action_id:
            resolved[event.action_id].append(event)
    for action_id, answers in resolved.items():
        request = requests.get(action_id)
        if request is None:
            problems.append(
                f"{_where(answers[0])}: answers action {action_id}, whose request is missing "
                "(dropped request?)"
            )
        elif any(answer.key != request.key for answer in answers):
            problems.append(f"action {action_id}: answered under a different key")
        finals = [a for a in answers if a.type != EventType.DEFERRED]
        if len(finals) > 1:
            seqs = ", ".join(str(a.seq) for a in finals)
            problems.append(
                f"action {action_id} (key {answers[0].key!r}): resolved {len(finals)} times "
                f"(seq {seqs}); a request is resolved exactly once (inserted record?)"
            )
        elif finals and any(a.seq > finals[0].seq for a in answers):
            problems.append(
                f"action {action_id} (key {answers[0].key!r}): deferred after it was answered "
                f"at seq {finals[0].seq} (inserted record?)"
            )
    for action_id, request in requests.items():
        holder = getattr(records.get(request.key), "holder_action_id", None)
        if action_id not in resolved and holder != action_id:  # else running, or to recover
            problems.append(
                f"{_where(request)}: action {action_id} was never resolved "
                "(dropped completion or refusal?)"
            )
    return problems


def _check_replays(events: list[LedgerEvent]) -> list[str]:
    problems = []
    fingerprints = {
        e.action_id: e.payload.get("fingerprint")
        for e in events
        if e.type == EventType.REQUESTED and not e.compacted
    }
    completions = [e for e in events if e.type == EventType.COMPLETED and not e.compacted]
    # The first completion of an action is its own (reversed: the first one set wins).
    originals = {e.action_id: e for e in reversed(completions) if not e.payload.get("replayed")}
    for event in completions:
        if not event.payload.get("replayed"):
            continue
        source = event.payload.get("reused_from_action_id")
        original = originals.get(source or "")
        if original is None:
            if not any(e.action_id == source and e.compacted for e in events):
                problems.append(
                    f"{_where(event)}: replay provenance points to action {source}, which has "
                    "no original completion"
                )
            continue
        if original.key != event.key:
            problems.append(
                f"{_where(event)}: replay provenance points to action {source} under another "
                f"key ({original.key!r})"
            )
        theirs, mine = fingerprints.get(source), fingerprints.get(event.action_id)
        if None not in (theirs, mine) and theirs != mine:
            problems.append(
                f"{_where(event)}: replay provenance points to action {source}, whose "
                "fingerprint differs"
            )
        if original.payload.get("status") != event.payload.get("status"):
            problems.append(
                f"{_where(event)}: replayed status {event.payload.get('status')!r} differs from "
                f"the original outcome {original.payload.get('status')!r} of action {source}"
            )
        elif event.payload.get("verdict") is None and (
            original.payload.get("output") != event.payload.get("output")
            or original.payload.get("error") != event.payload.get("error")
        ):
            problems.append(
                f"{_where(event)}: replayed output differs from the original outcome of "
                f"action {source}"
            )
    return problems


def _check_fencing(events: list[LedgerEvent]) -> list[str]:
    problems = []
    seen: dict[tuple[str, Any], int] = {}  # (key, the payload's fencing token): seq
    for event in events:
        if event.type == EventType.STARTED and not event.compacted:
            token = event.payload.get("token")
            if (first := seen.setdefault((event.key, token), event.seq)) != event.seq:
                problems.append(
                    f"{_where(event)}: a second execution under fencing token {token} "
                    f"(first at seq {first})"
                )
    return problems


def _check_approvals(events: list[LedgerEvent], gated: tuple[str, ...]) -> list[str]:
    """Every execution of a call that needed approval holds exactly one approval of its
    fingerprint, recorded under its key before its started marker, and no approval lets
    two executions start."""
    problems = []
    requests = {e.action_id: e for e in events if e.type == EventType.REQUESTED and not e.compacted}
    approvals: dict[str, LedgerEvent] = {}
    used: dict[str, int] = {}
    for event in events:
        if event.type == EventType.APPROVED and not event.compacted:
            approvals[event.payload.get("approval_id") or ""] = event
            continue
        if event.type != EventType.STARTED or event.compacted:
            continue
        request = requests.get(event.action_id or "")
        if request is None:
            continue  # a compacted request: nothing left to hold it to
        capability = request.payload.get("capability") or ""
        needed = request.payload.get("requires_approval") is True or any(
            fnmatch.fnmatchcase(capability, pattern) for pattern in gated
        )
        approval_id = event.payload.get("approval_id")
        if not needed and approval_id is None:
            continue
        approval = approvals.get(approval_id or "")
        if approval is None:
            problems.append(
                f"{_where(event)}: execution {event.action_id} of gated capability "
                f"{capability!r} started without an approval recorded before it"
            )
            continue
        if approval.key != event.key:
            problems.append(
                f"{_where(event)}: its approval (seq {approval.seq}) was given under another key"
            )
        if approval.payload.get("fingerprint") != request.payload.get("fingerprint"):
            problems.append(
                f"{_where(event)}: its approval (seq {approval.seq}) names another fingerprint "
                "than the request that started"
            )
        if approval_id in used:
            problems.append(
                f"{_where(event)}: approval {approval_id} (seq {approval.seq}) already let the "
                f"execution at seq {used[approval_id]} start; an approval is consumed once"
            )
        else:
            used[approval_id or ""] = event.seq
    return problems
