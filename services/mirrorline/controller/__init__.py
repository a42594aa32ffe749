"""The controller: leader-elected owner of the control log, the assignment and the Admin API."""
