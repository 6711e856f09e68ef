from gitrun.entry import main

raise SystemExit(main())
