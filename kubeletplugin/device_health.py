"""Device health for kubelet's optional health stream: is each published device's GPU still answering?

The check is deliberately simple and real: a GPU whose NVML queries fail (``GPU_IS_LOST``, a fallen-off
bus, a driver in trouble) makes every device of that GPU unhealthy; a GPU that answers makes them
healthy.  A device that carries a taint (a GPU fault NVML reported: kubeletplugin.gpu_faults) is
unhealthy too, for as long as the taint stays.  The source reports the devices
of the pool the publisher published last, so kubelet hears about exactly what the slices offer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dra_driver.devicemodel.pool import NodePool
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlError

log = logging.getLogger(__name__)


class NvmlDeviceHealth:
    """A ``DeviceHealthSource``: ``(pool name, device name, healthy)`` for every published device."""

    def __init__(self, nvml: Nvml, pool_name: str, published_pool: Callable[[], NodePool | None]) -> None:
        self._nvml = nvml
        self._pool_name = pool_name
        self._published_pool = published_pool
        self._unhealthy: set[str] = set()

    def __call__(self) -> list[tuple[str, str, bool | None]]:
        pool = self._published_pool()
        if pool is None:
            return []
        answering = {uuid: self._answers(uuid) for uuid in {device.gpu_uuid for device in pool.devices}}
        return [
            (self._pool_name, device.name, answering[device.gpu_uuid] and not device.taints) for device in pool.devices
        ]

    def _answers(self, gpu_uuid: str) -> bool:
        try:
            self._nvml.gpu(gpu_uuid)
        except NvmlError as exc:
            if gpu_uuid not in self._unhealthy:
                log.error("GPU %s does not answer NVML queries: reporting its devices unhealthy: %s", gpu_uuid, exc)
                self._unhealthy.add(gpu_uuid)
            return False
        if gpu_uuid in self._unhealthy:
            log.info("GPU %s answers NVML queries again", gpu_uuid)
            self._unhealthy.discard(gpu_uuid)
        return True
