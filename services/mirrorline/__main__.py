import signal
import sys


def _stopped_before_start(signum: int, frame: object) -> None:
    # SIGTERM while the heartbeat service is still importing or reading its
    # configuration: nothing runs yet, so stopping is a clean exit (status 0), not a
    # death by signal. `mirrorline.runtime.serve` takes over the signal once it runs.
    raise SystemExit(0)


if sys.argv[1:2] == ["heartbeat"]:
    signal.signal(signal.SIGTERM, _stopped_before_start)

from mirrorline.cli import main  # noqa: E402

raise SystemExit(main())
