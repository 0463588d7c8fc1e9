from abstream.cli import main

raise SystemExit(main())
