"""`locsum bench` and `locsum_sdk.profiling`: points measured in fresh processes, lengths parsed, memory fitted."""

import json

import pytest

from locsum_sdk.cli import main
from locsum_sdk.errors import OptionError
from locsum_sdk.profiling import Point, linear_fit, parse_lengths, text_of_tokens


def test_lengths_accept_thousands_and_refuse_nonsense():
    assert parse_lengths("2000, 8k,0.5k") == [2000, 8000, 500]
    for bad in ("", "abc", "0", "2k,x"):
        with pytest.raises(OptionError):
            parse_lengths(bad)


def test_filler_text_has_about_the_asked_tokens(tokenizer):
    for tokens in (200, 3000):
        counted = len(tokenizer.encode(" " + text_of_tokens(tokenizer, tokens), add_special_tokens=False).ids)
        assert abs(counted - tokens) <= 0.1 * tokens


def test_linear_fit_recovers_a_line():
    points = [Point(t, t, 1, 1, 100.0 + 0.5 * t, 90.0, 0.0, 0.0, []) for t in (1000, 2000, 4000)]
    slope, intercept = linear_fit(points)
    assert slope == pytest.approx(500.0) and intercept == pytest.approx(100.0)
    assert linear_fit(points[:1]) is None


def test_bench_measures_each_length_in_its_own_process(bundle_dir, capsys):
    assert main(["bench", "--bundle", str(bundle_dir), "--tokens", "150,600", "--steps", "3", "--threads", "1",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    small, large = report["points"]
    assert small["target_tokens"] == 150 and large["target_tokens"] == 600
    assert small["steps"] == large["steps"] == 3
    assert large["pages"] > small["pages"] >= 1
    assert large["peak_rss_mb"] >= large["loaded_rss_mb"] > 0 and report["mb_per_1k_tokens"] is not None


def test_bench_refuses_bad_options(bundle_dir, capsys):
    assert main(["bench", "--bundle", str(bundle_dir), "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
