"""docs/sharing.md's table of share sizes is the MIG catalog's: every GI profile with share sizes, its
sizes and the SMs of each size's compute instance -- so the page cannot drift from what migdra
publishes and creates."""

from __future__ import annotations

import re
from pathlib import Path

from dra_driver.mig import load_catalog

SHARING = Path(__file__).resolve().parents[2] / "docs" / "sharing.md"
_TABLE = re.compile(r"<!-- share-sizes:begin[^>]*-->\n(.*?)<!-- share-sizes:end -->", re.S)


def expected_table() -> str:
    """The table as it must read: one row per GPU model and GI profile that has share sizes."""
    lines = ["| GPU model | GI profile | share sizes (compute slices: SMs of the CI) |", "|---|---|---|"]
    for key, model in load_catalog().gpus.items():
        for profile in model.gpu_instance_profiles:
            sizes = profile.share_sizes
            if not sizes:
                continue
            cells = ", ".join(
                f"{size}: {profile.compute_instance_for_share(size).multiprocessor_count}" for size in sizes
            )
            lines.append(f"| {key} | `{profile.name}` | {cells} |")
    return "\n".join(lines) + "\n"


def test_the_share_size_table_is_the_catalogs() -> None:
    match = _TABLE.search(SHARING.read_text())
    assert match is not None, "docs/sharing.md lost its share-sizes markers"
    assert match.group(1) == expected_table(), (
        "docs/sharing.md's share-size table differs from the catalog; replace it with:\n" + expected_table()
    )


def test_the_table_lists_a_4g_on_an_h100_with_1_2_and_4_slices() -> None:
    assert "| H100-SXM5-80GB | `4g.40gb` | 1: 16, 2: 32, 4: 64 |" in expected_table()
