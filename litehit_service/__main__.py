import sys

from litehit_service.cli import main

if __name__ == "__main__":
    sys.exit(main())
