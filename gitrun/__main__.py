from gitrun.cli import main

raise SystemExit(main())
