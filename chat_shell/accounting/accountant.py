"""The accountant of one guard (SPEC 4): what the request the view would send costs now.

It keeps the calibration samples (persisted ones on earlier turns' replies, and the provider's
answers to the requests this guard shaped), the fit over them, and from those and the view's
running totals the effective estimate. At the end of the turn it writes the samples and the
message counts onto the messages (`annotate_responses`), so the next turn starts calibrated and
tokenizes nothing it has seen. Every figure works from the view's totals: O(new messages).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from chat_shell.accounting.budget import Budget
from chat_shell.accounting.calibration import Estimate, Fit, Reported, Sample, estimate, fit
from chat_shell.accounting.token_counter import REPLY_PRIMING, MessageCount, TokenCounter
from chat_shell.accounting.view import ContextView
from chat_shell.messages.markers import MARKER_KEY, with_markers


@dataclass
class _Request:
    """One model request the guard shaped, and what the provider said about it."""

    length: int
    last_id: str | None
    # Where the view stood when the request was sent (see `ContextView.unchanged_prefix`).
    mark: tuple[int, int]
    message_tokens: int
    local: int
    provider: int | None = None
    response_id: str | None = None


def _provider_input(message: AIMessage) -> int | None:
    usage = message.usage_metadata
    tokens = usage.get("input_tokens") if usage else None
    return tokens if isinstance(tokens, int) and tokens > 0 else None


def _answers(messages: Sequence[BaseMessage], request: _Request) -> bool:
    """Whether the message right after the request's last message is its reply."""
    index = request.length
    return (
        index < len(messages)
        and isinstance(messages[index], AIMessage)
        and (index == 0 or messages[index - 1].id == request.last_id)
    )


@dataclass(eq=False)
class Accountant:
    profile_name: str
    budget: Budget
    counter: TokenCounter
    view: ContextView
    schema_tokens: int
    _guidance_tokens: int = field(default=0, init=False)
    _requests: list[_Request] = field(default_factory=list, init=False)
    _marker_samples: list[tuple[str | None, Sample]] = field(default_factory=list, init=False)
    _live_samples: list[tuple[str | None, Sample]] = field(default_factory=list, init=False)
    _fit: Fit | None = field(default=None, init=False)
    _fit_key: tuple[int, int] = field(default=(0, 0), init=False)

    def set_fixed(self, schema_tokens: int, guidance_tokens: int) -> None:
        """What the request carries besides the view's messages now: the tool schemas offered
        with the view, and the attempt guidance appended to this call's input (0 when none)."""
        self.schema_tokens = schema_tokens
        self._guidance_tokens = guidance_tokens

    @property
    def fixed_tokens(self) -> int:
        """Tool schemas, attempt guidance and reply priming: part of the request, not of any
        message of the view."""
        return self.schema_tokens + self._guidance_tokens + REPLY_PRIMING

    def sync(self, messages: Sequence[BaseMessage]) -> None:
        """Bring the view up to `messages` and take the samples the new ones carry."""
        self._observe(self.view.sync(messages))

    def estimate(self) -> Estimate:
        """The effective estimate of the request the view would send now."""
        view = self.view
        reported = None
        for request in reversed(self._requests):
            if request.provider is None:
                continue
            if view.unchanged_prefix(request.mark, request.length):
                reported = Reported(request.provider, view.message_tokens - request.message_tokens)
            break
        local = view.message_tokens + self.fixed_tokens
        return estimate(
            local, overhead_tokens=self.budget.overhead_tokens, fit=self._calibration(), reported=reported
        )

    def record_request(self, current: Estimate) -> None:
        """The view is sent as it is now: remember the request, to match the provider's answer."""
        view = self.view
        last_id = view.state[-1].id if len(view) else None
        self._requests.append(_Request(len(view), last_id, view.mark(), view.message_tokens, current.local))

    def local_parts(self) -> dict[str, int]:
        """Local tokens of the request by breakdown source, the fixed ones included."""
        parts = self.view.local_parts()
        parts["tool_schemas"] = parts.get("tool_schemas", 0) + self.schema_tokens
        parts["system"] = parts.get("system", 0) + REPLY_PRIMING + self._guidance_tokens
        return parts

    def annotate_responses(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """`messages` with a `token_count` marker on every message that lacks a valid one, and
        a calibration sample (local tokens of the request as sent, provider input tokens,
        profile) on each AIMessage that answered a request this guard shaped."""
        messages = list(messages)
        view = self.view
        self.sync(messages)
        responses = {r.length: r for r in self._requests if _answers(messages, r)}
        annotated: list[BaseMessage] = []
        for index, message in enumerate(messages):
            fields: dict[str, Any] = {}
            if not view.marked[index]:
                if view.state[index] is view.shown[index]:
                    count = MessageCount(view.tokens[index], view.hashes[index])
                else:
                    count = self.counter.count_message(message)
                fields["token_count"] = self.counter.marker(count)
            request = responses.get(index)
            already = (message.additional_kwargs.get(MARKER_KEY) or {}).get("local_input_tokens")
            if request is not None and isinstance(message, AIMessage) and already is None:
                fields["local_input_tokens"] = request.local
                fields["provider_input_tokens"] = _provider_input(message)
                fields["profile"] = self.profile_name
            if fields:
                message = with_markers(message, **fields)
                view.adopt(index, message)
            annotated.append(message)
        return annotated

    # -- calibration -----------------------------------------------------------------------

    def _observe(self, first_new: int) -> None:
        """Calibration samples from the new messages: persisted ones on earlier turns' replies,
        and the provider's answer to this guard's latest request."""
        view = self.view
        if first_new == 0:
            self._marker_samples.clear()
            self._fit = None
        for message in view.state[first_new:]:
            if not isinstance(message, AIMessage):
                continue
            raw = message.additional_kwargs.get(MARKER_KEY) or {}
            local, provider = raw.get("local_input_tokens"), raw.get("provider_input_tokens")
            if (
                isinstance(local, int)
                and isinstance(provider, int)
                and raw.get("profile") == self.profile_name
            ):
                self._marker_samples.append((message.id, Sample(local, provider)))
        if self._requests:
            request = self._requests[-1]
            if request.response_id is None and _answers(view.state, request):
                response = view.state[request.length]
                assert isinstance(response, AIMessage)
                request.response_id = response.id
                request.provider = _provider_input(response)
                if request.provider is not None:
                    self._live_samples.append((response.id, Sample(request.local, request.provider)))

    def _calibration(self) -> Fit:
        """The fit over this profile's samples, recomputed only when a sample arrives."""
        key = (len(self._marker_samples), len(self._live_samples))
        if self._fit is None or self._fit_key != key:
            live_ids = {message_id for message_id, _ in self._live_samples}
            samples = [s for message_id, s in self._marker_samples if message_id not in live_ids]
            samples += [s for _, s in self._live_samples]
            self._fit = fit(samples, self.budget.overhead_tokens)
            self._fit_key = key
        return self._fit
