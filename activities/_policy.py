"""Who may do what: performers' capabilities, the actors who may reconcile, and the
capabilities whose calls need a person's approval (and who may give it)."""

from __future__ import annotations

import fnmatch
import logging
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..ledger import Authority, InvalidRequest

logger = logging.getLogger(__name__)


class Policy(BaseModel):
    """An authority policy, usually loaded from TOML::

        [performers]
        "agent-*" = ["files.*", "tickets.create"]

        [reconcile]
        actors = ["ops-*", "alice@example.com"]

        [approve]
        capabilities = ["payments.*"]   # every call of these needs an approval
        actors = ["lead-*"]             # who may approve or reject

    Performer and actor names, and capabilities, are glob patterns. A performer never
    approves its own call, whatever the patterns say.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    performers: dict[str, list[str]] = Field(default_factory=dict)
    reconcilers: list[str] = Field(default_factory=list)
    #: Capability patterns whose every call needs an approval, as with
    #: ``@tool(requires_approval=True)``.
    gated: list[str] = Field(default_factory=list)
    approvers: list[str] = Field(default_factory=list)
    allow_all: bool = False

    @field_validator("performers")
    @classmethod
    def _patterns(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for performer, capabilities in value.items():
            if not performer.strip():
                raise ValueError("a performer pattern must not be empty")
            if not all(isinstance(c, str) and c.strip() for c in capabilities):
                raise ValueError(f"performer {performer!r}: capabilities must be non-empty strings")
        return value

    @classmethod
    def permissive(cls) -> Policy:
        """Everyone may do everything: for the embedded dev setup only. Logged loudly."""
        logger.warning(
            "ledger policy: ALLOW-ALL (every performer may use every capability and anyone may "
            "reconcile or approve); outside local development pass "
            "LedgerPlugin(policy='policy.toml') (worker.py: --policy FILE)"
        )
        return cls(performers={"*": ["*"]}, reconcilers=["*"], approvers=["*"], allow_all=True)

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Read a TOML policy file; raises :class:`InvalidRequest` naming what is wrong."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InvalidRequest(f"policy file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidRequest(f"policy file {path} is not valid TOML: {exc}") from None
        unknown = set(data) - {"performers", "reconcile", "approve"}
        if unknown:
            raise InvalidRequest(
                f"policy file {path}: unknown section(s) {sorted(unknown)}; "
                "expected [performers], [reconcile] and [approve]"
            )
        reconcile = data.get("reconcile", {})
        if not isinstance(reconcile, dict) or set(reconcile) - {"actors"}:
            raise InvalidRequest(f"policy file {path}: [reconcile] takes only actors = [...]")
        approve = data.get("approve", {})
        if not isinstance(approve, dict) or set(approve) - {"actors", "capabilities"}:
            raise InvalidRequest(
                f"policy file {path}: [approve] takes only capabilities = [...] and actors = [...]"
            )
        try:
            return cls(
                performers=data.get("performers", {}),
                reconcilers=reconcile.get("actors", []),
                gated=approve.get("capabilities", []),
                approvers=approve.get("actors", []),
            )
        except ValidationError as exc:
            raise InvalidRequest(f"policy file {path}: {exc}") from None

    def authority_for(self, performer: str) -> Authority:
        """The capabilities the performer holds now, as the ledger's :class:`Authority`."""
        capabilities: list[str] = []
        for pattern, granted in self.performers.items():
            if fnmatch.fnmatchcase(performer, pattern):
                capabilities.extend(granted)
        return Authority(performer, capabilities)

    def may_reconcile(self, actor: str) -> bool:
        return bool(actor) and _matches(actor, self.reconcilers)

    def requires_approval(self, capability: str) -> bool:
        return _matches(capability, self.gated)

    def may_approve(self, actor: str) -> bool:
        return bool(actor) and _matches(actor, self.approvers)


def _matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
