"""Who may do what: performers' capabilities, the actors who may reconcile, the calls
that need a person's approval (and who may give it), the keys that prove who decided,
and what a tool's own hints count for."""

from __future__ import annotations

import fnmatch
import logging
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..ledger import Authority, InvalidRequest
from ..ledger._seam import Signers, read_policy_file
from ..workflows._seam import ToolHints

logger = logging.getLogger(__name__)


class ToolRule(BaseModel):
    """The policy's last word on tools whose name matches, whatever their hints say."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: An unknown effect may be tried again under the key (the far side dedupes, or the
    #: tool only reads); ``None``: as the tool's declaration and hints say.
    retry_safe: bool | None = None
    #: Every call waits for a person's approval; ``None``: as the capability's rules say.
    requires_approval: bool | None = None


class Treatment(BaseModel):
    """How the ledger handles one call, after the policy has weighed the tool's hints."""

    model_config = ConfigDict(frozen=True)

    retry_safe: bool
    requires_approval: bool


class Policy(BaseModel):
    """An authority policy, usually loaded from TOML::

        [performers]
        "agent-*" = ["files.*", "tickets.create"]

        [reconcile]
        actors = ["ops-*", "alice@example.com"]
        probes = ["place_order"]        # tools whose probes may settle an unknown effect

        [approve]
        capabilities = ["payments.*"]   # every call of these needs an approval
        actors = ["lead-*"]             # who may approve or reject
        destructive = true              # and every call of an MCP tool that may destroy
        require_signature = true        # decisions must be signed with the actor's key

        [keys]                          # actor = public key, or a list of them
        lead-ann = "ed25519:..."

        [hints]                         # MCP annotations that may relax the ledger
        trust = ["notes/count_*"]       # tool names, or server/tool

        [tools."append_note"]           # the last word on tools of this name
        requires_approval = true
        retry_safe = false

    Performer and actor names, capabilities and tool names are glob patterns; the
    actors of ``[keys]`` are exact names. A performer never approves its own call,
    whatever the patterns say. An actor's name alone proves nothing: anybody who may send
    an update can write it. With ``require_signature`` (in ``[approve]`` for decisions,
    in ``[reconcile]`` for verdicts) a decision counts only if it is signed with one of
    the actor's keys, for the call and the run it names (``temporal-ledger sign``).

    An MCP tool's annotations are hints from its server, not promises, and the MCP
    specification says a client must not decide from the annotations of a server it does
    not trust. A hint that makes the ledger more careful always applies: with
    ``destructive = true`` a tool that is not read-only and does not say
    ``destructiveHint: false`` waits for an approval. A hint that relaxes it
    (``readOnlyHint``, ``idempotentHint``: retry-safe, so an unknown effect is tried again
    under the key instead of parked) applies only to tools that ``[hints] trust`` names,
    by tool name or as ``server/tool``; by default nothing is relaxed. ``[tools]``
    overrides both, per tool name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    performers: dict[str, list[str]] = Field(default_factory=dict)
    reconcilers: list[str] = Field(default_factory=list)
    #: Tool-name patterns whose probes may record a verdict (as ``probe:<tool>``).
    probes: list[str] = Field(default_factory=list)
    #: Capability patterns whose every call needs an approval, as with
    #: ``@tool(requires_approval=True)``.
    gated: list[str] = Field(default_factory=list)
    approvers: list[str] = Field(default_factory=list)
    #: Calls of tools whose hints say they may destroy need an approval.
    gate_destructive: bool = False
    #: Patterns of tool names (or ``server/tool``) whose relaxing hints are trusted.
    trust_hints: list[str] = Field(default_factory=list)
    #: Per tool-name pattern, the last word on retry safety and approval.
    tools: dict[str, ToolRule] = Field(default_factory=dict)
    #: Actor name to its Ed25519 public keys (``"ed25519:<base64>"``); a rotated-out key
    #: stays listed so that the decisions it signed stay verifiable.
    keys: dict[str, list[str]] = Field(default_factory=dict)
    #: Approvals and rejections must be signed by one of the actor's keys.
    signed_decisions: bool = False
    #: Operators' verdicts must be signed by one of the actor's keys.
    signed_verdicts: bool = False
    allow_all: bool = False

    @field_validator("performers")
    @classmethod
    def _patterns(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for performer, capabilities in value.items():
            if not performer.strip():
                raise ValueError("a performer pattern must not be empty")
            if not all(c.strip() for c in capabilities):
                raise ValueError(f"performer {performer!r}: capabilities must be non-empty strings")
        return value

    @model_validator(mode="after")
    def _keys_and_flags(self) -> Policy:
        try:  # the ledger's own reading, as `temporal-ledger verify --policy` reads them
            Signers.from_tables(
                self.keys,
                decisions=self.signed_decisions,
                verdicts=self.signed_verdicts,
                probes=self.probes,
            )
        except InvalidRequest as exc:
            raise ValueError(str(exc)) from None
        return self

    @classmethod
    def permissive(cls) -> Policy:
        """Everyone may do everything: for the embedded dev setup only. Logged loudly.

        Returns:
            A policy that allows every performer every capability, and lets anyone
            reconcile and approve.
        """
        logger.warning(
            "ledger policy: ALLOW-ALL (every performer may use every capability and anyone may "
            "reconcile or approve); outside local development pass "
            "LedgerPlugin(policy='policy.toml')"
        )
        return cls(
            performers={"*": ["*"]},
            reconcilers=["*"],
            probes=["*"],
            approvers=["*"],
            allow_all=True,
        )

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Read a TOML policy file (the layout above).

        Args:
            path: The policy file.

        Returns:
            The policy.

        Raises:
            InvalidRequest: The file is missing, is not TOML, or holds an unknown section,
                key or value; the message names what is wrong.
        """
        path = Path(path)
        data = read_policy_file(path)
        unknown = set(data) - {"performers", "reconcile", "approve", "hints", "tools", "keys"}
        if unknown:
            raise InvalidRequest(
                f"policy file {path}: unknown section(s) {sorted(unknown)}; "
                "expected [performers], [reconcile], [approve], [hints], [keys] and [tools]"
            )
        for section, (keys, takes) in _SECTIONS.items():
            table = data.get(section, {})
            if not isinstance(table, dict) or set(table) - keys:
                raise InvalidRequest(f"policy file {path}: [{section}] takes only {takes}")
        hints, reconcile, approve = (data.get(name, {}) for name in _SECTIONS)
        # The ledger's own reading of the signing part, so that `temporal-ledger verify
        # --policy` and the workers judge the same keys the same way.
        signers = Signers.from_policy(data, where=f"policy file {path}")
        try:
            return cls(
                performers=data.get("performers", {}),
                reconcilers=reconcile.get("actors", []),
                probes=list(signers.probes),
                gated=approve.get("capabilities", []),
                approvers=approve.get("actors", []),
                gate_destructive=approve.get("destructive", False),
                trust_hints=hints.get("trust", []),
                tools=data.get("tools", {}),
                keys={actor: list(keys) for actor, keys in signers.keys.items()},
                signed_decisions=signers.decisions_signed,
                signed_verdicts=signers.verdicts_signed,
            )
        except ValidationError as exc:
            raise InvalidRequest(f"policy file {path}: {exc}") from None

    def authority_for(self, performer: str) -> Authority:
        """The capabilities the performer holds now.

        Args:
            performer: Who acts.

        Returns:
            The ledger's :class:`~temporal_ledger.ledger.Authority` for the performer:
            every capability pattern of every ``[performers]`` pattern it matches.
        """
        return Authority(
            performer,
            [
                capability
                for pattern, granted in self.performers.items()
                if fnmatch.fnmatchcase(performer, pattern)
                for capability in granted
            ],
        )

    def may_reconcile(self, actor: str) -> bool:
        """Whether ``actor`` may give a verdict on an unknown effect.

        Args:
            actor: Who answers.

        Returns:
            ``True`` if the actor matches a pattern of ``[reconcile] actors``.
        """
        return bool(actor) and _matches(actor, self.reconcilers)

    def may_probe(self, tool: str) -> bool:
        """Whether ``tool``'s probe may record a verdict on an unknown effect.

        Args:
            tool: The tool's (activity's) name.

        Returns:
            ``True`` if the tool matches a pattern of ``[reconcile] probes``.
        """
        return _matches(tool, self.probes)

    def trusts_hints_of(self, tool: str | None, *, server: str | None = None) -> bool:
        """Whether a hint of ``tool`` that relaxes the ledger counts.

        Args:
            tool: The tool's name.
            server: Its server's name, if known.

        Returns:
            ``True`` if the tool's name, or ``server/tool``, matches ``[hints] trust``.
        """
        if tool is None:
            return False
        names = [tool] if server is None else [tool, f"{server}/{tool}"]
        return any(_matches(name, self.trust_hints) for name in names)

    def requires_approval(self, capability: str) -> bool:
        """Whether every call of ``capability`` waits for a person's approval.

        Args:
            capability: The call's capability.

        Returns:
            ``True`` if it matches a pattern of ``[approve] capabilities``.
        """
        return _matches(capability, self.gated)

    def may_approve(self, actor: str) -> bool:
        """Whether ``actor`` may approve or reject calls (never its own: see the
        workflow's check of the performer).

        Args:
            actor: Who decides.

        Returns:
            ``True`` if the actor matches a pattern of ``[approve] actors``.
        """
        return bool(actor) and _matches(actor, self.approvers)

    def signers(self) -> Signers:
        """The actors' keys and which decisions must be signed, as the ledger checks them.

        Returns:
            The ledger's signature checker for this policy.
        """
        return Signers(
            keys=self.keys,
            decisions_signed=self.signed_decisions,
            verdicts_signed=self.signed_verdicts,
            probes=tuple(self.probes),
        )

    def treatment(
        self,
        *,
        capability: str,
        retry_safe: bool,
        requires_approval: bool = False,
        tool: str | None = None,
        hints: ToolHints | None = None,
        server: str | None = None,
    ) -> Treatment:
        """How to handle one call: its declaration, then its hints, then ``[tools]``.

        Args:
            capability: The call's capability.
            retry_safe: What the tool declares.
            requires_approval: What the tool declares.
            tool: The tool's name, for ``[tools]`` and ``[hints] trust``.
            hints: The tool's annotations from its server (MCP), if any.
            server: The name of the tool's server, for ``[hints] trust``, if known.

        Returns:
            Whether the call is retry-safe and whether it needs an approval.
        """
        requires_approval = requires_approval or self.requires_approval(capability)
        if hints is not None:
            if self.trusts_hints_of(tool, server=server):
                retry_safe = retry_safe or hints.retry_safe
            requires_approval = requires_approval or (self.gate_destructive and hints.may_destroy)
        treatment = Treatment(retry_safe=retry_safe, requires_approval=requires_approval)
        for pattern, rule in self.tools.items():
            if tool is not None and fnmatch.fnmatchcase(tool, pattern):
                # The rule's last word where it has one.
                treatment = treatment.model_copy(update=rule.model_dump(exclude_none=True))
        return treatment


#: The keys each table of a policy file takes, and how its error says so.
_SECTIONS = {
    "hints": ({"trust"}, "trust = [...] (tool names or server/tool patterns)"),
    "reconcile": (
        {"actors", "probes", "require_signature"},
        "actors = [...], probes = [...] and require_signature = true|false",
    ),
    "approve": (
        {"actors", "capabilities", "destructive", "require_signature"},
        "capabilities = [...], actors = [...], destructive = true|false and "
        "require_signature = true|false",
    ),
}


def _matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
