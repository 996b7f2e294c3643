"""The metrics port's settings are one mixin (coven_codex/metrics/options.py): the daemon's settings
and every adapter's section take the same fields, with the same checks and the same options."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from coven_codex.adapters.kit.config import DiscordSection, SlackSection, TelegramSection
from coven_codex.metrics.options import MetricsOptions, MetricsSettings
from coven_codex.settings import Settings

FIELDS = ("metrics_port", "metrics_host", "metrics_allow")
MODELS: list[type[BaseModel]] = [Settings, SlackSection, DiscordSection, TelegramSection]


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_the_daemon_and_every_adapter_section_declare_the_metrics_settings_alike(model: type[BaseModel]) -> None:
    assert issubclass(model, MetricsSettings)
    for name in FIELDS:
        assert repr(model.model_fields[name]) == repr(MetricsSettings.model_fields[name])


@pytest.mark.parametrize("model", [Settings, SlackSection], ids=lambda model: model.__name__)
def test_a_network_that_is_not_one_is_refused_and_a_set_port_makes_the_options(model: type[MetricsSettings]) -> None:
    with pytest.raises(ValidationError, match="metrics_allow: 'ten' is not a network"):
        model.model_validate({"metrics_allow": ["ten"]})
    assert model.model_validate({}).metrics is None
    options = model.model_validate({"metrics_port": 9464, "metrics_allow": ["10.0.0.0/8"]}).metrics
    assert options is not None
    assert (options.port, options.host, [str(n) for n in options.allow]) == (9464, "127.0.0.1", ["10.0.0.0/8"])
    assert isinstance(options, MetricsOptions)
