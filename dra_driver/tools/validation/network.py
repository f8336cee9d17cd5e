"""Interface addresses of ``status.devices[].networkData.ips``: CIDRs in canonical ``ifaddr`` form.

Mirrors apimachinery's ``IsValidInterfaceAddress``: a full address and a prefix length (``10.1.2.3/24``,
``2001:db8::5/64``), written as Go writes it back.  Python's parser is stricter than Go's sloppy one for
IPv4 with leading zeros (``010.1.2.3/24``); both refuse it, with a different message.
"""

from __future__ import annotations

import ipaddress

from dra_driver.tools.validation.errors import FieldError, invalid
from dra_driver.tools.validation.paths import FieldPath

_NOT_A_CIDR = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"


def validate_interface_address(value: str, path: FieldPath) -> list[FieldError]:
    """``value`` must be ``<address>/<prefix length>`` in canonical form."""
    address, slash, prefix = value.partition("/")
    if not slash or not prefix.isdigit() or not prefix.isascii() or "%" in address:
        return [invalid(path, value, _NOT_A_CIDR)]
    try:
        interface = ipaddress.ip_interface(value)
    except ValueError:
        return [invalid(path, value, _NOT_A_CIDR)]
    canonical = f"{interface.ip}/{interface.network.prefixlen}"
    if isinstance(interface, ipaddress.IPv6Interface) and interface.ip.ipv4_mapped is not None:
        # Go treats an IPv4-mapped IPv6 address as IPv4 and writes it back that way.
        canonical = f"{interface.ip.ipv4_mapped}/{max(interface.network.prefixlen - 96, 0)}"
    if value != canonical:
        return [invalid(path, value, f'must be in canonical form ("{canonical}")')]
    return []
