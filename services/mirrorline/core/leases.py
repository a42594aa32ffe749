"""The default lease of controller-run deployments, in one light module.

Both the controller (its leadership lease and the workers' leases) and the command line
(`--lease-ms` of `controller` and `run`) need it; the command line must not import the
controller to learn it, or every `mirrorline` command would pay for loading the whole
controller before parsing its arguments.
"""

#: Milliseconds a controller's leadership and a worker's lease last without renewal.
DEFAULT_LEASE_MS = 6000
