"""What the Temporal side of this distribution uses of the ledger beyond its public face.

``temporal_ledger.activities`` and ``temporal_ledger.workflows`` import the ledger from
its public face (``temporal_ledger.ledger``) or from here, never from its other private
modules: this list is the whole of what they build on, and the one place to look when
one of these parts changes (``docs/repository.md``, Imports). Not public API: a user's
code imports ``temporal_ledger.ledger``. Each name is imported ``as`` itself, which
re-exports it.
"""

from ._canonical import canonical_dump as canonical_dump
from ._canonical import check_json as check_json
from ._canonical import model_json as model_json
from ._keys import step_key as step_key
from ._models import ApprovalState as ApprovalState
from ._models import Decision as Decision
from ._models import EffectState as EffectState
from ._models import ExecutionContext as ExecutionContext
from ._models import FailureType as FailureType
from ._models import NextOperation as NextOperation
from ._models import Verdict as Verdict
from ._models import may_act_again as may_act_again
from ._open import opener as opener
from ._open import shown_url as shown_url
from ._schema import output_misfit as output_misfit
from ._schema import output_template as output_template
from ._signatures import DecisionSignature as DecisionSignature
from ._signatures import Signers as Signers
from ._signatures import read_policy_file as read_policy_file
from ._sqlite import path_from_url as path_from_url
from ._template_text import refuse_placeholders as refuse_placeholders
from ._template_text import refuse_probe_name as refuse_probe_name
from ._wire import is_wire_key as is_wire_key
from ._wire import wire_key as wire_key
