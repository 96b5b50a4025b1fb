"""An OpenAI stream starts once the engine has taken its requests.

vLLM's serving classes return a stream before any engine request exists (they are made when
it is first read), and answer a request the engine refuses while taking it (a token id out
of the vocabulary, a parameter the model cannot use) with an error event inside a 200
stream, where the same body unstreamed is a 400. Here each engine request tells when the
engine has taken it (`AcceptingAsyncLLM.on_accepted`) or why not, and the stream is begun
before the response is: a refusal is raised with its own status instead."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["AcceptanceKey", "Acceptances", "acceptance_key", "begun"]

AcceptanceKey = tuple[str, int]


def acceptance_key(request_id: str, prompt: object) -> AcceptanceKey:
    """What the engine's taking of one engine request is told by: its id and its prompt (the
    object itself). Requests a client gave the same id (`X-Request-Id`) share vLLM's id,
    never a prompt, so that one's acceptance cannot be taken for another's."""
    return request_id, id(prompt)


class Acceptances:
    """Whether the engine has taken each of one request's engine requests."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self._futures: list[asyncio.Future[None]] = []

    def watch(
        self, key: AcceptanceKey, outputs: AsyncIterator[T], streaming: bool
    ) -> AsyncGenerator[T, None]:
        """`outputs` of the engine request `key` names, its acceptance watched. Streaming, a
        refusal ends them quietly: `begun` raises it (vLLM's stream would log it as a crash)."""
        acceptance: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        acceptance.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._futures.append(acceptance)
        self._llm.on_accepted[key] = lambda: settle(acceptance)
        return self._watched(key, outputs, acceptance, streaming)

    async def _watched(
        self,
        key: AcceptanceKey,
        outputs: AsyncIterator[T],
        acceptance: asyncio.Future[None],
        streaming: bool,
    ) -> AsyncGenerator[T, None]:
        try:
            async for output in outputs:
                settle(acceptance)
                yield output
        except Exception as exc:
            refused = not acceptance.done()
            settle(acceptance, exc)
            if not (refused and streaming):
                raise
        finally:
            self._llm.on_accepted.pop(key, None)
            if not acceptance.done():
                acceptance.cancel()
            aclose = getattr(outputs, "aclose", None)
            if aclose is not None:
                await aclose()

    def refusal(self) -> BaseException | None:
        """Why the engine refused one of the engine requests before taking it, if it did."""
        for future in self._futures:
            if future.done() and not future.cancelled() and future.exception() is not None:
                return future.exception()
        return None

    async def all_accepted(self) -> None:
        """Until every engine request so far was taken (or one was refused)."""
        if self._futures:
            await asyncio.wait(self._futures)


def settle(acceptance: asyncio.Future[None], error: BaseException | None = None) -> None:
    if acceptance.done():
        return
    if error is None:
        acceptance.set_result(None)
    else:
        acceptance.set_exception(error)


async def begun(
    stream: AsyncGenerator[str, None], acceptances: Acceptances
) -> AsyncGenerator[str, None]:
    """`stream`, begun until the engine took its requests or it gave its first frame; the
    refusal of one the engine did not take is raised here, the stream closed unread."""
    first = asyncio.ensure_future(anext(stream))
    accepted = asyncio.ensure_future(acceptances.all_accepted())
    try:
        await asyncio.wait({first, accepted}, return_when=asyncio.FIRST_COMPLETED)
        refusal = acceptances.refusal()
        if refusal is not None:
            raise refusal
    except BaseException:
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        await stream.aclose()
        raise
    finally:
        accepted.cancel()
    return first_then_rest(first, stream)


async def first_then_rest(
    first: asyncio.Future[str], stream: AsyncGenerator[str, None]
) -> AsyncGenerator[str, None]:
    """The stream's first frame (awaited), then the rest."""
    try:
        try:
            yield await first
        except StopAsyncIteration:
            return
        async for frame in stream:
            yield frame
    finally:
        if not first.done():
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
        await stream.aclose()
