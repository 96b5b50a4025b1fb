"""Server settings: environment variables, an optional TOML file, then defaults."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

from pydantic import field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from app.observability.metrics_config import parse_metrics_config
from app.observability.trace_config import parse_trace_config
from app.paths import PROJECT_ROOT
from app.security.restrictions import GRPC_HEADER_PREFIX, Restrictions, parse_restrictions
from app.settings_fields import SettingsFields

DEFAULT_SETTINGS_FILE = PROJECT_ROOT / "configs" / "server.toml"


def split_list(value: object, separator: str) -> object:
    """A list setting as one variable holds it: a JSON list, or items between `separator`s
    (blank ones dropped); anything else (a list from TOML or code) as it is."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        return json.loads(value)
    if isinstance(value, str):
        return [item.strip() for item in value.split(separator) if item.strip()]
    return value


class Settings(SettingsFields):
    """Everything the server reads at start-up.

    Each field can be set by an environment variable of the same name in upper case
    (`HOST`, `PORT`, `MODEL_REPOSITORY`, ...) or in the TOML file named by
    `SETTINGS_FILE` (default `configs/server.toml`, optional).
    """

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    def frontend_process_count(self) -> int:
        """FRONTEND_PROCESSES, or the default for this machine's cores and GPUs."""
        if self.frontend_processes is not None:
            return self.frontend_processes
        cores = len(os.sched_getaffinity(0))
        has_gpu = (
            bool(glob.glob("/dev/nvidia[0-9]*")) and os.environ.get("CUDA_VISIBLE_DEVICES") != ""
        )
        return min(cores // 4, 8) if has_gpu and cores >= 8 else 1

    @field_validator("api_keys", "cors_allow_origins", "allowed_hosts", mode="before")
    @classmethod
    def split_commas(cls, value: object) -> object:
        """`API_KEYS=a,b` as well as a list (a JSON list, from TOML or code)."""
        return split_list(value, ",")

    @field_validator(
        "http_restricted_api",
        "grpc_restricted_protocol",
        "backend_config",
        "metrics_config",
        "trace_config",
        mode="before",
    )
    @classmethod
    def split_semicolons(cls, value: object) -> object:
        """Options holding commas: several are separated by ';' in one variable (or JSON)."""
        return split_list(value, ";")

    @field_validator("metrics_config")
    @classmethod
    def check_metrics_config(cls, value: list[str]) -> list[str]:
        """Triton's --metrics-config options, checked at start-up."""
        parse_metrics_config(value)
        return value

    @field_validator("trace_config")
    @classmethod
    def check_trace_config(cls, value: list[str]) -> list[str]:
        """Triton's --trace-config options, checked at start-up."""
        parse_trace_config(value)
        return value

    @field_validator("model_repository", mode="before")
    @classmethod
    def repository_list(cls, value: object) -> object:
        """`MODEL_REPOSITORY=<dir>` or a JSON list of folders; in code, a path or a list."""
        if isinstance(value, str) and value.lstrip().startswith("["):
            return json.loads(value)
        if isinstance(value, (str, Path)):
            return [value]
        return value

    @model_validator(mode="after")
    def check_security_options(self) -> Settings:
        """Triton's start-up errors for options that need another one."""
        if self.load_model and self.model_control_mode != "explicit":
            raise ValueError(
                "Error: Use of '--load-model' "
                "requires setting '--model-control-mode=explicit' as well."
            )
        if "*" in self.load_model and len(self.load_model) > 1:
            raise ValueError("Error: '--load-model=*' must be the only --load-model argument.")
        self.http_restrictions()
        self.grpc_restrictions()
        if (self.grpc_use_ssl or self.grpc_use_ssl_mutual) and not (
            self.grpc_server_cert and self.grpc_server_key
        ):
            raise ValueError("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
        if self.grpc_use_ssl_mutual and not self.grpc_root_cert:
            raise ValueError("--grpc-use-ssl-mutual needs --grpc-root-cert")
        if bool(self.http_ssl_certfile) != bool(self.http_ssl_keyfile):
            raise ValueError("HTTP TLS needs both http_ssl_certfile and http_ssl_keyfile")
        if self.http_ssl_ca_certs and not self.http_ssl_certfile:
            raise ValueError(
                "http_ssl_ca_certs (client certificates) "
                "needs http_ssl_certfile and http_ssl_keyfile"
            )
        return self

    @model_validator(mode="after")
    def check_port_collision(self) -> Settings:
        """Triton's start-up error for two services on one address and port."""
        services = [
            ("HTTP", self.host, self.port if self.allow_http else 0),
            ("GRPC", self.grpc_address or self.host, self.grpc_port if self.allow_grpc else 0),
            (
                "metrics",
                self.metrics_address or self.host,
                (self.metrics_port or 0) if self.allow_metrics else 0,
            ),
        ]
        for index, (name, address, port) in enumerate(services):
            for other, other_address, other_port in services[index + 1 :]:
                if port and port == other_port and address == other_address:
                    raise ValueError(
                        f"The server cannot listen to {name} requests and {other} "
                        f"requests at the same "
                        f"address and port {address}:{port}"
                    )
        return self

    def http_restrictions(self) -> Restrictions:
        return parse_restrictions(self.http_restricted_api, "http-restricted-api")

    def grpc_restrictions(self) -> Restrictions:
        return parse_restrictions(
            self.grpc_restricted_protocol, "grpc-restricted-protocol", GRPC_HEADER_PREFIX
        )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = Path(os.environ.get("SETTINGS_FILE", DEFAULT_SETTINGS_FILE))
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls, toml_file=toml_file),
        )
