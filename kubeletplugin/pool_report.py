"""Tell operators what the device model decided about the hardware: logs on change, metrics always.

Foreign GPU instances (made by an admin or another tool) are never touched; an operator must know
they exist and that their placements are withheld, so each one is logged once when it appears and
once when it goes, and counted per GPU in ``migdra_foreign_gpu_instances``.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally

from dra_driver.devicemodel.pool import ForeignInstance, NodePool
from dra_driver.logs import log_context
from kubeletplugin.metrics import PublishMetrics
from kubeletplugin.publisher import PublishResult

log = logging.getLogger(__name__)


class PoolReporter:
    def __init__(self, metrics: PublishMetrics) -> None:
        self._metrics = metrics
        self._known_foreign: set[ForeignInstance] = set()
        self._gpus_seen: set[str] = set()

    def report_pool(self, pool: NodePool) -> None:
        foreign = set(pool.foreign_instances)
        for instance in sorted(foreign - self._known_foreign, key=_order):
            with log_context(gpu_uuid=instance.gpu_uuid):
                log.warning(
                    "GPU %s (minor %d) holds GPU instance %d (%s at %s) that migdra did not create: "
                    "leaving it alone and withholding every placement that overlaps it",
                    instance.gpu_uuid,
                    instance.gpu_minor,
                    instance.gpu_instance_id,
                    instance.profile_name,
                    instance.placement,
                )
        for instance in sorted(self._known_foreign - foreign, key=_order):
            with log_context(gpu_uuid=instance.gpu_uuid):
                log.info(
                    "foreign GPU instance %d on GPU %s is gone; its placements are published again",
                    instance.gpu_instance_id,
                    instance.gpu_uuid,
                )
        self._known_foreign = foreign
        per_gpu = Tally(instance.gpu_uuid for instance in foreign)
        gpus = {device.gpu_uuid for device in pool.devices} | set(per_gpu) | self._gpus_seen
        for gpu_uuid in gpus:
            self._metrics.foreign_gpu_instances.labels(gpu_uuid=gpu_uuid).set(per_gpu.get(gpu_uuid, 0))
        self._gpus_seen = gpus
        by_type = Tally(device.type.value for device in pool.devices)
        for device_type in ("mig", "gpu"):
            self._metrics.published_devices.labels(type=device_type).set(by_type.get(device_type, 0))

    def report_publish(self, result: PublishResult) -> None:
        for operation, count in (("create", result.created), ("update", result.updated), ("delete", result.deleted)):
            if count:
                self._metrics.slice_writes.labels(operation=operation).inc(count)
        self._metrics.pool_generation.set(result.generation)


def _order(instance: ForeignInstance) -> tuple[int, int]:
    return instance.gpu_minor, instance.gpu_instance_id
