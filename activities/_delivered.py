"""The payloads Temporal delivered to an activity, as the ledger fingerprints them.

A ledgered activity's request is fingerprinted from the payloads Temporal delivered (after
the user's codec), never by encoding the values the activity receives again: a value that
can be read once (an iterator, a generator, pydantic's lazily validated ``Iterable`` field)
would be consumed by that encoding, and the activity would get it empty; and a value the
converter reads but cannot write (such an iterator inside a plain dict) would make a valid
call unledgerable.

Temporal hands an activity interceptor only the decoded values (``ExecuteActivityInput``
has no payloads), so the plugin puts :class:`DeliveredPayloads` in the data converter as a
pass-through codec around the user's own. Temporal's activity worker binds the converter
to each activity task (``DataConverter.with_context`` with an
``ActivitySerializationContext``: the documented way a codec learns which activity it
decodes for) and decodes the task's arguments with it in the task's own coroutine, before
any interceptor runs. The codec bound to that task keeps what it decoded in a context
variable of that coroutine, where the ledger's interceptor reads it: nothing is shared
between tasks, and the value is checked against the running activity's identity.

Why a codec and not a payload converter, whose ``from_payloads`` sees the same payloads:
the agent frameworks' plugins bring converter classes of their own and refuse others
(temporalio's OpenAI Agents plugin accepts only its own class), but every one of them
keeps the codec of the converter it is given.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Sequence
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)

#: Set in an activity task's coroutine by the codec bound to that task: its context, and
#: the batches of payloads it decoded, in order.
_decoded: contextvars.ContextVar[tuple[ActivitySerializationContext, list[list[Payload]]]] = (
    contextvars.ContextVar("ledger_delivered_payloads")
)


@dataclasses.dataclass(eq=False)
class DeliveredPayloads(PayloadCodec, WithSerializationContext):
    """A codec that changes nothing: it runs the user's codec (if any) and, bound to an
    activity task, keeps the payloads it decoded for that task.

    Args:
        inner: The user's codec, run as if this one were not there.
        context: The activity task this instance is bound to (``with_context`` binds it).
    """

    inner: PayloadCodec | None
    context: ActivitySerializationContext | None = None

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """The user's codec's encoding (the payloads as they are without one).

        Args:
            payloads: The payloads to encode.

        Returns:
            The encoded payloads.
        """
        return await self.inner.encode(payloads) if self.inner else list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """The user's codec's decoding; kept for the activity task this codec is bound to.

        Args:
            payloads: The payloads to decode.

        Returns:
            The decoded payloads.
        """
        decoded = await self.inner.decode(payloads) if self.inner else list(payloads)
        if self.context is not None:
            context, batches = _decoded.get((self.context, []))
            if context is not self.context or not batches:
                batches = []
                _decoded.set((self.context, batches))
            batches.append(list(decoded))
        return decoded

    def with_context(self, context: SerializationContext) -> DeliveredPayloads:
        """This codec bound to ``context`` (the user's codec too, if it takes one).

        Args:
            context: What Temporal encodes or decodes for.

        Returns:
            A codec that keeps what it decodes when ``context`` is an activity's.
        """
        inner = self.inner
        if isinstance(inner, WithSerializationContext):
            inner = inner.with_context(context)
        bound = context if isinstance(context, ActivitySerializationContext) else None
        if inner is self.inner and bound is None and self.context is None:
            return self
        return DeliveredPayloads(inner, bound)


def with_delivered_payloads(converter: DataConverter) -> DataConverter:
    """``converter`` with :class:`DeliveredPayloads` around its codec (once)."""
    if isinstance(converter.payload_codec, DeliveredPayloads):
        return converter
    return dataclasses.replace(converter, payload_codec=DeliveredPayloads(converter.payload_codec))


def keeps_delivered(converter: DataConverter) -> bool:
    """Whether activities decoded with ``converter`` leave their payloads to the ledger."""
    return isinstance(converter.payload_codec, DeliveredPayloads)


def delivered_arguments(values: Sequence[Any]) -> list[Payload] | None:
    """The payloads Temporal decoded the running activity's arguments ``values`` from.

    The first batch of as many payloads as there are arguments that the codec bound to this
    activity task decoded: Temporal decodes the arguments first, then the heartbeat
    details of an earlier attempt. With external storage, the codec also decodes each
    stored payload's reference before the payloads are fetched: those batches are passed
    over. ``None`` when no codec of the ledger's saw them (the client's converter lacks
    it) or they do not match the running activity.
    """
    if not values:
        return []
    context, batches = _decoded.get((None, []))
    info = activity.info()
    if context is None or (
        context.activity_id,
        context.activity_type,
        context.workflow_id or None,
    ) != (info.activity_id, info.activity_type, info.workflow_id):
        return None
    fits = (b for b in batches if len(b) == len(values) and not any(map(_is_reference, b)))
    return next(fits, None)


def _is_reference(payload: Payload) -> bool:
    """Whether ``payload`` is external storage's reference to a payload kept elsewhere."""
    encoding = payload.metadata.get("encoding", b"")
    return encoding == b"json/external-storage-reference" or (
        encoding == b"json/protobuf"
        and payload.metadata.get("messageType", b"").endswith(b"ExternalStorageReference")
    )
