# bench/device/attention_report.py (issue 29's benchmark report) on CPU with made-up measurements: the SDPA
# runs taken from a kvtile run, the kvtile row -> SDPA variant table, the tables and the targets it writes.
import json
import math
import os
import subprocess
import sys

import pytest

_bench = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench", "device")
sys.path.insert(0, _bench)

import attention_report as ar  # noqa: E402

CEILING = 4000.0


def row(kernel, b, hq, hkv, tokens, us, lengths="uniform", sweep=False, chunks=128):
    gbs = 2.0 * b * tokens / us  # made up; the report reads ceiling_fraction
    return dict(kernel=kernel, batch=b, q_heads=hq, kv_heads=hkv, head_dim=128, tokens=tokens, lengths=lengths,
                total_tokens=b * tokens, chunks=chunks, us=us, bytes=1e6, gbs=gbs, ceiling_fraction=gbs / CEILING,
                speedup_vs_fp16_baseline=2.0, small_batch_sweep=sweep)


def sdpa(b, hq, hkv, tokens, us, backend="cudnn", variant="", q_tokens=1):
    return dict(backend=backend, batch=b, q_heads=hq, kv_heads=hkv, head_dim=128, tokens=tokens, us=us, bytes=1e6,
                gbs=1.0, variant=variant, q_tokens=q_tokens)


@pytest.fixture
def run(tmp_path):
    att = [
        row("fp16_baseline", 1, 32, 8, 16384, 40.0), row("k4v2_g128", 1, 32, 8, 16384, 20.0),
        row("k4v2_g128_onecall", 1, 32, 8, 16384, 21.0),
        row("k4v2_g128_split1", 1, 32, 8, 16384, 60.0), row("k4v2_g128_split16", 1, 32, 8, 16384, 19.0),
        row("k4v2_g128", 16, 32, 8, 65536, 240.0), row("k4v2_g128_mq4", 16, 32, 8, 65536, 360.0),
        row("k4v2_g128_mq8", 16, 32, 8, 65536, 600.0), row("k4v4_g128", 16, 32, 8, 65536, 300.0),
        row("k4v2_g128", 2, 8, 1, 4096, 20.0, sweep=True), row("fp16_baseline", 2, 8, 1, 4096, 22.0, sweep=True),
        row("k4v2_g128", 32, 32, 8, 64512, 170.0, lengths="ragged32", chunks=376),
        row("k4v2_g128_mqr", 32, 32, 8, 64512, 400.0, lengths="ragged32"),
        row("k4v2_g128_mqr_bound", 32, 32, 8, 64512, 600.0, lengths="ragged32"),
        row("k4v2_g128", 16, 32, 8, 65536, 999.0, lengths="ragged32"),  # not uniform: no SDPA run
    ]
    sd = [sdpa(1, 32, 8, 16384, 32.0), sdpa(1, 32, 8, 16384, 30.0, backend="flash"), sdpa(16, 32, 8, 65536, 960.0),
          sdpa(16, 32, 8, 65536, 3000.0, variant="mq8", q_tokens=8), sdpa(2, 8, 1, 4096, 10.0)]
    a, s = tmp_path / "attention.json", tmp_path / "sdpa.json"
    a.write_text(json.dumps(dict(device="Test GPU", read_ceiling_gbs=CEILING, iterations=50, results=att)))
    s.write_text(json.dumps(dict(torch="2.11", device="Test GPU", results=sd)))
    return tmp_path, a, s


def test_sdpa_runs_are_the_uniform_rows_of_the_default_kernel_and_its_variants(run):
    _, a, _ = run
    assert ar.sdpa_runs(str(a)) == [((1, 32, 8, 128, 16384), "", 1), ((16, 32, 8, 128, 65536), "", 1),
                                    ((16, 32, 8, 128, 65536), "mq4", 4), ((16, 32, 8, 128, 65536), "mq8", 8),
                                    ((2, 8, 1, 128, 4096), "", 1)]


def test_sdpa_variant_of_kvtile_rows():
    assert ar.sdpa_variant("k4v2_g128") == ""
    assert ar.sdpa_variant("k4v2_g128_mq8") == "mq8"
    assert ar.sdpa_variant("k4v2_g128_mq4_nsplit") == "mq4"  # a variant of the multi-query row
    assert ar.sdpa_variant("k4v2_g128_bf16q") == "bf16"
    assert ar.sdpa_variant("k4v4_g128") == ""  # another preset: the one-token SDPA run
    assert ar.sdpa_variant("k4v2_g128_mqr") is None
    assert ar.sdpa_variant("k4v2_g128_mqr_bound") is None


def test_report_tables_and_targets(run):
    d, a, s = run
    out = d / "report"
    r = subprocess.run([sys.executable, os.path.join(_bench, "attention_report.py"), "--attention", str(a),
                        "--sdpa", str(s), "--date", "2026-01-01", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    md = (d / "report.md").read_text()
    lines = md.splitlines()
    # The standard table: best SDPA backend (flash, 30 us) against 20 us.
    assert any(l.startswith("| (1, 32, 8, 128, 16K) | 20.0 |") and "30.0 (flash) | **1.50x**" in l for l in lines)
    # The sweep shape is in its own table, not in the standard one's geometric mean.
    sweep_at = md.index("Small batches (batch 1, 2, 4")
    assert "| (2, 8, 1, 128, 4K) | 20.0 |" in md[sweep_at:]
    assert "| (2, 8, 1, 128, 4K) | 20.0 |" not in md[:sweep_at]
    g = math.sqrt((30.0 / 20.0) * (960.0 / 240.0))
    assert f"geometric mean over the 2 uniform shapes of the standard set: **{g:.2f}x**" in md
    # Split counts: the plan's 20 us against the best forced split (16 chunks, 19 us).
    assert any(l.startswith("| (1, 32, 8, 128, 16K) | 128 | 20.0 | 16 | 19.0 | 1.05 | 60.0, 19.0 |") for l in lines)
    # Targets: batch 1 ceiling, multi-query ratios, ragged plans.
    f = 100 * (2.0 * 16384 / 20.0) / CEILING
    assert f"batch 1 at (1, 32, 8, 128, 16K): {f:.1f}% of the read ceiling (target 50%: NOT met)" in md
    assert ("multi-query, 8 new tokens per sequence at (16, 32, 8, 128, 64K): 600.0 us, 2.50x the one-token step "
            "(target <= 1.3x: NOT met)") in md
    assert "multi-query, 4 new tokens per sequence at (16, 32, 8, 128, 64K): 360.0 us, 1.50x" in md
    assert "400.0 us planned with the host counts, 600.0 us planned at 8 for every sequence" in md
    # Other rows: mq8 against the mq8 SDPA run, another preset against the one-token run, none for mqr.
    assert "| (16, 32, 8, 128, 64K) | k4v2_g128_mq8 | 600.0 |" in md and "| 2.00x | 5.00x |" in md
    assert any(l.startswith("| (16, 32, 8, 128, 64K) | k4v4_g128 | 300.0 |") and l.endswith("| 3.20x |") for l in lines)
    assert any("| k4v2_g128_mqr | 400.0 |" in l and l.endswith("| - |") for l in lines)
    merged = json.loads((d / "report.json").read_text())
    assert merged["kvtile"]["device"] == "Test GPU" and len(merged["sdpa"]["results"]) == 5


def test_report_skips_without_a_run(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(_bench, "attention_report.py"), "--attention",
                        str(tmp_path / "missing.json"), "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 77 and "SKIPPED" in r.stdout
