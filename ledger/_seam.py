"""What the Temporal side of this distribution uses of the ledger beyond its public face.

``temporal_ledger.activities`` and ``temporal_ledger.workflows`` import the ledger from
its public face (``temporal_ledger.ledger``) or from here, never from its other private
modules: this list is the whole of what they build on, and the one place to look when
one of these parts changes (``docs/repository.md``, Imports). Not public API: a user's
code imports ``temporal_ledger.ledger``.
"""

from ._canonical import canonical_dump, check_json, model_json
from ._keys import step_key
from ._models import (
    ApprovalState,
    Decision,
    EffectState,
    ExecutionContext,
    FailureType,
    NextOperation,
    Verdict,
    may_act_again,
)
from ._open import opener, shown_url
from ._schema import output_misfit, output_template
from ._signatures import DecisionSignature, Signers, read_policy_file
from ._sqlite import path_from_url
from ._template_text import refuse_placeholders, refuse_probe_name
from ._wire import is_wire_key, wire_key

__all__ = [
    "ApprovalState",
    "Decision",
    "DecisionSignature",
    "EffectState",
    "ExecutionContext",
    "FailureType",
    "NextOperation",
    "Signers",
    "Verdict",
    "canonical_dump",
    "check_json",
    "is_wire_key",
    "may_act_again",
    "model_json",
    "opener",
    "output_misfit",
    "output_template",
    "path_from_url",
    "read_policy_file",
    "refuse_placeholders",
    "refuse_probe_name",
    "shown_url",
    "step_key",
    "wire_key",
]
