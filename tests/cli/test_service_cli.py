"""``p2 serve``, ``p2 jobs``, ``p2 plan`` through the real entry point: a real
service process, simulated ranks over real gRPC, one-line errors, SIGTERM."""

from __future__ import annotations

import contextlib
import json
import socket
import time

import grpc
import pytest

from optimizer_service.plan import Plan
from p2.v1 import enforcer_link_pb2_grpc
from tests.support.certs import MISSING, have_openssl, make_certificates
from tests.support.cli import p2
from tests.support.participants import SimRank
from tests.optimizer_service.syndicate.test_live_search import TOPOLOGY as LIVE_TOPOLOGY
from tests.optimizer_service.syndicate.test_live_search import passthrough_traces
from tests.support.service_process import Ranks, ServeProcess, free_port
from tests.support.telemetry import TelemetryFeed

pytestmark = pytest.mark.slow


def test_serve_jobs_and_plans_end_to_end(tmp_path):
    serve = ServeProcess(tmp_path)
    try:
        client = ("--service", serve.address)
        listed = p2("jobs", "list", *client, "--json", "-")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"jobs": []}
        ranks = Ranks(serve.address, "train-1", 2)
        try:
            shown = p2("jobs", "show", "train-1", *client, "--json", "-")
            assert shown.returncode == 0, shown.stderr
            job = json.loads(shown.stdout)
            assert job["state"] == "live" and job["world_size"] == 2 and len(job["ranks"]) == 2
            assert (job["fit"], job["bound"], job["search_version"]) == (None, None, None)    # no search yet
            assert job["plans"] == [] and job["passthrough"] == {
                "predicted_seconds": None, "measured_seconds": None, "bound_iteration_seconds": None,
                "ratio_to_bound": None, "predicted_ratio_to_bound": None}
            plan_file = tmp_path / "plan.json"         # as p2 optimize --plan writes one: predicted and bound
            plan_file.write_text(Plan(1, 2, {0: None}, (), predicted_iteration_seconds=0.3,
                                      bound_iteration_seconds=0.2).to_json())
            submitted = p2("plan", "submit", "--job", "train-1", str(plan_file), "--wait", "20", *client,
                           "--json", "-")
            assert submitted.returncode == 0, submitted.stderr
            record = json.loads(submitted.stdout)
            assert record["version"] == 1 and record["state"] == "committed"
            assert record["bound_iteration_seconds"] == 0.2 and record["predicted_ratio_to_bound"] == pytest.approx(1.5)
            history = json.loads(p2("plan", "list", "--job", "train-1", *client, "--json", "-").stdout)
            assert [p["version"] for p in history["plans"]] == [1]
            one = p2("plan", "show", "--job", "train-1", "1", *client)
            assert one.returncode == 0 and "committed" in one.stdout, one.stderr
            assert "bound 200 ms" in one.stdout and "predicted/bound 1.50x" in one.stdout, one.stdout
            # p2 jobs show: each plan's times beside the bound; passthrough's bound is the first plan's
            job = json.loads(p2("jobs", "show", "train-1", *client, "--json", "-").stdout)
            assert [(p["version"], p["predicted_seconds"], p["bound_iteration_seconds"], p["measured_seconds"],
                     p["ratio_to_bound"]) for p in job["plans"]] == [(1, 0.3, 0.2, None, None)]
            assert job["passthrough"]["bound_iteration_seconds"] == 0.2
            text = p2("jobs", "show", "train-1", *client).stdout
            assert "PRED/BOUND" in text and "MEAS/BOUND" in text and "no fitted model yet" in text, text
            assert [line.split()[:6] for line in text.splitlines() if line.split()[:1] in (["v1"], ["passthrough"])] \
                == [["passthrough", "-", "-", "-", "200", "ms"], ["v1", "committed", "300", "ms", "-", "200"]], text
            table = p2("jobs", "list", *client)
            assert "train-1" in table.stdout and "live" in table.stdout
        finally:
            ranks.close()
    finally:
        code, log = serve.stop()
    assert code == 0, log
    assert "registered" in log and "commit" in log and "stopping" in log


def test_jobs_show_gives_the_model_the_latest_search_fitted_and_each_values_effect(tmp_path):
    """A real search by the service (the ranks answer its trace request): ``p2 jobs show`` has the
    search's fitted model (channels, host) and what the prediction is without each fitted value,
    and ``--json`` the fit and the bound as the search's stored decision has them."""
    topology = tmp_path / "topology.yaml"
    topology.write_text(LIVE_TOPOLOGY.to_yaml())
    policy = ["first_plan_after=5", "warmup=1", "window=4", "min_samples=2", "evaluate=4"]
    serve = ServeProcess(tmp_path, "--topology", str(topology), *(a for item in policy for a in ("--policy", item)))
    client = ("--service", serve.address)
    try:
        ranks = Ranks(serve.address, "fit-1", 4)
        for sim, trace in zip(ranks.ranks, passthrough_traces([0.02] * 8)):
            sim.trace = trace
        feed = TelemetryFeed(ranks)

        def shown():        # the JSON and the text of one search (the service may search again meanwhile)
            before = json.loads(p2("jobs", "show", "fit-1", *client, "--json", "-").stdout)
            text = p2("jobs", "show", "fit-1", *client).stdout
            after = json.loads(p2("jobs", "show", "fit-1", *client, "--json", "-").stdout)
            return before["fit"] and before["search_version"] == after["search_version"] and (after, text)

        try:
            job, text = until(shown, timeout=90)
            events = json.loads(p2("jobs", "events", "fit-1", *client, "--json", "-").stdout)["decisions"]
        finally:
            feed.close()
            ranks.close()
    finally:
        code, log = serve.stop()
    assert code == 0, log
    searched = next(d for d in events if d["kind"] == "searched" and d["version"] == job["search_version"])
    assert job["fit"] == searched["search"]["fit"] and job["bound"] == searched["search"]["bound"]
    assert job["search_version"] == searched["version"] >= 1
    fit = job["fit"]
    rows = {" ".join(line.split()[:2 if line.split()[0] == "channel" else 1]): line.split()
            for line in text.splitlines() if line.split()[:1] in (["channel"], ["host"])}
    assert set(rows) == {"channel 0", "channel 1", "host"}, text
    zero = fit["channels"]["0"]
    assert rows["channel 0"][2:4] == [f"{zero['motif_seconds'] * 1e3:.3g}", f"{zero['round_seconds'] * 1e3:.3g}"]
    assert rows["channel 0"][-3:] == ["rate,", "motif_seconds,", "latency"]          # HOW: all three fitted
    effects = [line.strip() for line in text.splitlines() if line.strip().startswith("prediction without")]
    assert effects == [f"prediction without {e['parameter']}: {e['predicted_seconds_without'] * 1e3:.1f} ms "
                       f"(with all: {fit['fit_predicted_seconds'] * 1e3:.1f} ms)" for e in fit["effects"]], text
    assert {"prediction without channel 0 rate", "prediction without host motif_seconds"} <= \
        {line.split(":")[0] for line in effects}
    assert f"bound by {job['bound']['binding']}" in text
    readings = [(how, fit[field], value, unit) for field, how, value, unit in (
        ("other_reading", "every link at its calibrated rate", "motif_seconds", "per motif"),
        ("per_motif_reading", "every link at its calibrated rate and round", "motif_seconds", "per motif"),
        ("slowest_round_reading", "every link at its calibrated rate and fixed cost", "round_seconds", "per round"))]

    def ms(seconds):          # three significant digits, whole from 100 ms on
        return f"{seconds * 1e3:.0f}" if seconds >= 0.1 else f"{seconds * 1e3:.3g}"

    said = [line.strip() for line in text.splitlines() if line.strip().startswith("chosen by the worst")]
    between = [line.strip() for line in text.splitlines() if line.strip().startswith("predicted ")
               and "the middle of the window" in line]
    if readings[0][1] is None:          # the job searched again meanwhile: a later search chooses by the fit alone
        assert said == [] and readings[1][1] is None and readings[2][1] is None, text
        assert between == [] and fit["predicted_seconds"] == fit["fit_predicted_seconds"], text
    else:       # a cluster state's first search chose by the worst of four readings of its window
        def values(reading, value):
            return ", ".join(f"{where} {ms(entry[value])} ms" for where, entry in
                             (("channel 0", reading["channels"]["0"]), ("channel 1", reading["channels"]["1"]),
                              ("host", reading["host"])))

        chosen = readings[2][1]["chosen_seconds"]
        assert readings[0][1]["chosen_seconds"] == readings[1][1]["chosen_seconds"] == chosen
        assert said == ["chosen by the worst of this fit and the window read with "
                        + "; and with ".join(f"{how} ({values(reading, value)} {unit})"
                                             for how, reading, value, unit in readings)
                        + f"; the chosen plan at the worst reading {ms(chosen)} ms"], text
        # and predicted at the middle of the window read all per motif and all per round
        at_motif, at_round = fit["predicted_between"]
        assert fit["predicted_seconds"] == pytest.approx((at_motif + at_round) / 2)
        assert between == [(f"predicted {ms(fit['predicted_seconds'])} ms: the middle of the window read with all its "
                            f"excess per motif ({ms(at_motif)} ms) and all of it per round ({ms(at_round)} ms); "
                            f"by this fit {ms(fit['fit_predicted_seconds'])} ms")], text


def until(predicate, timeout: float):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)
    return value


def test_client_errors_are_one_line_with_exit_codes(tmp_path):
    serve = ServeProcess(tmp_path, env={"P2_TOKEN": "tok-0123456789abcdef"})
    try:
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(Plan(1, 2, {0: None}, ()).to_json())
        token_file = tmp_path / "token"
        token_file.write_text("tok-0123456789abcdef\n")
        cases = [
            (["jobs", "list", "--service", serve.address], 2, "missing bearer token"),
            (["jobs", "list", "--service", serve.address], 2, "wrong bearer token",
             {"P2_TOKEN": "nope-0123456789abcdef"}),
            (["jobs", "list", "--service", serve.address], 2, "fewer than the 16 required", {"P2_TOKEN": "nope"}),
            (["jobs", "show", "ghost", "--service", serve.address, "--token-file", str(token_file)], 2, "no job 'ghost'"),
            (["plan", "submit", "--job", "ghost", str(tmp_path / "missing.json"), "--service", serve.address],
             2, "cannot read the plan"),
            (["plan", "show", "--job", "ghost", "1", "--service", "127.0.0.1:1", "--timeout", "2"], 1,
             "cannot reach the service"),
        ]
        for args, code, words, *env in cases:
            result = p2(*args, env=env[0] if env else None)
            assert result.returncode == code, (args, result.stderr)
            assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr, result.stderr
    finally:
        code, _ = serve.stop()
    assert code == 0


def test_jobs_list_follows_pages_and_jobs_delete_refuses_then_forces(tmp_path):
    serve = ServeProcess(tmp_path, "--no-replan", "--http", "off", env={"P2_MAX_JOBS": "3"})
    client = ("--service", serve.address)
    ranks = [Ranks(serve.address, name, 1) for name in ("job-c", "job-a", "job-b")]
    try:
        def listed(*args: str) -> list[str]:
            result = p2("jobs", "list", *args, *client, "--json", "-")
            assert result.returncode == 0, result.stderr
            return [job["job_id"] for job in json.loads(result.stdout)["jobs"]]

        assert listed() == ["job-a", "job-b", "job-c"]
        assert listed("--page-size", "1") == ["job-a", "job-b", "job-c"]      # three calls, one cursor each
        assert listed("--limit", "2", "--page-size", "1") == ["job-a", "job-b"]
        with grpc.insecure_channel(serve.address) as channel:   # a fourth job is over P2_MAX_JOBS=3
            fourth = enforcer_link_pb2_grpc.EnforcerLinkStub(channel).Connect(
                iter([SimRank("job-d", 0, 1).register_message()]), timeout=10)
            with pytest.raises(grpc.RpcError) as refused:
                list(fourth)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value
        assert "P2_MAX_JOBS=3" in refused.value.details() and "p2 jobs delete" in refused.value.details()
        helped = p2("jobs", "delete", "--help")
        assert helped.returncode == 0 and "--force" in helped.stdout, helped.stderr
        for args, words in [(["job-a"], "connected"), (["ghost"], "no job 'ghost'"),
                            (["bad id!"], "job_id"), ([], "Missing argument")]:
            result = p2("jobs", "delete", *args, *client)
            assert result.returncode == 2, (args, result.stderr)
            lines = result.stderr.strip().splitlines()
            assert words in result.stderr and (len(lines) == 1 or not args), result.stderr
        out = tmp_path / "deleted.json"
        forced = p2("jobs", "delete", "job-a", "--force", "--json", str(out), *client)
        assert forced.returncode == 0 and "job job-a deleted" in forced.stdout, forced.stderr
        assert json.loads(out.read_text()) == {"job_id": "job-a", "deleted": True, "force": True}
        assert listed() == ["job-b", "job-c"]
        assert "job-a" not in p2("jobs", "list", *client).stdout
    finally:
        for group in ranks:
            group.close()
        code, log = serve.stop()
    assert code == 0, log
    assert "job job-a: deleted" in log, log


def test_serve_refuses_bad_settings_with_one_line(tmp_path):
    for args, words in [(["--store", "mysql://x"], "unsupported scheme"),
                        (["--token-file", str(tmp_path / "none")], "cannot read the token file"),
                        (["--tls-cert", str(tmp_path / "c.pem")], "TLS needs both"),
                        (["--http", "nowhere"], "--http 'nowhere' is not HOST:PORT")]:
        result = p2("serve", "--listen", "127.0.0.1:0", "--store", f"sqlite:///{tmp_path / 's.db'}", *args)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr, result.stderr


def test_the_dashboard_port_taken_is_an_error_when_asked_for_and_a_fallback_by_default(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = p2("serve", "--listen", "127.0.0.1:0", "--store", f"sqlite:///{tmp_path / 's.db'}",
                    "--http", f"127.0.0.1:{port}")
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert f"cannot serve the dashboard on 127.0.0.1:{port}" in result.stderr
        holder = contextlib.ExitStack()             # take 8080 (it may be taken already: the same case)
        with contextlib.suppress(OSError):
            holder.enter_context(socket.create_server(("127.0.0.1", 8080)))
        with holder:
            serve = ServeProcess(tmp_path, "--http-port-file", str(tmp_path / "http.port"))
            chosen = int((tmp_path / "http.port").read_text())
            code, log = serve.stop()
    assert chosen != 8080 and code == 0
    assert "port 8080 is in use" in log and f"dashboard http://127.0.0.1:{chosen}/" in log


def test_serve_with_its_store_down_says_so_in_one_line(tmp_path):
    result = p2("serve", "--listen", "127.0.0.1:0", "--store", f"redis://127.0.0.1:{free_port()}/0")
    assert result.returncode == 1, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "is unavailable" in result.stderr, result.stderr


@pytest.mark.skipif(not have_openssl(), reason=MISSING)
def test_mutual_tls(tmp_path):
    certs = make_certificates(tmp_path / "pki")
    serve = ServeProcess(tmp_path, "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
                         "--tls-ca", str(certs.ca))
    try:
        base = ("jobs", "list", "--service", serve.address, "--timeout", "5", "--json", "-")
        trusted = p2(*base, "--tls-ca", str(certs.ca), "--tls-cert", str(certs.client_cert),
                     "--tls-key", str(certs.client_key))
        assert trusted.returncode == 0, trusted.stderr
        assert json.loads(trusted.stdout) == {"jobs": []}
        anonymous = p2(*base, "--tls-ca", str(certs.ca))              # TLS, but no client certificate
        assert anonymous.returncode == 1 and len(anonymous.stderr.strip().splitlines()) == 1, anonymous.stderr
        plaintext = p2(*base)
        assert plaintext.returncode == 1, plaintext.stderr
    finally:
        code, _ = serve.stop()
    assert code == 0
