from guardeval.cli import main

raise SystemExit(main())
