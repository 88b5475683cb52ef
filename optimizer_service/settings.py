"""The one settings object. Built by the CLI (or a server) and passed in;
nothing reads the environment at import time. Every field can be set through
an environment variable ``P2_<FIELD>`` (e.g. ``P2_MAX_PLACEMENTS=50000``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from optimizer_service.p2.planner import Limits

_DEFAULTS = Limits()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="P2_", extra="ignore", frozen=True)

    max_devices: int = Field(_DEFAULTS.max_devices, ge=1,
                        description="largest topology (devices) the planner accepts")
    max_placements: int = Field(_DEFAULTS.max_placements, ge=1,
                        description="most parallelism matrices one request may explore")
    max_synthesis_devices: int = Field(_DEFAULTS.max_synthesis_devices, ge=1,
                        description="largest reduction group (devices) programs are synthesized for")
    max_program_size: int = Field(_DEFAULTS.max_program_size, ge=1,
                        description="largest --max-size a request may ask for")
    max_search_states: int = Field(_DEFAULTS.max_states, ge=1,
                        description="most search states one synthesis may visit")
    log_level: str = Field("WARNING", description="logging level of the p2 command")
    pure_python: bool = Field(False, description="price plans with the Python scheduler even where the C++ "
                              "twin is built (P2_PURE_PYTHON=1)")
    cluster_dir: Path | None = Field(None, description="where emulated clusters' state folders live "
                                     "(default /run/p2-clusters, else ~/.cache/p2/clusters)")
    master_port: int | None = Field(None, ge=1, le=65535,
                                    description="rank 0's rendezvous port on emulated clusters (default: a free one)")

    def limits(self) -> Limits:
        return Limits(max_devices=self.max_devices, max_placements=self.max_placements,
                      max_synthesis_devices=self.max_synthesis_devices,
                      max_program_size=self.max_program_size, max_states=self.max_search_states)
