"""Chat clients: one `complete(system, user) -> str` over an OpenAI-compatible HTTP server
(llama.cpp's llama-server, vLLM, Ollama, OpenAI) or AWS Bedrock.

The answer job's generator, the LLM contextualizer, query rewriting and the eval judge all
talk to a model through these. A failure the question is not to blame for (a timeout, a
retryable HTTP status, the time budget spent) is a BackendError, so a caller can tell it from
a bad reply and a rerun can ask again.
"""
from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from typing import Optional, Protocol

from transforms.common.bounded_http import ReplyTooLarge, open_and_read


class ChatClient(Protocol):
    def complete(self, system: str, user: str) -> str:
        ...


class BackendError(RuntimeError):
    pass


_RETRY_HTTP = {408, 425, 429, 500, 502, 503, 504}


_ERROR_BYTES = 300  # of an HTTP error body, kept for the message (and never more read)
# A reply may hold max_tokens tokens; one token is a few bytes, up to ~6 per character once
# JSON escapes it. 64 bytes a token and 16 KiB for the envelope (id, usage, timings) is far
# above any honest reply and keeps a hostile one from filling memory (issue 35, item 9).
_REPLY_BYTES_PER_TOKEN = 64
_REPLY_ENVELOPE_BYTES = 16 * 1024


def reply_byte_cap(max_tokens: int) -> int:
    """The most bytes of one reply an OpenAI-compatible client reads for max_tokens."""
    return _REPLY_ENVELOPE_BYTES + _REPLY_BYTES_PER_TOKEN * max(1, int(max_tokens))


def _attempts(last: int) -> str:
    return f"{last + 1} attempt{'s' if last else ''}"


class OpenAICompatibleClient:
    """POST {base_url}/chat/completions (vLLM, llama.cpp server, Ollama, OpenAI) via urllib."""

    def __init__(self, base_url: str, model: str, api_key: Optional[str] = None,
                 timeout: float = 30, max_tokens: int = 512, temperature: float = 0,
                 retries: int = 2, backoff_s: float = 1.0, budget_s: Optional[float] = None,
                 budget_key: str = "answer.budget_s"):
        from transforms.common.redact import mask_url, register_secret_values, split_userinfo, url_secrets
        url, user, password = split_userinfo(base_url.rstrip("/"))
        # masked in every message this client raises, and known to redact_text in this process
        self._secrets = [s for s in (api_key, *url_secrets(base_url)) if s]
        register_secret_values(self._secrets)
        self.url = url + "/chat/completions"  # user info never travels in the URL or a message
        self.shown_url = mask_url(self.url)
        self._basic = None
        if user is not None or password is not None:
            import base64
            from urllib.parse import unquote
            self._basic = base64.b64encode(f"{unquote(user or '')}:{unquote(password or '')}".encode()).decode()
        self.model = model
        self.api_key = api_key
        self.budget_s = budget_s  # a deadline: seconds from the first request after which nothing is asked or read
        self.budget_key = budget_key  # the config key that set it, for the message
        self._budget_ends: Optional[float] = None  # set at the first request (_budget_deadline)
        self._budget_lock = __import__("threading").Lock()
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.max_reply_bytes = reply_byte_cap(max_tokens)  # bytes of one reply read, at most
        self.temperature = temperature
        self.retries = retries
        self.backoff_s = backoff_s

    def complete(self, system: str, user: str) -> str:
        """One reply; whatever it raises (an HTTP error body the server sent back included) has
        the key and URL password masked (issue 35, item 2)."""
        try:
            return self._complete(system, user)
        except Exception as e:
            from transforms.common.redact import redact_exception
            raise redact_exception(e, self._secrets)

    def _complete(self, system: str, user: str) -> str:
        body = json.dumps({
            "model": self.model,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": user}],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        elif self._basic:
            headers["Authorization"] = f"Basic {self._basic}"
        for attempt in range(self.retries + 1):
            seconds = self._time_left()  # this request's deadline: timeout_s, or what the budget leaves
            req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                raw = open_and_read(req, seconds, self.max_reply_bytes, _ERROR_BYTES)
                payload = json.loads(raw.decode("utf-8"))
                break
            except ReplyTooLarge as e:  # the same request gets the same reply: not retried
                raise BackendError(f"reply from {self.shown_url} refused: {e} "
                                   f"(max_tokens {self.max_tokens})") from None
            except urllib.error.HTTPError as e:
                detail = getattr(e, "detail", "")
                if e.code not in _RETRY_HTTP or attempt == self.retries:
                    raise BackendError(f"HTTP {e.code} from {self.shown_url} ({_attempts(attempt)}): "
                                       f"{detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError,
                    http.client.HTTPException) as e:
                self._check_budget()  # a request the budget's deadline cut says so
                if attempt == self.retries:
                    raise BackendError(f"request to {self.shown_url} failed ({_attempts(attempt)}): {e}") from None
            except ValueError as e:  # a reply that is not JSON (or not UTF-8)
                raise BackendError(f"reply from {self.shown_url} is not JSON: {e}") from None
            time.sleep(max(0.0, min(self.backoff_s * (2 ** attempt), self._time_left())))
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"unexpected response shape: {str(payload)[:300]}") from None
        if content is not None and not isinstance(content, str):
            raise BackendError(f"unexpected content type: {type(content).__name__}")
        return content or ""

    def _budget_deadline(self) -> Optional[float]:
        """When the budget runs out: budget_s after this client's first request (None: no budget)."""
        if self.budget_s is None:
            return None
        with self._budget_lock:
            if self._budget_ends is None:
                self._budget_ends = time.monotonic() + self.budget_s
            return self._budget_ends

    def _check_budget(self) -> None:
        ends = self._budget_deadline()
        if ends is not None and time.monotonic() >= ends:
            raise BackendError(f"{self.budget_key} ({self.budget_s:g} s of generator time) is spent")

    def _time_left(self) -> float:
        """This request's deadline in seconds from now: timeout_s, capped by what is left of the
        budget (a deadline for the whole run, counted from the first request). Both hold while the
        reply is being read (bounded_http.open_and_read), not only between socket reads."""
        self._check_budget()
        ends = self._budget_deadline()
        return self.timeout if ends is None else min(self.timeout, ends - time.monotonic())


class BedrockClient:
    """Amazon Bedrock via boto3 bedrock-runtime converse (any converse-capable model)."""

    def __init__(self, model_id: str, region: Optional[str] = None, max_tokens: int = 512,
                 temperature: float = 0, timeout: float = 60, max_attempts: int = 4,
                 client=None):
        self.model_id = model_id
        self.max_tokens = max_tokens
        self.temperature = temperature
        if client is None:
            import boto3
            from botocore.config import Config

            client = boto3.client("bedrock-runtime", region_name=region, config=Config(
                read_timeout=timeout, connect_timeout=min(timeout, 10),
                retries={"max_attempts": max_attempts, "mode": "adaptive"}))
        self.client = client

    def complete(self, system: str, user: str) -> str:
        resp = self.client.converse(
            modelId=self.model_id,
            system=[{"text": system}],
            messages=[{"role": "user", "content": [{"text": user}]}],
            inferenceConfig={"maxTokens": self.max_tokens, "temperature": self.temperature},
        )
        try:
            blocks = resp["output"]["message"]["content"]
        except (KeyError, TypeError):
            raise BackendError(f"unexpected converse response: {str(resp)[:300]}") from None
        return "".join(b.get("text", "") for b in blocks)


def llm_client(llm, max_tokens: int, section: str = "llm",
               needed_by: str = "the LLM features") -> OpenAICompatibleClient:
    """The server of a config section with the endpoint keys (`llm:`, or `answer:` for the
    generator), for replies of at most max_tokens."""
    if not llm.base_url or not llm.model:
        raise ValueError(f"{section}.base_url and {section}.model are required {needed_by}")
    return OpenAICompatibleClient(llm.base_url, llm.model, api_key=llm.api_key, timeout=llm.timeout_s,
                                  max_tokens=max_tokens, retries=llm.retries, backoff_s=llm.backoff_s,
                                  budget_s=llm.budget_s, budget_key=f"{section}.budget_s")
