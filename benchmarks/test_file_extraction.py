"""Reading a 100-page PDF against the summary it feeds: the example meeting written twelve times as a PDF (by the
test suite's writer), read by `locsum_sdk.files.read_file` (pages a second on this machine) and summarized by the
default bundle at its defaults from the text read, each timed in turn in one run. Prints pages a second and
extraction's share of the summary's time; writes `benchmarks/results/file_extraction.json`. Target: extraction under
10% of the summary's time."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from benchmarks.common import write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test suite's file writers

MEETING = Path(__file__).resolve().parents[1] / "examples" / "meeting.txt"
COPIES = 12  # about 100 pages


def test_extraction_against_the_summary_it_feeds(benchmark, tmp_path):
    from document_files import write_pdf

    from locsum_sdk import Summarizer
    from locsum_sdk.files import read_file

    pdf = write_pdf("\n".join([MEETING.read_text(encoding="utf-8")] * COPIES), tmp_path / "report.pdf")
    summarizer = Summarizer.from_pretrained("default", threads=2)
    extraction, summary = [], []

    def run():
        for _ in range(2):
            started = time.perf_counter()
            read = read_file(pdf)
            extraction.append(time.perf_counter() - started)
            started = time.perf_counter()
            summarizer.summarize_file(read)
            summary.append(time.perf_counter() - started)
        return read

    read = benchmark.pedantic(run, rounds=1, iterations=1)
    pages = read.parts[-1].last_page
    share = min(extraction) / min(summary)
    print(f"\n{pages} pages read in {min(extraction):.3f} s: {pages / min(extraction):.0f} pages a second; the summary "
          f"took {min(summary):.2f} s; extraction is {100 * share:.1f}% of it")
    write_result("file_extraction", {"pages": pages, "extraction_seconds": extraction, "summary_seconds": summary,
                                     "pages_per_second": pages / min(extraction), "share": share})
    assert share < 0.10
