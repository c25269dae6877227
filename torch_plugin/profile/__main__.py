"""``python -m torch_plugin.profile``: runs cli.main (the profiler's state lives in the package's
modules, imported as usual, so torch.emu.profile() and the command line share it)."""
import sys

from torch_plugin.profile.cli import main

sys.exit(main())
