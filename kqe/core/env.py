"""Environment variables read one way everywhere: an empty value is an unset one, and a switch is on or
off only when it says so (`KQE_ONLINE=false` is off, `KQE_ONLINE=maybe` is refused in one line)."""

from __future__ import annotations

import os

from kqe.core.errors import UserError

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")
ACCEPTED = "/".join(word for pair in zip(_ON, _OFF, strict=True) for word in pair)
"""The values a switch takes, as said in its error (any case): 1/0/true/false/yes/no/on/off."""


def env_value(name: str) -> str | None:
    """The value of the environment variable `name`; None when it is unset or empty (`KQE_HOME=` in a
    shell or `make KQE_HOME=` names no folder: it means the default, not the current folder)."""
    return os.environ.get(name) or None


def env_switch(name: str) -> bool | None:
    """The boolean environment switch `name`: True for 1/true/yes/on, False for 0/false/no/off (any
    case, surrounding blanks ignored), None when unset or empty; any other value is a UserError naming
    the variable, its value and the accepted values."""
    raw = env_value(name)
    if raw is None:
        return None
    word = raw.strip().lower()
    if word in _ON:
        return True
    if word in _OFF:
        return False
    raise UserError(
        f"{name}={raw!r} is not a switch value: set it to one of {ACCEPTED} (any case) or unset it"
    )
