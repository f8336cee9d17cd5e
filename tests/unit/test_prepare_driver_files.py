"""The driver files of the CDI specs: discovery over a fake driver root, host paths, hooks, settings."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
from click.testing import CliRunner

from dra_driver.cli.main import cli
from dra_driver.errors import ConfigurationError
from kubeletplugin import app
from kubeletplugin.prepare.cdi import CdiDevice, CommonEdits, DeviceNode, build_cdi_spec
from kubeletplugin.prepare.driver_files import (
    DriverFiles,
    LibraryLink,
    check_driver_version,
    compute_driver_edits,
    compute_host_path,
    discover_driver_files,
    load_driver_edits,
)
from kubeletplugin.settings import PrepareSettings
from migdra_devcluster.realnode.driver_root import LIBRARIES as FAKE_LIBRARIES
from migdra_devcluster.realnode.driver_root import VERSION, build_fake_driver_root

LIB = PurePosixPath("/usr/lib/x86_64-linux-gnu")
HOST = PurePosixPath("/run/nvidia/driver")
RO = ["ro", "nosuid", "nodev", "bind"]


def test_discovery_finds_the_libraries_links_binaries_firmware_and_hook(tmp_path: Path) -> None:
    root = build_fake_driver_root(tmp_path / "driver-root")
    files = discover_driver_files(root, HOST)
    assert files.version == VERSION
    assert [p.name for p in files.libraries] == [f"{stem}.so.{VERSION}" for stem in FAKE_LIBRARIES]
    assert {p.parent for p in files.libraries} == {LIB}
    links = {str(link.link): link.target for link in files.links}
    assert links[f"{LIB}/libcuda.so.1"] == f"libcuda.so.{VERSION}"
    assert links[f"{LIB}/libnvidia-nvvm.so.4"] == f"libnvidia-nvvm.so.{VERSION}"  # not .so.1: read off the link
    assert links[f"{LIB}/libcuda.so"] == "libcuda.so.1"
    assert not any("gpucomp" in link for link in links)  # no soname link in the root: none made
    assert [str(p) for p in files.binaries] == [
        "/usr/bin/nvidia-smi",
        "/usr/bin/nvidia-debugdump",
        "/usr/bin/nvidia-persistenced",
    ]
    assert [str(p) for p in files.firmware] == [
        f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
    ]
    assert files.ipc == ()
    assert files.hook_path == HOST / "usr/bin/nvidia-cdi-hook"  # found in the driver root, named as the host sees it


def test_a_rhel_layout_is_found_in_lib64(tmp_path: Path) -> None:
    files = discover_driver_files(build_fake_driver_root(tmp_path, lib_dir="usr/lib64"), PurePosixPath("/"))
    assert files.library_dirs == (PurePosixPath("/usr/lib64"),)
    assert PurePosixPath(f"/usr/lib64/libcuda.so.{VERSION}") in files.libraries


def test_a_merged_usr_directory_is_mounted_once_under_its_first_name(tmp_path: Path) -> None:
    root = build_fake_driver_root(tmp_path, firmware=False)
    (root / "lib").symlink_to("usr/lib")  # lib/x86_64-linux-gnu is usr/lib/x86_64-linux-gnu
    files = discover_driver_files(root, PurePosixPath("/"))
    assert files.library_dirs == (LIB,)
    assert len(files.libraries) == len({p.name for p in files.libraries})


def test_the_mps_pipe_directory_is_mounted_when_present(tmp_path: Path) -> None:
    root = build_fake_driver_root(tmp_path)
    (root / "tmp/nvidia-mps").mkdir(parents=True)
    assert discover_driver_files(root, PurePosixPath("/")).ipc == (PurePosixPath("/tmp/nvidia-mps"),)


@pytest.mark.parametrize(
    ("layout", "fragment"),
    [
        pytest.param(
            "empty",
            "no NVIDIA driver there: found no libcuda.so.<version>, libnvidia-ml.so.<version> in usr/lib/x86_64",
            id="no-driver",
        ),
        pytest.param("absent", "no such directory", id="no-directory"),
        pytest.param(
            "two-versions", "libraries of more than one driver version (570.86.15, 580.95.05)", id="two-versions"
        ),
        pytest.param("no-nvml", f"driver {VERSION} is incomplete: no libnvidia-ml.so.{VERSION}", id="incomplete"),
    ],
)
def test_a_root_without_exactly_one_driver_names_the_flag(tmp_path: Path, layout: str, fragment: str) -> None:
    root = tmp_path / "driver-root"
    if layout == "empty":
        (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    elif layout == "two-versions":
        build_fake_driver_root(root)
        build_fake_driver_root(tmp_path / "old", "570.86.15", stems=("libcuda", "libnvidia-ml"))
        for old in (tmp_path / "old" / "usr/lib/x86_64-linux-gnu").glob("*.so.570.86.15"):
            old.rename(root / "usr/lib/x86_64-linux-gnu" / old.name)
    elif layout == "no-nvml":
        build_fake_driver_root(root, stems=("libcuda",))
    with pytest.raises(ConfigurationError) as raised:
        discover_driver_files(root, PurePosixPath("/"))
    assert str(raised.value).startswith(f"--driver-root (MIGDRA_DRIVER_ROOT) {root}: ")
    assert fragment in str(raised.value)


def test_without_a_hook_the_libraries_are_mounted_under_their_sonames_too(tmp_path: Path) -> None:
    root = build_fake_driver_root(tmp_path, hook=False)
    files = discover_driver_files(root, HOST)
    assert files.hook_path is None  # the container toolkit is optional: a warning, not an error
    edits = compute_driver_edits(files, HOST)
    assert edits.hooks == ()
    by_container = {m["containerPath"]: m["hostPath"] for m in edits.mounts}
    assert by_container[f"{LIB}/libcuda.so.1"] == f"{HOST}{LIB}/libcuda.so.{VERSION}"
    assert by_container[f"{LIB}/libnvidia-nvvm.so.4"] == f"{HOST}{LIB}/libnvidia-nvvm.so.{VERSION}"
    assert f"{LIB}/libcuda.so" not in by_container  # a link to a link: only the hook makes it
    configured = PurePosixPath("/usr/local/nvidia/toolkit/nvidia-cdi-hook")  # a host path: not looked for here
    assert discover_driver_files(root, HOST, configured).hook_path == configured


@pytest.mark.parametrize(
    ("host_root", "expected"),
    [
        pytest.param("/", f"/usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}", id="host-installed"),
        pytest.param(
            "/run/nvidia/driver", f"/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}", id="gpu-operator"
        ),
    ],
)
def test_host_paths_are_under_the_host_driver_root(host_root: str, expected: str) -> None:
    assert compute_host_path(LIB / f"libcuda.so.{VERSION}", PurePosixPath(host_root)) == expected


def test_the_edits_mount_every_file_read_only_and_run_the_two_hooks() -> None:
    files = DriverFiles(
        version=VERSION,
        libraries=(LIB / f"libcuda.so.{VERSION}", LIB / f"libnvidia-ml.so.{VERSION}"),
        links=(
            LibraryLink(f"libcuda.so.{VERSION}", LIB / "libcuda.so.1"),
            LibraryLink(f"libnvidia-ml.so.{VERSION}", LIB / "libnvidia-ml.so.1"),
            LibraryLink("libcuda.so.1", LIB / "libcuda.so"),
        ),
        binaries=(PurePosixPath("/usr/bin/nvidia-smi"),),
        firmware=(PurePosixPath(f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"),),
        ipc=(),
        hook_path=PurePosixPath("/usr/local/nvidia/toolkit/nvidia-cdi-hook"),
    )
    edits = compute_driver_edits(files, HOST)
    assert list(edits.mounts) == [
        {"hostPath": f"{HOST}{path}", "containerPath": path, "options": RO}
        for path in (
            f"{LIB}/libcuda.so.{VERSION}",
            f"{LIB}/libnvidia-ml.so.{VERSION}",
            "/usr/bin/nvidia-smi",
            f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        )
    ]
    hook = "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
    assert list(edits.hooks) == [
        {
            "hookName": "createContainer",
            "path": hook,
            "args": [
                "nvidia-cdi-hook",
                "create-symlinks",
                "--link",
                f"libcuda.so.{VERSION}::{LIB}/libcuda.so.1",
                "--link",
                f"libnvidia-ml.so.{VERSION}::{LIB}/libnvidia-ml.so.1",
                "--link",
                f"libcuda.so.1::{LIB}/libcuda.so",
            ],
        },
        {
            "hookName": "createContainer",
            "path": hook,
            "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", str(LIB)],
        },
    ]


def test_the_driver_root_must_hold_the_running_driver(tmp_path: Path) -> None:
    files = discover_driver_files(build_fake_driver_root(tmp_path), PurePosixPath("/"))
    check_driver_version(files, VERSION, tmp_path)
    with pytest.raises(ConfigurationError, match=f"holds driver {VERSION} but the running driver is 590.1.2"):
        check_driver_version(files, "590.1.2", tmp_path)


def test_loading_follows_the_settings(tmp_path: Path) -> None:
    root = build_fake_driver_root(tmp_path / "driver-root")
    given = PrepareSettings(driver_root=root, host_driver_root=Path("/run/nvidia/driver"))
    assert load_driver_edits(PrepareSettings(), simulated=True) is None  # a simulated node has no driver
    assert load_driver_edits(given.model_copy(update={"cdi_driver_files": False}), simulated=False) is None
    loaded = load_driver_edits(given, simulated=True)  # simulated, but a driver root was given
    assert loaded is not None
    files, edits = loaded
    assert files.version == VERSION
    assert all(m["hostPath"].startswith("/run/nvidia/driver/") for m in edits.mounts)
    for mount in edits.mounts:  # each host path is a file of the driver root
        assert (root / PurePosixPath(mount["hostPath"]).relative_to(HOST)).exists()
    with pytest.raises(
        ConfigurationError, match=r"--nvidia-cdi-hook-path \(MIGDRA_CDI_HOOK_PATH\): must be an absolute"
    ):
        load_driver_edits(PrepareSettings(driver_root=root, cdi_hook_path=Path("bin/hook")), simulated=False)


def test_the_host_driver_root_defaults_to_the_driver_root_and_must_be_absolute(tmp_path: Path) -> None:
    assert PrepareSettings(driver_root=tmp_path).host_driver_directory == tmp_path
    with pytest.raises(ValueError, match="must be an absolute path"):
        PrepareSettings(host_driver_root=Path("run/nvidia/driver"))


def test_common_edits_go_into_the_spec_level_edits_once_and_device_nodes_can_be_left_out() -> None:
    devices = [CdiDevice("gpu-0", (DeviceNode("/dev/nvidia0"),), {"MIGDRA_GPU_UUID": "GPU-0"})]
    mount = {"hostPath": "/h/libcuda.so.1", "containerPath": "/c/libcuda.so.1", "options": RO}
    hook = {"hookName": "createContainer", "path": "/h/hook", "args": ["nvidia-cdi-hook", "update-ldcache"]}
    spec = build_cdi_spec("gpu.migdra.io", "uid", devices, [], common=CommonEdits(True, (mount,), (hook,)))
    assert spec["containerEdits"]["mounts"] == [mount]
    assert spec["containerEdits"]["hooks"] == [hook]
    assert spec["containerEdits"]["env"][0] == "NVIDIA_VISIBLE_DEVICES=void"
    assert "mounts" not in spec["devices"][0]["containerEdits"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}]

    bare = build_cdi_spec("gpu.migdra.io", "uid", devices, [], common=CommonEdits(device_nodes=False))
    assert "deviceNodes" not in bare["containerEdits"]
    assert "deviceNodes" not in bare["devices"][0]["containerEdits"]
    assert bare["devices"][0]["containerEdits"]["env"] == ["MIGDRA_GPU_UUID=GPU-0"]  # a device keeps an edit


def test_a_dev_root_puts_each_device_node_under_it_as_its_host_path() -> None:
    """A real node of the development cluster keeps its mknod-made nodes in a directory of its own: the
    container still sees /dev/nvidia0, the runtime reads the node's numbers from the host path."""
    devices = [CdiDevice("gpu-0", (DeviceNode("/dev/nvidia0"),), {"MIGDRA_GPU_UUID": "GPU-0"})]
    spec = build_cdi_spec("gpu.migdra.io", "uid", devices, [], common=CommonEdits(dev_root="/srv/node/dev-root/"))
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia0", "hostPath": "/srv/node/dev-root/dev/nvidia0"}
    ]
    control = spec["containerEdits"]["deviceNodes"]
    assert {"path": "/dev/nvidiactl", "hostPath": "/srv/node/dev-root/dev/nvidiactl"} in control
    assert all(node["hostPath"] == "/srv/node/dev-root" + node["path"] for node in control)


def test_the_kubelet_plugin_flags_reach_the_prepare_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[PrepareSettings] = []

    def run_plugin(plugin: object, prepare: PrepareSettings, *args: object) -> int:
        seen.append(prepare)
        return 0

    monkeypatch.setattr(app, "run_plugin", run_plugin)
    monkeypatch.setattr("dra_driver.serving.stop_on_signals", lambda: None)
    flags = ["--driver-root", "/driver-root", "--host-driver-root", "/run/nvidia/driver"]
    flags += ["--nvidia-cdi-hook-path", "/usr/local/nvidia/toolkit/nvidia-cdi-hook", "--no-cdi-device-nodes"]
    outcome = CliRunner().invoke(cli, ["kubelet-plugin", "--node-name", "n1", "--sim-gpus", "H100", *flags])
    assert outcome.exit_code == 0, outcome.output
    (prepare,) = seen
    assert prepare.driver_root == Path("/driver-root")
    assert prepare.host_driver_directory == Path("/run/nvidia/driver")
    assert prepare.cdi_hook_path == Path("/usr/local/nvidia/toolkit/nvidia-cdi-hook")
    assert (prepare.cdi_device_nodes, prepare.cdi_driver_files) == (False, True)
    assert "driver_root" in prepare.model_fields_set  # so a simulated node adds the driver files
