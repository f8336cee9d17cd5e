"""Every number the validation enforces, in one place.

Source of the ``resource.k8s.io`` limits: ``docs/resource-api.md`` (section given per group; the
values are those of the 1.35+ ``v1`` API).  The Kubernetes-wide limits at the end (names, labels,
annotations, conditions) are apimachinery's (that page's last section).
"""

from __future__ import annotations

from typing import Final

# --- ResourceSlice (section "ResourceSlice") ---
SLICE_MAX_DEVICES: Final = 128
SLICE_MAX_DEVICES_WITH_TAINTS_OR_COUNTERS: Final = 64  # when any device has taints or consumes counters
SLICE_MAX_COUNTER_SETS: Final = 8
COUNTER_SET_MAX_COUNTERS: Final = 32
DEVICE_MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
DEVICE_MAX_COUNTER_CONSUMPTIONS: Final = 2
COUNTER_CONSUMPTION_MAX_COUNTERS: Final = 32
DEVICE_MAX_TAINTS: Final = 16
CAPACITY_REQUEST_POLICY_MAX_VALID_VALUES: Final = 10  # requestPolicy.validValues (DRAConsumableCapacity)
DEVICE_MAX_BINDING_CONDITIONS: Final = 4  # each of bindingConditions and bindingFailureConditions
ATTRIBUTE_MAX_VALUE_BYTES: Final = 64  # string and version attribute values
DRIVER_NAME_MAX_BYTES: Final = 63
POOL_NAME_MAX_BYTES: Final = 253
QUALIFIED_NAME_MAX_DOMAIN_BYTES: Final = 63  # <domain>/<C identifier>
QUALIFIED_NAME_MAX_ID_BYTES: Final = 32

# --- ResourceClaim spec.devices, template spec.spec (section "ResourceClaim and ResourceClaimTemplate") ---
CLAIM_MAX_REQUESTS: Final = 32  # also bounds the request lists of constraints and config entries
REQUEST_MAX_SUBREQUESTS: Final = 8  # firstAvailable
REQUEST_MAX_SELECTORS: Final = 32
REQUEST_MAX_TOLERATIONS: Final = 16
CLAIM_MAX_CONSTRAINTS: Final = 32
CLAIM_MAX_CONFIG: Final = 32
CEL_EXPRESSION_MAX_BYTES: Final = 10 * 1024
OPAQUE_PARAMETERS_MAX_BYTES: Final = 10 * 1024

# --- ResourceClaim status (same section) ---
ALLOCATION_MAX_RESULTS: Final = 32
ALLOCATION_MAX_CONFIG: Final = 64  # class config + claim config
CLAIM_MAX_RESERVED_FOR: Final = 256
DEVICE_STATUS_MAX_CONDITIONS: Final = 8
DEVICE_STATUS_DATA_MAX_BYTES: Final = 10 * 1024
NETWORK_INTERFACE_NAME_MAX_BYTES: Final = 256
NETWORK_MAX_IPS: Final = 16
NETWORK_HARDWARE_ADDRESS_MAX_BYTES: Final = 128

# --- DeviceClass (section "DeviceClass and DeviceTaintRule") ---
CLASS_MAX_SELECTORS: Final = 32
CLASS_MAX_CONFIG: Final = 32

# --- Kubernetes-wide (apimachinery: util/validation, api/validation, apis/meta/v1/validation) ---
DNS1123_LABEL_MAX_BYTES: Final = 63
DNS1123_SUBDOMAIN_MAX_BYTES: Final = 253
LABEL_KEY_NAME_MAX_BYTES: Final = 63
LABEL_VALUE_MAX_BYTES: Final = 63
TOTAL_ANNOTATIONS_MAX_BYTES: Final = 256 * 1024
CONDITION_REASON_MAX_BYTES: Final = 1024
CONDITION_MESSAGE_MAX_BYTES: Final = 32 * 1024
