"""A user's task YAML read before lm-eval indexes it: lm-eval skips a file it cannot parse with a
warning (the task then "does not exist") and crashes on a `task:` that is not a name. Each YAML under
`--include-path` is parsed here, tags such as `!function` left unresolved, and refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kqe.core.errors import UserError


class _TagsAsText(yaml.SafeLoader):
    """YAML's safe loader that reads any tag (`!function hooks.f`) as its text instead of running it."""


_TagsAsText.add_multi_constructor("!", lambda loader, suffix, node: str(getattr(node, "value", "")))


def check_task_yaml(path: Path, given: str) -> None:
    """UserError naming `path` when it is not YAML, not a mapping, or names its task other than by a
    string (a group's `task:` list holds names or mappings)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
        config: Any = yaml.load(text, Loader=_TagsAsText)  # a safe loader: runs no tag
    except UnicodeDecodeError:
        raise UserError(f"--include-path {given}: {path} is not UTF-8 text; save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"--include-path {given}: {path} cannot be read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise UserError(
            f"--include-path {given}: {path} is not valid YAML{line}: fix it, or move it out of the folder"
        ) from None
    if config is None:
        return  # an empty file: lm-eval skips it, and so may we
    if not isinstance(config, dict):
        raise UserError(
            f"--include-path {given}: {path} holds a {type(config).__name__}, not a task config (a mapping "
            "of task:, dataset_path:, …): fix it, or move it out of the folder"
        )
    task = config.get("task")
    names = task if isinstance(task, list) else [task]
    if ("task" in config and not all(isinstance(name, str | dict) for name in names)) or task == []:
        raise UserError(
            f"--include-path {given}: {path} gives task: {task!r}; a task is named by a string "
            "(a group lists names): fix it"
        )
