import sys

from gpumemlab.cli import main

sys.exit(main())
