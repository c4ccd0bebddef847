"""The neighbours benchmark's arithmetic (bench/neighbours_report.py): answers counted, the
victim's summaries, the phases run and the baseline each is judged against, each phase's
targets judged over its rounds, the listing flood's card, the /proc, PostgreSQL and /metrics
readings, what each phase cost, and the tables."""

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import neighbours_report as nr  # noqa: E402


def test_answer_kind_names_the_code_of_a_refusal_or_of_a_json_rpc_error():
    assert nr.answer_kind(200, b'{"jsonrpc":"2.0","id":"1","result":{}}') == "200"
    assert nr.answer_kind(200, b'{"jsonrpc":"2.0","error":{"code":-32603}}') == "200 rpc -32603"
    assert nr.answer_kind(429, b'{"error":"rate_limited","message":"x"}') == "429 rate_limited"
    assert nr.answer_kind(503, b'{"error":"response_buffer_full"}') == "503 response_buffer_full"
    assert nr.answer_kind(502, b"<html>bad gateway</html>") == "502"
    assert nr.answer_kind(500, b"{not json") == "500"
    assert nr.answer_kind(0, b"") == "no answer"


def test_method_summary_counts_failures_and_their_latency():
    samples = [[float(ms), True, "200"] for ms in range(1, 100)] + [[5000.0, False, "503 x"]]
    s = nr.method_summary(samples)
    assert s["requests"] == 100 and s["ok"] == 99
    assert s["success_pct"] == pytest.approx(99.0)
    assert s["p50_ms"] == 50.0
    # The failure waited 5 s: the victim's p99 says so.
    assert s["p99_ms"] == 99.0 and s["max_ms"] == 5000.0
    assert s["failures"] == {"503 x": 1}
    empty = nr.method_summary([])
    assert empty["requests"] == 0 and math.isnan(empty["success_pct"])
    assert math.isnan(empty["p99_ms"])


def test_a_stream_survives_only_opened_unended_and_never_silent_too_long():
    ok = {"opened": True, "ended_early": False, "longest_gap_s": 3.1}
    assert nr.stream_survived(ok)
    assert not nr.stream_survived(dict(ok, opened=False))
    assert not nr.stream_survived(dict(ok, ended_early=True))
    assert not nr.stream_survived(dict(ok, longest_gap_s=nr.STREAM_SILENCE_S + 0.1))
    assert not nr.stream_survived({"opened": True})


def victim(p99s: dict, failed: int = 0, survived: bool = True) -> dict:
    """The raw victim of one phase: 100 requests per method, its p99 as asked, `failed` of
    GetTask's failed."""
    methods = {}
    for m in nr.METHODS:
        samples = [[1.0, True, "200"] for _ in range(98)] + [[p99s[m], True, "200"]] * 2
        methods[m] = samples
    for i in range(failed):
        methods["GetTask"][i] = [1.0, False, "503 response_buffer_full"]
    return {"methods": methods,
            "stream": {"opened": True, "ended_early": not survived, "longest_gap_s": 3.0,
                       "end_reason": None if survived else "the gateway ended the stream"}}


COSTS = {"seconds": 5.0, "cores": 2, "gateway_cpu_pct": 80.0, "postgres_cpu_pct": 30.0,
         "upstream_cpu_pct": 5.0, "victim_cpu_pct": 10.0, "attacker_cpu_pct": 40.0,
         "machine_busy_pct": 190.0, "postgres_backends": 4, "postgres_xact_per_s": 120.0}


def phase_round(rnd, p99s, failed=0, survived=True, rss=60.0, restarted=False, phase="x",
                costs=None):
    return {"round": rnd, "phase": phase, "victim": nr.victim_summary(victim(p99s, failed,
                                                                             survived)),
            "peak_rss_mib": rss, "start_rss_mib": 30.0, "restarted": restarted,
            "counters": {"a2a_response_buffer_refusals_total": 3.0} if failed else {},
            "attacker": {"answers": {"429 rate_limited": 9000, "200": 150},
                         "requests_per_s": 1830.0},
            "costs": dict(COSTS) if costs is None else costs}


ALONE = {"GetTask": 2.0, "ListTasks": 10.0, "SendMessage": 4.0}


def test_the_victim_alone_is_judged_without_p99_ratios():
    judged = nr.judge_phase([nr.round_values(phase_round(0, ALONE), None)])
    assert set(judged) == {"success", "stream", "rss", "restart"}
    assert all(nr.verdict_word(j) == "MET" for j in judged.values())
    assert "too few rounds" in judged["success"]["verdict"]


def test_an_attack_is_judged_per_method_against_the_same_round_alone():
    alone = [phase_round(r, ALONE) for r in range(3)]
    # ListTasks 2.5x its p99 alone in every round; GetTask 2.5x in one round of three.
    attack = [phase_round(0, dict(ALONE, ListTasks=25.0, GetTask=5.0)),
              phase_round(1, dict(ALONE, ListTasks=25.0)),
              phase_round(2, dict(ALONE, ListTasks=25.0))]
    judged = nr.judge_phase([nr.round_values(a, alone[i]) for i, a in enumerate(attack)])
    assert nr.verdict_word(judged["p99_ListTasks"]) == "MISS"
    assert judged["p99_ListTasks"]["value"] == pytest.approx(2.5)
    assert nr.verdict_word(judged["p99_GetTask"]) == "UNSTEADY"
    assert nr.verdict_word(judged["p99_SendMessage"]) == "MET"
    assert judged["p99_SendMessage"]["shown"].startswith("1.00x")


def test_one_lost_stream_or_restart_in_three_rounds_is_a_miss():
    alone = [phase_round(r, ALONE) for r in range(3)]
    attack = [phase_round(0, ALONE), phase_round(1, ALONE, survived=False),
              phase_round(2, ALONE, restarted=True)]
    judged = nr.judge_phase([nr.round_values(a, alone[i]) for i, a in enumerate(attack)])
    assert judged["stream"]["verdict"] == "MISS (2 of 3 rounds met)"
    assert judged["stream"]["shown"] == "no"
    assert judged["restart"]["verdict"] == "MISS (2 of 3 rounds met)"
    assert judged["restart"]["shown"] == "yes"
    assert nr.verdict_word(judged["success"]) == "MET"


def test_one_failed_request_and_a_peak_over_128_mib_miss():
    alone = phase_round(0, ALONE)
    hurt = phase_round(0, ALONE, failed=1, rss=128.5)
    judged = nr.judge_phase([nr.round_values(hurt, alone)])
    assert nr.verdict_word(judged["success"]) == "MISS"
    assert judged["success"]["value"] == pytest.approx(299 / 3)
    assert nr.verdict_word(judged["rss"]) == "MISS"
    edge = nr.judge_phase([nr.round_values(phase_round(0, ALONE, rss=128.0), alone)])
    assert nr.verdict_word(edge["rss"]) == "MET"


def test_a_missing_p99_alone_is_not_applicable_rather_than_met():
    alone = phase_round(0, ALONE)
    alone["victim"]["methods"]["SendMessage"]["p99_ms"] = math.nan
    judged = nr.judge_phase([nr.round_values(phase_round(0, ALONE), alone)])
    assert nr.verdict_word(judged["p99_SendMessage"]) == "N/A"


def test_the_card_is_as_large_as_asked_and_within_the_gateways_bounds():
    body = nr.large_card("http://127.0.0.1:9/agents/0/rpc", 60 * 1024)
    assert abs(len(body) - 60 * 1024) <= 8 and len(body) <= nr.CARD_MAX_BYTES
    card = json.loads(body)
    assert card["supportedInterfaces"][0]["url"] == "http://127.0.0.1:9/agents/0/rpc"

    def walk(v):
        objects, elements, strings = isinstance(v, dict), 1, []
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else []
        if isinstance(v, str):
            strings.append(len(v.encode()))
        for child in children:
            o, e, s = walk(child)
            objects, elements, strings = objects + o, elements + e, strings + s
        return objects, elements, strings

    objects, elements, strings = walk(card)
    assert objects <= 64 and elements <= 512
    assert max(strings) < nr.CARD_MAX_STRING
    with pytest.raises(ValueError):
        nr.large_card("http://127.0.0.1:9/rpc", nr.CARD_MAX_BYTES)


def test_start_time_is_read_after_the_command_name_whatever_it_holds():
    fields = ["S"] + [str(i) for i in range(4, 60)]
    stat = "1234 (q-a2a) (gw) x) " + " ".join(fields)
    # Field 22 is the start time.
    assert nr.start_time(stat) == 22


def test_metric_sum_adds_every_label_set_and_deltas_keep_what_moved():
    text = "\n".join([
        "# TYPE a2a_response_buffer_refusals_total counter",
        'a2a_response_buffer_refusals_total{scope="connection"} 3',
        'a2a_response_buffer_refusals_total{scope="process"} 4',
        "a2a_response_buffer_refusals_total_other 100",
        "a2a_store_share_refusals_total 0",
    ])
    assert nr.metric_sum(text, "a2a_response_buffer_refusals_total") == 7.0
    assert nr.metric_sum(text, "a2a_store_share_refusals_total") == 0.0
    assert nr.metric_sum(text, "a2a_introspections_shed_total") is None
    assert nr.metric_deltas({"a": 1.0, "b": 2.0, "c": None}, {"a": 1.0, "b": 5.0, "c": 4.0}) == {
        "b": 3.0, "c": 4.0}


def test_describe_tally_puts_the_most_frequent_first_and_says_what_it_left_out():
    counts = {"200": 5, "429 rate_limited": 12_000, "503 x": 5, "no answer": 1, "401": 2}
    assert nr.describe_tally(counts, most=3) == (
        "429 rate_limited: 12,000; 200: 5; 503 x: 5; 2 more kinds")
    assert nr.describe_tally({}) == "-"
    assert list(nr.tally(["b", "a", "b"])) == ["b", "a"]


def results_of(phases: dict) -> dict:
    return {"date": "2026-01-01 00:00 UTC", "mode": "quick", "rounds_run": 1, "seconds": 4.0,
            "machine": {"nproc": 2},
            "config": {"victim_tenant": "t-acme", "attacker_tenant": "t-globex",
                       "rate_limit": "50/s, burst 100 per principal",
                       "victim_rates": {"GetTask": 24, "ListTasks": 12, "SendMessage": 20}},
            "attacks": {"stalled": "12 HTTP/2 connections"}, "phases": phases}


def test_render_prints_a_verdict_per_target_per_phase_and_the_victims_failures():
    alone = phase_round(0, ALONE, phase="alone")
    stalled = phase_round(0, dict(ALONE, ListTasks=40.0), failed=3, rss=140.0,
                          phase="stalled")
    phases = {}
    for name, r, base in (("alone", alone, None), ("stalled", stalled, alone)):
        phases[name] = {"title": nr.PHASES[name], "rounds": [r],
                        "targets": nr.judge_phase([nr.round_values(r, base)])}
    text = nr.render(results_of(phases))
    row = next(line for line in text.splitlines()
               if line.startswith(f"| {nr.PHASES['stalled']} |") and "MISS" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == nr.PHASES["alone"]          # judged against the victim alone
    assert cells[2].startswith("MISS 99.0 %")
    assert cells[5].startswith("MISS 4.00x")       # ListTasks p99
    assert cells[7].startswith("MISS 140.0 MiB")
    assert cells[8].startswith("MET no")
    alone_row = next(line for line in text.splitlines()
                     if line.startswith(f"| {nr.PHASES['alone']} |") and "MET" in line)
    assert "| - |" in alone_row                     # no p99 ratio alone
    assert "stalled readers (HTTP/2 windows at 0), round 0, GetTask: " \
           "503 response_buffer_full: 3" in text
    assert "- stalled readers (HTTP/2 windows at 0): a2a_response_buffer_refusals_total +3" in text
    assert "- victim alone:" not in text            # nothing counted alone
    headers, rows = nr.phase_rows(results_of(phases))
    assert rows[1][1] == "99.0" and rows[1][2] == "1/1"
    assert rows[1][6] == "140.0 (30.0)"             # the peak, and the RSS the phase began at
    assert headers[-1] == "restarted" and rows[1][-1] == "no"
    # The second table: what the phase cost, the attacker's answers with it.
    assert "What each attack cost" in text and "the machine has 2 cores" in text
    cost_row = next(line for line in text.splitlines()
                    if line.startswith(f"| {nr.PHASES['stalled']} |") and "req/s" not in line
                    and "gateway" in line)
    assert "429 rate_limited: 9,000; 200: 150" in cost_row
    assert "190 saturated" in cost_row


def test_the_phases_run_are_every_attack_or_those_asked_each_with_its_baseline():
    assert nr.phases_to_run(None) == list(nr.PHASES)
    assert nr.phases_to_run("store,stalled") == ["alone", "stalled", "store"]
    # The introspection flood brings its baseline, run just before it.
    assert nr.phases_to_run("introspection") == ["alone", "introspection_alone",
                                                 "introspection"]
    with pytest.raises(ValueError, match="introspection_alone"):
        nr.phases_to_run("introspection_alone")     # a baseline is not an attack
    with pytest.raises(ValueError, match="nope"):
        nr.phases_to_run("store,nope")


def test_each_attack_has_its_baseline_and_the_baselines_have_none():
    assert nr.baseline_of("alone") is None and nr.baseline_of("introspection_alone") is None
    assert nr.baseline_of("introspection") == "introspection_alone"
    for name in ("listing", "stalled", "rate_limit", "store"):
        assert nr.baseline_of(name) == "alone"
    assert set(nr.Q_SLOW_PHASES) == {"introspection", "introspection_alone"}
    assert nr.INTROSPECT_DELAY_MS == 100


def test_the_introspection_flood_is_judged_against_the_victim_alone_with_q_as_slow():
    q_slow = dict(ALONE, GetTask=40.0, ListTasks=60.0, SendMessage=50.0)
    runs = {
        "alone": [phase_round(r, ALONE) for r in range(3)],
        "introspection_alone": [phase_round(r, q_slow) for r in range(3)],
        # 1.5x the baseline with Q slow, 20x and more the victim alone with Q fast.
        "introspection": [phase_round(r, {m: v * 1.5 for m, v in q_slow.items()})
                          for r in range(3)],
        "store": [phase_round(r, dict(ALONE, ListTasks=30.0)) for r in range(3)],
    }
    judged = nr.judge_runs(runs)
    flood = judged["introspection"]
    for m in nr.METHODS:
        assert nr.verdict_word(flood[f"p99_{m}"]) == "MET"
        assert flood[f"p99_{m}"]["value"] == pytest.approx(1.5)
    # The other attacks stay judged against the victim alone.
    assert nr.verdict_word(judged["store"]["p99_ListTasks"]) == "MISS"
    assert judged["store"]["p99_ListTasks"]["value"] == pytest.approx(3.0)
    # A baseline has no p99 ratio, and its other targets as every phase's.
    assert set(judged["introspection_alone"]) == {"success", "stream", "rss", "restart"}
    with pytest.raises(ValueError, match="fewer rounds"):
        nr.judge_runs({"alone": runs["alone"], "introspection_alone": runs["alone"][:1],
                       "introspection": runs["introspection"]})


def test_the_target_table_names_each_phases_baseline():
    runs = {"alone": [phase_round(0, ALONE)],
            "introspection_alone": [phase_round(0, ALONE)],
            "introspection": [phase_round(0, ALONE)]}
    judged = nr.judge_runs(runs)
    phases = {n: {"title": nr.PHASES[n], "rounds": runs[n], "targets": judged[n]}
              for n in runs}
    headers, rows = nr.target_rows(results_of(phases))
    assert headers[1] == "p99 baseline" and headers[4] == "GetTask p99 ≤ 2× baseline"
    assert [r[1] for r in rows] == ["-", "-", nr.PHASES["introspection_alone"]]
    assert rows[1][4] == "-" and rows[2][4].startswith("MET 1.00x")
    text = nr.render(results_of(phases))
    assert "but for the introspection flood" in text and "100 ms" in text


def test_cpu_pct_is_ticks_over_wall_time_in_percent_of_one_core():
    assert nr.cpu_pct(150, 100, 1.0) == pytest.approx(150.0)
    assert nr.cpu_pct(50, 100, 2.0) == pytest.approx(25.0)
    assert math.isnan(nr.cpu_pct(None, 100, 1.0))
    assert math.isnan(nr.cpu_pct(10, 100, 0.0))


def test_machine_ticks_leave_idle_and_iowait_out_of_busy_and_guest_out_of_total():
    stat = "\n".join([
        "cpu  100 20 30 400 50 6 4 10 99 99",
        "cpu0 50 10 15 200 25 3 2 5 0 0",
        "intr 12345"])
    busy, total = nr.machine_ticks(stat)
    assert total == 620 and busy == 170
    with pytest.raises(ValueError):
        nr.machine_ticks("intr 1")
    # Two cores, busy for 150 of 200 ticks: 150 % of one core.
    assert nr.machine_busy_pct((100, 1000), (250, 1200), 2) == pytest.approx(150.0)
    assert math.isnan(nr.machine_busy_pct((100, 1000), (100, 1000), 2))


def test_ticks_used_counts_new_processes_whole_and_a_reused_pid_as_new():
    before = {10: (500, 1000), 11: (500, 40), 12: (500, 7)}
    after = {10: (500, 1300), 11: (900, 25), 13: (950, 60)}
    # 10 used 300; 11 is another process under a reused pid (all its 25); 13 began (60);
    # 12 ended and cannot be read.
    assert nr.ticks_used(before, after) == 385
    assert nr.ticks_used({}, {}) == 0
    assert nr.ticks_used({10: (500, 1000)}, {10: (500, 990)}) == 0


def test_parse_pg_reading_reads_the_transactions_and_the_backends():
    assert nr.parse_pg_reading("x|12345\np|101\np|202\n") == (12345, [101, 202])
    assert nr.parse_pg_reading("") == (None, [])
    assert nr.parse_pg_reading("p|7\n") == (None, [7])


def test_the_largest_cpu_user_counts_what_no_measured_process_used_as_other():
    assert nr.largest_cpu_user(COSTS) == ("gateway", 80.0)
    # 120 busy, 105 measured (15 other): the attacker's client leads once the gateway is at 20.
    quieter = dict(COSTS, gateway_cpu_pct=20.0, machine_busy_pct=120.0)
    assert nr.largest_cpu_user(quieter) == ("attacker client", 40.0)
    # 195 busy, 95 measured: 100 used by processes not measured.
    busy_elsewhere = dict(COSTS, machine_busy_pct=195.0, gateway_cpu_pct=10.0)
    assert nr.largest_cpu_user(busy_elsewhere) == ("other processes", 100.0)
    # Measured more than the machine's busy time (readings a moment apart): no negative other.
    assert nr.largest_cpu_user(dict(COSTS, machine_busy_pct=50.0)) == ("gateway", 80.0)
    label, pct = nr.largest_cpu_user({"gateway_cpu_pct": math.nan})
    assert label == "-" and math.isnan(pct)
    assert nr.saturated(COSTS)                       # 190 of 200 %
    assert not nr.saturated(dict(COSTS, machine_busy_pct=170.0))
    assert not nr.saturated(dict(COSTS, machine_busy_pct=math.nan))


def test_cost_rows_take_the_median_over_the_rounds_and_sum_the_answers():
    rounds = [phase_round(r, ALONE, costs=dict(COSTS, gateway_cpu_pct=g, machine_busy_pct=b))
              for r, (g, b) in enumerate([(60.0, 100.0), (90.0, 120.0), (75.0, 110.0)])]
    alone = [phase_round(0, ALONE, costs={})]
    alone[0]["attacker"] = {}
    phases = {"alone": {"title": nr.PHASES["alone"], "rounds": alone, "targets": {}},
              "rate_limit": {"title": nr.PHASES["rate_limit"], "rounds": rounds,
                             "targets": {}}}
    headers, rows = nr.cost_rows(results_of(phases))
    col = {h: i for i, h in enumerate(headers)}
    assert headers[1] == "gateway CPU %" and "machine busy % (of 200)" in col
    alone_row, attack = rows
    assert alone_row[col["gateway CPU %"]] == "-"
    assert alone_row[col["attacker's answers (all rounds)"]] == "-"
    assert attack[col["gateway CPU %"]] == "75"
    assert attack[col["machine busy % (of 200)"]] == "110"    # not saturated
    assert attack[col["largest CPU user %"]] == "gateway 75"
    assert attack[col["PostgreSQL xact/s"]] == "120"
    assert attack[col["attacker req/s"]] == "1,830"
    assert attack[col["attacker's answers (all rounds)"]] == "429 rate_limited: 27,000; 200: 450"
