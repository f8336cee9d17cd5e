#!/usr/bin/env python3
"""Derive the shipped MIG catalog (``dra_driver/mig/data/mig-catalog.yaml``) from the researched table.

Why a generator: ``hack/data/mig-profiles.yaml`` is the researched source of truth, with one source
list per value (NVIDIA documentation, public repositories and issues with recorded ``nvidia-smi``
output, and our own recordings in ``tests/golden/recordings/``; the rules behind the numbers are in
``docs/nvml-mig.md``).  The package ships a *normalised* copy of it: one schema, only the GPU models
migdra supports, explicit values where the table has ``null`` (each marked in ``uncertain:`` with the
reason), and the compute-instance tables the table only describes in prose, derived by one documented
rule and checked against the one GPU whose tables were recorded (A100-SXM4-40GB).

Run ``make catalog`` (``python hack/gen_mig_catalog.py``) after editing the table or the estimates
below; ``make lint`` (``--check``) and ``tests/unit/test_catalog.py`` fail when the committed file is
stale.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
DEFAULT_REFERENCE = REPO / "hack" / "data" / "mig-profiles.yaml"
OUTPUT = REPO / "dra_driver" / "mig" / "data" / "mig-catalog.yaml"

# catalog key -> (reference key, aliases).  An alias may name several models (``A100``: both boards are
# common, neither is *the* A100): looking it up fails listing them, instead of guessing one.
MODELS: dict[str, tuple[str, list[str]]] = {
    "A30": ("A30-24GB", ["A30-24GB"]),
    "A100-SXM4-40GB": ("A100-SXM4-40GB", ["A100-40GB", "A100"]),
    "A100-SXM4-80GB": ("A100-SXM4-80GB", ["A100-80GB", "A100"]),
    "H100-SXM5-80GB": ("H100-SXM5-80GB", ["H100-80GB", "H100"]),
    "H100-NVL": ("H100-NVL-94GB", ["H100-NVL-94GB"]),
    "H200": ("H200-SXM5-141GB", ["H200-SXM5-141GB"]),
    "GH200-96GB": ("GH200-96GB", ["GH200"]),
    "B200": ("B200", []),
    "RTX-PRO-6000-Blackwell-Server-Edition": (
        "RTX-PRO-6000-Blackwell-Server-Edition",
        ["RTX-PRO-6000", "RTX-PRO-6000-Blackwell"],
    ),
}

ARCHITECTURES = {7: "ampere", 9: "hopper", 10: "blackwell"}

# CUDA compute capability per model: public CUDA GPU tables (sm_80 Ampere GA100, sm_90 Hopper,
# sm_100 B200, sm_120 RTX PRO 6000 Blackwell).  Not in the MIG reference, so listed here with its source.
COMPUTE_CAPABILITY = {
    "A30": "8.0",
    "A100-SXM4-40GB": "8.0",
    "A100-SXM4-80GB": "8.0",
    "H100-SXM5-80GB": "9.0",
    "H100-NVL": "9.0",
    "H200": "9.0",
    "GH200-96GB": "9.0",
    "B200": "10.0",
    "RTX-PRO-6000-Blackwell-Server-Edition": "12.0",
}

# What nvmlDeviceGetBrand and nvmlDeviceGetAddressingMode answer per model (NVML enum values:
# NVML_BRAND_NVIDIA = 14, NVML_BRAND_NVIDIA_RTX = 13; NVML_DEVICE_ADDRESSING_MODE_NONE = 0, _HMM = 1,
# _ATS = 2), with where each value was seen: public `nvidia-smi -q` outputs ("Product Brand", "Addressing
# Mode"), none of them a recording of ours (our one recording predates migdra hw record asking).  The
# addressing mode belongs to the host as much as to the GPU (HMM needs the open kernel modules and a
# kernel with HMM; ATS needs a Grace CPU): the value here is the common one, what the simulator answers.
_SEEN_DATACENTER_BRAND = "nvidia-smi -q shows 'Product Brand: NVIDIA' (NVML_BRAND_NVIDIA)"
BRAND: dict[str, tuple[int, str]] = {
    "A30": (14, "INFERRED: as the other Ampere/Hopper data-center boards; never seen on an A30"),
    "A100-SXM4-40GB": (14, "INFERRED: seen on A100-SXM4-80GB; never seen on the 40GB board"),
    "A100-SXM4-80GB": (14, f"{_SEEN_DATACENTER_BRAND} on drivers 525.60.13 and 555.42.02; not recorded by us"),
    "H100-SXM5-80GB": (14, f"{_SEEN_DATACENTER_BRAND} on driver 560.35.03; not recorded by us"),
    "H100-NVL": (14, f"{_SEEN_DATACENTER_BRAND} on driver 550.127.06 (vGPU host); not recorded by us"),
    "H200": (14, "INFERRED: as H100; not asked when the H200 was recorded"),
    "GH200-96GB": (14, f"{_SEEN_DATACENTER_BRAND} on GH200 480GB, driver 550.127.05; not recorded by us"),
    "B200": (14, "INFERRED: as the Hopper boards; never seen on a B200"),
    "RTX-PRO-6000-Blackwell-Server-Edition": (
        13,
        "UNCONFIRMED: RTX professional boards show 'Product Brand: NVIDIA RTX'; never seen on this one",
    ),
}
_SEEN_NO_ADDRESSING = "nvidia-smi -q shows 'Addressing Mode: None' (x86 host without HMM)"
ADDRESSING_MODE: dict[str, tuple[int, str]] = {
    "A30": (0, "INFERRED: as A100 on an x86 host; HMM (1) where the kernel and open modules provide it"),
    "A100-SXM4-40GB": (0, "INFERRED: as A100-SXM4-80GB; HMM (1) where the kernel and open modules provide it"),
    "A100-SXM4-80GB": (0, f"{_SEEN_NO_ADDRESSING} on driver 555.42.02; HMM (1) on hosts that provide it"),
    "H100-SXM5-80GB": (0, f"{_SEEN_NO_ADDRESSING} on driver 560.35.03; HMM (1) on hosts that provide it"),
    "H100-NVL": (0, "INFERRED: as H100 SXM; a vGPU host showed N/A (NOT_SUPPORTED)"),
    "H200": (0, "INFERRED: as H100 on an x86 host; not asked when the H200 was recorded"),
    "GH200-96GB": (2, "nvidia-smi -q shows 'Addressing Mode: ATS' on GH200 480GB, driver 550.127.05"),
    "B200": (0, "INFERRED: as H100 on an x86 host"),
    "RTX-PRO-6000-Blackwell-Server-Edition": (0, "INFERRED: as H100 on an x86 host"),
}

# Values the reference could not find (null there).  The simulator needs a number, so each gets an
# explicit estimate with its reasoning; the catalog marks every one of them in `uncertain:`.
GPU_ESTIMATES: dict[str, dict[str, tuple[Any, str]]] = {
    "A30": {"total_memory_mib": (24576, "ESTIMATE: 24 GB HBM2 board; exact MiB never captured")},
    "GH200-96GB": {
        "total_memory_mib": (97871, "ESTIMATE: must exceed 7g.96gb (95232 MiB); exact MiB never captured"),
        "nvml_name": ("NVIDIA GH200 96GB HBM3", "ESTIMATE: NVML name of GH200 boards never captured"),
    },
    "B200": {
        "total_memory_mib": (183359, "ESTIMATE: user guide says 180GB; exact MiB never captured"),
        "sm_total": (148, "ESTIMATE: public B200 spec (148 SMs); never read from NVML in MIG context"),
    },
}
PROFILE_ESTIMATES: dict[tuple[str, str], dict[str, tuple[Any, str]]] = {
    ("B200", "3g.90gb"): {
        "multiprocessor_count": (66, "ESTIMATE: Hopper 3g/1g SM ratio (60/16) applied to B200's 18-SM 1g"),
        "decoder_count": (3, "ESTIMATE: one per compute slice, as on Hopper"),
        "jpeg_count": (3, "ESTIMATE: one per compute slice, as on Hopper"),
        "memory_size_mb": (90624, "ESTIMATE: 2 x 2g.45gb (45312 MiB)"),
    },
    ("B200", "4g.90gb"): {
        "multiprocessor_count": (72, "ESTIMATE: 4 x 18 SMs, as Hopper's 4g = 4 x 16"),
        "decoder_count": (4, "ESTIMATE: one per compute slice, as on Hopper"),
        "jpeg_count": (4, "ESTIMATE: one per compute slice, as on Hopper"),
        "memory_size_mb": (90624, "ESTIMATE: 2 x 2g.45gb (45312 MiB)"),
    },
    ("B200", "7g.180gb"): {
        "multiprocessor_count": (148, "ESTIMATE: all SMs, as Hopper's 7g uses all 132"),
        "decoder_count": (7, "ESTIMATE: one per compute slice, as on Hopper"),
        "jpeg_count": (7, "ESTIMATE: one per compute slice, as on Hopper"),
        "memory_size_mb": (181760, "ESTIMATE: 2 x 4g + 512 MiB, as on Hopper"),
    },
}

# Order nvmlDeviceCreateGpuInstance (no placement) tries starts in, per placement size.  Recorded for 1g
# on 8-slice chips (6,4,5,0,1,2,3; C_H100_80, dask-cuda#583); size 2 from GH200 `-cgi 15,15,15` -> GI 5,3,4
# = starts 4,0,2 (C_GH200_96); "3g first went to start 4" (UG examples).  Other cases: UNCONFIRMED.
DEFAULT_ORDER_8_SLICE = {1: [6, 4, 5, 0, 1, 2, 3], 2: [4, 0, 2, 6], 4: [4, 0], 8: [0]}

# How many NVML_GPU_INSTANCE_PROFILE_* indices a driver branch knows: indices at or past the count are
# INVALID_ARGUMENT, known ones a GPU lacks NOT_SUPPORTED (docs/nvml-mig.md, "Profile indices and IDs").
# Each pynvml release mirrors the header of its driver branch, so its COUNT is the branch's count.
DRIVER_PROFILE_INDEX_COUNTS: list[dict[str, Any]] = [
    {
        "from_driver_major": 0,
        "gpu_instance_profile_count": 0xA,
        "sources": ["PYNVML"],
        "uncertain": "INFERRED: pynvml 11.525 to 12.550 define COUNT = 0xA (up to 1_SLICE_REV2)",
    },
    {
        "from_driver_major": 575,
        "gpu_instance_profile_count": 0x11,
        "sources": ["PYNVML", "HW_H200_580159"],
        "uncertain": "pynvml 12.575.51 and 13.580.65 define COUNT = 0x11; recorded on driver 580.159.04 (index 17 is "
        "INVALID_ARGUMENT, 10 to 16 NOT_SUPPORTED); the 575 boundary is INFERRED from pynvml's version",
    },
    {
        "from_driver_major": 615,
        "gpu_instance_profile_count": 0x12,
        "sources": ["PYNVML"],
        "uncertain": "INFERRED: pynvml 13.615.71 adds 3_SLICE_GFX (0x11) and COUNT = 0x12",
    },
]

GI_PROFILE_FIELDS = [
    "name",
    "nvml_profile_index",
    "profile_id",
    "slice_count",
    "instance_count",
    "multiprocessor_count",
    "copy_engine_count",
    "decoder_count",
    "encoder_count",
    "jpeg_count",
    "ofa_count",
    "is_p2p_supported",
    "memory_size_mb",
]

# NVML_COMPUTE_INSTANCE_PROFILE_* index for a CI of k compute slices; for CIs the index is the ID.
CI_INDEX_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
CI_1_SLICE_REV1 = 7
GI_1_SLICE = 0
GI_2_SLICE = 1
GI_1_SLICE_REV2 = 9


def _ci_placements(compute_slices: int, size: int) -> list[list[int]]:
    """Starts aligned to the next power of two >= size, inside the GI (recorded A100 -lcip counts fit)."""
    step = 1
    while step < size:
        step *= 2
    return [[start, size] for start in range(0, compute_slices, step) if start + size <= compute_slices]


def derive_compute_instance_profiles(
    key: str, architecture: str, gi: dict[str, Any], one_slice_sms: int, rev2_sms: int | None
) -> list[dict[str, Any]]:
    """The CI table of one GI profile, by the rule in the reference's Hopper/Blackwell note.

    k-slice CI (k in 1, 2, 3, 4, 7) inside an n-slice GI: k x (SMs of the 1-slice GI) unless k == n,
    where it is the whole GI.  Hopper and newer add CI profile 7 (1_SLICE_REV1): the default CI of
    double-memory 1g GIs, and a 26-SM 1-slice CI inside 2g GIs (go-nvml#146).
    RTX PRO: only the full CI (reference note).
    """
    n = gi["slice_count"]
    # A 4g GI has no 3c CI (mig-parted's known A100 configs list 1c/2c/4c.4g only); 3g and 7g GIs do.
    sizes = [n] if key.startswith("RTX-PRO") else [k for k in (1, 2, 3, 4, 7) if k <= n and (k, n) != (3, 4)]
    recorded = "recorded for A100-SXM4-40GB (UG_GETSTART, MIGPARTED_KNOWN); derived by rule for this GPU"
    profiles: list[dict[str, Any]] = []
    for k in sizes:
        placements = _ci_placements(n, k)
        full = k == n
        name = f"MIG {gi['name']}" if full else f"MIG {k}c.{gi['name']}"
        profiles.append(
            {
                "ci_profile_index": CI_INDEX_BY_SLICES[k],
                "name": name,
                "slice_count": k,
                "instance_count": len(placements),
                "multiprocessor_count": gi["multiprocessor_count"] if full else k * one_slice_sms,
                "placements": placements,
                "uncertain": {
                    "placements": "INFERRED: no -lcipp output exists; starts aligned to size within the GI",
                    **({} if full or key.startswith("A100") else {"multiprocessor_count": "INFERRED: " + recorded}),
                },
            }
        )
    hopper_plus = architecture in ("hopper", "blackwell") and not key.startswith("RTX-PRO")
    if hopper_plus and gi["nvml_profile_index"] == GI_1_SLICE_REV2:
        # 1c CI of a double-memory 1g GI: the 1-slice SM count; the default full CI is profile 7.
        profiles[0]["multiprocessor_count"] = one_slice_sms
        profiles[0]["name"] = f"MIG 1c.{gi['name']}"
        profiles[0]["uncertain"]["multiprocessor_count"] = "INFERRED: plain 1c CI keeps the 1-slice SMs"
        profiles.append(
            {
                "ci_profile_index": CI_1_SLICE_REV1,
                "name": f"MIG {gi['name']}",
                "slice_count": 1,
                "instance_count": 1,
                "multiprocessor_count": gi["multiprocessor_count"],
                "placements": [[0, 1]],
                "sources": ["C_GH200_96"],
                "uncertain": {"placements": "INFERRED: no -lcipp output exists"},
            }
        )
    if hopper_plus and gi["nvml_profile_index"] == GI_2_SLICE and rev2_sms is not None:
        profiles.append(
            {
                "ci_profile_index": CI_1_SLICE_REV1,
                "name": f"MIG 1c.{gi['name']}",
                "slice_count": 1,
                "instance_count": 1,
                "multiprocessor_count": rev2_sms,
                "placements": [[0, 1], [1, 1]],
                "sources": ["I_GONVML_146"],
                "uncertain": {"placements": "INFERRED: no -lcipp output exists"},
            }
        )
    profiles.sort(key=lambda p: p["ci_profile_index"])
    return profiles


def _check_against_recorded_a100(ref_gpu: dict[str, Any], gi: dict[str, Any], derived: list[dict[str, Any]]) -> None:
    recorded = ref_gpu.get("compute_instance_profiles", {}).get(gi["name"])
    if not isinstance(recorded, list):
        return
    got = {(p["ci_profile_index"], p["instance_count"], p["multiprocessor_count"]) for p in derived}
    want = {(r["ci_profile_index_and_id"], r["instance_count"], r["multiprocessor_count"]) for r in recorded}
    if got != want:
        raise SystemExit(f"CI derivation rule disagrees with the recorded A100 table for {gi['name']}: {got} != {want}")
    for profile in derived:
        profile["sources"] = ["UG_GETSTART", "MIGPARTED_KNOWN"]


def _gi_id_rule() -> dict[str, Any]:
    return {
        "base_by_fraction": {"1": 0, "1/2": 1, "1/4": 3, "1/8": 7},
        "formula": "id = base(size / memory_slices) + start / size",
        "uncertain": "Observed on A100/H100/GH200/H100 NVL; some boards swap the two halves (I_DCGM_138). "
        "A30 and RTX PRO use the same rule by fraction: INFERRED.",
    }


def build_gpu(key: str, ref_key: str, aliases: list[str], ref_gpu: dict[str, Any]) -> dict[str, Any]:
    arch_value = int(str(ref_gpu["architecture"]).split("(")[1].rstrip(")"))
    architecture = ARCHITECTURES[arch_value]
    uncertain: dict[str, str] = {}
    for flag_key in (
        "nvml_name_flag",
        "total_memory_flag",
        "placements_flag",
        "mig_mode_change_flag",
        "memory_slices_note",
        "constant_mapping_flag",
    ):
        if flag_key in ref_gpu:
            uncertain[flag_key.removesuffix("_flag").removesuffix("_note")] = str(ref_gpu[flag_key])
    gpu: dict[str, Any] = {
        "reference_key": ref_key,
        "aliases": aliases,
        "nvml_name": ref_gpu.get("nvml_name"),
        "pci_device_id": str(ref_gpu["pci_device_id"]),
        "architecture": architecture,
        "nvml_architecture": arch_value,
        "cuda_compute_capability": COMPUTE_CAPABILITY[key],
        "nvml_brand": BRAND[key][0],
        "nvml_addressing_mode": ADDRESSING_MODE[key][0],
        "total_memory_mib": ref_gpu.get("total_memory_mib"),
        "memory_slices": ref_gpu["memory_slices"],
        "compute_slices": ref_gpu["compute_slices"],
        "sm_total": ref_gpu.get("sm_total"),
        "max_gpu_instances": ref_gpu["max_gpu_instances"],
        "mig_mode_change_requires_reset": ref_gpu["mig_mode_change_requires_reset"],
    }
    uncertain["nvml_brand"] = BRAND[key][1]
    uncertain["nvml_addressing_mode"] = ADDRESSING_MODE[key][1]
    for field, (value, why) in GPU_ESTIMATES.get(key, {}).items():
        if gpu.get(field) is not None:
            raise SystemExit(f"{key}.{field}: reference now has a value; drop the estimate")
        gpu[field] = value
        uncertain[field] = why
    slices = gpu["memory_slices"]
    if slices == 8:
        order = DEFAULT_ORDER_8_SLICE
        uncertain["default_placement_order"] = (
            "1g (H100, A100) and size-2 (GH200) orders recorded; UNCONFIRMED as a rule"
        )
    else:
        order = {}
        uncertain["default_placement_order"] = "UNCONFIRMED: highest start first, by analogy"
    profiles_out: list[dict[str, Any]] = []
    ref_profiles = ref_gpu["gpu_instance_profiles"]
    one_slice = next(p for p in ref_profiles if p["nvml_profile_index"] == GI_1_SLICE)
    rev2 = next((p for p in ref_profiles if p["nvml_profile_index"] == GI_1_SLICE_REV2), None)
    for ref_profile in ref_profiles:
        profile: dict[str, Any] = {field: ref_profile[field] for field in GI_PROFILE_FIELDS}
        profile["placements"] = [list(p) for p in ref_profile["placements"]]
        profile["default_ci_profile_index"] = ref_profile["default_ci_profile_index"]
        profile["sources"] = list(ref_profile.get("src", []))
        p_uncertain: dict[str, str] = {}
        if "flag" in ref_profile:
            p_uncertain["profile"] = str(ref_profile["flag"])
        if "default_ci_flag" in ref_profile:
            p_uncertain["default_ci_profile_index"] = str(ref_profile["default_ci_flag"])
        if "memory_flag" in ref_profile:
            p_uncertain["memory_size_mb"] = str(ref_profile["memory_flag"])
        for field, (value, why) in PROFILE_ESTIMATES.get((key, profile["name"]), {}).items():
            if profile[field] is not None:
                raise SystemExit(f"{key} {profile['name']}.{field}: reference now has a value; drop the estimate")
            profile[field] = value
            p_uncertain[field] = why
        missing = [f for f in GI_PROFILE_FIELDS if profile[f] is None]
        if missing:
            raise SystemExit(f"{key} {profile['name']}: no value or estimate for {missing}")
        alternatives = ref_profile.get("memory_size_mb_observed_alternatives")
        if alternatives:
            profile["memory_size_mb_alternatives"] = [
                {"value": a["value"], "sources": list(a.get("src", [])), **({"note": a["note"]} if "note" in a else {})}
                for a in alternatives
            ]
        profile["uncertain"] = p_uncertain
        profiles_out.append(profile)
    for profile in profiles_out:
        derived = derive_compute_instance_profiles(
            key,
            architecture,
            profile,
            one_slice_sms=one_slice["multiprocessor_count"],
            rev2_sms=rev2["multiprocessor_count"] if rev2 else None,
        )
        if key == "A100-SXM4-40GB":
            _check_against_recorded_a100(ref_gpu, profile, derived)
        if profile["default_ci_profile_index"] not in {p["ci_profile_index"] for p in derived}:
            raise SystemExit(f"{key} {profile['name']}: default CI profile missing from the derived table")
        profile["compute_instance_profiles"] = derived
    sizes = sorted({p["placements"][0][1] for p in profiles_out})
    gpu["default_placement_order"] = {
        size: order.get(size)
        or sorted({s for p in profiles_out for s, z in p["placements"] if z == size}, reverse=True)
        for size in sizes
    }
    gpu["sources"] = sorted(
        {
            s
            for k in ("nvml_name_src", "pci_device_id_src", "profile_names_src", "reset_src", "max_gpu_instances_src")
            for s in ref_gpu.get(k, [])
            if isinstance(s, str) and len(s) < 40
        }
    )
    gpu["uncertain"] = uncertain
    gpu["gpu_instance_profiles"] = profiles_out
    return gpu


class _NoAliasDumper(yaml.SafeDumper):
    """Shared lists are written out in full: the catalog is read by people, not only by the loader."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


HEADER = """\
# migdra MIG catalog: one entry per supported GPU model, in NVML terms.
#
# GENERATED by hack/gen_mig_catalog.py from hack/data/mig-profiles.yaml -- do not edit by hand.
# Provenance: every profile lists `sources` (keys of the `sources:` table below: NVIDIA docs, NVIDIA
# repositories at a commit, public issues with recorded nvidia-smi output).  Every value that was NOT
# read off real hardware output is named in that entry's `uncertain:` map with the reason: INFERRED
# (derived from a consistent pattern), UNCONFIRMED (plausible), or ESTIMATE (the reference has no value;
# the number is ours).  memory_size_mb drifts between driver branches; `memory_size_mb_alternatives`
# keeps the other observed values.  Compute-instance tables are derived by one rule
# (hack/gen_mig_catalog.py: derive_compute_instance_profiles) that reproduces the recorded A100-40GB
# tables exactly; for other GPUs they are INFERRED.
"""


_COMMIT_PIN = re.compile(r" ?@[0-9a-f]{7,40}\b")


def _without_commit_pins(source: str) -> str:
    """A source as the shipped catalog names it: repository and file, without the commit the research
    read it at (that pin stays in hack/data/mig-profiles.yaml; the product cites no commits)."""
    return _COMMIT_PIN.sub("", source)


def generate(reference: Path) -> str:
    ref = yaml.safe_load(reference.read_text())
    catalog: dict[str, Any] = {
        "schema_version": 1,
        "gpu_instance_id_rule": _gi_id_rule(),
        "driver_profile_index_counts": DRIVER_PROFILE_INDEX_COUNTS,
        "gpus": {
            key: build_gpu(key, ref_key, aliases, ref["gpus"][ref_key]) for key, (ref_key, aliases) in MODELS.items()
        },
        "sources": {key: _without_commit_pins(text) for key, text in ref["sources"].items()},
    }
    body = yaml.dump(
        catalog, Dumper=_NoAliasDumper, sort_keys=False, width=160, default_flow_style=None, allow_unicode=True
    )
    return HEADER + body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed catalog is stale")
    args = parser.parse_args()
    text = generate(args.reference)
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale: run hack/gen_mig_catalog.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
