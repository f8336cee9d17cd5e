"""The NVML boundary: one interface over NVML, its errors and its value types.

- ``dra_driver.nvml.backend.Nvml``: the interface (the only production importer of ``pynvml``);
- ``dra_driver.nvml.session.open_nvml``: opens the real library or the simulator per the settings;
- ``dra_driver.nvml.types`` / ``dra_driver.nvml.errors``: what it returns and raises;
- ``dra_driver.nvml.sim``: the simulated NVML library, installed beneath the real ``pynvml``.

This package file deliberately imports nothing, so pure code (the device model) can use the value
types without loading ``pynvml``.
"""
