"""The one settings object. Built by the CLI (or a server) and passed in;
nothing reads the environment at import time. Every field can be set through
an environment variable ``P2_<FIELD>`` (e.g. ``P2_MAX_PLACEMENTS=50000``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from optimizer_service.p2.planner import Limits
from optimizer_service.service.planning import DEFAULT_NICE, MAX_NICE

_DEFAULTS = Limits()
DEFAULT_HTTP = "127.0.0.1:8080"


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
    service: str = Field("127.0.0.1:50051", description="the optimizer service's address (HOST:PORT) for "
                         "'p2 jobs', 'p2 plan' and the enforcers")
    token: str | None = Field(None, description="bearer token for the service (P2_TOKEN_FILE is preferred: "
                              "an environment variable is visible to other processes of the user)")
    token_file: Path | None = Field(None, description="file holding the service's bearer token ('p2 serve' "
                                    "re-reads it when it changes; ranks on every reconnect)")
    token_grace_seconds: float = Field(300.0, ge=0, le=86_400, description="how long 'p2 serve' still accepts "
                                       "the previous token after its token file changed")
    store: str | None = Field(None, description="the service's store: sqlite:///PATH (default: "
                              "STATE_DIR/service.db) or redis://[:password@]host:port/db")
    state_dir: Path | None = Field(None, description="where the service keeps its SQLite store (default "
                                   "$XDG_STATE_HOME/p2, else ~/.local/state/p2)")
    crash_at: str | None = Field(None, description="testing only: 'p2 serve' SIGKILLs itself at this protocol "
                                 "point (e.g. decision-persisted, commit-sent-to-one); see service/core.py")
    search_records: Path | None = Field(None, description="folder where 'p2 serve' writes each live search's "
                                        "inputs and outcome (JOB-vVERSION.json; 'p2 serve --record-searches'), to "
                                        "be searched again with benchmarks/replay.py")
    search_nice: int = Field(DEFAULT_NICE, ge=0, le=MAX_NICE, description="how much lower than 'p2 serve' its search worker's "
                             "CPU priority is (nice; 0: the same): on a host it shares with the job, a search "
                             "then takes the cores the training loops leave idle")
    vote_timeout: float = Field(10.0, gt=0, description="seconds the service waits for every rank's vote")
    max_jobs: int = Field(1_000, ge=1, le=1_000_000, description="most jobs the service holds; a Register for "
                          "one more is refused until 'p2 jobs delete' removes one")
    http: str | None = Field(None, description="where 'p2 serve' serves the dashboard and /metrics "
                             f"(HOST:PORT; 'off' for none; default {DEFAULT_HTTP}, or a free port when that is taken)")
    http_max_connections: int | None = Field(None, ge=1, le=65536, description="most connections the dashboard "
                                             "holds open at once; more are refused with 503 (default: a quarter of "
                                             "the process' file descriptor limit, 16 to 1024)")
    http_header_timeout: float = Field(10.0, gt=0, le=3600, description="seconds a dashboard client has to send a "
                                       "complete request head, from connecting or from the previous answer")
    http_idle_timeout: float = Field(5.0, gt=0, le=3600, description="seconds a dashboard client may stay silent "
                                     "while the service waits on it (the next request, more body, reading)")
    dashboard_public: bool = Field(True, description="the dashboard's pages, /api/ reads and /metrics need no "
                                   "token (P2_DASHBOARD_PUBLIC=0: they need the service's token too)")
    advertise: str | None = Field(None, description="the HOST:PORT other services name to clients when this "
                                  "'p2 serve' leads (default: the --listen host, or this machine's name when it "
                                  "listens on every interface, and the bound port); unique per service")
    lease_seconds: float = Field(15.0, gt=0, le=3600, description="how long the leadership lease on a Redis "
                                 "store lives after its last renewal (a standby takes over then)")
    lease_renew_seconds: float = Field(2.0, gt=0, le=3600, description="how often the leader renews its lease "
                                       "and a standby tries to take it")
    lease_give_up_seconds: float = Field(10.0, gt=0, le=3600, description="how long a leader goes on without a "
                                         "successful renewal before it stops (below P2_LEASE_SECONDS)")
    dashboard_hosts: str | None = Field(None, description="more Host names the dashboard answers to, besides the "
                                        "address it binds and the loopback names (comma-separated NAME or "
                                        "NAME:PORT; '*' for any, e.g. behind a proxy that checks them); other "
                                        "names are refused (421), which stops DNS rebinding")

    def service_token(self, token_file: Path | None = None) -> str | None:
        """The bearer token: ``token_file`` (a flag), else P2_TOKEN_FILE, else P2_TOKEN; at least
        16 characters (a one-line error says how to make one)."""
        from optimizer_service.service.auth import check_token, read_token
        path = token_file or self.token_file
        if path is not None:
            return read_token(path)
        return None if self.token is None else check_token(self.token, "P2_TOKEN")

    def dashboard_host_list(self) -> tuple[str, ...]:
        """P2_DASHBOARD_HOSTS as a tuple of names (commas or spaces between them)."""
        return tuple(part for part in (self.dashboard_hosts or "").replace(",", " ").split() if part)

    def limits(self) -> Limits:
        return Limits(max_devices=self.max_devices, max_placements=self.max_placements,
                      max_synthesis_devices=self.max_synthesis_devices,
                      max_program_size=self.max_program_size, max_states=self.max_search_states)
