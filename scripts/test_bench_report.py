"""Tests of scripts/bench_report.py on outputs shaped as the benchmarks print them."""
import json
import tempfile
import unittest
from pathlib import Path

import bench_report


def page(added, p90, kb, first_action):
    # bench.sh's build chatter, then bench.py's pretty-printed result.
    return "   Compiling parlor\n{ not json\n" + json.dumps({
        "transfer_total_kb": kb,
        "fetched_on_first_action_bytes": {"parlor.js": first_action},
        "ttft_added_ms_median": added,
        "ttft_added_ms_p90": p90,
        "ttft_direct_ms_median": 0.5,
        "new_dialog_floor_ms_median": 1.25,
        "journal_append_ms_median": 0.875,
        "journal_append_spaced_ms_median": 0.5,
        "ttft_added_back_to_back_ms_median": 2.5,
        "ttft_added_no_write_ms_median": 0.25,
        "ttft_added_no_write_ms_p90": p90 - 0.5,
    }, indent=2) + "\n"


def load(errors, p99, rss):
    run = {"errors": errors, "first_delta_ms_p99": p99, "rss_peak_mib": {"1": rss, "2": rss - 1}}
    return '{"one_process_files":\n' + json.dumps(run, indent=2) + ',"two_processes_redis":\n' + \
        json.dumps(run, indent=2) + "}\n"


def cargo(ack_100, ack_big):
    lines = [
        "Benchmarking plan/lastN: Collecting 100 samples",
        json.dumps({"backend": "file", "stored_messages": 100, "acknowledged_ms_p50": ack_100}),
        json.dumps({"backend": "file", "stored_messages": 100000, "acknowledged_ms_p50": ack_big}),
        json.dumps({"bench": "auth", "backend": "redis", "cookie_added_us_p50": 4.1,
                    "token_added_us_p50": 3.6}),
        json.dumps({"transport": "stdio", "round_own_ms_p50": 0.24}),
    ]
    return "\n".join(lines) + "\n"


class Report(unittest.TestCase):
    def write_run(self, root, name, files):
        run = Path(root) / name
        run.mkdir(parents=True)
        for file, text in files.items():
            (run / file).write_text(text)

    def test_every_run_is_read_and_each_target_judged_by_its_rule(self):
        with tempfile.TemporaryDirectory() as root:
            # Five runs; the p99 of streams misses its target in one of them only.
            for i, p99 in enumerate([240, 300, 1400, 500, 600]):
                self.write_run(root, f"run-{i}", {
                    "page.out": page(0.7 + i / 10, 1.2, 148.8, 20_000),
                    "load.out": load(0, p99, 85.0),
                    "cargo.out": cargo(4.0, 3.0 + i),
                })
            doc = bench_report.report(root)
            figures = {f["name"]: f for f in doc["figures"]}
            self.assertEqual(len(doc["runs"]), 5)
            added = figures["ttft_added_new_ms"]
            self.assertAlmostEqual(added["median"], 0.9)
            self.assertTrue(added["met"])
            self.assertEqual(len(added["runs"]), 5)
            # The floor: the journal's synced append less what the model call overlaps.
            self.assertEqual(figures["ttft_added_new_floor_ms"]["median"], 0.375)
            self.assertEqual(figures["journal_append_ms"]["median"], 0.875)
            # The ratio to the journal append, both ways it is measured: after a pause (as a
            # turn meets it) and right after another; each judged against 3x.
            self.assertEqual(figures["ttft_over_spaced_append_new"]["median"], 1.8)
            self.assertTrue(figures["ttft_over_spaced_append_new"]["met"])
            self.assertAlmostEqual(figures["ttft_over_journal_new"]["median"], 1.03)
            self.assertEqual(figures["ttft_over_journal_new"]["target"], 3)
            self.assertEqual(figures["ttft_added_back_to_back_ms"]["median"], 2.5)
            self.assertNotIn("met", figures["ttft_added_back_to_back_ms"])
            self.assertEqual(figures["new_dialog_floor_ms"]["median"], 1.25)
            # The same path with no durable write: the floor measured, not a target.
            self.assertEqual(figures["ttft_added_new_no_write_ms"]["median"], 0.25)
            self.assertAlmostEqual(figures["ttft_added_new_no_write_p90_ms"]["median"], 0.7)
            self.assertNotIn("met", figures["ttft_added_new_no_write_p90_ms"])
            # Met in four runs of five: a target that must hold in each run is not met.
            self.assertFalse(figures["streams_file_first_delta_p99_ms"]["met"])
            self.assertTrue(figures["streams_file_errors"]["met"])
            self.assertEqual(figures["streams_file_rss_peak_mib"]["median"], 85.0)
            # Ratios to the 100-message turn of the same backend: 0.75 … 1.75, median 1.25.
            ratio = figures["turn_ratio_file_100000"]
            self.assertEqual(ratio["median"], 1.25)
            self.assertTrue(ratio["met"])
            self.assertEqual(figures["page_and_first_action_kb"]["median"], 168.8)
            self.assertTrue(figures["auth_cookie_added_us_redis"]["met"])
            self.assertEqual(figures["tool_round_ms_stdio"]["target"], 1.0)
            self.assertIn("streams_file_first_delta_p99_ms", bench_report.table(doc))

    def test_a_run_that_measured_nothing_adds_nothing(self):
        with tempfile.TemporaryDirectory() as root:
            self.write_run(root, "run-0", {"page.out": "the build failed\n"})
            self.assertEqual(bench_report.report(root)["figures"], [])


if __name__ == "__main__":
    unittest.main()
