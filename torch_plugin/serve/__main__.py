import sys

from torch_plugin.serve import main

sys.exit(main())
