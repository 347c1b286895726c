"""Decisions that prove who gave them: Ed25519 signatures over approvals and verdicts.

An actor's name in a decision is whatever its sender wrote. A signed decision carries
proof: its author signs, with a private key that never leaves their machine, the
canonical JSON (RFC 8785) of a *statement* that names exactly what was decided, about
which call, in which workflow and namespace. The policy lists each actor's public keys;
the workflow's update validator, the activity that records the decision and ``verify``
check the signature against them.

Everything here is computation without I/O (the workflow runs it), except reading and
writing key files (PEM) for the CLI. The ``cryptography`` package (extra ``signing``) is
imported only when a key is made or read, or a signature made or checked.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fnmatch
import hashlib
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ._canonical import canonical_json, check_json
from ._errors import InvalidRequest
from ._models import EventType

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from ._models import LedgerEvent

#: Names what a signature is over, so a signature made for anything else never fits.
STATEMENT_VERSION = "temporal-ledger-decision-v1"
#: Verdicts recorded by a tool's probe: the worker's own finding, never a person's.
PROBE_ACTOR_PREFIX = "probe:"

_SIGNATURE_BYTES = 64

# -- keys: PEM files on the decider's machine, public keys as a policy writes them

#: How a public key is written in a policy: ``ed25519:`` and the raw 32-byte key.
KEY_PREFIX = "ed25519:"
#: The extra that brings ``cryptography``.
EXTRA = "signing"
_PUBLIC_KEY_BYTES = 32


def crypto() -> tuple[type[Ed25519PrivateKey], type[Ed25519PublicKey]]:
    """``cryptography``'s Ed25519 private and public key classes, or an ImportError naming
    the extra."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise ImportError(
            "signed decisions need the cryptography package: "
            f"pip install 'temporal-ledger[{EXTRA}]'"
        ) from exc
    return ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey


def parse_public_key(text: Any) -> bytes:
    """The raw 32 bytes of ``ed25519:<base64 or hex>``; :class:`InvalidRequest` if not."""
    if not isinstance(text, str) or not text.startswith(KEY_PREFIX):
        raise InvalidRequest(
            f"a public key is written {KEY_PREFIX}<base64 or hex of 32 bytes>, got {text!r}"
        )
    body = text.removeprefix(KEY_PREFIX).strip()
    raw = None
    if len(body) == 2 * _PUBLIC_KEY_BYTES:
        with contextlib.suppress(ValueError):
            raw = bytes.fromhex(body)
    if raw is None:
        # Standard or URL-safe base64, padded or not.
        padded = body.replace("-", "+").replace("_", "/") + "=" * (-len(body) % 4)
        try:
            raw = base64.b64decode(padded, validate=True)
        except ValueError:  # binascii.Error too
            raise InvalidRequest(f"public key {text!r}: not base64 or hex") from None
    if len(raw) != _PUBLIC_KEY_BYTES:
        raise InvalidRequest(
            f"public key {text!r}: an Ed25519 public key is {_PUBLIC_KEY_BYTES} bytes, "
            f"this is {len(raw)}"
        )
    return raw


def public_key_text(raw: bytes) -> str:
    """A public key as the policy writes it."""
    return KEY_PREFIX + base64.b64encode(raw).decode()


def key_id(raw: bytes) -> str:
    """A public key's short name: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(raw).hexdigest()[:16]


def generate_private_key() -> Ed25519PrivateKey:
    """A new Ed25519 private key."""
    return crypto()[0].generate()


def raw_public_key(private_key: Ed25519PrivateKey) -> bytes:
    """The raw 32 bytes of the private key's public half."""
    from cryptography.hazmat.primitives import serialization

    return private_key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


def write_private_key(path: Path, private_key: Ed25519PrivateKey) -> None:
    """Write a new key file readable by its owner alone, in a folder made for its owner
    alone where there is none (as ``ssh-keygen`` does); never overwrite one."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:  # the key file exists, a file is where the folder should be...
        if isinstance(exc, FileExistsError) and path.parent.is_dir():
            raise InvalidRequest(f"{path} exists: a key file is never overwritten") from None
        raise InvalidRequest(f"cannot write key file {path}: {exc.strerror or exc}") from None
    from cryptography.hazmat.primitives import serialization

    # Unencrypted PKCS#8 PEM, as ``openssl genpkey -algorithm ed25519`` writes it.
    pem = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with os.fdopen(descriptor, "wb") as file:
        file.write(pem)


def read_private_key(path: Path) -> Ed25519PrivateKey:
    """An Ed25519 private key from a PEM file; :class:`InvalidRequest` naming what is wrong."""
    private_key_class, _ = crypto()
    from cryptography.hazmat.primitives import serialization

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read key file {path}: {exc.strerror or exc}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, private_key_class):
        raise InvalidRequest(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    return key


# -- signatures --------------------------------------------------------------------------


class DecisionSignature(BaseModel):
    """The proof sent with a decision (field ``signature`` of an approval or a verdict).

    ``workflow_id`` and ``namespace`` are the run the decision was signed for; the
    signature covers them with the decision, so it holds in that run alone.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Which of the actor's keys signed (see :func:`key_id`).
    key_id: str
    workflow_id: str
    namespace: str
    #: The Ed25519 signature of the statement, base64.
    value: str

    @field_validator("key_id", "workflow_id", "namespace")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("value")
    @classmethod
    def _signature_bytes(cls, value: str) -> str:
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:  # binascii.Error too
            raise ValueError("must be the base64 of an Ed25519 signature") from None
        if len(raw) != _SIGNATURE_BYTES:
            raise ValueError(f"must be {_SIGNATURE_BYTES} bytes (base64), got {len(raw)}")
        return value

    @classmethod
    def parse(cls, value: Any) -> DecisionSignature | None:
        """``value`` (a mapping or a model) as a signature; :class:`InvalidRequest` naming
        what is wrong. ``None`` stays ``None``."""
        if value is None or isinstance(value, DecisionSignature):
            return value
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(x) for x in e['loc']) or 'signature'}: {e['msg']}"
                for e in exc.errors()
            )
            raise InvalidRequest(f"malformed signature: {problems}") from None


def _value(item: Any) -> Any:
    """An enum member's value; anything else as it is."""
    return getattr(item, "value", item)


def _statement(about: str, workflow_id: str, namespace: str, **fields: Any) -> dict[str, Any]:
    run = {"namespace": namespace, "workflow_id": workflow_id}
    return {"statement": STATEMENT_VERSION, "about": about, **run, **fields}


def decision_statement(
    *, key: str, fingerprint: str, decision: Any, actor: str, basis: str, **run: str
) -> dict[str, Any]:
    """What an approver signs: this decision on the call of this fingerprint, in this run
    (``workflow_id`` and ``namespace``)."""
    decided = {"decision": _value(decision), "actor": actor, "basis": basis}
    return _statement("decision", **run, key=key, fingerprint=fingerprint, **decided)


def verdict_statement(
    *,
    key: str,
    action_id: str,
    verdict: Any,
    actor: str,
    basis: str,
    evidence: Any,
    output: Any,
    **run: str,
) -> dict[str, Any]:
    """What a reconciler signs: this verdict (and observed output) on this action's
    unknown effect, in this run (``workflow_id`` and ``namespace``)."""
    decided = {"verdict": _value(verdict), "actor": actor, "basis": basis}
    seen = {"evidence": list(evidence or []), "output": output}
    return _statement("verdict", **run, key=key, action_id=action_id, **decided, **seen)


def sign(private_key: Ed25519PrivateKey, statement: dict[str, Any]) -> DecisionSignature:
    """Sign a statement (:func:`decision_statement`, :func:`verdict_statement`)."""
    check_json(statement, where="the signed decision")
    return DecisionSignature(
        key_id=key_id(raw_public_key(private_key)),
        workflow_id=statement["workflow_id"],
        namespace=statement["namespace"],
        value=base64.b64encode(private_key.sign(canonical_json(statement))).decode(),
    )


def _verifies(raw: bytes, statement: dict[str, Any], value: str) -> bool:
    public_key = crypto()[1].from_public_bytes(raw)
    from cryptography.exceptions import InvalidSignature

    try:
        public_key.verify(base64.b64decode(value), canonical_json(statement))
    except (InvalidSignature, InvalidRequest):
        return False
    return True


# -- who may sign what -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Signers:
    """The actors' public keys, which kinds of decision must be signed, and which tools'
    probes may give a verdict.

    Built from a policy (``[keys]``, ``[approve] require_signature``, ``[reconcile]
    require_signature`` and ``probes``). A decision that carries a signature is checked
    whether or not signatures are required; one without passes only where they are not.
    """

    #: Actor name (exact, not a pattern) to its public keys, as the policy writes them.
    keys: Mapping[str, Iterable[str]] = dataclasses.field(default_factory=dict)
    decisions_signed: bool = False
    verdicts_signed: bool = False
    #: Tool-name patterns whose probes may record a verdict (as ``probe:<tool>``).
    probes: tuple[str, ...] = ()

    @classmethod
    def from_tables(
        cls,
        keys: Any,
        *,
        decisions: Any = False,
        verdicts: Any = False,
        probes: Any = (),
        where: str = "policy",
    ) -> Signers:
        """From a policy's ``[keys]`` table (actor = "ed25519:..." or a list of them: old
        keys stay listed after a rotation so that old decisions stay verifiable), its two
        ``require_signature`` flags and its ``[reconcile] probes``; :class:`InvalidRequest`
        naming the fault, and the ImportError naming the extra when keys are configured
        without ``cryptography``."""
        for section, flag in (("approve", decisions), ("reconcile", verdicts)):
            if not isinstance(flag, bool):
                raise InvalidRequest(f"{where}: [{section}] require_signature is true or false")
        if not isinstance(probes, (list, tuple)) or not all(
            isinstance(p, str) and p.strip() for p in probes
        ):
            raise InvalidRequest(f"{where}: [reconcile] probes is a list of tool-name patterns")
        if not isinstance(keys, Mapping):
            raise InvalidRequest(f"{where}: [keys] maps actor names to public keys")
        parsed: dict[str, list[str]] = {}
        for actor, given in keys.items():
            if not isinstance(actor, str) or not actor.strip():
                raise InvalidRequest(f"{where}: [keys]: an actor name must not be empty")
            listed = [given] if isinstance(given, str) else given
            if not isinstance(listed, list) or not listed:
                raise InvalidRequest(
                    f'{where}: [keys]: {actor} = "ed25519:..." or a list of such keys, '
                    f"got {given!r}"
                )
            for text in listed:
                try:
                    parse_public_key(text)
                except InvalidRequest as exc:
                    raise InvalidRequest(f"{where}: [keys]: {actor}: {exc}") from None
            parsed[actor] = list(listed)
        if (decisions or verdicts) and not parsed:
            raise InvalidRequest(
                f"{where}: require_signature = true, but [keys] lists no actor's public key: "
                "nobody could decide"
            )
        if parsed:
            crypto()  # the ImportError naming the extra now, not at the first signature
        return cls(parsed, decisions, verdicts, tuple(probes))

    @classmethod
    def from_policy(cls, data: Mapping[str, Any], *, where: str) -> Signers:
        """From a parsed policy file: its ``[keys]``, ``[approve] require_signature`` and
        ``[reconcile] require_signature`` and ``probes``."""
        approve = data.get("approve", {})
        reconcile = data.get("reconcile", {})
        if not isinstance(approve, Mapping) or not isinstance(reconcile, Mapping):
            raise InvalidRequest(f"{where}: [approve] and [reconcile] are tables")
        return cls.from_tables(
            data.get("keys", {}),
            decisions=approve.get("require_signature", False),
            verdicts=reconcile.get("require_signature", False),
            probes=reconcile.get("probes", []),
            where=where,
        )

    def probe_problem(self, actor: str, verdict: Any, evidence: Any) -> str | None:
        """Why a verdict by ``probe:<tool>`` is not one a probe of this policy could give,
        or ``None``: the policy lets that tool's probe decide, and a verdict that settles
        the effect rests on evidence."""
        tool = actor.removeprefix(PROBE_ACTOR_PREFIX)
        if not any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.probes):
            return (
                f"a verdict by {actor!r}, but the policy names no probe for tool {tool!r} "
                "([reconcile] probes): nobody but that tool's probe may give it"
            )
        if _value(verdict) != "still_unknown" and not evidence:
            return f"a verdict by {actor!r} that settles the effect without evidence"
        return None

    def decision_problem(self, **given: Any) -> str | None:
        """Why this approval or rejection does not prove its actor, or ``None``: ``given``
        are the fields of :func:`decision_statement` but the run, its ``signature``, and
        the ``workflow_id`` and ``namespace`` it arrived in, when known."""
        return self._problem("decision", self.decisions_signed, **given)

    def verdict_problem(self, **given: Any) -> str | None:
        """Why this verdict does not prove its actor, or ``None``: ``given`` as for
        :meth:`decision_problem`, with the fields of :func:`verdict_statement`."""
        if given["signature"] is not None and not given["action_id"]:
            return "a signed verdict must name the action it is about (action_id)"
        return self._problem("verdict", self.verdicts_signed, **given)

    def _problem(
        self,
        kind: str,
        required: bool,
        *,
        signature: DecisionSignature | None,
        workflow_id: str | None = None,
        namespace: str | None = None,
        **fields: Any,
    ) -> str | None:
        actor = fields["actor"]
        if signature is None:
            if not required:
                return None
            return (
                f"the {kind} of {actor!r} is unsigned, and the policy requires signed "
                f"{kind}s: sign it with `temporal-ledger sign` and the actor's key"
            )
        run = {"workflow_id": signature.workflow_id, "namespace": signature.namespace}
        for name, signed, arrived in (
            ("workflow", signature.workflow_id, workflow_id),
            ("namespace", signature.namespace, namespace),
        ):
            if arrived is not None and signed != arrived:
                return f"the {kind} was signed for {name} {signed!r}, not this one ({arrived!r})"
        listed = {key_id(parse_public_key(text)): text for text in self.keys.get(actor, ())}
        if not listed:
            return f"the policy lists no public key for {actor!r}: nothing can prove it is theirs"
        found = listed.get(signature.key_id)
        if found is None:
            return (
                f"the {kind} is signed with key {signature.key_id}, which the policy does not "
                f"give {actor!r} (its keys: {', '.join(sorted(listed))})"
            )
        make = decision_statement if kind == "decision" else verdict_statement
        if not _verifies(parse_public_key(found), make(**fields, **run), signature.value):
            return (
                f"the signature with key {signature.key_id} of {actor!r} does not match this "
                f"{kind}: it was made over other fields (key, "
                f"{'fingerprint' if kind == 'decision' else 'action, evidence, output'}, "
                f"{kind}, actor, basis, workflow or namespace)"
            )
        return None


def read_policy_file(path: Path) -> dict[str, Any]:
    """A policy file's TOML tables; :class:`InvalidRequest` when it is missing or not TOML.
    The workers' policy and ``verify --policy`` read the same file."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidRequest(f"policy file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequest(f"policy file {path} is not valid TOML: {exc}") from None


def read_policy(path: str | Path) -> tuple[Signers, list[str]]:
    """From a policy file, what ``verify`` holds the ledger to: the signers, and the
    capability patterns ``[approve] capabilities`` gates. :class:`InvalidRequest` naming
    what is wrong."""
    path = Path(path)
    data = read_policy_file(path)
    signers = Signers.from_policy(data, where=f"policy file {path}")
    gated = data.get("approve", {}).get("capabilities", [])
    if not isinstance(gated, list) or not all(isinstance(g, str) and g for g in gated):
        raise InvalidRequest(f"policy file {path}: [approve] capabilities is a list of patterns")
    return signers, gated


# -- what verify re-checks ---------------------------------------------------------------


def recorded_problems(events: Iterable[LedgerEvent], signers: Signers) -> list[str]:
    """Re-check the signature of every recorded approval, rejection and person's verdict
    against the policy's keys, and every probe's verdict against the probes the policy
    names; name each event that fails (or lacks a signature where the policy requires
    one). Compacted events have no body left to check."""
    found = ((e, _recorded_problem(e, signers)) for e in events if not e.compacted)
    return [f"seq {e.seq} ({e.type}, key {e.key!r}): {p}" for e, p in found if p is not None]


def _recorded_problem(event: LedgerEvent, signers: Signers) -> str | None:
    names = _SIGNED_FIELDS.get(event.type)
    if names is None:
        return None
    payload = event.payload
    actor = str(payload.get("actor"))
    if event.type == EventType.RECONCILED and actor.startswith(PROBE_ACTOR_PREFIX):
        return signers.probe_problem(actor, payload.get("verdict"), payload.get("evidence"))
    fields = {name: payload.get(name) for name in names}
    if event.type == EventType.RECONCILED:
        check, fields["action_id"] = signers.verdict_problem, event.action_id
    else:
        check = signers.decision_problem
    try:
        signature = DecisionSignature.parse(payload.get("signature"))
    except InvalidRequest as exc:
        return str(exc)
    basis = str(payload.get("basis"))
    return check(signature=signature, key=event.key, actor=actor, basis=basis, **fields)


#: The recorded fields of a decision or a verdict that its signature covers, with its
#: key, actor and basis (and a verdict's action).
_SIGNED_FIELDS: dict[str, tuple[str, ...]] = {
    EventType.APPROVED: ("fingerprint", "decision"),
    EventType.APPROVAL_REJECTED: ("fingerprint", "decision"),
    EventType.RECONCILED: ("verdict", "evidence", "output"),
}
