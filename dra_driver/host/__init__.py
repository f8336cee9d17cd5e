"""Facts about the host that NVML does not report (read from sysfs; never written)."""
