import sys

from litehit_service.cli import main

sys.exit(main())
