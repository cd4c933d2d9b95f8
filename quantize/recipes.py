"""Named recipes a user can type: a TOML recipe file and `key=value` options.

A recipe file (`--recipes FILE`) holds one table per named recipe; the name is then usable wherever a
scheme is (`SCHEMES=bf16,awq-g64`), and a scheme that needs calibration is built as
`<name>-<mix>`::

    [awq-g64]             # a new name: `scheme` says what it builds
    scheme = "awq-w4a16"
    group_size = 64
    symmetric = false

    [gptq-w4a16]          # a registry scheme's own name: its defaults, overridden
    dampening_frac = 0.05

Every key is checked against the scheme's typed recipe: a misspelled key is a one-line error naming
the file, the table and the known keys.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kqe.core.errors import UserError
from kqe.core.io import NestingError, loads_toml, read_text
from kqe.core.schemes import SCHEMES
from quantize.schemes import Recipe, recipe_for

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""Recipe names become checkpoint names and file names."""


def load_recipe_file(path: Path) -> dict[str, Recipe]:
    """Every table of the recipe file at `path`, validated."""
    try:
        tables = loads_toml(read_text(path, "recipe file (--recipes)"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"recipe file {path} is not valid TOML: {exc}") from None
    except NestingError as exc:
        raise UserError(f"recipe file {path} is not TOML kqe reads ({exc}): fix or replace it") from None
    recipes: dict[str, Recipe] = {}
    for name, table in tables.items():
        where = f"{path} [{name}]"
        if not isinstance(table, dict):
            raise UserError(f'{path}: {name!r} is not a table: write [{name}] with scheme = "…" below')
        if not _NAME.fullmatch(name):
            raise UserError(f"{where}: a recipe name may hold letters, digits, '.', '_' and '-' only")
        options = dict(table)
        scheme = options.pop("scheme", name if name in SCHEMES else None)
        if scheme is None:
            raise UserError(f"{where}: add scheme = one of {', '.join(SCHEMES)}")
        if name in SCHEMES and scheme != name:
            raise UserError(f"{where}: a table named after scheme {name} cannot build {scheme}: rename it")
        if scheme not in SCHEMES:
            raise UserError(f"{where}: unknown scheme {scheme!r}: known schemes are {', '.join(SCHEMES)}")
        recipes[name] = recipe_for(str(scheme), options, where)
    return recipes


def resolve_recipes(names: Sequence[str], recipe_file: Path | None = None) -> dict[str, Recipe]:
    """The recipe of each name: a table of `recipe_file`, else a registry scheme with its defaults."""
    tables = load_recipe_file(recipe_file) if recipe_file is not None else {}
    resolved: dict[str, Recipe] = {}
    for name in names:
        if name in tables:
            resolved[name] = tables[name]
        elif name in SCHEMES:
            resolved[name] = recipe_for(name)
        else:
            also = f", or a table of {recipe_file} ({', '.join(tables) or 'none'})" if recipe_file else ""
            raise UserError(f"unknown scheme {name!r}: known schemes are {', '.join(SCHEMES)}{also}")
    return resolved


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """`["group_size=64", "symmetric=false", "ignore=['lm_head']"]` → typed values (TOML syntax;
    a bare word is a string)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"recipe option {pair!r}: write key=value, e.g. group_size=64")
        try:
            value = loads_toml(f"v = {text.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = text.strip()
        except NestingError as exc:
            raise UserError(f"recipe option {key.strip()!r} in --set is {exc}: give a flat value") from None
        options[key.strip()] = value
    return options
