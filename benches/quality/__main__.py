import sys

from benches.quality.run import main

sys.exit(main())
