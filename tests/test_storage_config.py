"""The ``s3:`` section: one endpoint and region for s3:// datasets and checkpoints."""

from __future__ import annotations

import pytest

from ffjobs.config import ConfigError, load_config


def test_s3_section_is_top_level_and_empty_by_default():
    config = load_config(None)
    assert (config.s3.endpoint_url, config.s3.region) == (None, None)
    assert config.to_dict()["s3"] == {"endpoint_url": None, "region": None}
    assert "s3_endpoint_url" not in config.to_dict()["data"]


def test_s3_section_from_overrides():
    config = load_config(None, ["s3.endpoint_url=http://minio:9000", "s3.region=eu-west-1"])
    assert config.s3.client_options() == {
        "endpoint_url": "http://minio:9000",
        "region_name": "eu-west-1",
    }


def test_endpoint_without_scheme_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"^--set: s3\.endpoint_url: must start with http://"):
        load_config(None, ["s3.endpoint_url=minio:9000"])


def test_old_data_keys_are_gone():
    with pytest.raises(ConfigError, match=r"data\.s3_endpoint_url: unknown key"):
        load_config(None, ["data.s3_endpoint_url=http://minio:9000"])
