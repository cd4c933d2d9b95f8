"""One record for everything that talks to a running server: scoring, generation, perplexity, load."""

from __future__ import annotations

from dataclasses import dataclass

from kqe.core.errors import UserError


@dataclass(frozen=True)
class Endpoint:
    """A running OpenAI-compatible vLLM server on this machine."""

    base_url: str
    api_key: str | None
    served_name: str | None
    """Model name to request; None: the one model the server lists (`kqe load --url`)."""

    def model(self) -> str:
        """The served name requests carry; UserError when it is not known."""
        if self.served_name is None:
            raise UserError(f"{self.base_url}: which served model to ask is not known: pass --served-name")
        return self.served_name
