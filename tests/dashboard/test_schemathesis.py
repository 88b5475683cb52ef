"""The dashboard's API against its own OpenAPI document, with schemathesis, on a real ``p2 serve``
(token, SQLite, a registered job): generated requests to every operation, with and without the
token, and every answer checked — no 5xx, a status the document lists, a body and content type
that match it (issue 30: the document said nothing of 400/401/403/404/409/429, ``job_id``'s
pattern was not the store's, and a body that was not JSON answered ``{"detail"}``).

Bounded: at most 20 examples per operation and mode, no deadline per example, no shrinking; the
whole file takes about a minute here (2 shared cores)."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pytest

schemathesis = pytest.importorskip("schemathesis")

import requests  # noqa: E402
from hypothesis import HealthCheck, Phase, given, reject, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

from schemathesis.checks import positive_data_acceptance  # noqa: E402

from tests.dashboard.conftest import TOKEN  # noqa: E402
from tests.support.service_process import Ranks, ServeProcess  # noqa: E402

pytestmark = pytest.mark.slow
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Operations whose valid input is more than a schema states (a topology's YAML and the axes that fit it; a
#: plan that fits the job): schema-valid requests may rightly get 422, so "valid data is accepted" is not
#: checked there (every other check is).
SEMANTIC = {"GET /api/explore", "POST /api/jobs/{job_id}/plans"}
HEAD_LIMIT = 16 * 1024 - 512        # h11's limit on a request head, less the request line's and our headers' rest


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``p2 serve`` with a token and its dashboard, one job of 2 simulated ranks; its base URL."""
    folder = tmp_path_factory.mktemp("schemathesis")
    (folder / "token").write_text(TOKEN)
    serve = ServeProcess(folder, "--token-file", str(folder / "token"), "--no-replan", dashboard=True)
    ranks = Ranks(serve.address, "schema-job", 2, token=TOKEN)
    try:
        yield serve.http_url
    finally:
        ranks.close()
        code, log = serve.stop()
        assert "Traceback" not in log, log[-3000:]         # nothing a client sent made the service fail


def head_bytes(case) -> int:
    """About how long the request's head is: its path and query, URL-encoded, and its headers."""
    query = urlencode(case.query or {}, doseq=True)
    return len(quote(case.formatted_path)) + len(query) + sum(len(k) + len(str(v)) + 4
                                                                for k, v in (case.headers or {}).items())


def check_every_operation(base_url: str, mode, headers: dict[str, str], examples: int) -> int:
    """Generated cases (``mode``: valid or invalid input) for every operation, each answer checked
    against the document; how many operations ran. (schemathesis' own pytest plugin does not run
    under this pytest, so the operations are looped here, each its own bounded hypothesis run.)"""
    api = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    operations = 0
    for result in api.get_all_operations():
        operation = result.ok()

        excluded = [positive_data_acceptance] if operation.label in SEMANTIC else []

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=examples, deadline=None, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck), derandomize=True, database=None)
        def run(case) -> None:
            try:
                case.call_and_validate(headers=headers, excluded_checks=excluded)
            except requests.ConnectionError:
                # A request head over the HTTP server's 16 KiB is refused by the transport before the app
                # (and the connection reset while the client still sends): not the API's answer to judge.
                reject() if head_bytes(case) > HEAD_LIMIT else None
                raise

        try:
            run()
        except Unsatisfiable:           # no invalid input exists for an operation without parameters
            assert mode == GenerationMode.NEGATIVE, operation.label
            continue
        except Exception as error:
            raise AssertionError(f"{operation.label} ({mode.value}): {error}") from error
        operations += 1
    return operations


@pytest.mark.parametrize(("mode", "token", "examples"), [("positive", True, 20), ("negative", True, 10),
                                                        ("positive", False, 5)],
                         ids=["valid-with-token", "invalid-with-token", "valid-without-token"])
def test_the_api_answers_what_its_document_says(served, mode, token, examples):
    ran = check_every_operation(served, GenerationMode(mode), AUTH if token else {}, examples)
    assert ran >= (15 if mode == "positive" else 10)
