from mirrorline.cli import main

raise SystemExit(main())
