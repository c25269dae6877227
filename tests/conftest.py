"""Test-wide setup shared by every test package.

The emulated system (runtime + driver + emulator) is process-global and is
created on first use with the preset named by ``EMU_PRESET``. This module is
imported by pytest before any test module, so the small ``tiny`` preset
(fast power-on, 64 MiB per device) is the default for test runs; set
``EMU_PRESET`` explicitly to run the suite against another preset.
"""
import os

os.environ.setdefault("EMU_PRESET", "tiny")
