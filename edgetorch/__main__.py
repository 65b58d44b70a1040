import sys

from edgetorch.cli import main

sys.exit(main())
