import sys

from sim.face.cli import main

sys.exit(main())
