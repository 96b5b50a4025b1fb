"""The chart's `server:` values are the server's own settings: with the chart's defaults, every
setting the server container gets is the value the server would take by itself (the
settings' definition is the one source of their defaults)."""

from __future__ import annotations

from typing import Any

from app.settings import Settings
from tests.deploy.conftest import env, render

CHART_CHOICES = {"MODEL_REPOSITORY": "the repository the chart mounts"}
"""Settings the chart sets on purpose to something of its own (the reason)."""


def setting_names() -> dict[str, str]:
    """Environment variable -> settings field."""
    names = {}
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names[(alias if isinstance(alias, str) else name).upper()] = name
    return names


def test_the_charts_defaults_are_the_servers_defaults() -> None:
    container_env: dict[str, Any] = env(render("default"))
    fields = setting_names()
    given = {
        fields[key]: value
        for key, value in container_env.items()
        if key in fields and key not in CHART_CHOICES
    }
    assert len(given) >= 10, container_env
    chosen = Settings(**given).model_dump(include=set(given))
    defaults = {
        name: Settings.model_fields[name].get_default(call_default_factory=True) for name in given
    }
    assert chosen == defaults
