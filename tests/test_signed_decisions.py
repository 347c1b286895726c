"""Approvals and verdicts that prove who gave them (issue 22).

Against the session's real dev server, on both ledger backends, with a payments far side
on 127.0.0.1 and the real ``temporal`` and ``temporal-ledger`` CLIs for what a person
does: keys made with ``temporal-ledger keygen``, decisions signed (and sent) with
``temporal-ledger sign``, the ledger checked with ``temporal-ledger verify --policy``.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import stat
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporal_ledger.activities import Policy
from temporal_ledger.activities._reconcile import approve_call
from temporal_ledger.activities._runtime import Runtime, _runtime
from temporal_ledger.ledger import ActionRequest, InvalidRequest, Ledger
from temporal_ledger.ledger._models import ApprovalState, EventType
from temporal_ledger.ledger._signatures import (
    Signers,
    decision_statement,
    generate_private_key,
    public_key_text,
    raw_public_key,
    read_policy,
    read_private_key,
    sign,
    verdict_statement,
    write_private_key,
)
from temporal_ledger.workflows._protocol import ApproveInput
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from tests.approval_tools import PAYMENT_TOOLS, PaymentWorkflow
from tests.cli_in_process import run_cli_async
from tests.forgery import append_forged_event
from tests.temporal_support import Setup, open_effects, wait_for
from tests.test_approvals_and_probes import Payments, pending_approvals, start
from worker import temporal_binary

pytestmark = pytest.mark.timeout(180)

NAMESPACE = "default"


def public(private_key: Any) -> str:
    return public_key_text(raw_public_key(private_key))


async def cli(*args: str, db: str | None = None) -> tuple[int, str]:
    """``temporal-ledger ARGS`` as a person runs it (in this process: tests/cli_in_process.py;
    the approval below runs the command the run shows in a shell, a real process)."""
    return await run_cli_async([*(["--db", db] if db else []), *args])


@pytest.fixture
def payments() -> Iterator[Payments]:
    far = Payments()
    far.thread.start()
    try:
        yield far
    finally:
        far.server.shutdown()
        far.server.server_close()


class Keys:
    """Key files and keys: lead-ann's made with the CLI, ops-cy's, lead-bo's (a real
    approver with a key of her own) and mallory's (in no policy) made in-process."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.bo = generate_private_key()
        self.mallory = generate_private_key()

    async def make(self) -> None:
        code, out = await cli("keygen", "--out", str(self.folder / "ann.pem"), "--json")
        assert code == 0, out
        self.ann = read_private_key(self.folder / "ann.pem")
        self.cy = generate_private_key()
        write_private_key(self.folder / "cy.pem", self.cy)

    def policy(self, *, decisions: bool, verdicts: bool) -> str:
        return f"""
[performers]
"agent" = ["payments.*"]

[reconcile]
actors = ["ops-*"]
probes = ["charge*"]
require_signature = {json.dumps(verdicts)}

[approve]
actors = ["lead-*"]
require_signature = {json.dumps(decisions)}

[keys]
"lead-ann" = ["{public(generate_private_key())}", "{public(self.ann)}"]  # rotated: old first
"lead-bo" = "{public(self.bo)}"
"ops-cy" = "{public(self.cy)}"
"""


@pytest.fixture
async def keys(tmp_path: Path) -> Keys:
    made = Keys(tmp_path)
    await made.make()
    return made


@pytest.fixture
def world_setup(temporal_address: str, tmp_path: Path, ledger_url: str) -> Setup:
    """One test's world on the session's dev server, with the parametrised backend."""
    return Setup(
        address=temporal_address,
        task_queue=f"tq-{uuid.uuid4().hex[:8]}",
        ledger_url=ledger_url,
        policy=tmp_path / "policy.toml",
        folder=tmp_path,
    )


@pytest.fixture
async def world(world_setup: Setup, keys: Keys) -> AsyncIterator[tuple[Setup, Client]]:
    world_setup.policy.write_text(keys.policy(decisions=True, verdicts=True))
    client = await world_setup.client()
    async with Worker(
        client,
        task_queue=world_setup.task_queue,
        workflows=[PaymentWorkflow],
        activities=list(PAYMENT_TOOLS.values()),
    ):
        yield world_setup, client


def signed_decision(
    pending: dict[str, Any],
    private_key: Any,
    *,
    actor: str = "lead-ann",
    workflow_id: str,
    namespace: str = NAMESPACE,
    **signed_over: Any,
) -> dict[str, Any]:
    """A decision on ``pending`` with a signature by ``private_key`` over its fields,
    except those ``signed_over`` replaces in what is signed (not in what is sent)."""
    sent = {
        "key": pending["key"],
        "fingerprint": pending["fingerprint"],
        "decision": "approve",
        "actor": actor,
        "basis": f"checked the refund of {pending['arguments']['amount']}",
    }
    statement = decision_statement(
        **{**sent, **signed_over}, workflow_id=workflow_id, namespace=namespace
    )
    return {**sent, "signature": sign(private_key, statement).model_dump()}


async def refused(handle: WorkflowHandle[Any, Any], update: str, given: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await handle.execute_update(update, given)
    return str(failed.value.cause)


async def test_an_approval_counts_only_when_signed_by_the_actors_key_for_this_call(
    world: tuple[Setup, Client], payments: Payments, keys: Keys
) -> None:
    setup, client = world
    handle = await start(setup, client, "refund", payments, 20)
    pending = (await wait_for(lambda: pending_approvals(setup, handle), what="approval"))[0]
    assert pending["signature_required"] is True
    assert "temporal-ledger sign approve --key-file" in pending["approve_command"]
    assert "keys" not in pending  # the policy's keys stay in the policy file

    # Refused by the update's validator, each for what it is: nothing reaches the run's
    # history, the ledger or the far side.
    history = len((await handle.fetch_history()).events)
    shown = ActionRequest(
        key=pending["key"], capability="payments.refund", instruction="refund",
        payload=pending["arguments"], performer="agent",
    )  # fmt: skip
    other_call = ActionRequest(**{**shown.model_dump(), "payload": {**shown.payload, "amount": 2}})
    here = {"workflow_id": handle.id}
    genuine = signed_decision(pending, keys.ann, **here)
    unsigned = {k: v for k, v in genuine.items() if k != "signature"}
    # mallory's signature, labelled with lead-ann's key id
    relabelled = signed_decision(pending, keys.mallory, **here)
    relabelled["signature"]["key_id"] = genuine["signature"]["key_id"]
    # made for another run, labelled with this one
    moved = signed_decision(pending, keys.ann, workflow_id="another-run")
    moved["signature"]["workflow_id"] = handle.id
    for bad, reason in (
        (unsigned, "the decision of 'lead-ann' is unsigned, and the policy requires"),
        (signed_decision(pending, keys.bo, **here), "which the policy does not give 'lead-ann'"),
        (signed_decision(pending, keys.mallory, **here), "does not give 'lead-ann'"),
        (relabelled, "does not match this decision"),
        (
            signed_decision(pending, keys.ann, fingerprint=other_call.fingerprint(), **here),
            "does not match this decision",
        ),
        (signed_decision(pending, keys.ann, basis="something else", **here), "does not match"),
        (
            signed_decision(pending, keys.ann, workflow_id="another-run"),
            "signed for workflow 'another-run', not this one",
        ),
        (
            signed_decision(pending, keys.ann, workflow_id=handle.id, namespace="production"),
            "signed for namespace 'production', not this one ('default')",
        ),
        (moved, "does not match this decision"),
        (signed_decision(pending, keys.bo, actor="lead-bo", decision="reject", **here), "match"),
    ):
        assert reason in await refused(handle, "approve", bad)
    assert len((await handle.fetch_history()).events) == history
    with Ledger.open(setup.ledger_url) as ledger:
        assert EventType.APPROVED not in [e.type for e in ledger.events(pending["key"])]
        assert EventType.APPROVAL_REJECTED not in [e.type for e in ledger.events(pending["key"])]
    assert payments.posts == 0

    # lead-ann runs the command the run shows, with her key file, name and basis: it signs
    # on her machine and sends it with the real temporal CLI; the call acts once.
    command = (
        pending["approve_command"]
        .replace("temporal-ledger ", f"{shlex.quote(sys.executable)} -m temporal_ledger.ledger ")
        .replace("YOUR-KEY.pem", shlex.quote(str(keys.folder / "ann.pem")))
        .replace("YOUR-NAME", "lead-ann")
        .replace("--basis WHY", "--basis " + shlex.quote("customer called, 20 is right"))
    ) + f" --temporal {shlex.quote(temporal_binary())}"
    process = await asyncio.create_subprocess_shell(
        command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out = (await asyncio.wait_for(process.communicate(), 60))[0].decode()
    assert process.returncode == 0 and "approved" in out, (command, out)
    assert await handle.result() == {"payment_id": "P-1", "amount": 20}
    assert payments.effects == 1 and payments.posts == 1

    key = pending["key"]
    with Ledger.open(setup.ledger_url) as ledger:
        approval = ledger.state(key).approval
        assert approval is not None and approval.state is ApprovalState.CONSUMED
        assert approval.signature is not None
        assert approval.signature["workflow_id"] == handle.id
        signers, _ = read_policy(setup.policy)
        assert ledger.verify(signers=signers).ok
    code, shown_text = await cli("show", key, db=setup.ledger_url)
    ann_id = json.loads((await cli("public-key", "--key-file", str(keys.folder / "ann.pem"),
                                   "--json"))[1])["key_id"]  # fmt: skip
    assert code == 0 and f"signed with lead-ann's key {ann_id} for workflow {handle.id}" in (
        shown_text
    )
    assert f"signed={ann_id}" in shown_text
    code, out = await cli("verify", "--policy", str(setup.policy), db=setup.ledger_url)
    assert code == 0 and "OK" in out, out

    # Somebody with write access to the tables adds approvals in lead-ann's name and
    # recomputes the chain: the chain holds, the signatures do not.
    with Ledger.open(setup.ledger_url) as ledger:
        events = ledger.events(key)
    recorded = next(e for e in reversed(events) if e.type == EventType.APPROVED)
    unsigned_seq = append_forged_event(
        setup.ledger_url, key, EventType.APPROVED,
        {**{k: v for k, v in recorded.payload.items() if k != "signature"},
         "approval_id": "forged-1", "basis": "approved it myself"},
    )  # fmt: skip
    copied_seq = append_forged_event(
        setup.ledger_url, key, EventType.APPROVED,
        {**recorded.payload, "approval_id": "forged-2", "basis": "a copied signature"},
    )  # fmt: skip
    code, out = await cli("verify", db=setup.ledger_url)
    assert code == 0, out  # without the keys, nothing shows: the chain was recomputed
    code, out = await cli("verify", "--policy", str(setup.policy), db=setup.ledger_url)
    assert code == 1, out
    assert (
        f"seq {unsigned_seq} (action.approved, key {key!r}): the decision of 'lead-ann' is "
        "unsigned" in out
    )
    assert (
        f"seq {copied_seq} (action.approved, key {key!r}): the signature with key {ann_id} "
        "of 'lead-ann' does not match this decision" in out
    )
    assert f"seq {recorded.seq} " not in out  # the genuine one still verifies
    assert "2 problem(s)" in out


async def test_a_verdict_signed_over_another_output_is_refused(
    world: tuple[Setup, Client], payments: Payments, keys: Keys
) -> None:
    setup, client = world
    payments.script = ["commit-then-drop"]
    handle = await start(setup, client, "charge_broken_probe", payments, 5)
    parked = (await wait_for(lambda: open_effects(setup.address, handle.id), what="the park"))[0]
    assert parked["signature_required"] is True
    assert "temporal-ledger sign reconcile --key-file" in parked["update_command"]
    assert '--input "$(temporal-ledger sign reconcile --key-file' in parked["signal_command"]
    key, action_id = parked["key"], parked["action_id"]
    seen = payments.by_key[Ledger.wire_key(key)]

    def verdict(output: Any, signed_output: Any, **changes: Any) -> dict[str, Any]:
        sent = {
            "key": key, "action_id": action_id, "verdict": "effect_confirmed",
            "actor": "ops-cy", "basis": "in the books", "evidence": ["books:row-1"],
            "output": output,
        }  # fmt: skip
        statement = verdict_statement(
            **{**sent, "output": signed_output, **changes},
            workflow_id=handle.id,
            namespace=NAMESPACE,
        )
        return {**sent, "signature": sign(keys.cy, statement).model_dump()}

    other = {"payment_id": "P-77", "amount": 5}
    history = len((await handle.fetch_history()).events)
    assert "does not match this verdict" in await refused(handle, "reconcile", verdict(seen, other))
    assert "does not match" in await refused(
        handle, "reconcile", verdict(seen, seen, evidence=["books:row-9"])
    )
    unsigned = verdict(seen, seen)
    del unsigned["signature"]
    assert "the verdict of 'ops-cy' is unsigned" in await refused(handle, "reconcile", unsigned)
    assert len((await handle.fetch_history()).events) == history
    with Ledger.open(setup.ledger_url) as ledger:
        assert ledger.state(key).reconciliations == []

    # Signed over the output it sends, with the CLI: the step takes that output.
    code, out = await cli(
        "sign", "reconcile", "--key-file", str(keys.folder / "cy.pem"),
        "--workflow-id", handle.id, "--key", key, "--action-id", action_id,
        "--verdict", "effect_confirmed", "--actor", "ops-cy", "--basis", "in the books",
        "--output", json.dumps(seen),
    )  # fmt: skip
    assert code == 0, out
    answer = await handle.execute_update("reconcile", json.loads(out))
    assert answer["effect"] == "observed"
    assert await handle.result() == seen
    assert payments.effects == 1 and payments.posts == 1
    with Ledger.open(setup.ledger_url) as ledger:
        (reconciliation,) = ledger.state(key).reconciliations
        assert reconciliation.actor == "ops-cy" and reconciliation.signature is not None
        signers, _ = read_policy(setup.policy)
        assert ledger.verify(signers=signers).ok


async def test_the_recording_activity_checks_the_signature_again(
    ledger_url: str, keys: Keys
) -> None:
    """A decision that reaches the activity without the workflow's check (an older
    workflow worker, a hand-scheduled activity) is held to the worker's policy too."""
    policy_file = keys.folder / "policy.toml"
    policy_file.write_text(keys.policy(decisions=True, verdicts=False))
    policy = Policy.load(policy_file)
    fingerprint = "f" * 64
    given = {"key": "k-1", "fingerprint": fingerprint, "decision": "approve",
             "actor": "lead-ann", "basis": "fine"}  # fmt: skip
    environment = ActivityEnvironment()
    with Ledger.open(ledger_url) as ledger:
        token = _runtime.set(Runtime(ledger=ledger, policy=policy))
        try:
            with pytest.raises(ApplicationError) as unsigned:
                await environment.run(approve_call, ApproveInput.model_validate(given))
            assert unsigned.value.type == "ApproveNotAllowed"
            assert "unsigned" in unsigned.value.message
            info = environment.info
            statement = decision_statement(
                **given, workflow_id="elsewhere", namespace=info.workflow_namespace
            )
            elsewhere = {**given, "signature": sign(keys.ann, statement).model_dump()}
            with pytest.raises(ApplicationError) as moved:
                await environment.run(approve_call, ApproveInput.model_validate(elsewhere))
            assert f"not this one ({info.workflow_id!r})" in moved.value.message
        finally:
            _runtime.reset(token)
        assert ledger.events("k-1") == []


# -- the checks themselves, without a server ------------------------------------------


def test_signers_name_what_does_not_prove_the_decision() -> None:
    ann, bo = generate_private_key(), generate_private_key()
    signers = Signers(keys={"lead-ann": [public(ann)]}, decisions_signed=True)
    fields = {"key": "k", "fingerprint": "f1", "decision": "approve", "actor": "lead-ann",
              "basis": "fine"}  # fmt: skip
    where = {"workflow_id": "wf", "namespace": "default"}
    good = sign(ann, decision_statement(**fields, **where))
    assert signers.decision_problem(**fields, signature=good, **where) is None
    assert signers.decision_problem(**fields, signature=good) is None  # as verify checks it
    for signature, problem in (
        (None, "unsigned"),
        (sign(bo, decision_statement(**fields, **where)), "does not give 'lead-ann'"),
        (sign(ann, decision_statement(**{**fields, "fingerprint": "f2"}, **where)), "match"),
        (sign(ann, decision_statement(**{**fields, "decision": "reject"}, **where)), "match"),
        (sign(ann, decision_statement(**fields, workflow_id="x", namespace="default")), "'x'"),
    ):
        found = signers.decision_problem(**fields, signature=signature, **where)
        assert found is not None and problem in found
    # Not required: an unsigned decision passes as before; a signed one is still checked.
    optional = Signers(keys={"lead-ann": [public(ann)]})
    assert optional.decision_problem(**fields, signature=None, **where) is None
    bad = sign(bo, decision_statement(**fields, **where))
    assert optional.decision_problem(**fields, signature=bad, **where) is not None
    # An actor the policy gives no key cannot prove anything.
    nobody = signers.decision_problem(**{**fields, "actor": "lead-cy"}, signature=good, **where)
    assert nobody is not None and "no public key for 'lead-cy'" in nobody


def test_a_verdict_signature_covers_the_action_and_the_output() -> None:
    cy = generate_private_key()
    signers = Signers(keys={"ops-cy": [public(cy)]}, verdicts_signed=True)
    fields = {"key": "k", "action_id": "a1", "verdict": "effect_confirmed", "actor": "ops-cy",
              "basis": "seen", "evidence": ["log:1"], "output": {"id": 1}}  # fmt: skip
    where = {"workflow_id": "wf", "namespace": "default"}
    good = sign(cy, verdict_statement(**fields, **where))
    assert signers.verdict_problem(**fields, signature=good, **where) is None
    for changed in ({"action_id": "a2"}, {"output": {"id": 2}}, {"verdict": "still_unknown"}):
        found = signers.verdict_problem(**{**fields, **changed}, signature=good, **where)
        assert found is not None and "does not match this verdict" in found


def test_policy_keys_are_checked_when_the_policy_loads(tmp_path: Path) -> None:
    ann = generate_private_key()
    path = tmp_path / "policy.toml"
    raw = raw_public_key(ann)
    for written in (public(ann), "ed25519:" + raw.hex(), "ed25519:" + public(ann)[8:].rstrip("=")):
        path.write_text(f'[keys]\n"lead-ann" = "{written}"\n')
        assert Policy.load(path).signers().keys == {"lead-ann": [written]}
    for text, problem in (
        ('[keys]\n"lead-ann" = "rsa:AAAA"\n', "lead-ann: a public key is written ed25519:"),
        ('[keys]\n"lead-ann" = "ed25519:AAAA"\n', "is 32 bytes, this is 3"),
        ('[keys]\n"lead-ann" = []\n', 'lead-ann = "ed25519:..." or a list'),
        ("[approve]\nrequire_signature = true\n", "[keys] lists no actor's public key"),
        ('[reconcile]\nrequire_signature = "yes"\n', "require_signature is true or false"),
        ("[approve]\nsigned = true\n", "require_signature = true|false"),
    ):
        path.write_text(text)
        with pytest.raises(InvalidRequest) as bad:
            Policy.load(path)
        assert str(path) in str(bad.value) and problem in str(bad.value), str(bad.value)
    # Without keys, the policy is as it was: nothing to sign, nothing required.
    path.write_text('[approve]\nactors = ["lead-*"]\n')
    loaded = Policy.load(path)
    assert loaded.keys == {} and not loaded.signed_decisions and not loaded.signed_verdicts


async def test_decisions_recorded_with_the_cli_are_signed_and_verified(
    ledger_url: str, keys: Keys, tmp_path: Path
) -> None:
    """``temporal-ledger approve --key-file`` signs for the run the call came from, and
    ``verify --policy`` names a decision whose signature is not the actor's."""
    policy = tmp_path / "policy.toml"
    policy.write_text(keys.policy(decisions=True, verdicts=True))
    request = ActionRequest(
        key="refund-7", capability="payments.refund", instruction="refund",
        payload={"amount": 7}, performer="agent",
        context={"workflow_id": "wf-7", "namespace": "default"},
    )  # fmt: skip
    with Ledger.open(ledger_url) as ledger:
        waiting = await ledger.execute(
            request, authority=Policy.load(policy).authority_for("agent"),
            adapter=lambda *_: {"ok": True}, requires_approval=True,
        )  # fmt: skip
        assert waiting.error_type == "ApprovalRequired"
    code, out = await cli(
        "approve", "refund-7", "--fingerprint", request.fingerprint(), "--actor", "lead-bo",
        "--basis", "fine", "--key-file", str(keys.folder / "ann.pem"), db=ledger_url,
    )  # fmt: skip
    assert code == 0, out  # the ledger records what it is given; verify judges it
    code, out = await cli("verify", "--policy", str(policy), db=ledger_url)
    assert code == 1 and "does not give 'lead-bo'" in out and "action.approved" in out, out
    code, out = await cli("show", "refund-7", db=ledger_url)
    assert "signed with lead-bo's key" in out and "for workflow wf-7 in namespace default" in out
    code, out = await cli("verify", "--policy", str(tmp_path / "missing.toml"), db=ledger_url)
    assert code == 2 and "policy file not found" in out


def test_keys_without_the_signing_extra_name_it(tmp_path: Path) -> None:
    """A policy with keys on a machine without ``cryptography``: an ImportError naming the
    extra when the policy loads, not a failure at the first signature."""
    path = tmp_path / "policy.toml"
    path.write_text(f'[keys]\n"lead-ann" = "{public(generate_private_key())}"\n')
    code = (
        "import sys; sys.modules['cryptography'] = None\n"
        "from temporal_ledger.activities import Policy\n"
        "try:\n"
        f"    Policy.load({str(path)!r})\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install 'temporal-ledger[signing]'" in done.stdout, done.stderr


async def test_keygen_makes_the_folder_for_its_owner_alone_and_never_overwrites(
    tmp_path: Path,
) -> None:
    """``keygen --out ~/.ledger/ann.pem`` on a machine without ``~/.ledger``: the folder is
    made (owner only, as ssh-keygen makes ~/.ssh); a second keygen to the same file, or to a
    folder that cannot be made, is refused with a message and exit 2, not a traceback."""
    out_file = tmp_path / "home" / ".ledger" / "ann.pem"
    code, out = await cli("keygen", "--out", str(out_file), "--actor", "lead-ann")
    assert code == 0, out
    assert stat.S_IMODE(out_file.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(out_file.stat().st_mode) == 0o600
    first = out_file.read_bytes()
    assert read_private_key(out_file) is not None

    code, out = await cli("keygen", "--out", str(out_file))
    assert code == 2 and "is never overwritten" in out and "Traceback" not in out, out
    assert out_file.read_bytes() == first

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, out = await cli("keygen", "--out", str(blocker / "ann.pem"))
    assert code == 2 and "cannot write key file" in out and "Traceback" not in out, out
